"""The ways a call elsewhere fails that a local call cannot: a value that cannot travel,
a worker that died, a cluster that cannot be reached.

Why a module of its own: every other module of the package raises them, and the package
exports them to the user (``isinstance(node.exception, WorkerDied)``). Messages are what a
person reads on the failed node, so each says what happened and what to do.
"""

from __future__ import annotations

from cortex_jupyter.runtime.core.errors import CortexRuntimeError

__all__ = ["ClusterUnavailable", "NotSendable", "WorkerDied"]


class NotSendable(CortexRuntimeError):
    """Raised when a tool's argument, result or exception cannot travel between the
    kernel and the process that runs the tool (it cannot be pickled)."""

    def __init__(
        self, what: str, value_type: str, where: str, reason: str, *, back: bool = False
    ) -> None:
        self.what = what
        self.value_type = value_type
        self.where = where
        self.reason = reason
        self.back = back
        kind = f" (a {value_type})" if value_type else ""
        direction = "back from" if back else "to"
        hint = (
            "return plain data (numbers, strings, lists, dicts, arrays) instead"
            if back
            else "pass something that can be (a path, a URL, a connection string) "
            "and open it inside the tool"
        )
        super().__init__(
            f"cannot send {what}{kind} {direction} {where}: it cannot be pickled ({reason}); {hint}"
        )


class WorkerDied(CortexRuntimeError):
    """Raised when the process running a tool died before it answered (the tool crashed
    it or ran out of memory, or the worker was stopped)."""

    def __init__(self, tool: str, where: str, detail: str) -> None:
        self.tool = tool
        self.where = where
        self.detail = detail
        super().__init__(
            f"the worker running {tool}() on {where} died before it answered ({detail}); "
            "the tool may have crashed its process or run out of memory"
        )


class ClusterUnavailable(CortexRuntimeError):
    """Raised when the Dask cluster cannot be started or its scheduler cannot be reached."""

    def __init__(self, address: str | None, source: str, reason: str) -> None:
        self.address = address
        self.source = source
        self.reason = reason
        if address is None:
            what = "could not start a local dask cluster"
            hint = "set a scheduler address to use an existing cluster"
        else:
            what = f"could not connect to the dask scheduler at {address} (from {source})"
            hint = "check the address, or unset it to start a local cluster"
        super().__init__(f"{what}: {reason}; {hint}")
