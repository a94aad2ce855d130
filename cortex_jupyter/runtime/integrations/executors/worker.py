"""The worker's side of a call: runs the tool in a ``Capture`` of its own and answers
with an ``Outcome``.

Why a module of its own: this is the code that runs in the other process (a Dask
worker, a pool's process), and it never touches the kernel's state. What the tool
prints, logs and warns and its ``progress()`` reports are kept as they are for a local
tool; they come back with the outcome (also when the tool raises). On a Dask worker
they also travel *live*, as events on the topic the kernel's client subscribes to
(pushed, not polled; at most ``FLUSH_HZ`` a second per call); the outcome carries them
all again, so a live message that is late or lost changes nothing but when the text
shows. On a Dask worker a cancelled call is stopped too: its next ``progress()`` report
raises, and a watchdog raises the same exception in the tool's thread, so a pure-Python
loop that never reports stops as well.
"""

from __future__ import annotations

import ctypes
import inspect
import pickle
import sys
import threading
import traceback
from collections.abc import Callable, Generator, Sequence
from typing import Any

from cortex_jupyter.runtime.core.record.graph import ActionNode
from cortex_jupyter.runtime.core.record.observer import Carried, entered
from cortex_jupyter.runtime.core.record.run import summarize
from cortex_jupyter.runtime.integrations.executors.wire import (
    Outcome,
    dumps_or_why,
    exception_label,
    loads,
    type_label,
)
from cortex_jupyter.runtime.scheduler.capture import FLUSH_HZ, Capture, capturing

__all__ = ["LIVE_MESSAGE_LIMIT", "LIVE_TEXT_BUDGET", "WATCH_INTERVAL", "run_remote"]

#: Characters of text one call sends live; the rest arrives with its outcome.
LIVE_TEXT_BUDGET = 256 * 1024
#: The most characters one live message carries (events are kept on the scheduler).
LIVE_MESSAGE_LIMIT = 64 * 1024
#: Seconds between a worker's looks at whether its running call was cancelled.
WATCH_INTERVAL = 0.05


class _Cancelled(BaseException):
    """Raised inside a tool on a Dask worker, at its next ``progress()`` report, once its
    task was cancelled (a ``BaseException``, so the tool's ``except Exception`` lets it
    through)."""


def run_remote(blob: bytes, call: str, topic: str | None, carried: Sequence[Carried] = ()) -> bytes:
    """Runs on the worker: the tool, with what it writes recorded, inside what the run's
    observers ``carried`` (a trace's context); the pickled outcome."""
    recorder = _Recorder(call, _live_sender(topic), cancellation_check(dask_worker()))
    outcome = recorder.call(blob, carried)
    node = recorder.capture.node
    if node.progress is not None:
        outcome.progress = (node.progress.done, node.progress.total, node.progress.note)
    outcome.partial = recorder.partial
    outcome.batches = recorder.batches
    return pickle.dumps(outcome)


class _Recorder:
    """A worker-side ``Capture`` whose flushes become numbered text batches, all returned
    with the outcome and, given a ``send``, also sent live (by a thread started with the
    call, at most ``FLUSH_HZ`` times a second)."""

    def __init__(
        self,
        call: str,
        send: Callable[[dict[str, Any]], None] | None,
        cancelled: Callable[[], bool] | None,
    ) -> None:
        self.call_id = call
        self.batches: list[dict[str, Any]] = []
        self.partial: str | None = None
        self.capture = _WorkerCapture(ActionNode(call, call), self._wake, cancelled)
        self._cancelled = cancelled
        self._send = send
        self._seq = 0
        self._live_chars = 0
        self._text_live = send is not None
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def call(self, blob: bytes, carried: Sequence[Carried] = ()) -> Outcome:
        try:
            self._wake()  # live output: the pump starts with the call
            with capturing(self.capture), _Watchdog(self._cancelled):
                func, args, kwargs = loads(blob)
                with entered(carried):
                    result = func(*args, **kwargs)
                    if inspect.isgenerator(result):
                        result = self._drain(result)
        except _Cancelled:
            return Outcome("cancelled")
        except BaseException as exc:  # everything the tool raises goes back to the caller
            outcome = Outcome("raised", label=exception_label(exc))
            outcome.detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            blob_or_why = dumps_or_why(exc)
            if isinstance(blob_or_why, str):
                return Outcome("unsendable", label=f"the tool's exception {outcome.label}",
                                detail=blob_or_why)  # fmt: skip
            outcome.blob = blob_or_why
            return outcome
        finally:
            self._close()
        blob_or_why = dumps_or_why(result)
        if isinstance(blob_or_why, str):
            label = f"the result of the tool (a {type_label(result)})"
            return Outcome("unsendable", label=label, detail=blob_or_why)
        return Outcome("ok", blob=blob_or_why)

    def _drain(self, gen: Generator[Any, Any, Any]) -> Any:
        """A generator tool: each yield is its latest partial output, as locally."""
        last = None
        try:
            while True:
                last = next(gen)
                self.capture.partial(summarize(last))
        except StopIteration as stop:
            return stop.value if stop.value is not None else last

    # ---- flushing ------------------------------------------------------------------------

    def _wake(self) -> None:
        if self._send is None:
            return
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._pump, name="cortex-live", daemon=True)
                self._thread.start()

    def _pump(self) -> None:
        """Flushes ``FLUSH_HZ`` times a second while the call runs (a tool's print goes
        straight to its capture's sink and wakes nobody: ``capture.CapturedText``)."""
        while not self._stop.wait(1 / FLUSH_HZ):
            self._flush()
        # closing: the final flush sends nothing live

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._stop.set()
        if thread is not None:
            thread.join()
        self._flush(final=True)

    def _flush(self, final: bool = False) -> None:
        with self._flush_lock:
            event = self.capture.flush(final=final)
            if event is None:
                return
            text: dict[str, Any] | None = None
            if event.stdout or event.stderr or event.logs:
                text = {"stdout": event.stdout, "stderr": event.stderr, "logs": list(event.logs)}
                self.batches.append(text)
            if event.partial is not None:
                self.partial = event.partial
            if self._send is None or final:
                return
            progress = event.progress
            message: dict[str, Any] = {
                "call": self.call_id,
                "seq": self._seq + 1,
                "progress": None
                if progress is None
                else [progress.done, progress.total, progress.note],
                "partial": event.partial,
            }
            if text is not None and self._text_live:
                size = len(event.stdout) + len(event.stderr) + sum(map(len, event.logs))
                if size <= LIVE_MESSAGE_LIMIT and self._live_chars + size <= LIVE_TEXT_BUDGET:
                    self._live_chars += size
                    message["text"], message["batch"] = text, len(self.batches) - 1
                else:
                    self._text_live = False  # in order or not at all: the rest comes at the end
            if "text" in message or progress is not None or event.partial is not None:
                self._seq += 1
                try:
                    self._send(message)
                except Exception:  # live output is a courtesy; the outcome carries it all
                    self._send = None


