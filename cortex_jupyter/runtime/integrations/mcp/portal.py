"""The manager's own event loop, in a daemon thread, and what a hop to it relays back.

Sessions outlive a cell, while each cell's run may be on its own event loop and
thread. So a manager owns one event loop in a daemon thread where every server's client
session lives; a call made from any other loop hops there and back (``_LoopThread.hop``):
the work is started on this loop through its portal, and the caller waits in a worker
thread (``_next_item``) and relays the call's log lines and progress to the action's
capture (``_deliver``) as they arrive. Kept apart from the manager because none of this
knows what a server is: it only moves work and its messages between threads.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from contextlib import suppress
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup
from anyio.from_thread import BlockingPortal

from cortex_jupyter.runtime.integrations.mcp.errors import McpServerError
from cortex_jupyter.runtime.scheduler.capture import Capture

__all__: list[str] = []

T = TypeVar("T")


class _LoopThread:
    """An event loop in a daemon thread (a kernel that exits never waits for it), with a
    portal other threads start work through and a task group for the servers."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._portal: BlockingPortal | None = None
        self._tasks: TaskGroup | None = None
        self._closing: anyio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="cortex-mcp-loop", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=10.0):
            raise RuntimeError("the MCP event loop did not start within 10 s")

    @property
    def portal(self) -> BlockingPortal:
        assert self._portal is not None
        return self._portal

    @property
    def tasks(self) -> TaskGroup:
        assert self._tasks is not None
        return self._tasks

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self._portal is not None

    def close(self) -> None:
        if self.alive and self._closing is not None:
            with suppress(Exception):
                self.portal.call(self._closing.set)
            self._thread.join(timeout=10.0)

    def run_sync(self, func: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``func(*args)`` run on this loop, from another thread, which waits for it."""
        if threading.get_ident() == self.ident:
            raise RuntimeError("McpManager's blocking methods cannot run on its own loop")
        start: Callable[..., Future[T]] = self.portal.start_task_soon
        future = start(func, *args)
        try:
            return future.result()
        except BaseException:  # the kernel's interrupt while waiting: stop the work too
            future.cancel()
            raise

    async def hop(
        self, capture: Capture | None, func: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        """``await func(*args, post)`` on this loop, from the caller's.

        ``post((kind, payload))`` (log lines, progress) reaches this side through a
        queue a worker thread waits on; cancelling this side cancels the work there.
        """
        outbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        start: Callable[..., Future[T]] = self.portal.start_task_soon
        future = start(func, *args, outbox.put)
        future.add_done_callback(lambda _: outbox.put(("end", None)))
        try:
            while True:
                kind, payload = await anyio.to_thread.run_sync(
                    _next_item, outbox, abandon_on_cancel=True
                )
                if kind == "end":
                    break
                if capture is not None:
                    _deliver(capture, kind, payload)
        finally:
            if not future.done():
                future.cancel()
        if future.cancelled():
            raise McpServerError(str(args[0]), "was closed", "the call was cancelled by close")
        return future.result()

    def _main(self) -> None:
        anyio.run(self._serve)

    async def _serve(self) -> None:
        async with BlockingPortal() as portal, anyio.create_task_group() as tasks:
            self._portal, self._tasks, self._closing = portal, tasks, anyio.Event()
            self._ready.set()
            await self._closing.wait()
            tasks.cancel_scope.cancel()
        self._portal = None


def _next_item(outbox: queue.SimpleQueue[tuple[str, Any]]) -> tuple[str, Any]:
    """The next thing a hop relays, or ``("idle", None)`` after a second (so an
    abandoned waiting thread ends soon)."""
    try:
        return outbox.get(timeout=1.0)
    except queue.Empty:
        return ("idle", None)


def _deliver(capture: Capture, kind: str, payload: Any) -> None:
    if kind == "log":
        capture.log(payload)
    elif kind == "progress":
        done, total, note = payload
        capture.progress(done, total, note)
