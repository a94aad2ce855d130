"""Running sync tools off the kernel's process: a Dask cluster, or any Executor.

Why: sync tools run in the kernel's worker threads, and CPU-bound ones take turns on
the GIL (six 0.2 s pure-Python calls take 1.13 s in threads, 0.60 s on two worker
processes). ``@tool(executor="dask")`` sends a tool to the session's Dask cluster: a
``distributed.LocalCluster`` started on first use (processes, one thread each, one per
core, no dashboard unless asked), or the scheduler at ``set_dask_address(...)`` /
``DASK_SCHEDULER_ADDRESS``. ``executor=`` also takes any ``concurrent.futures.Executor``
(a ``ProcessPoolExecutor``, a Dask client's ``get_executor()``).

``run_elsewhere`` is the scheduler's one entry point. One call travels like this:

- The function and its arguments are pickled together with cloudpickle (so functions
  defined in a notebook or a test body travel by value). When that fails, each
  argument is tried alone and ``NotSendable`` names the one that cannot be sent.
- On the worker, ``_run_remote`` calls the tool inside a ``Capture`` of its own, so
  what it prints, logs and warns and its ``progress()`` reports are kept as they are
  for a local tool. They come back with the outcome (also when the tool raises) and are
  replayed into the action's capture. On a Dask worker they also travel *live*, as
  events on one topic the client subscribes to (pushed, not polled; at most
  ``FLUSH_HZ`` a second per call); the outcome carries them all again, so a live
  message that is late or lost changes nothing but when the text shows.
- The run's task waits without blocking its loop: a worker thread of the run waits on
  an inbox that the future's done-callback and the live events fill, so Dask's own
  threads never wait for the run's loop.
- When the waiting task is cancelled (Stop, the action's timeout), the future is
  cancelled, so the cluster forgets the task. On a Dask worker the call running there
  is stopped too: its next ``progress()`` report raises, and a watchdog raises the
  same exception in the tool's thread (``_Watchdog``), so a pure-Python loop that
  never reports stops as well; a call blocked inside C code (a long ``sleep``, a
  NumPy kernel) stops when that call returns. A ``ProcessPoolExecutor`` cannot stop a
  call already running: it runs to its end and its result is dropped.

Timeouts, retries and cancellation stay the scheduler's: Dask does not retry a task
(the local cluster also fails a task whose worker died at once, ``allowed_failures=0``).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextvars
import functools
import inspect
import linecache
import os
import pickle
import queue
import re
import sys
import threading
import traceback
import types
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from cortex_jupyter.runtime.core.errors import CortexRuntimeError, ToolExited
from cortex_jupyter.runtime.core.graph import ActionNode
from cortex_jupyter.runtime.core.registry import Registry
from cortex_jupyter.runtime.scheduler.capture import FLUSH_HZ, Capture, capturing, current

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

__all__ = [
    "ClusterInfo",
    "ClusterUnavailable",
    "NotSendable",
    "WorkerDied",
    "close_all",
    "cluster_info",
    "dask_client",
    "run_elsewhere",
    "set_dask_address",
    "set_dask_dashboard",
]

#: The Dask event topic live output travels on (one for every call: the scheduler keeps
#: the last ``distributed.admin.low-level-log-length`` events of each topic).
LIVE_TOPIC = "cortex-jupyter-output"
#: Characters of text one call sends live; the rest arrives with its outcome.
LIVE_TEXT_BUDGET = 256 * 1024
#: The most characters one live message carries (events are kept on the scheduler).
LIVE_MESSAGE_LIMIT = 64 * 1024
#: Seconds a cancellation may take to reach the cluster before the run stops waiting.
CANCEL_TIMEOUT = 5.0
#: Seconds between a worker's looks at whether its running call was cancelled.
WATCH_INTERVAL = 0.05


# ---- errors -------------------------------------------------------------------------------


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


class _RemoteTraceback(Exception):
    """The traceback of a tool's exception on the worker (its ``__cause__`` here)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


_DYNAMIC_FRAME = re.compile(r'^(\s*)File "<dynamic-code>", line (\d+), in (\S+)$')