class _WorkerCapture(Capture):
    """The tool's capture on a worker: ``progress()`` also checks whether the call was
    cancelled, and stops the tool there if so."""

    def __init__(
        self, node: ActionNode, wake: Callable[[], None], cancelled: Callable[[], bool] | None
    ) -> None:
        super().__init__(node, wake)
        self._cancelled = cancelled

    def progress(self, done: float, total: float | None, note: str) -> None:
        if self._cancelled is not None and self._cancelled():
            raise _Cancelled()
        super().progress(done, total, note)


class _Watchdog:
    """On a Dask worker, while the tool runs: once its task is cancelled (Stop, a
    timeout, the client gone), raises ``_Cancelled`` in the tool's thread, so a pure-Python
    loop that never reports progress stops too and frees the worker's one thread. Python
    delivers it at the thread's next bytecode: a call blocked inside C code (a sleep, a
    socket read, a NumPy kernel) stops when that call returns.

    Asked every ``WATCH_INTERVAL`` seconds (Dask tells a worker of a cancellation by
    changing the task's state; there is no public event to wait on)."""

    def __init__(self, cancelled: Callable[[], bool] | None) -> None:
        self._cancelled = cancelled
        self._target = threading.get_ident()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._fired = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Watchdog:
        if self._cancelled is not None:
            self._thread = threading.Thread(target=self._watch, name="cortex-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done.set()
            if self._fired:  # raised, and perhaps not delivered yet: withdraw it
                _raise_in(self._target, None)
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        assert self._cancelled is not None
        while not self._done.wait(WATCH_INTERVAL):
            if self._cancelled():
                with self._lock:
                    if not self._done.is_set():
                        self._fired = _raise_in(self._target, _Cancelled)
                return


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> bool:
    """Raise ``exc`` asynchronously in the thread ``thread_id`` (``None``: withdraw one
    not delivered yet); whether a thread was found."""
    found = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )
    return bool(found)


def _live_sender(topic: str | None) -> Callable[[dict[str, Any]], None] | None:
    """How this worker sends live messages: a Dask worker's ``log_event``, or nothing."""
    worker = dask_worker()
    if topic is None or worker is None:
        return None

    def send(message: dict[str, Any]) -> None:
        worker.log_event(topic, message)

    return send


def cancellation_check(worker: Any) -> Callable[[], bool] | None:
    """On a Dask ``worker`` (None: not one): whether this thread's task was cancelled
    (the scheduler told the worker to forget it). Reads the worker's state without
    locking: a stale answer only delays the stop to the next look."""
    if worker is None:
        return None
    try:
        key = worker.get_current_task()
    except Exception:
        return None

    def cancelled() -> bool:
        try:
            task = worker.state.tasks.get(key)
        except Exception:  # another distributed version's internals: no early stop
            return False
        return task is None or task.state in ("cancelled", "released", "forgotten")

    return cancelled


def dask_worker() -> Any:
    """The Dask worker running this task, or None (not imported: not a Dask worker)."""
    if "distributed" not in sys.modules:
        return None
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        return None
