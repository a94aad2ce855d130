"""The bottom of the runtime: what a run is made of. It imports only the protocol.

- ``graph``: action nodes, their statuses and the dependency bookkeeping (pure);
- ``record``: the run record (``Run``), built from events, saved and loaded as JSON lines;
- ``events``: the run events the scheduler and the loop emit beside the parser's;
- ``answer``: the one ``$name`` rule for filling an answer with values;
- ``typed``: typed answers (``output_type``): the JSON read from the answer, ``"$name"``
  filled, pydantic's validation, errors as data;
- ``variables``, ``scope``, ``reach``: ``$name`` resolution, what a model may reach, and
  the allow-list of what one step of ``$name.path`` may go through;
- ``secrets``, ``bounded``: redaction, and reprs and cuts that never leak a secret;
- ``captured``: what a tool writes, joined and redacted a batch at a time;
- ``registry``, ``schema``, ``coerce``, ``relics``: what actions may call (tools, relics,
  workflows, agents), their JSON schemas, fitting values to them, the built-in cache;
  the registry is also where integrations and the loop pass themselves in;
- ``model``, ``chunks``: the model interface (``StreamingModel``) and its chunks;
- ``cost``: prices as data (``Price``, a model's ``price`` method), budgets and spending;
- ``errors``: one error vocabulary (``CortexError``) for the runtime and the models.
"""
