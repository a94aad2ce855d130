"""The bottom of the runtime: what a run is made of. It imports only the protocol.

Two modules and six rooms, each room's ``__init__`` listing its modules. They are listed
in the order they build on each other: each imports only what is listed before it
(pyproject.toml's import-linter contracts keep it so).

- ``errors``: one error vocabulary (``CortexError``) for the runtime and the models;
- ``model/``: the model interface (``StreamingModel``), its messages and its chunks;
- ``trust/``: what a model may reach (``$name`` scope, the allow-list of a path's steps)
  and what never leaves (secrets redacted, bounded reprs, the environment's credentials);
- ``events``: the run events the scheduler and the loop emit beside the parser's;
- ``values/``: ``$name`` values found and resolved, filled into answers, fitted to a
  parameter's type, read back as typed answers, and the JSON schemas of those types;
- ``calls/``: what actions may call (tools, relics, workflows, agents) and the built-in
  cache relic; the registry is also where integrations and the loop pass themselves in;
- ``cost/``: prices as data, and budgets reserved and settled against them;
- ``record/``: what a run records: the action graph, captured output, joined deltas, the
  run record (``Run``) and the observers that watch it.
"""
