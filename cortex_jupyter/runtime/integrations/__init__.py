"""Edges that plug into the core's registry: MCP servers and executors (Dask, processes).
The core, the scheduler and the loop never import them; each is independent of the others."""
