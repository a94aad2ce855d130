"""Tries on a Dask cluster's workers, their events coming back to the notebook.

Why a module of its own: an experiment's tries are ordinary runs (``Agent.run``); with
``executor=`` (a ``distributed.Client`` or a scheduler's address) each one runs on a
worker instead of the kernel, and the notebook still sees it as it happens: the matrix
and the store are fed from its events. ``ClusterRunner.run_try`` is the one entry point.

One try travels like this:

- The agent is made ready to travel: its model as a fresh copy for this prompt
  (``model.fresh(prompt)`` when the model has it: a script starts at its first turn),
  and the tools it may call as a registry of their own, pickled with it (cloudpickle, as
  ``executor="dask"`` tools are: functions defined in a notebook travel by value). A
  tool registered with ``executor=`` runs in the worker's own process: the try is
  already on the cluster. A model's API key travels inside the task, as the model
  holds it (use ``tls://`` between machines).
- On the worker (``_remote_try``) the agent runs in an event loop of its own
  (``anyio.run``: a worker thread has none). Its events, redacted there (the worker's own
  environment may hold credentials the notebook does not know), travel live on the Dask
  event topic ``TOPIC``, batched at most ``FLUSH_HZ`` times a second; a status change
  carries its node's state as the event left it.
- The answer is the finished record as plain data: a transcript of every event, the
  nodes and the variables (redacted as ``Run.to_jsonl`` redacts), plus, pickled apart,
  the live values JSON would lose (typed output, node outputs, exceptions, variables);
  one that cannot come back, or holds a secret of the worker, stays as its (redacted)
  JSON form or short repr.
- In the notebook, ``run_try`` rebuilds the run in one ``Run`` record (the caller's
  ``run=``, or a new one with the same id as on the worker), applying each event as it
  arrives (then ``on_event`` sees the record as a local observer would), and then the
  events that did not arrive live, from the answer: ``on_event`` gets every event once,
  in order, in the notebook's process. Times are the notebook's ``time.monotonic()``:
  the worker's readings are moved by one offset (the two clocks' origins on the wall
  clock), so a run's order, durations and overlaps hold as they were measured.
- Cancelling ``run_try`` cancels the task; the worker sees it (within
  ``WATCH_INTERVAL``) and cancels the agent's run. A worker that dies mid-try ends
  ``run_try`` with ``WorkerLost`` (which worker, which try), never a hang, also when the
  cluster would run the task again elsewhere (its default ``allowed_failures``).

Nothing here imports distributed until a runner is made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pickle
import queue
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from cortex_jupyter.runtime import Agent, Registry, Run, RunHooks
from cortex_jupyter.runtime.core.calls.registry import REGISTRY_TYPES, ToolSpec
from cortex_jupyter.runtime.core.errors import CortexRuntimeError
from cortex_jupyter.runtime.core.events import ActionStatus, AnyEvent
from cortex_jupyter.runtime.core.record.run import (
    TRANSCRIPT_FORMAT,
    TRANSCRIPT_VERSION,
    encode_event,
    encode_node,
    to_json_value,
)
from cortex_jupyter.runtime.core.trust.secrets import redact, redact_value
from cortex_jupyter.runtime.integrations.executors.cluster import LiveRoutes
from cortex_jupyter.runtime.integrations.executors.errors import ClusterUnavailable, NotSendable
from cortex_jupyter.runtime.integrations.executors.wire import (
    RemoteTraceback,
    dumps,
    dumps_or_why,
    exception_label,
    loads,
)
from cortex_jupyter.runtime.integrations.executors.worker import cancellation_check, dask_worker
from cortex_jupyter.runtime.scheduler.capture import FLUSH_HZ

__all__ = ["CANCEL_TIMEOUT", "TOPIC", "WATCH_INTERVAL", "ClusterRunner", "TryFailed", "WorkerLost"]

#: The Dask event topic a try's events travel on.
TOPIC = "cortex-jupyter-try"
#: Seconds between a worker's looks at whether its try was cancelled.
WATCH_INTERVAL = 0.05
#: Seconds a cancellation may take to reach the cluster before ``run_try`` stops waiting.
CANCEL_TIMEOUT = 5.0
_ADDRESS_SCHEMES = ("tcp://", "tls://", "inproc://", "ucx://", "ws://", "wss://")


@dataclass(eq=False, repr=False)
class WorkerLost(CortexRuntimeError):
    """Raised when the worker running a try died (or was stopped) before it answered."""

    label: str
    worker: str
    detail: str
    template = "the worker {e.worker} running {e.label} died before it finished ({e.detail})"


@dataclass(eq=False, repr=False)
class TryFailed(CortexRuntimeError):
    """Raised when the agent's run raised on the worker (the runtime failed, not the
    model: a failing model ends the run ``failed``); the record so far is kept."""

    label: str
    worker: str
    error: str
    template = "{e.label} failed on the worker {e.worker}: {e.error}"


class ClusterRunner:
    """Runs tries on a Dask cluster: ``executor`` is a ``distributed.Client`` (kept open:
    it is the caller's) or a scheduler's address (``"tcp://host:8786"``: a client is
    opened here, and ``close()`` closes it)."""

    def __init__(self, executor: Any) -> None:
        self._own = False
        if isinstance(executor, str):
            self.client = _connect(executor)
            self._own = True
        elif type(executor).__name__ == "Client" and type(executor).__module__.startswith(
            "distributed"
        ):
            self.client = executor
        else:
            raise ValueError(
                "executor= takes a distributed.Client or a Dask scheduler's address "
                f"('tcp://host:8786'), not {_kind(executor)}"
            )
        if self.client.status in ("closing", "closed"):
            raise ValueError("executor=: this distributed.Client is closed")
        self.client.subscribe_topic(TOPIC, _tries.route)

    def close(self) -> None:
        """Close the client this runner opened (a client it was given stays open)."""
        if self._own:
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic(TOPIC)
            self.client.close()

    def __enter__(self) -> ClusterRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def run_try(
        self,
        agent: Agent,
        prompt: str,
        namespace: Mapping[str, Any] | None = None,
        on_event: Callable[[AnyEvent], None] | None = None,
        *,
        run: Run | None = None,
        label: str | None = None,
    ) -> Run:
        """Run ``agent`` on ``prompt`` on a worker and return the finished record.

        ``on_event`` is called here, in the caller's task, with every event of the run,
        once and in order, as they arrive; ``run`` (a new ``Run`` by default) is filled as
        they do, so a store's ``Recording`` made for it before the call sees it as it
        would a local run. ``label`` names the try in errors (``try <run id>``).
        Raises ``WorkerLost``, ``TryFailed``, ``NotSendable``; cancelling the call
        cancels the try on its worker.
        """
        run = run if run is not None else Run()
        label = label or f"try {run.id}"
        blob = _pack(agent, prompt, namespace)
        job = _Job(self.client, blob, run, on_event, label)
        try:
            return await job.go()
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(CANCEL_TIMEOUT, shield=True):
                await anyio.to_thread.run_sync(job.cancel, abandon_on_cancel=True)
            raise
        finally:
            job.forget()


def _kind(value: Any) -> str:
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def _connect(address: str) -> Any:
    if not address.startswith(_ADDRESS_SCHEMES):
        raise ValueError(
            f"executor={address!r} is not a Dask scheduler's address: write it as "
            "'tcp://host:8786' (or tls://...)"
        )
    from distributed import Client

    try:
        return Client(address, set_as_default=False, timeout=10)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ClusterUnavailable(address, "executor=", f"{type(exc).__name__}: {exc}") from None


# ---- the notebook's side ----------------------------------------------------------------------

#: Live messages by try id, filled from the Dask client's event handler.
_tries = LiveRoutes("try")


def _travelling(agent: Agent, prompt: str) -> tuple[Agent, list[tuple[str, str]]]:
    """``agent`` as it goes to the worker: a fresh model, and what it may call as a
    registry of its own (the worker's default registry knows nothing of the notebook's
    tools), with ``executor=`` tools run in place; and the built-in entries it may call,
    which the worker makes for itself (the ``cache`` relic holds an open database)."""
    model = agent.model
    if model is None:
        raise ValueError(
            "an agent run on a cluster needs a model of its own (Agent(model=...)): the "
            "session's model does not travel"
        )
    fresh = getattr(model, "fresh", None)
    if callable(fresh):
        model = fresh(prompt)
    tools = Registry(builtins=False)
    builtins: list[tuple[str, str]] = []
    callable_ = agent.callable()
    for kind in REGISTRY_TYPES:
        for name in callable_.names(kind):
            spec = callable_.get(kind, name)
            if isinstance(spec, ToolSpec) and _builtin(spec):
                builtins.append((kind, name))
                continue
            if isinstance(spec, ToolSpec) and spec.executor is not None:
                spec = dataclasses.replace(spec, executor=None)
            tools.add(spec)
    return agent.with_options(model=model, registry=tools, tools=None), builtins


def _builtin(spec: ToolSpec) -> bool:
    """One of the entries every registry starts with (``complete``, ``cache.get``...)."""
    module = getattr(spec.func, "__module__", None) or ""
    return module.startswith("cortex_jupyter.runtime.core.calls.")


def _arrived(agent: Agent, builtins: list[tuple[str, str]]) -> Agent:
    """On the worker: the agent's registry, with the built-in entries it may call made
    here."""
    if not builtins:
        return agent
    here = Registry()
    wanted = set(builtins)
    for kind in REGISTRY_TYPES:
        for name in here.names(kind):
            if (kind, name) not in wanted:
                here.remove(kind, name)
    for kind in REGISTRY_TYPES:
        for name in agent.home.names(kind):
            here.add(agent.home.get(kind, name))
    return agent.with_options(registry=here)


def _pack(agent: Agent, prompt: str, namespace: Mapping[str, Any] | None) -> bytes:
    shipped, builtins = _travelling(agent, prompt)
    space = dict(namespace or {})
    try:
        return dumps((shipped, builtins, prompt, space))
    except Exception as exc:
        for name, value in space.items():
            if isinstance(dumps_or_why(value), str):
                raise NotSendable(f"the case's variable {name!r}", type(value).__name__,
                                  "the dask cluster", str(exc)) from None  # fmt: skip
        raise NotSendable("the agent (its model or tools)", "", "the dask cluster",
                          f"{type(exc).__name__}: {exc}") from None  # fmt: skip


class _Job:
    """One try: submitted, its live messages applied to ``run`` as they come, then the
    answer; ``cancel`` (any thread) cancels the task."""

    def __init__(
        self,
        client: Any,
        blob: bytes,
        run: Run,
        on_event: Callable[[AnyEvent], None] | None,
        label: str,
    ) -> None:
        self.client = client
        self.blob = blob
        self.run = run
        self.on_event = on_event
        self.label = label
        self.key = f"cortex-try-{run.id}-{uuid.uuid4().hex[:8]}"
        self.inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.future: Any = None
        self.offset: float | None = None  # add to a worker's time: the notebook's
        self.attempt: str | None = None
        self.worker = "(not known yet)"
        self.delivered = 0  # events applied so far
        self.live = True  # false after a gap: the rest comes with the answer
        self.limiter = anyio.CapacityLimiter(1)

    async def go(self) -> Run:
        _tries.add(self.key, self.inbox)
        self.future = self.client.submit(
            _remote_try, self.blob, self.key, TOPIC, self.run.id, key=self.key, pure=False
        )
        self.future.add_done_callback(lambda _: self.inbox.put(("done", None)))
        while True:
            kind, message = await anyio.to_thread.run_sync(
                self.inbox.get, abandon_on_cancel=True, limiter=self.limiter
            )
            if kind == "done":
                break
            self._live(message)
        raw = await anyio.to_thread.run_sync(self._result, limiter=self.limiter)
        return self._finish(pickle.loads(raw))

    def cancel(self) -> None:
        if self.future is not None:
            self.future.cancel()

    def forget(self) -> None:
        _tries.drop(self.key)
        self.future = None  # a future held is a result the cluster keeps

    def _result(self) -> bytes:
        try:
            return bytes(self.future.result())
        except Exception as exc:
            name = type(exc).__name__
            if name == "KilledWorker":
                raise WorkerLost(self.label, self.worker, f"KilledWorker: {exc}") from None
            if name in ("CancelledError", "FutureCancelledError"):
                raise WorkerLost(self.label, self.worker, f"the task was lost: {exc}") from None
            raise

    # ---- live ---------------------------------------------------------------------------

    def _same_attempt(self, message: Mapping[str, Any]) -> None:
        """The first attempt is the try; a message from another means its worker died and
        the cluster started it again elsewhere (its events would come twice)."""
        if self.attempt is None:
            self.attempt = str(message["attempt"])
            self.worker = f"{message['worker']} (pid {message['pid']})"
        elif message["attempt"] != self.attempt:
            self.cancel()
            raise WorkerLost(
                self.label, self.worker,
                f"the cluster started the try again on {message['worker']}",
            )  # fmt: skip
        if self.offset is None:
            # Both clocks read against the wall clock: no transport delay in it, exact on
            # one machine, as good as the machines' clock sync between two.
            self.offset = float(message["clock"]) - _clock()

    def _live(self, message: Mapping[str, Any]) -> None:
        self._same_attempt(message)
        if "started" in message:
            self.run.started = float(message["started"]) + self._shift()
        first = int(message.get("first", 0))
        events = message.get("events", ())
        if not self.live or first > self.delivered:
            self.live = False  # a message was lost: the answer brings the rest
            return
        for entry in events[self.delivered - first :]:
            self._apply(*entry)

    def _shift(self) -> float:
        return self.offset or 0.0

    def _apply(self, at: float, encoded: dict[str, Any], node: dict[str, Any] | None) -> None:
        from cortex_jupyter.runtime.core.record.run import decode_event, decode_node

        shift = self._shift()
        event = decode_event(_moved_event(encoded, shift))
        if node is not None:
            self.run.actions[node["id"]] = decode_node(_moved_node(node, shift))
        self.run.record(event, at + shift)
        self.delivered += 1
        if self.on_event is not None:
            self.on_event(event)

    # ---- the answer ---------------------------------------------------------------------

    def _finish(self, answer: dict[str, Any]) -> Run:
        if answer["kind"] == "again":  # its first attempt's worker died (see _remote_try)
            raise WorkerLost(
                self.label, answer["first"],
                f"the cluster started the try again on {answer['worker']}; not run there",
            )  # fmt: skip
        self._same_attempt(answer)
        if answer["kind"] == "cancelled":
            raise WorkerLost(self.label, self.worker, "the try was cancelled on the cluster")
        shift = self._shift()
        lines = answer["lines"]
        nodes = {line["id"]: line for line in lines if line.get("record") == "node"}
        for line in lines[1:]:
            if line.get("record") != "event" or line["n"] < self.delivered:
                continue
            node = None
            if line.get("kind") == "action_status" and line.get("id") in nodes:
                node = nodes[line["id"]]
            encoded = {k: v for k, v in line.items() if k not in ("record", "t", "n")}
            self._apply(line["t"], encoded, node)
        final = Run.from_jsonl(
            "".join(json.dumps(_moved_line(line, shift)) + "\n" for line in lines)
        )
        for f in dataclasses.fields(Run):
            if f.name not in ("events", "event_times"):
                setattr(self.run, f.name, getattr(final, f.name))
        _reattach(self.run, answer)
        if answer["kind"] == "raised":
            raise TryFailed(self.label, self.worker, answer["label"]) from RemoteTraceback(
                answer["detail"]
            )
        return self.run


def _reattach(run: Run, answer: Mapping[str, Any]) -> None:
    """Put back what JSON loses: the resolved parameters (as JSON), and the live values
    (typed output, node outputs and exceptions) that could be loaded here."""
    for node_id, resolved in answer.get("resolved", {}).items():
        if node_id in run.actions:
            run.actions[node_id].resolved = resolved
    values = answer.get("values", {})
    for name, blob in values.items():
        try:
            value = loads(blob)
        except Exception:
            continue  # its JSON form (or short repr) stays
        where, _, node_id = name.partition(":")
        if where == "output" and not node_id:
            run.output = value
        elif where == "output" and node_id in run.actions:
            run.actions[node_id].output = value
        elif where == "exception" and node_id in run.actions:
            run.actions[node_id].exception = value
        elif where == "variable":
            run.variables[node_id] = value


def _moved_event(encoded: dict[str, Any], shift: float) -> dict[str, Any]:
    out = dict(encoded)
    if isinstance(out.get("time"), int | float):
        out["time"] = out["time"] + shift
    if isinstance(out.get("event"), dict):
        out["event"] = _moved_event(out["event"], shift)
    return out


def _moved_node(node: dict[str, Any], shift: float) -> dict[str, Any]:
    out = dict(node)
    for name in ("submitted", "started", "finished"):
        if isinstance(out.get(name), int | float):
            out[name] = out[name] + shift
    return out


def _moved_line(line: dict[str, Any], shift: float) -> dict[str, Any]:
    record = line.get("record")
    if record == TRANSCRIPT_FORMAT:
        out = dict(line)
        for name in ("started", "ended"):
            if isinstance(out.get(name), int | float):
                out[name] = out[name] + shift
        return out
    if record == "event":
        out = _moved_event(line, shift)
        out["t"] = line["t"] + shift
        out.pop("n", None)
        return out
    if record == "node":
        return _moved_node(line, shift)
    return line


# ---- the worker's side ------------------------------------------------------------------------


def _remote_try(blob: bytes, key: str, topic: str, run_id: str) -> bytes:
    """Runs on a worker: the agent's run, its events sent live; the pickled answer."""
    worker = dask_worker()
    here = {
        "try": key,
        "attempt": uuid.uuid4().hex,
        "worker": str(getattr(worker, "address", "?")),
        "pid": os.getpid(),
    }
    first = _first_attempt(worker, key, f"{here['worker']} (pid {here['pid']})")
    if first is not None:
        # The cluster ran the task again after the worker of its first attempt died. Its
        # tools ran there already (a refund), and the notebook may never have heard of
        # that attempt (its last events die with the worker): say so, run nothing.
        return pickle.dumps({**here, "kind": "again", "first": first, "clock": _clock()})
    shipped, builtins, prompt, namespace = loads(blob)
    agent = _arrived(shipped, builtins)
    run = Run(id=run_id)
    sender = _Sender(worker, topic, here, run)
    cancelled = cancellation_check(worker)
    answer: dict[str, Any] = {**here, "kind": "ok"}

    async def main() -> None:
        async with anyio.create_task_group() as group:
            if cancelled is not None:
                group.start_soon(_watch, cancelled, group.cancel_scope)
            await agent.run(
                prompt, namespace=namespace, run=run, hooks=RunHooks(on_event=sender.event)
            )
            group.cancel_scope.cancel()

    sender.start()
    try:
        anyio.run(main)
        if cancelled is not None and cancelled():
            answer["kind"] = "cancelled"
    except BaseException as exc:  # the runtime failed: the record so far goes back too
        answer["kind"] = "raised"
        answer["label"] = redact(exception_label(exc))
        answer["detail"] = redact("".join(traceback.format_exception(exc)))
    finally:
        sender.close()
    answer["lines"] = _transcript(run)
    answer["resolved"] = {
        node.id: redact_value(to_json_value(node.resolved)[0])
        for node in run.actions.values()
        if node.resolved is not None
    }
    answer["values"] = _values(run)
    answer["clock"] = _clock()
    return pickle.dumps(answer)


def _first_attempt(worker: Any, key: str, here: str) -> str | None:
    """None when this is the try's first attempt on the cluster, else the worker that ran
    the first. The scheduler keeps a mark per try, set before the try runs (a round trip,
    not the batched events, so a worker killed at once still leaves it)."""
    if worker is None:
        return None
    from distributed import get_client

    client = get_client()
    mark = ["cortex-try-started", key]
    first = client.get_metadata(mark, default=None)  # type: ignore[no-untyped-call]
    if first is not None:
        return str(first)
    client.set_metadata(mark, here)  # type: ignore[no-untyped-call]
    return None


def _clock() -> float:
    """This process's ``time.monotonic()`` origin on the wall clock: a reading ``t`` of
    one process is ``t + its _clock() - another's _clock()`` of the other."""
    return time.time() - time.monotonic()


async def _watch(cancelled: Callable[[], bool], scope: anyio.CancelScope) -> None:
    while not cancelled():
        await anyio.sleep(WATCH_INTERVAL)
    scope.cancel()


def _transcript(run: Run) -> list[dict[str, Any]]:
    """The run as ``Run.to_jsonl``'s lines, redacted, each event numbered (``n``): every
    event on its own, as they were sent live (no joining of text deltas)."""
    header = {
        "record": TRANSCRIPT_FORMAT, "version": TRANSCRIPT_VERSION, "id": run.id,
        "status": run.status, "started": run.started, "ended": run.ended,
        "final": run.final, "notes": run.notes, "model": run.model, "turns": run.turns,
        "reason": run.reason,
    }  # fmt: skip
    lines: list[dict[str, Any]] = [header]
    for n, (event, at) in enumerate(zip(run.events, run.event_times, strict=True)):
        lines.append({"record": "event", "t": at, "n": n, **encode_event(event)})
    lines.extend(encode_node(node) for node in run.actions.values())
    values: dict[str, Any] = {}
    reprs = []
    for name, value in run.variables.items():
        values[name], is_repr = to_json_value(value)
        if is_repr:
            reprs.append(name)
    lines.append({"record": "variables", "values": values, "repr": reprs})
    return [redact_value(line) for line in lines]


def _values(run: Run) -> dict[str, bytes]:
    """The live values JSON loses, each pickled alone: one that cannot be, or that holds
    a secret of this worker (the notebook could not redact it), is left out."""
    found: dict[str, Any] = {"output:": run.output} if run.output is not None else {}
    for node in run.actions.values():
        if node.output is not None:
            found[f"output:{node.id}"] = node.output
        if node.exception is not None:
            found[f"exception:{node.id}"] = node.exception
    for name, value in run.variables.items():
        found[f"variable:{name}"] = value
    out = {}
    for name, value in found.items():
        shown = to_json_value(value)[0] if not isinstance(value, BaseException) else str(value)
        if redact_value(shown) != shown:
            continue  # it holds a secret of this worker: only its redacted form goes back
        blob = dumps_or_why(value)
        if isinstance(blob, bytes):
            out[name] = blob
    return out


class _Sender:
    """Sends a try's events live: a start message at once, then batches at most
    ``FLUSH_HZ`` times a second from a thread of its own, redacted. Live messages are a
    courtesy (the answer carries every event): one that fails stops the rest."""

    def __init__(self, worker: Any, topic: str, here: dict[str, Any], run: Run) -> None:
        self.worker = worker
        self.topic = topic
        self.here = here
        self.run = run
        self.pending: list[list[Any]] = []
        self.sent = 0
        self.lock = threading.Lock()
        self.wanted = threading.Event()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.broken = worker is None

    def start(self) -> None:
        self._send({"started": self.run.started})
        if not self.broken:
            self.thread = threading.Thread(target=self._pump, name="cortex-try", daemon=True)
            self.thread.start()

    def event(self, event: AnyEvent) -> None:
        node = None
        if isinstance(event, ActionStatus) and event.id in self.run.actions:
            node = encode_node(self.run.actions[event.id])
        at = self.run.event_times[-1] if self.run.event_times else time.monotonic()
        with self.lock:
            self.pending.append([at, encode_event(event), node])
        self.wanted.set()

    def close(self) -> None:
        self.stop.set()
        self.wanted.set()
        if self.thread is not None:
            self.thread.join()

    def _pump(self) -> None:
        while True:
            self.wanted.wait()
            stopping = self.stop.wait(1 / FLUSH_HZ)
            self.wanted.clear()
            self._flush()
            if stopping:
                return

    def _flush(self) -> None:
        with self.lock:
            batch, self.pending = self.pending, []
        if batch:
            first, self.sent = self.sent, self.sent + len(batch)
            self._send({"first": first, "events": redact_value(batch)})

    def _send(self, fields: dict[str, Any]) -> None:
        if self.broken:
            return
        try:
            self.worker.log_event(self.topic, {**self.here, "clock": _clock(), **fields})
        except Exception:
            self.broken = True
