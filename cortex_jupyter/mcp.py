"""Tools from Model Context Protocol servers, for notebooks: ``cortex_jupyter.mcp.add(...)``.

Each server's tools become ``NAME.TOOL`` tools of the default registry (the one
``%%cortex`` cells use), so the model can call them like any other tool::

    import cortex_jupyter.mcp as mcp

    mcp.add("fs", ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."])
    mcp.add("gh", url="https://api.githubcopilot.com/mcp/",
            headers={"Authorization": "Bearer ${GITHUB_TOKEN}"})
    mcp.load_config("mcp.json")   # {"mcpServers": {...}} (Claude Desktop) or {"servers": ...}
    mcp.servers()                 # state, tools and last error of each server
    print(mcp.status("fs").details())
    mcp.remove("fs")

The functions here work on one ``McpManager`` shared by the notebook (see
``cortex_jupyter.runtime.integrations.mcp`` for what it does and the classes named below).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from cortex_jupyter.runtime.integrations.mcp import (
    DEFAULT_TIMEOUT,
    InvalidMcpArguments,
    McpConfigError,
    McpContent,
    McpManager,
    McpResource,
    McpServerError,
    McpTool,
    McpToolError,
    NativeNames,
    ServerConfig,
    ServerStatus,
    UnknownMcpServer,
    default_manager,
    read_config,
    read_resource,
)

__all__ = [
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
]


def add(
    name: str,
    command: Sequence[str] | str | None = None,
    *,
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> ServerStatus:
    """Start a stdio server (``command``) or connect to a streamable-HTTP one (``url``)
    and register its tools as ``NAME.TOOL``; see ``McpManager.add``."""
    return default_manager().add(
        name, command, url=url, env=env, headers=headers, cwd=cwd, timeout=timeout
    )


def load_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> list[ServerStatus]:
    """Add every server of an ``mcpServers`` / ``servers`` config file, all at once."""
    return default_manager().load_config(source)


def remove(name: str) -> None:
    """Close a server and unregister its tools."""
    default_manager().remove(name)


def servers() -> list[ServerStatus]:
    """Every added server: its state, tools, last error and last stderr lines."""
    return default_manager().servers()


def status(name: str) -> ServerStatus:
    """One server's state, tools, last error and last stderr lines (``.details()`` as
    text); raises ``UnknownMcpServer``."""
    return default_manager().status(name)


def stderr(name: str) -> str:
    """What a server wrote to stderr (the last lines kept)."""
    return default_manager().stderr(name)


def logs(name: str) -> str:
    """Log messages a server sent while none of its tool calls ran."""
    return default_manager().logs(name)


def close_all() -> None:
    """Close every server (done at interpreter exit too)."""
    default_manager().close_all()
