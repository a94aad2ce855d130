"""The notebook's MCP servers: one ``McpManager`` on the default registry (the one
``%%cortex`` cells use) and the functions a notebook calls on it. ``cortex_jupyter.mcp``
is this package's public face; these functions are its verbs::

    import cortex_jupyter.mcp as mcp

    mcp.add("fs", ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."])
    mcp.add("gh", url="https://api.githubcopilot.com/mcp/",
            headers={"Authorization": "Bearer ${GITHUB_TOKEN}"})
    mcp.load_config("mcp.json")   # {"mcpServers": {...}} (Claude Desktop) or {"servers": ...}
    mcp.servers()                 # state, tools and last error of each server
    print(mcp.status("fs").details())
    mcp.remove("fs")

Each server's tools become ``NAME.TOOL`` tools, so the model can call them like any
other tool. Kept apart from the manager so that the manager serves any registry and
this module is the one place that knows about the notebook's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from cortex_jupyter.runtime.core.registry import default_registry
from cortex_jupyter.runtime.integrations.mcp.config import DEFAULT_TIMEOUT
from cortex_jupyter.runtime.integrations.mcp.manager import McpManager
from cortex_jupyter.runtime.integrations.mcp.server import ServerStatus

__all__ = [
    "add",
    "close_all",
    "default_manager",
    "load_config",
    "logs",
    "read_resource",
    "remove",
    "servers",
    "status",
    "stderr",
]

_default: McpManager | None = None
_default_lock = threading.Lock()


def default_manager() -> McpManager:
    """The manager of the default registry (what ``cortex_jupyter.mcp`` and the
    ``%cortex mcp`` magic use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = McpManager(default_registry)
        return _default


async def read_resource(server: str, uri: str) -> str:
    """``default_manager().read_resource(server, uri)``: a context feed's ``mcp`` source."""
    return await default_manager().read_resource(server, uri)


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
