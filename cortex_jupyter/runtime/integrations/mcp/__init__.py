"""Tools from Model Context Protocol servers: each server's tools as ``NAME.TOOL`` entries
of a registry. ``cortex_jupyter.mcp`` re-exports everything here for notebooks.

The package reads in the order a server is used:

- ``config``: how to reach a server (``ServerConfig``) and config files (``read_config``);
- ``errors``: the one-line errors every part raises;
- ``schema``: a server's tools as ``McpTool`` registry entries, results as outputs;
- ``native``: dotted registry names as native function-calling names and back;
- ``server``: one server's state, its status line and its stderr;
- ``portal``: the manager's own event loop in a daemon thread;
- ``manager``: ``McpManager``, each server's life and its registered tools;
- ``notebook``: the notebook's default manager and the functions over it (``add``...).

It imports the core and the scheduler's capture, never the loop or another integration.
"""

from __future__ import annotations

from cortex_jupyter.runtime.core.model.chunks import NATIVE_NAME, NativeNames
from cortex_jupyter.runtime.integrations.mcp.config import (
    DEFAULT_TIMEOUT,
    ServerConfig,
    read_config,
)
from cortex_jupyter.runtime.integrations.mcp.errors import (
    InvalidMcpArguments,
    McpConfigError,
    McpServerError,
    McpToolError,
    UnknownMcpServer,
)
from cortex_jupyter.runtime.integrations.mcp.manager import McpManager
from cortex_jupyter.runtime.integrations.mcp.notebook import (
    add,
    close_all,
    default_manager,
    load_config,
    logs,
    read_resource,
    remove,
    servers,
    status,
    stderr,
)
from cortex_jupyter.runtime.integrations.mcp.schema import (
    McpContent,
    McpResource,
    McpTool,
    tool_output,
)
from cortex_jupyter.runtime.integrations.mcp.server import ServerStatus

__all__ = [
    "DEFAULT_TIMEOUT",
    "NATIVE_NAME",
    "InvalidMcpArguments",
    "McpConfigError",
    "McpContent",
    "McpManager",
    "McpResource",
    "McpServerError",
    "McpTool",
    "McpToolError",
    "NativeNames",
    "ServerConfig",
    "ServerStatus",
    "UnknownMcpServer",
    "add",
    "close_all",
    "default_manager",
    "load_config",
    "logs",
    "read_config",
    "read_resource",
    "remove",
    "servers",
    "status",
    "stderr",
    "tool_output",
]