def _with_sources(detail: str, func: Callable[..., Any]) -> str:
    """The worker's traceback with the kernel's file names and source lines put back.

    cloudpickle (3.1.3 on) names the file of a function pickled by value
    ``<dynamic-code>``, so the worker cannot show the line that raised; the line
    numbers survive, and the kernel has the function's own code objects and source."""
    files = _code_files(func)
    if not files:
        return detail
    out: list[str] = []
    lines = detail.splitlines(keepends=True)
    for i, line in enumerate(lines):
        match = _DYNAMIC_FRAME.match(line.rstrip("\n"))
        filename = files.get(match.group(3)) if match else None
        if match is None or filename is None:
            out.append(line)
            continue
        indent, number = match.group(1), int(match.group(2))
        out.append(f'{indent}File "{filename}", line {number}, in {match.group(3)}\n')
        source = linecache.getline(filename, number).strip()
        shown = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if source and shown != source:  # the worker could not read it
            out.append(f"{indent}    {source}\n")
    return "".join(out)


def _code_files(func: Any) -> dict[str, str]:
    """The file of each code object a tool carries, by its name (nested ones too)."""
    while isinstance(func, functools.partial):
        func = func.func
    code = getattr(inspect.unwrap(func), "__code__", None)
    files: dict[str, str] = {}
    stack = [code] if isinstance(code, types.CodeType) else []
    while stack:
        code = stack.pop()
        if not code.co_filename.startswith("<"):
            files.setdefault(code.co_name, code.co_filename)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return files


class _Cancelled(BaseException):
    """Raised inside a tool on a Dask worker, at its next ``progress()`` report, once its
    task was cancelled (a ``BaseException``, so the tool's ``except Exception`` lets it
    through)."""


# ---- the caller's side -----------------------------------------------------------------------


