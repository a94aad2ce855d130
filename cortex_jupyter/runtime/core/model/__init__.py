"""The model interface: what the runtime needs of a model, and what a model streams back.

- ``client``: ``Message`` (one chat message) and ``ModelClient``, the plain text seam
  ``llm`` actions and tests use;
- ``chunks``: ``StreamingModel``, the one interface every model implements, and the
  typed chunks of a reply (text, reasoning, tool calls, ``Usage``, ``Finish``).

The clients themselves live in ``cortex_jupyter.models``, above the runtime.
"""
