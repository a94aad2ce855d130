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
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import anyio
import anyio.from_thread
from anyio.abc import TaskGroup
from anyio.from_thread import BlockingPortal

T = TypeVar("T")
Emit = Callable[[Any], None]
#: Longest wait, after a cancel, for the run to wind down before giving up on it.
CANCEL_GRACE = 5.0
#: How often an async cell's pump looks for events (it cannot block on the queue).
ASYNC_STEP = 0.01
#: Put on the queue when the job ends, so a pump waiting for events wakes at once
#: (rather than when its wait runs out: up to ``1/hz`` late, at the end of every cell).
_WAKE = object()


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
        self._stop_requested = False

    def run(self) -> T:
        """Run the job to its end; ``KeyboardInterrupt`` cancels it and is re-raised.

        On ``loop`` (a session's own, kept between cells) when given, else on a loop
        made for this run. Events emitted after ``run`` returned (by work the loop's
        background task group still runs) go to ``late``, in the emitting thread.
        """
        with stop_raises():
            if self._loop is not None:
                return self._run_on(self._loop.portal)
            with anyio.from_thread.start_blocking_portal() as portal:
                return self._run_on(portal)

    async def run_async(self) -> T:
        """``run`` for an async cell, on the kernel's own event loop: the pump awaits
        between deliveries, so widget messages are handled while the run goes on, and
        the kernel's Stop (a cancellation of the cell, in an async cell) or the view's
        Stop button cancels the run as ``KeyboardInterrupt`` does in ``run``."""
        if self._loop is not None:
            return await self._run_on_async(self._loop.portal)
        with anyio.from_thread.start_blocking_portal() as portal:
            return await self._run_on_async(portal)

    async def _run_on_async(self, portal: BlockingPortal) -> T:
        future = portal.start_task_soon(self._guarded)
        try:
            await self._pump_async(future.done)
        except (KeyboardInterrupt, anyio.get_cancelled_exc_class()):
            self._cancel(portal)
            await self._wind_down_async(future.done)
            raise KeyboardInterrupt from None
        finally:
            self._end()
        return future.result()

    def _run_on(self, portal: BlockingPortal) -> T:
        future = portal.start_task_soon(self._guarded)
        future.add_done_callback(lambda _: self._queue.put(_WAKE))
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
        pump = _Pump()
        while not self._pump_once(done(), pump, block=True):
            pass

    async def _pump_async(self, done: Callable[[], bool]) -> None:
        """``_pump`` for an async cell: it awaits between steps, so the kernel's loop runs
        meanwhile (and dispatches widget messages: a button click while the cell runs)."""
        pump = _Pump()
        while not self._pump_once(done(), pump, block=False):
            await anyio.sleep(ASYNC_STEP)

    def _pump_once(self, finished: bool, pump: _Pump, *, block: bool) -> bool:
        """One step of the pump: take what arrived (waiting for it when ``block``),
        deliver a batch when one is due; True when the job is done and all is delivered.
        A stop requested from the view (``request_stop``) is a ``KeyboardInterrupt``."""
        if self._stop_requested:
            self._stop_requested = False
            raise KeyboardInterrupt
        wait = 0.0 if finished or not block else self._interval
        if pump.batch:
            wait = min(wait, max(0.0, pump.last + self._interval - time.monotonic()))
        try:
            pump.batch.append(self._queue.get(timeout=wait) if wait else self._queue.get_nowait())
            while True:
                pump.batch.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        if _WAKE in pump.batch:  # the job ended: the next step sees it done, at once
            pump.batch = [event for event in pump.batch if event is not _WAKE]
        now = time.monotonic()
        if pump.batch and (finished or now - pump.last >= self._interval):
            events, pump.batch = pump.batch, []
            self._behind = bool(self._deliver(events))
            pump.last = now
        elif not pump.batch and not finished and now - pump.last >= self._quiet_wait():
            # Nothing new, but clocks on screen (elapsed, running durations) move on,
            # and what the view held back goes out.
            self._behind = bool(self._deliver([]))
            pump.last = now
        return finished and not pump.batch and self._queue.empty()

    def request_stop(self) -> None:
        """Stop the run as the kernel's interrupt does (the view's own Stop button): the
        pump raises ``KeyboardInterrupt`` at its next step, in the cell's thread."""
        self._stop_requested = True

    def _quiet_wait(self) -> float:
        return self._interval if self._behind else self._idle

    def _wind_down(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + CANCEL_GRACE
        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)

    async def _wind_down_async(self, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + CANCEL_GRACE
        with anyio.CancelScope(shield=True):  # the cell was cancelled: finish regardless
            while not done() and time.monotonic() < deadline:
                await anyio.sleep(0.01)

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
        events = [event for event in events if event is not _WAKE]
        if events:
            self._deliver(events)


@contextmanager
def stop_raises() -> Iterator[None]:
    """While a cell runs in the main thread, SIGINT (the kernel's Stop, or
    ``_thread.interrupt_main``) raises ``KeyboardInterrupt`` there, whatever handler a
    library left on it before the cell: an asyncio loop's ``add_signal_handler`` never
    removed, a server's "shut down on Ctrl-C", ``signal.SIG_IGN``. The handler found is
    put back afterwards, unless the cell itself replaced ours meanwhile.

    ipykernel sets Python's handler around each request it handles, but only there: a
    sync cell run by IPython directly (a terminal, nbval's kernel between requests, a
    test) keeps whatever handler it finds.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives signals
        return
    found = signal.getsignal(signal.SIGINT)
    if found is signal.default_int_handler:
        yield
        return
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except (ValueError, OSError):  # an embedded interpreter with no signals
        yield
        return
    try:
        yield
    finally:
        if found is not None and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, found)


class Loop:
    """An event loop in a daemon thread, kept for a session's whole life.

    A session's runs are started on it, and its task group ``background`` owns the
    ``fire_and_forget`` actions: a run (and its cell) may end before them
    (ARCHITECTURE.md), and they go on here and report their final status later.
    ``stop_background`` cancels them; ``close`` stops the loop. A daemon thread, so a
    kernel that shuts down never waits for it.
    """

    def __init__(self) -> None:
        #: Set while a background task group is open (``stop_background`` renews it).
        self._ready = threading.Event()
        self._background: TaskGroup | None = None
        self._closing = False
        started: Future[BlockingPortal] = Future()
        self._thread = threading.Thread(
            target=anyio.run, args=(self._serve, started), name="cortex-loop", daemon=True
        )
        self._thread.start()
        try:
            #: How other threads start work on the loop (its first task group is open).
            self.portal = started.result(timeout=10.0)
        except FutureTimeout:
            raise RuntimeError("the cortex event loop did not start within 10 s") from None

    def is_current(self) -> bool:
        """Whether the caller runs on this loop's thread (an async tool of a run on it)."""
        return threading.current_thread() is self._thread

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

    async def _serve(self, started: Future[BlockingPortal]) -> None:
        async with BlockingPortal() as portal:
            while not self._closing:
                async with anyio.create_task_group() as group:
                    self._background = group
                    self._ready.set()
                    if not started.done():
                        started.set_result(portal)
                    await anyio.sleep_forever()  # until its cancel scope is cancelled
            await portal.stop(cancel_remaining=True)


class _Pump:
    """What the pump carries from one step to the next."""

    __slots__ = ("batch", "last")

    def __init__(self) -> None:
        self.batch: list[Any] = []
        self.last = float("-inf")
