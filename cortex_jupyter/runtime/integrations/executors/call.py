"""The kernel's side of a call elsewhere: ``run_elsewhere``, the scheduler's one entry
point into this package.

Why a module of its own: it is where a call meets the run. One call travels like this:

- The function and its arguments are pickled together (``wire``). When that fails, each
  argument is tried alone and ``NotSendable`` names the one that cannot be sent.
- It is submitted to the session's Dask cluster (``cluster``) or to the given
  ``concurrent.futures.Executor``, to run ``worker.run_remote`` there.
- What the run's observers carry to another process (``runtime.core.record.observer``: a
  trace's context, so the tool's own spans nest inside its action's) is sent with it and
  entered around the tool there; a thread pool's call already runs in the caller's
  context.
- The run's task waits without blocking its loop: a worker thread of the run waits on an
  inbox that the future's done-callback and the live events fill, so Dask's own threads
  never wait for the run's loop. Live messages reach the action's capture as they come;
  the outcome's output is replayed after them (what did not arrive live), then its
  result returned or its exception raised.
- When the waiting task is cancelled (Stop, the action's timeout), the future is
  cancelled, so the cluster forgets the task (and a Dask worker stops the call). A
  ``ProcessPoolExecutor`` cannot stop a call already running: it runs to its end and its
  result is dropped.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import inspect
import pickle
import queue
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from cortex_jupyter.runtime.core.errors import ToolExited
from cortex_jupyter.runtime.core.record.observer import Carried, carried
from cortex_jupyter.runtime.integrations.executors import cluster
from cortex_jupyter.runtime.integrations.executors.errors import NotSendable, WorkerDied
from cortex_jupyter.runtime.integrations.executors.wire import (
    Outcome,
    RemoteTraceback,
    dumps,
    loads,
    type_label,
    with_sources,
)
from cortex_jupyter.runtime.integrations.executors.worker import run_remote
from cortex_jupyter.runtime.scheduler.capture import Capture, current

__all__ = ["CANCEL_TIMEOUT", "executor_name", "run_elsewhere"]

#: Seconds a cancellation may take to reach the cluster before the run stops waiting.
CANCEL_TIMEOUT = 5.0


async def run_elsewhere(
    executor: Any, func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> Any:
    """Call ``func(*args, **kwargs)`` on ``executor`` (``"dask"`` or a
    ``concurrent.futures.Executor``) and return its result, without blocking the loop.

    What the tool writes reaches the running action's capture. Cancelling the awaiting
    task cancels the call's future. Raises the tool's own exception, ``NotSendable``,
    ``WorkerDied`` or ``ClusterUnavailable``.
    """
    call = _Call(executor, func, args, kwargs, current(), carried(executor_name(executor)))
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
        carried: tuple[Carried, ...] = (),
    ) -> None:
        self.executor = executor
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.name = getattr(func, "__name__", "tool")
        self.where = _where(executor)
        self.id = f"cortex-{self.name}-{uuid.uuid4().hex}"
        #: What the run's observers send with the tool (entered around it on the worker).
        self.carried = carried
        self._sink = _Sink(capture)
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._future: Any = None
        self._cancelled = False
        #: Read here, on the run's loop: the worker thread has no loop to ask.
        self._cancelled_class = anyio.get_cancelled_exc_class()
        #: The context the call was made in (a trace's current span), for a thread pool.
        self._caller = _without_capture(contextvars.copy_context())

    # Both run in an empty context: what they start inside the Dask client or the
    # executor (tasks on the client's loop, its threads) must not inherit the action's
    # capture, or Dask's own logging would land on this node for good.

    def run(self) -> Any:
        return contextvars.Context().run(self._run)

    def cancel(self) -> None:
        contextvars.Context().run(self._cancel)

    def _run(self) -> Any:
        blob = self._pickle()
        live = (
            cluster.live_messages(self.id, self._inbox)
            if self.executor == "dask"
            else contextlib.nullcontext()
        )
        with live:
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
            return dumps((self.func, self.args, self.kwargs))
        except Exception as exc:
            raise self._unsendable(exc) from exc

    def _unsendable(self, exc: Exception) -> NotSendable:
        """The error naming what cannot be pickled: the first argument that cannot be
        pickled alone, or else the function itself (what it refers to)."""
        for name, value in self._named_arguments():
            try:
                dumps(value)
            except Exception as alone:
                return NotSendable(f"parameter {name!r}", type_label(value), self.where, str(alone))
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
            client = cluster.dask_client()
            with self._lock:
                if self._cancelled:
                    return None
                self._future = client.submit(
                    run_remote, blob, self.id, cluster.LIVE_TOPIC, self.carried,
                    key=self.id, pure=False,
                )  # fmt: skip
                return self._future
        call: Any = run_remote
        args: tuple[Any, ...] = (blob, self.id, None, self.carried)
        if isinstance(self.executor, concurrent.futures.ThreadPoolExecutor):
            # A thread of this process runs the tool in the caller's context (a trace's
            # current span), as the run's own worker threads do: nothing to carry. A
            # process or a cluster cannot receive a context: it gets what is carried.
            call, args = self._caller.run, (run_remote, blob, self.id, None)
        with self._lock:
            if self._cancelled:
                return None
            self._future = self.executor.submit(call, *args)
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

    def _finish(self, outcome: Outcome) -> Any:
        """Replay what the tool wrote, then return its result or raise its exception."""
        self._sink.replay(outcome)
        if outcome.kind == "unsendable":
            raise NotSendable(outcome.label, "", self.where, outcome.detail, back=True)
        try:
            value = loads(outcome.blob)
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
        raise value from RemoteTraceback(with_sources(outcome.detail, self.func))


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

    def replay(self, outcome: Outcome) -> None:
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


def _without_capture(context: contextvars.Context) -> contextvars.Context:
    """``context`` less the action's capture: ``run_remote`` records what the tool writes
    itself, as a worker's side does, and a capture inherited would take it twice."""
    kept = contextvars.Context()
    for var, value in context.items():
        if var.name != "cortex_capture":
            kept.run(var.set, value)
    return kept


def _is_dask(executor: Any) -> bool:
    return executor == "dask" or type(executor).__module__.startswith("distributed")


def executor_name(executor: Any) -> str:
    """What a trace calls ``executor``: ``dask`` for the session's cluster or a Dask
    client's executor, else its class's name (``ProcessPoolExecutor``)."""
    return "dask" if _is_dask(executor) else type(executor).__name__


def _where(executor: Any) -> str:
    if _is_dask(executor):
        return "the dask cluster"
    return f"a {type(executor).__name__}"
