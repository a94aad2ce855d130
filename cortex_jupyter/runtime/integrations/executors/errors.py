"""The ways a call elsewhere fails that a local call cannot: a value that cannot travel,
a worker that died, a cluster that cannot be reached.

Why a module of its own: every other module of the package raises them, and the package
exports them to the user (``isinstance(node.exception, WorkerDied)``). Messages are what a
person reads on the failed node, so each says what happened and what to do. Each class is
a row of the core's ``CortexError`` table: its fields and the ``template`` of its message.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass

from cortex_jupyter.runtime.core.errors import CortexRuntimeError

__all__ = ["ClusterUnavailable", "NotSendable", "WorkerDied"]


@dataclass(eq=False, repr=False)
class NotSendable(CortexRuntimeError):
    """Raised when a tool's argument, result or exception cannot travel between the
    kernel and the process that runs the tool (it cannot be pickled)."""

    what: str
    value_type: str
    where: str
    reason: str
    _: KW_ONLY
    back: bool = False
    template = (
        "cannot send {e.what}{e.kind} {e.direction} {e.where}: it cannot be pickled "
        "({e.reason}); {e.hint}"
    )

    @property
    def kind(self) -> str:
        return f" (a {self.value_type})" if self.value_type else ""

    @property
    def direction(self) -> str:
        return "back from" if self.back else "to"

    @property
    def hint(self) -> str:
        if self.back:
            return "return plain data (numbers, strings, lists, dicts, arrays) instead"
        return (
            "pass something that can be (a path, a URL, a connection string) "
            "and open it inside the tool"
        )


@dataclass(eq=False, repr=False)
class WorkerDied(CortexRuntimeError):
    """Raised when the process running a tool died before it answered (the tool crashed
    it or ran out of memory, or the worker was stopped)."""

    tool: str
    where: str
    detail: str
    template = (
        "the worker running {e.tool}() on {e.where} died before it answered ({e.detail}); "
        "the tool may have crashed its process or run out of memory"
    )


@dataclass(eq=False, repr=False)
class ClusterUnavailable(CortexRuntimeError):
    """Raised when the Dask cluster cannot be started or its scheduler cannot be reached."""

    address: str | None
    source: str
    reason: str
    template = "{e.what}: {e.reason}; {e.hint}"

    @property
    def what(self) -> str:
        if self.address is None:
            return "could not start a local dask cluster"
        return f"could not connect to the dask scheduler at {self.address} (from {self.source})"

    @property
    def hint(self) -> str:
        if self.address is None:
            return "set a scheduler address to use an existing cluster"
        return "check the address, or unset it to start a local cluster"
