"""Edges that plug into the core's registry. The core, the scheduler and the loop never
import them, and none imports another (pyproject.toml's import-linter contracts).

- ``mcp``: MCP servers' tools and resources (config, schema conversion, the client);
  it passes its resource reader in as ``Registry.read_resource``;
- ``executors``: tools run off the kernel's process (Dask, process pools); it passes its
  runner in as ``Registry.run_elsewhere``;
- ``tracing``: every run as an OpenTelemetry trace; it passes its run observer in through
  ``runtime.core.record.observer``.
"""
