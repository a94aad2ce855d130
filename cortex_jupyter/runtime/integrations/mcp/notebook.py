"""The notebook's MCP servers: one ``McpManager`` on the default registry (the one
``%%cortex`` cells use), and its methods as plain functions (``add``, ``remove``,
``servers``...) that ``cortex_jupyter.mcp`` offers notebooks.

Each function is the manager's method itself, called on ``default_manager()`` (looked
up at each call), with the method's signature and docstring: one definition of each
verb, not a second copy of its parameters. Kept apart from the manager so that the
manager serves any registry and this module is the one place that knows the notebook's.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from cortex_jupyter.runtime.core.calls.registry import Registry, default_registry
from cortex_jupyter.runtime.integrations.mcp.manager import McpManager

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

P = ParamSpec("P")
R = TypeVar("R")

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


def _on_default(method: Callable[Concatenate[McpManager, P], R]) -> Callable[P, R]:
    """``method`` as a function of the notebook's manager: same name, docstring and
    signature (less ``self``), e.g. ``add = _on_default(McpManager.add)``."""

    @functools.wraps(method)
    def function(*args: P.args, **kwargs: P.kwargs) -> R:
        return method(default_manager(), *args, **kwargs)

    signature = inspect.signature(method)
    function.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=list(signature.parameters.values())[1:]
    )
    function.__qualname__ = function.__name__
    function.__module__ = __name__
    return function


add = _on_default(McpManager.add)
load_config = _on_default(McpManager.load_config)
remove = _on_default(McpManager.remove)
servers = _on_default(McpManager.servers)
status = _on_default(McpManager.status)
stderr = _on_default(McpManager.stderr)
logs = _on_default(McpManager.logs)
close_all = _on_default(McpManager.close_all)

#: What a context feed with ``source: mcp`` reads, passed into the core (which never
#: imports this integration).
Registry.read_resource = read_resource
