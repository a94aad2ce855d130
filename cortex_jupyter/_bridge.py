"""Running an async run from a synchronous notebook cell, with live updates.

A cell already runs inside the kernel's asyncio loop, so ``anyio.run`` cannot be
called there (NOTES.md, "Running async work from a cell magic"). Instead the run
goes to a worker thread with its own event loop (an anyio blocking portal) while the
cell's own thread -- the only one allowed to touch widgets -- takes the run's events
from a queue, coalesces them and hands them to the view at most ``hz`` times a
second. The Stop button arrives in the cell's thread as ``KeyboardInterrupt``: the
run is cancelled through the portal, the events it still produces are delivered,
and the interrupt is raised again so "Run all" stops.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.from_thread
from anyio.abc import TaskGroup
from anyio.from_thread import BlockingPortal

T = TypeVar("T")
Emit = Callable[[Any], None]
#: Longest wait, after a cancel, for the run to wind down before giving up on it.
CANCEL_GRACE = 5.0


class Interrupted(Exception):
    """Raised when the run was stopped by the user; carries what the run returned."""

    def __init__(self, result: Any) -> None:
        super().__init__("the run was interrupted")
        self.result = result


class Bridge(Generic[T]):
    """Runs ``job(emit)`` in a worker thread; delivers emitted events in batches here.

    ``deliver`` gets at most ``hz`` batches a second, and an empty batch every ``idle``
    seconds while nothing happens, so a view can keep its clocks moving. When
    ``deliver`` returns true (it has changes it could not show yet: its message budget
    held them back) the next empty batch comes after ``1/hz`` seconds instead.
    """

    def __init__(
        self,
        job: Callable[[Emit], Awaitable[T]],
        deliver: Callable[[list[Any]], bool | None],
        *,
        hz: float = 25.0,
        idle: float = 0.25,
        loop: Loop | None = None,
        late: Callable[[list[Any]], None] | None = None,
    ) -> None:
        self._job = job
        self._deliver = deliver
        self._interval = 1.0 / hz
        self._idle = idle
        self._loop = loop
        self._late = late
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._ended = False
        self._scope: anyio.CancelScope | None = None
        self._scope_ready = threading.Event()
        self._behind = False  # the last delivery left changes waiting

    def run(self) -> T:
        """Run the job to its end; ``KeyboardInterrupt`` cancels it and is re-raised.

        On ``loop`` (a session's own, kept between cells) when given, else on a loop
        made for this run. Events emitted after ``run`` returned (by work the loop's
        background task group still runs) go to ``late``, in the emitting thread.
        """
        if self._loop is not None:
            return self._run_on(self._loop.portal)
        with anyio.from_thread.start_blocking_portal() as portal:
            return self._run_on(portal)

    def _run_on(self, portal: BlockingPortal) -> T:
        future = portal.start_task_soon(self._guarded)
        try:
            self._pump(future.done)
        except KeyboardInterrupt:
            self._cancel(portal)
            self._wind_down(future.done)
            raise
        finally:
            self._end()
        return future.result()

    def _emit(self, event: Any) -> None:
        with self._lock:
            if not self._ended:
                self._queue.put(event)
                return
        if self._late is not None:
            self._late([event])

    async def _guarded(self) -> T:
        with anyio.CancelScope() as scope:
            self._scope = scope
            self._scope_ready.set()
            return await self._job(self._emit)
        raise Interrupted(None)  # the scope was cancelled before the job returned

    def _cancel(self, portal: anyio.from_thread.BlockingPortal) -> None:
        if self._scope_ready.wait(timeout=1.0) and self._scope is not None:
            portal.call(self._scope.cancel)

    def _pump(self, done: Callable[[], bool]) -> None:
        """Deliver events in batches, at most once per interval, until the job is done."""
        batch: list[Any] = []
        last = float("-inf")
        while True:
            finished = done()
            wait = 0.0 if finished else self._interval
            if batch:
                wait = min(wait, max(0.0, last + self._interval - time.monotonic()))
            try:
                batch.append(self._queue.get(timeout=wait) if wait else self._queue.get_nowait())
                while True:
                    batch.append(self._queue.get_nowait())
            except queue.Empty:
                pass
            now = time.monotonic()
            if batch and (finished or now - last >= self._interval):
                events, batch = batch, []
                self._behind = bool(self._deliver(events))
                last = now
            elif not batch and not finished and now - last >= self._quiet_wait():
                # Nothing new, but clocks on screen (elapsed, running durations) move on,
                # and what the view held back goes out.
                self._behind = bool(self._deliver([]))
                last = now
            if finished and not batch and self._queue.empty():
                return

    def _quiet_wait(self) -> float:
        return self._interval if self._behind else self._idle

    def _wind_down(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + CANCEL_GRACE
        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)

    def _end(self) -> None:
        """Deliver what is still queued; from now on events go to ``late``."""
        events: list[Any] = []
        with self._lock:
            self._ended = True
            try:
                while True:
                    events.append(self._queue.get_nowait())
            except queue.Empty:
                pass
        if events:
            self._deliver(events)


class Loop:
    """An event loop in a daemon thread, kept for a session's whole life.

    A session's runs are started on it, and its task group ``background`` owns the
    ``fire_and_forget`` actions: a run (and its cell) may end before them
    (ARCHITECTURE.md), and they go on here and report their final status later.
    ``stop_background`` cancels them; ``close`` stops the loop. A daemon thread, so a
    kernel that shuts down never waits for it.
    """

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._portal: BlockingPortal | None = None
        self._background: TaskGroup | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._main, name="cortex-loop", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=10.0):
            raise RuntimeError("the cortex event loop did not start within 10 s")

    @property
    def portal(self) -> BlockingPortal:
        assert self._portal is not None
        return self._portal

    @property
    def background(self) -> TaskGroup:
        assert self._background is not None
        return self._background

    def stop_background(self) -> None:
        """Cancel everything the background task group runs; it is replaced by a new one."""
        if self._closing or not self._thread.is_alive():
            return
        self._ready.clear()
        self.portal.call(self._cancel_background)
        self._ready.wait(timeout=10.0)

    def close(self) -> None:
        """Cancel the background work and stop the loop."""
        if self._closing or not self._thread.is_alive():
            return
        self._closing = True
        self.portal.call(self._cancel_background)
        self._thread.join(timeout=10.0)

    def _cancel_background(self) -> None:
        self.background.cancel_scope.cancel()

    def _main(self) -> None:
        anyio.run(self._serve)

    async def _serve(self) -> None:
        async with BlockingPortal() as portal:
            self._portal = portal
            while not self._closing:
                async with anyio.create_task_group() as group:
                    self._background = group
                    self._ready.set()
                    await anyio.sleep_forever()  # until its cancel scope is cancelled
            await portal.stop(cancel_remaining=True)
