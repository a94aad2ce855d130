"""What actions may call.

- ``registry``: ``Registry`` and ``@tool``: tools, relics, workflows, ``llm`` tasks,
  agents and internals, each with its JSON schema (``values.schema``); integrations and
  the loop pass themselves in here;
- ``relics``: persistent services across cells and kernel restarts, and the built-in
  ``cache`` relic.
"""