async def run_elsewhere(
    executor: Any, func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> Any:
    """Call ``func(*args, **kwargs)`` on ``executor`` (``"dask"`` or a
    ``concurrent.futures.Executor``) and return its result, without blocking the loop.

    What the tool writes reaches the running action's capture. Cancelling the awaiting
    task cancels the call's future. Raises the tool's own exception, ``NotSendable``,
    ``WorkerDied`` or ``ClusterUnavailable``.
    """
    call = _Call(executor, func, args, kwargs, current())
    try:
        # Its own limiter: waiting calls must not hold the tokens sync tools run on.
        return await anyio.to_thread.run_sync(
            call.run, abandon_on_cancel=True, limiter=anyio.CapacityLimiter(1)
        )
    except anyio.get_cancelled_exc_class():
        with anyio.move_on_after(CANCEL_TIMEOUT, shield=True):
            await anyio.to_thread.run_sync(call.cancel, abandon_on_cancel=True)
        raise


class _Call:
    """One call elsewhere. ``run`` (a worker thread of the run) pickles, submits, relays
    live output into the capture until the future is done, then replays the outcome;
    ``cancel`` (any thread) cancels the future, or the submission if it has not
    happened yet."""

    def __init__(
        self,
        executor: Any,
        func: Callable[..., Any],
        args: list[Any],
        kwargs: dict[str, Any],
        capture: Capture | None,
    ) -> None:
        self.executor = executor
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.name = getattr(func, "__name__", "tool")
        self.where = _where(executor)
        self.id = f"cortex-{self.name}-{uuid.uuid4().hex}"
        self._sink = _Sink(capture)
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._future: Any = None
        self._cancelled = False
        #: Read here, on the run's loop: the worker thread has no loop to ask.
        self._cancelled_class = anyio.get_cancelled_exc_class()

    # Both run in an empty context: what they start inside the Dask client or the
    # executor (tasks on the client's loop, its threads) must not inherit the action's
    # capture, or Dask's own logging would land on this node for good.

    def run(self) -> Any:
        return contextvars.Context().run(self._run)

    def cancel(self) -> None:
        contextvars.Context().run(self._cancel)

    def _run(self) -> Any:
        blob = self._pickle()
        live = self.executor == "dask"
        if live:
            _live_inboxes[self.id] = self._inbox
        try:
            future = self._submit(blob)
            if future is None:
                return None  # cancelled before it was sent; nobody waits for this
            future.add_done_callback(lambda _: self._inbox.put(("done", None)))
            while True:
                kind, message = self._inbox.get()
                if kind == "done":
                    break
                self._sink.live(message)
            raw = self._result(future)
        finally:
            if live:
                _live_inboxes.pop(self.id, None)
            with self._lock:
                # Let go of the future now (its callback refers back to this call): a
                # Dask future held is a result the cluster keeps.
                self._future = future = None
        return self._finish(pickle.loads(raw))

    def _cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            future = self._future
        self._inbox.put(("done", None))
        if future is not None:
            future.cancel()

    def _pickle(self) -> bytes:
        try:
            return _cloudpickle_dumps((self.func, self.args, self.kwargs))
        except Exception as exc:
            raise self._unsendable(exc) from exc

    def _unsendable(self, exc: Exception) -> NotSendable:
        """The error naming what cannot be pickled: the first argument that cannot be
        pickled alone, or else the function itself (what it refers to)."""
        for name, value in self._named_arguments():
            try:
                _cloudpickle_dumps(value)
            except Exception as alone:
                return NotSendable(
                    f"parameter {name!r}", _type_label(value), self.where, str(alone)
                )
        return NotSendable(f"the tool {self.name}()", "", self.where, str(exc))

    def _named_arguments(self) -> list[tuple[str, Any]]:
        try:
            params = inspect.signature(self.func).parameters.values()
            names = [
                p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            names = []
        names += [f"#{i}" for i in range(len(names), len(self.args))]
        return list(zip(names, self.args, strict=False)) + list(self.kwargs.items())

    def _submit(self, blob: bytes) -> Any:
        if self.executor == "dask":
            client = dask_client()
            with self._lock:
                if self._cancelled:
                    return None
                self._future = client.submit(
                    _run_remote, blob, self.id, LIVE_TOPIC, key=self.id, pure=False
                )
                return self._future
        with self._lock:
            if self._cancelled:
                return None
            self._future = self.executor.submit(_run_remote, blob, self.id, None)
            return self._future

    def _result(self, future: Any) -> bytes:
        try:
            return bytes(future.result())
        except concurrent.futures.process.BrokenProcessPool as exc:
            detail = f"{exc}; this executor cannot run anything any more: make a new one"
            raise WorkerDied(self.name, self.where, detail) from exc
        except Exception as exc:
            if type(exc).__name__ == "KilledWorker":  # distributed's, without importing it
                raise WorkerDied(self.name, self.where, f"KilledWorker: {exc}") from exc
            raise

    def _finish(self, outcome: _Outcome) -> Any:
        """Replay what the tool wrote, then return its result or raise its exception."""
        self._sink.replay(outcome)
        if outcome.kind == "unsendable":
            raise NotSendable(outcome.label, "", self.where, outcome.detail, back=True)
        try:
            value = _loads(outcome.blob)
        except Exception as exc:
            what = (
                f"the tool's exception {outcome.label}"
                if outcome.kind == "raised"
                else (f"the result of {self.name}()")
            )
            raise NotSendable(
                what, "", self.where, f"{type(exc).__name__}: {exc}", back=True
            ) from exc
        if outcome.kind == "ok":
            return value
        if isinstance(value, self._cancelled_class):
            raise ToolExited(value)  # the tool's own, not the run's cancellation
        raise value from _RemoteTraceback(_with_sources(outcome.detail, self.func))


class _Sink:
    """Where a call's output goes on the caller's side: the action's capture (live
    messages in order, then whatever of the outcome has not arrived), or the caller's
    own streams when the tool was called outside an action."""

    def __init__(self, capture: Capture | None) -> None:
        self.capture = capture
        self.applied = 0  # text batches applied from live messages
        self.live_text = True  # false after a gap: the rest comes with the outcome
        self.seq = 0  # the last live message applied
        self.progress: tuple[Any, ...] | None = None
        self.partial: str | None = None

    def live(self, message: dict[str, Any]) -> None:
        if message.get("seq", 0) <= self.seq:
            return
        self.seq = message["seq"]
        batch = message.get("text")
        if batch is not None and self.live_text:
            if message.get("batch") == self.applied:
                self._text(batch)
                self.applied += 1
            else:
                self.live_text = False
        self._report(message.get("progress"), message.get("partial"))

    def replay(self, outcome: _Outcome) -> None:
        for batch in outcome.batches[self.applied :]:
            self._text(batch)
        self.applied = len(outcome.batches)
        self._report(outcome.progress, outcome.partial)

    def _text(self, batch: dict[str, Any]) -> None:
        capture = self.capture
        if capture is None:
            sys.stdout.write(batch.get("stdout", ""))
            sys.stderr.write(batch.get("stderr", ""))
            return
        capture.write("stdout", batch.get("stdout", ""))
        capture.write("stderr", batch.get("stderr", ""))
        for line in batch.get("logs", ()):
            capture.log(line)

    def _report(self, progress: Any, partial: str | None) -> None:
        """Progress and partial output as the latest values (the outcome repeats the
        last live ones: not reported twice)."""
        if self.capture is None:
            return
        if progress is not None and tuple(progress) != self.progress:
            self.progress = (done, total, note) = tuple(progress)
            self.capture.progress(done, total, note)
        if partial is not None and partial != self.partial:
            self.partial = partial
            self.capture.partial(partial)


#: Live output by call id, filled from the Dask client's event handler.
_live_inboxes: dict[str, queue.SimpleQueue[tuple[str, Any]]] = {}


def _on_live(event: tuple[float, Any]) -> None:
    """The client's handler for ``LIVE_TOPIC`` (on the client's own loop): never blocks."""
    _, message = event
    if isinstance(message, dict):
        inbox = _live_inboxes.get(str(message.get("call")))
        if inbox is not None:
            inbox.put(("live", message))


def _where(executor: Any) -> str:
    if executor == "dask" or type(executor).__module__.startswith("distributed"):
        return "the dask cluster"
    return f"a {type(executor).__name__}"


def _type_label(value: Any) -> str:
    kind = type(value)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _loads(blob: bytes | None) -> Any:
    return None if blob is None else _cloudpickle_loads(blob)


def _cloudpickle_dumps(value: Any) -> bytes:
    """``cloudpickle.dumps``, typed: functions defined in ``__main__`` (a notebook, a
    test body) travel by value. Imported on first use, as the engines are."""
    import cloudpickle  # type: ignore[import-untyped]  # 3.1 ships no py.typed or stubs

    return bytes(cloudpickle.dumps(value))


def _cloudpickle_loads(blob: bytes) -> Any:
    import cloudpickle

    return cloudpickle.loads(blob)


# ---- the worker's side ---------------------------------------------------------------------


@dataclass
class _Outcome:
    """What comes back from the worker. The value (or the exception) is pickled on its
    own, so one that cannot be loaded here still leaves the output and a clear error.
    ``label`` is the exception as ``Type: message`` (or what could not be sent),
    ``detail`` its remote traceback (or why it could not be pickled)."""

    kind: str  # "ok" | "raised" | "unsendable" | "cancelled"
    blob: bytes | None = None
    label: str = ""
    detail: str = ""
    batches: list[dict[str, Any]] = field(default_factory=list)
    progress: tuple[float, float | None, str] | None = None
    partial: str | None = None


def _run_remote(blob: bytes, call: str, topic: str | None) -> bytes:
    """Runs on the worker: the tool, with what it writes recorded; the pickled outcome."""
    recorder = _Recorder(call, _live_sender(topic), _cancellation_check())
    outcome = recorder.call(blob)
    node = recorder.capture.node
    if node.progress is not None:
        outcome.progress = (node.progress.done, node.progress.total, node.progress.note)
    outcome.partial = recorder.partial
    outcome.batches = recorder.batches
    return pickle.dumps(outcome)


class _Recorder:
    """A worker-side ``Capture`` whose flushes become numbered text batches, all returned
    with the outcome and, given a ``send``, also sent live (by a thread started on the
    first write, at most ``FLUSH_HZ`` times a second)."""

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
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def call(self, blob: bytes) -> _Outcome:
        try:
            with capturing(self.capture), _Watchdog(self._cancelled):
                func, args, kwargs = _cloudpickle_loads(blob)
                result = func(*args, **kwargs)
                if inspect.isgenerator(result):
                    result = self._drain(result)
        except _Cancelled:
            return _Outcome("cancelled")
        except BaseException as exc:  # everything the tool raises goes back to the caller
            outcome = _Outcome("raised", label=_exception_label(exc))
            outcome.detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            blob_or_why = _dumps(exc)
            if isinstance(blob_or_why, str):
                return _Outcome("unsendable", label=f"the tool's exception {outcome.label}",
                                detail=blob_or_why)  # fmt: skip
            outcome.blob = blob_or_why
            return outcome
        finally:
            self._close()
        blob_or_why = _dumps(result)
        if isinstance(blob_or_why, str):
            label = f"the result of the tool (a {_type_label(result)})"
            return _Outcome("unsendable", label=label, detail=blob_or_why)
        return _Outcome("ok", blob=blob_or_why)

    def _drain(self, gen: Generator[Any, Any, Any]) -> Any:
        """A generator tool: each yield is its latest partial output, as locally."""
        from cortex_jupyter.runtime.core.record import summarize

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
        self._wanted.set()

    def _pump(self) -> None:
        while True:
            self._wanted.wait()
            if self._stop.wait(1 / FLUSH_HZ):
                return  # closing: the final flush sends nothing live
            self._wanted.clear()
            self._flush()

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self._stop.set()
        self._wanted.set()
        if thread is not None:
            thread.join()
        self._flush(final=True)

    def _flush(self, final: bool = False) -> None:
        with self._flush_lock:
            event = self.capture.flush()
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
    import ctypes

    found = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )
    return bool(found)


def _dumps(value: Any) -> bytes | str:
    """``value`` pickled, or why it cannot be."""
    try:
        return _cloudpickle_dumps(value)
    except Exception as exc:
        return str(exc) or type(exc).__name__


def _exception_label(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _live_sender(topic: str | None) -> Callable[[dict[str, Any]], None] | None:
    """How this worker sends live messages: a Dask worker's ``log_event``, or nothing."""
    worker = _dask_worker()
    if topic is None or worker is None:
        return None

    def send(message: dict[str, Any]) -> None:
        worker.log_event(topic, message)

    return send


def _cancellation_check() -> Callable[[], bool] | None:
    """On a Dask worker: whether this thread's task was cancelled (the scheduler told
    the worker to forget it). Reads the worker's state without locking: a stale answer
    only delays the stop to the next report."""
    worker = _dask_worker()
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


def _dask_worker() -> Any:
    """The Dask worker running this task, or None (not imported: not a Dask worker)."""
    if "distributed" not in sys.modules:
        return None
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        return None


# ---- the session's Dask cluster ---------------------------------------------------------------


@dataclass
class _DaskState:
    address: str | None = None  # set_dask_address
    dashboard: str | None = None  # set_dask_dashboard
    client: Client | None = None
    cluster: LocalCluster | None = None
    source: str = ""  # where the client's address came from
    connected_to: str | None = None  # the address the client was opened for (None: local)
    cluster_dashboard: bool = False  # the local cluster was started with one
    exit_hook: bool = False


_dask = _DaskState()
_dask_lock = threading.RLock()


def set_dask_address(address: str | None) -> None:
    """Use the Dask scheduler at ``address`` (``tcp://host:8786``) for ``executor="dask"``
    tools; ``None`` goes back to ``DASK_SCHEDULER_ADDRESS``, or else a local cluster.
    What this module had opened for another address is closed; the next call connects."""
    with _dask_lock:
        _dask.address = address or None
        if _dask.client is not None and _target()[0] != _dask.connected_to:
            close_all()


def set_dask_dashboard(address: str | None) -> None:
    """Give the local cluster started from now on a dashboard at ``address`` (``":8787"``,
    ``"127.0.0.1:0"``; it needs bokeh); ``None`` (the default): no dashboard."""
    with _dask_lock:
        _dask.dashboard = address or None


def dask_client() -> Client:
    """The session's Dask client: on first use it connects to the configured scheduler or
    starts a local cluster (blocking, a second or two). Closed by ``close_all()``."""
    with _dask_lock:
        client = _dask.client
        if client is not None and client.status not in ("closing", "closed"):
            return client
        close_all()
        address, source = _target()
        try:
            client = _connect(address)
        except Exception as exc:
            raise ClusterUnavailable(address, source, f"{type(exc).__name__}: {exc}") from exc
        _dask.client, _dask.source, _dask.connected_to = client, source, address
        # distributed leaves these methods unannotated (as it does Client, LocalCluster and
        # close below); its own signatures are stable: (topic, handler) here.
        client.subscribe_topic(LIVE_TOPIC, _on_live)  # type: ignore[no-untyped-call]
        if not _dask.exit_hook:
            atexit.register(close_all)
            _dask.exit_hook = True
        return client


def _target() -> tuple[str | None, str]:
    """The scheduler address to use and where it comes from (None: a local cluster)."""
    if _dask.address:
        return _dask.address, "set_dask_address"
    env = os.environ.get("DASK_SCHEDULER_ADDRESS")
    if env:
        return env, "DASK_SCHEDULER_ADDRESS"
    return None, "a local cluster started by cortex_jupyter"


def _connect(address: str | None) -> Client:
    from dask.system import CPU_COUNT
    from distributed import Client, LocalCluster

    if address is not None:
        return Client(address, set_as_default=False)  # type: ignore[no-untyped-call]
    _spawnable_main()
    # No dashboard unless asked: the scheduler's HTTP server (health, metrics) then
    # listens on a free port of this machine only, never 8787 (no "port in use" warning).
    http = {"dashboard_address": "127.0.0.1:0"} if _dask.dashboard is None else {}
    cluster = LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=CPU_COUNT,
        threads_per_worker=1,
        processes=True,
        dashboard_address=_dask.dashboard,
        # Retrying is the action's business (its `retry`), not Dask's: a task whose
        # worker died fails at once instead of killing three more workers.
        scheduler_kwargs={"allowed_failures": 0, **http},
    )
    try:
        client = Client(cluster, set_as_default=False)  # type: ignore[no-untyped-call]
    except BaseException:
        cluster.close()
        raise
    _dask.cluster, _dask.cluster_dashboard = cluster, _dask.dashboard is not None
    return client


def _spawnable_main() -> None:
    """Let worker processes be spawned from a notebook: multiprocessing reads
    ``__main__.__spec__``, the notebook's namespace is IPython's ``__main__`` module, and
    ``%reset`` deletes the name from it (the workers then fail to start with
    "module '__main__' has no attribute '__spec__'"). ``None`` is what it held."""
    main = sys.modules.get("__main__")
    if main is not None and not hasattr(main, "__spec__"):
        main.__spec__ = None


def close_all() -> None:
    """Close the Dask client and the local cluster this module started (the session's
    unload, and at exit); a cluster it only connected to keeps running. Calls still
    running there are cancelled. The next ``executor="dask"`` call starts again."""
    with _dask_lock:
        client, cluster = _dask.client, _dask.cluster
        _dask.client = _dask.cluster = None
        _dask.source, _dask.connected_to = "", None
    if client is not None:
        try:
            client.unsubscribe_topic(LIVE_TOPIC)  # type: ignore[no-untyped-call]
        finally:
            client.close()  # type: ignore[no-untyped-call]
    if cluster is not None:
        cluster.close()


@dataclass(frozen=True)
class ClusterInfo:
    """What ``%cortex cluster`` shows: the cluster ``executor="dask"`` tools run on."""

    address: str | None
    source: str
    workers: int = 0
    threads: int = 0
    memory: int = 0  # bytes, summed over the workers' limits
    dashboard: str | None = None
    error: str | None = None  # the scheduler could not be asked

    def __str__(self) -> str:
        if self.address is None:
            return f'no cluster yet: the first executor="dask" tool will use {self.source}'
        head = f"dask cluster at {self.address} ({self.source})"
        if self.error is not None:
            return f"{head}: not answering ({self.error})"
        from dask.utils import format_bytes

        workers = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        memory = format_bytes(self.memory)
        return (
            f"{head}: {workers}, {threads}, {memory} memory; dashboard: {self.dashboard or 'none'}"
        )


def cluster_info() -> ClusterInfo:
    """The cluster in use, or what the first ``executor="dask"`` tool will use ("no
    cluster yet"); never starts one."""
    with _dask_lock:
        client, cluster, source = _dask.client, _dask.cluster, _dask.source
    if client is None:
        address, source = _target()
        planned = f"the scheduler at {address} (from {source})" if address else source
        return ClusterInfo(None, planned)
    address = cluster.scheduler_address if cluster is not None else _dask.connected_to
    try:
        info = client.scheduler_info(n_workers=-1)
    except Exception as exc:
        return ClusterInfo(address, source, error=f"{type(exc).__name__}: {exc}")
    workers = list(info.get("workers", {}).values())
    dashboard: str | None = None
    if cluster is None or _dask.cluster_dashboard:
        try:
            dashboard = client.dashboard_link
        except Exception:
            dashboard = None
    return ClusterInfo(
        address,
        source,
        workers=len(workers),
        threads=sum(int(w.get("nthreads", 0)) for w in workers),
        memory=sum(int(w.get("memory_limit") or 0) for w in workers),
        dashboard=dashboard,
    )


Registry.run_elsewhere = run_elsewhere  # the scheduler runs executor= tools through it
