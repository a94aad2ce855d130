"""The scheduler: runs the actions of a stream as a dependency graph, while it streams.

``Scheduler.submit(event)`` takes the parser's events one by one (it never blocks):
an ``action`` event becomes a node, and the node starts at once if its dependencies
are done. When a node finishes, the nodes it released start from the same task, so
dispatch never polls. ``await scheduler.drain()`` ends a turn: ids that never
appeared are given up on and every action except ``fire_and_forget`` ones is waited
for. Leaving ``async with`` ends the run.

Every task belongs to the scheduler's task group (or to the ``background`` group the
caller passes for ``fire_and_forget`` actions); cancelling the run cancels running
actions, skips pending ones and keeps everything already finished.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from types import TracebackType
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import TaskGroup

from cortex_jupyter.protocol.events import (
    Action,
    ActionReady,
    ActionStart,
    ContextFeedEvent,
    Event,
    ProtocolError,
)
from cortex_jupyter.runtime.core.calls.registry import AgentSpec, Step, ToolSpec, WorkflowSpec
from cortex_jupyter.runtime.core.errors import (
    ActionTimeout,
    AgentDepthExceeded,
    CortexRuntimeError,
    InvalidVariableName,
    NoModelConfigured,
    SchedulerNotRunning,
    UnknownAction,
    WorkflowStepFailed,
)
from cortex_jupyter.runtime.core.events import ActionStatus, AnyEvent, End, Interrupt, Metric
from cortex_jupyter.runtime.core.model.chunks import StreamingModel
from cortex_jupyter.runtime.core.record.graph import NOT_STARTED, ActionNode, Graph, Update
from cortex_jupyter.runtime.core.record.observer import (
    RunObserver,
    RunStart,
    acting,
    notify,
    observers_for,
)
from cortex_jupyter.runtime.core.record.run import (
    Run,
    brief_json,
    dispatch_latencies,
    kept,
    summarize,
)
from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.runtime.core.values.coerce import fit
from cortex_jupyter.runtime.core.values.variables import (
    check_variable_name,
    find_references,
    resolve,
)
from cortex_jupyter.runtime.scheduler.asking import ask
from cortex_jupyter.runtime.scheduler.calls import call_tool, error_text
from cortex_jupyter.runtime.scheduler.capture import FLUSH_HZ, Capture, capturing
from cortex_jupyter.runtime.scheduler.spec import RunSpec

Invoke = Callable[[], Any]
_Call = tuple[list[Any], dict[str, Any]]  # a tool's positional and keyword arguments


class Scheduler:
    """Runs one run's actions as they arrive; see the module docstring."""

    def __init__(
        self,
        spec: RunSpec | None = None,
        /,
        *,
        run: Run | None = None,
        limiter: anyio.CapacityLimiter | None = None,
        **options: Any,
    ) -> None:
        """``spec`` says what the run is; or give its fields as keywords instead
        (``Scheduler(registry=..., namespace=...)``: ``RunSpec.of``). ``run`` is the
        record to fill (a new ``Run`` unless given); ``limiter`` bounds the worker threads
        of sync tools and is shared with nested agents' runs."""
        if spec is None:
            spec = RunSpec.of(**options)
        elif options:
            raise TypeError(f"give a RunSpec or its fields, not both: {', '.join(options)}")
        self.spec = spec
        self.registry = spec.registry
        self.namespace = spec.namespace
        self.model = spec.model
        #: Extra fields of every request this run sends (``runtime.loop.request``).
        self.request = spec.request
        self.feeds = spec.feeds
        self.internal = spec.internal
        self.retry = spec.retry
        self.run = run if run is not None else Run()
        self.graph = Graph()
        self.depth = spec.depth
        self.max_depth = spec.max_depth
        self._on_event = spec.on_event
        self._bind = spec.bind
        self.limiter = limiter if limiter is not None else anyio.CapacityLimiter(spec.max_threads)
        self._background = spec.background
        #: The approval rules; a nested agent's extend them (``Rules.within``).
        self.rules = spec.rules
        self.approve = spec.rules.approver()
        self.approve_names = spec.rules.names
        self.approve_timeout = spec.rules.timeout
        self._background_scopes: dict[str, anyio.CancelScope] = {}
        self._tg: TaskGroup | None = None
        self._starts: dict[str, ActionStart] = {}
        self._outstanding = 0
        self._idle: anyio.Event | None = None
        self._stopping = False
        self._captures: dict[str, Capture] = {}
        self._flush_scope: anyio.CancelScope | None = None
        self._loop_thread = threading.get_ident()
        #: Who watches this run besides the host's ``on_event``: the host's observers (a
        #: store) and those every run gets (tracing: ``runtime.core.record.observer``), asked at
        #: the run's start.
        self._observers: tuple[RunObserver, ...] = ()
        #: The status a run that is left normally ends with (the agent loop sets
        #: ``interrupted`` or ``turn_limit``).
        self.outcome = "completed"

    # ---- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> Scheduler:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._loop_thread = threading.get_ident()
        spec = self.spec
        self._observers = spec.observers + observers_for(
            RunStart(
                self.run,
                spec.agent,
                spec.model,
                {**spec.request, **spec.sampling},
                spec.conversation,
                spec.depth,
            )
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        tg = self._require_tg("end the run")
        if exc is not None:
            return await self._abort(exc)
        try:
            await self.drain()
        except BaseException as error:
            if not await self._abort(error):
                raise
            return True
        self._stop_flusher()
        self._end(self.outcome)
        await tg.__aexit__(None, None, None)
        return False

    def cancel(self) -> None:
        """Stop the run (the Stop button): running actions are cancelled, pending ones skipped.

        The ``async with`` block is left through cancellation and does not raise.
        """
        self._require_tg("cancel").cancel_scope.cancel()
        for scope in self._background_scopes.values():
            scope.cancel()

    async def _abort(self, exc: BaseException) -> bool:
        tg = self._require_tg("stop the run")
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
        self._stopping = True
        error = None if cancelled else error_text(exc)
        if self.run.reason is None:
            self.run.reason = "cancelled: the run was stopped" if cancelled else error
        self._emit(
            Interrupt(
                reason="cancelled" if cancelled else "stream failed",
                time=time.monotonic(),
                error=error,
            )
        )
        tg.cancel_scope.cancel()
        for scope in self._background_scopes.values():
            scope.cancel()
        self._stop_flusher()
        self._skip_unstarted()
        try:
            if cancelled:
                return bool(await tg.__aexit__(type(exc), exc, exc.__traceback__))
            await tg.__aexit__(None, None, None)
            return False
        finally:
            self._skip_unstarted()
            self._end("cancelled" if cancelled else "failed")

    def _skip_unstarted(self) -> None:
        now = time.monotonic()
        for node in list(self.run.actions.values()):
            if node.status == "pending":
                self._settle(node, "skipped", now, NOT_STARTED)

    def _end(self, status: str) -> None:
        if self.run.ended is not None:
            return
        now = time.monotonic()
        self.run.status = status
        self.run.ended = now
        for metric in self._metrics(now):
            self._emit(metric)
        self._emit(End(status=status, time=now))

    def _metrics(self, now: float) -> Iterable[Metric]:
        nodes = [n for n in self.run.actions.values() if n.parent is None]
        yield Metric("actions", len(nodes), now, "count")
        yield Metric("elapsed", now - self.run.started, now, "s")
        latencies = dispatch_latencies(self.run)
        if latencies:
            yield Metric("dispatch_latency_median", statistics.median(latencies), now, "s")
            yield Metric("dispatch_latency_max", max(latencies), now, "s")

    def _require_tg(self, what: str) -> TaskGroup:
        if self._tg is None:
            raise SchedulerNotRunning(what)
        return self._tg

    # ---- feeding --------------------------------------------------------------------

    def submit(self, event: Event) -> None:
        """Take one parser event; an action starts now if its dependencies are done."""
        self._require_tg("submit an event")
        self._emit(event)
        if isinstance(event, ActionReady):
            self._add_action(event.action, event.source)
        elif isinstance(event, ProtocolError) and event.id is not None:
            self._add_rejected(event)
        else:
            self._remember(event)

    def _remember(self, event: Event) -> None:
        """Keep what an action's opening tag and a context feed say, read the first time
        or again on resume."""
        if isinstance(event, ActionStart):
            self._starts[event.id] = event
        elif isinstance(event, ContextFeedEvent):
            self.feeds[event.id] = event.text

    def skip(self, event: ActionReady, why: str) -> None:
        """Take ``event``'s action without running it: its node is ``skipped`` with
        ``why`` (the loop's refusal of an exact repeat under a grammar: ``runtime.loop``)."""
        action = event.action
        if action.id in self.run.actions:  # a duplicate id: refused as ever
            self.submit(event)
            return
        self._require_tg("submit an event")
        self._emit(event)
        now = time.monotonic()
        node = ActionNode(action.id, action.name, action.type, action.mode, action, submitted=now)
        node.source = event.source
        self._track(node)
        self._settle(node, "skipped", now, why)
        self._apply(self.graph.add(node))

    # ---- picking a run up again (``Agent.resume``) ------------------------------------

    def replay(self, event: Event) -> None:
        """An event of a reply the run's record already holds, read again when the run is
        resumed: its effect without recording it twice. An action that ended on its own
        is restored (``kept``), one the stop caught runs again."""
        self._require_tg("replay an event")
        if isinstance(event, ActionReady):
            self.pick_up(event.action, event.source)
        elif isinstance(event, ProtocolError):
            if event.id not in (None, *self.run.actions):
                self.submit(event)  # a refusal the record lost
        else:
            self._remember(event)

    def pick_up(self, action: Action, source: str = "") -> None:
        """The action ``action`` of the resumed run: its node restored when ``kept``
        (its output bound again under its ``output_key``, its dependents released), else
        run again with the tool as it is registered now."""
        node = self.run.actions.get(action.id)
        if node is None:  # the record lost it (its last moment): it is new
            self._emit(ActionReady(action, source))
        elif kept(node):
            ok = node.status == "done" or (node.status == "failed" and action.on_error == "skip")
            update = self.graph.add(
                node, find_references(action.parameters), action.output_key, ok=ok
            )
            if ok:
                self._bind_output(node)
            self._apply(update)
            return
        else:  # its steps (a workflow's) are made again with it
            for id in [
                k for k, n in self.run.actions.items() if k == action.id or n.parent == action.id
            ]:
                del self.run.actions[id]
        self._add_action(action, source)

    async def drain(self) -> None:
        """End of a turn: give up on ids that never came, wait for every action but
        ``fire_and_forget`` ones."""
        self._require_tg("drain")
        self._apply(self.graph.resolve_missing())
        while self._outstanding > 0:
            self._idle = anyio.Event()
            await self._idle.wait()

    def _add_action(self, action: Action, source: str = "") -> None:
        taken = self.run.actions.get(action.id)
        if taken is not None and taken.parent is not None:
            # A workflow's step holds the id (``w.2``): the model's action is its own.
            free = self._free_id(action.id)
            action = replace(action, id=free)
            note = f"id {taken.id!r} is a step of workflow {taken.parent!r}; it runs as {free!r}"
        else:
            note = None
        if action.id in self.run.actions:
            self.submit(
                ProtocolError(
                    "duplicate_id",
                    f"action id {action.id!r} is already used in this run; "
                    "the second action was not run",
                    action.id,
                )
            )
            return
        node = ActionNode(
            action.id, action.name, action.type, action.mode, action, submitted=time.monotonic()
        )
        node.source = source
        node.note = note
        if action.original_id is not None:
            node.note = (
                f"the model reused id {action.original_id!r} from an earlier turn; "
                f"it runs as {action.id!r}"
            )
        self._track(node)
        update = self.graph.add(node, find_references(action.parameters), action.output_key)
        self._apply(update)

    def _add_rejected(self, error: ProtocolError) -> None:
        assert error.id is not None
        taken = self.run.actions.get(error.id)
        if taken is not None and taken.parent is None:
            return
        start = self._starts.get(error.id)
        now = time.monotonic()
        node = ActionNode(
            self._free_id(error.id),  # a workflow's step may hold the id
            name="?",
            type=start.type if start else "tool",
            mode=start.mode if start else "async",
            submitted=now,
        )
        self._track(node)
        self._settle(node, "failed", now, error.message)
        self._apply(self.graph.add(node))

    def _track(self, node: ActionNode) -> None:
        self.run.actions[node.id] = node
        if node.parent is None and node.mode != "fire_and_forget":
            self._outstanding += 1
        self._emit(
            ActionStatus(
                node.id,
                "pending",
                node.submitted or time.monotonic(),
                name=node.name,
                type=node.type,
                parent=node.parent,
                note=node.note,
            )
        )

    def _apply(self, update: Update) -> None:
        now = time.monotonic()
        for node, reason in update.skipped:
            self._settle(node, "skipped", now, reason)
        for node in update.ready:
            if self._stopping:
                self._settle(node, "skipped", now, NOT_STARTED)
            else:
                self._start(node)

    def _start(self, node: ActionNode) -> None:
        if node.mode == "fire_and_forget" and self._background is not None:
            self._background.start_soon(self._execute_background, node, name=node.id)
        else:
            self._require_tg("start an action").start_soon(self._execute, node, name=node.id)

    # ---- running one node -----------------------------------------------------------

    async def _execute_background(self, node: ActionNode) -> None:
        with anyio.CancelScope() as scope:
            self._background_scopes[node.id] = scope
            try:
                await self._execute(node)
            finally:
                del self._background_scopes[node.id]
        if scope.cancelled_caught and node.status == "pending":
            self._settle(node, "skipped", time.monotonic(), NOT_STARTED)

    async def _execute(self, node: ActionNode) -> None:
        if node.final:  # skipped while waiting for its turn to start
            return
        try:
            await self._run_node(node, {})
        finally:
            if node.status == "cancelled" and node.mode == "fire_and_forget":
                # Stopped on its own (%cortex stop) while the run goes on: what waits
                # for it is skipped with the reason, so the run can still end.
                self._apply(self.graph.complete(node.id, ok=False))
        ok = node.status == "done"
        if node.status == "failed" and node.action is not None and node.action.on_error == "skip":
            node.output = None
            ok = True
        if ok:
            self._bind_output(node)
        self._apply(self.graph.complete(node.id, ok=ok))

    async def _run_node(self, node: ActionNode, scope: Mapping[str, Any]) -> None:
        """Run a node's attempts and give it its final status (done, failed, skipped when
        its approval was denied, cancelled)."""
        action = node.action
        assert action is not None
        try:
            # Resolved and checked first: the node shows what it is called with, and a
            # call that could only fail is never put to a person for approval.
            prepared = self._prepare_call(node, action, scope)
            if self._needs_approval(node) and not await self._approved(node):
                return
            self._mark_running(node)
            output = await self._attempts(node, action, prepared)
        except anyio.get_cancelled_exc_class():
            self._settle(node, "cancelled", time.monotonic(), "cancelled: the run was stopped")
            raise
        except Exception as exc:
            node.exception = exc
            self._settle(node, "failed", time.monotonic(), error_text(exc))
        else:
            node.output = output
            self._settle(node, "done", time.monotonic(), None)

    def _mark_running(self, node: ActionNode) -> None:
        node.started = time.monotonic()
        node.status = "running"
        node.attempts = 1
        self._emit(
            ActionStatus(
                node.id, "running", node.started, attempt=1, parent=node.parent,
                parameters=brief_json(node.resolved),
            )
        )  # fmt: skip

    def _prepare_call(self, node: ActionNode, action: Action, scope: Mapping[str, Any]) -> Invoke:
        """Resolve the parameters (kept on the node) and check them against the entry."""
        params = resolve(action.parameters, [scope, self.run.variables, self.feeds, self.namespace])
        node.resolved = params
        return self._prepare(node, action, params)

    # ---- approval -------------------------------------------------------------------

    def _needs_approval(self, node: ActionNode) -> bool:
        if node.name in self.approve_names:
            return True
        try:
            spec = self.registry.get(node.type, node.name)
        except CortexRuntimeError:
            return False  # unknown: it fails when prepared, nothing to approve
        return bool(getattr(spec, "approve", False))

    async def _approved(self, node: ActionNode) -> bool:
        """Wait in ``awaiting`` for the decision; a denied node is settled ``skipped``."""
        node.status = "awaiting"
        self._emit(
            ActionStatus(
                node.id, "awaiting", time.monotonic(), parent=node.parent,
                parameters=brief_json(node.resolved),
            )
        )  # fmt: skip
        approved: object = False
        try:
            with anyio.fail_after(self.approve_timeout):
                approved = await self.approve(node)
            why = f"denied by {getattr(approved, 'by', 'the user')}"
        except TimeoutError:
            approved = False
            why = f"denied: not approved within {self.approve_timeout:g} s (approve_timeout)"
        except Exception as exc:  # the way of asking broke: never run unapproved
            approved = False
            why = f"denied: asking for approval failed ({error_text(exc)})"
        if not approved:
            self._settle(node, "skipped", time.monotonic(), why)
        return bool(approved)

    async def _attempts(self, node: ActionNode, action: Action, prepared: Invoke) -> Any:
        """Call with the action's timeout, retries and backoff, capturing its output."""
        capture = self._capture_for(node)
        self._want_flush()  # its thread may write at any time, and never wakes the loop

        async def invoke() -> Any:
            with capturing(capture), self._acting(node.id):
                return await prepared()

        retries = self.retry.retries(action)
        while True:
            if action.timeout is None:
                try:
                    return await invoke()
                except Exception as exc:
                    error: Exception = exc
            else:
                with anyio.move_on_after(action.timeout) as deadline:
                    try:
                        return await invoke()
                    except Exception as exc:
                        error = exc
                if deadline.cancelled_caught:
                    error = ActionTimeout(node.id, action.timeout, node.attempts)
            if node.attempts > retries:
                raise error
            delay = self.retry.delay(node.attempts)
            self._emit(
                ActionStatus(
                    node.id,
                    "running",
                    time.monotonic(),
                    attempt=node.attempts,
                    error=error_text(error),
                    parent=node.parent,
                    retry_in=delay,
                )
            )
            await anyio.sleep(delay)
            node.attempts += 1
            self._emit(
                ActionStatus(
                    node.id, "running", time.monotonic(), attempt=node.attempts, parent=node.parent
                )
            )

    def _settle(self, node: ActionNode, status: str, now: float, error: str | None) -> None:
        """Give a node its final status and say so (what it wrote goes out first)."""
        capture = self._captures.get(node.id)
        if capture is not None:  # all of it: a batch held back what may begin a secret
            self._emit_output(capture, final=True)
        node.status = status  # type: ignore[assignment]
        node.error = None if error is None else redact(error)
        node.finished = now
        output = summarize(node.output) if status == "done" else None
        self._emit(
            ActionStatus(
                node.id,
                status,
                now,
                attempt=node.attempts,
                error=error,
                output=output,
                parent=node.parent,
                note=node.note,
            )
        )
        if node.parent is None and node.mode != "fire_and_forget":
            self._outstanding -= 1
            if self._outstanding == 0 and self._idle is not None:
                self._idle.set()

    def _bind_output(self, node: ActionNode) -> None:
        key = node.output_key
        if key is None:
            return
        self.run.variables[key] = node.output
        if self._bind is None or node.status != "done":
            return
        try:
            check_variable_name(key)
        except InvalidVariableName as refused:
            self._note(node, str(refused))
            return
        try:
            self._bind(key, node.output)
        except InvalidVariableName as refused:  # the host's own rule (a user's name...)
            self._note(node, str(refused))
        except Exception as exc:  # the value stays on the run; the user is told why
            self._note(node, f"output_key {key!r} could not be bound: {error_text(exc)}")

    def _note(self, node: ActionNode, text: str) -> None:
        text = redact(text)
        node.note = text
        self.run.notes.append(f"{node.id}: {text}")
        self._emit(ActionStatus(node.id, node.status, time.monotonic(), node.attempts, note=text))

    # ---- what a call does, per action type --------------------------------------------

    def _prepare(self, node: ActionNode, action: Action, params: dict[str, Any]) -> Invoke:
        """A zero-argument coroutine function doing one attempt of ``action``."""
        if action.type == "internal":
            self.internal.check(action.name)
        if action.type not in ("tool", "relic", "workflow", "llm", "agent", "internal"):
            raise UnknownAction(action.type, action.name, ())
        spec = self.registry.get(action.type, action.name)
        params = self._fit_references(node, action, spec, params)
        args, kwargs = spec.check(params)
        if isinstance(spec, AgentSpec):
            return functools.partial(self._run_agent, node, spec, kwargs)
        if isinstance(spec, WorkflowSpec):
            return functools.partial(self._run_workflow, node, spec, kwargs)
        if spec.type == "llm":
            model = self._model_for(spec.type, spec.name, node.id)
            return functools.partial(self._run_llm, node, spec, model, (args, kwargs))
        if spec.type == "internal":
            kwargs["feeds"] = self.feeds
        return functools.partial(call_tool, spec, args, kwargs, self.limiter)

    def _fit_references(
        self, node: ActionNode, action: Action, spec: Any, params: dict[str, Any]
    ) -> dict[str, Any]:
        """``$name`` values fitted to the types the entry declares (``runtime.core.values.coerce``);
        each conversion is noted on the node."""
        wants = getattr(spec, "wants", None)
        if wants is None or not isinstance(action.parameters, Mapping):
            return params
        fitted, notes = fit(action.name, action.parameters, params, wants)
        if notes:
            node.resolved = fitted
            self._note(node, "; ".join(filter(None, [node.note, *notes])))
        return fitted

    # ---- captured output ------------------------------------------------------------

    def _capture_for(self, node: ActionNode) -> Capture:
        capture = self._captures.get(node.id)
        if capture is None:
            capture = self._captures[node.id] = Capture(node, self._wake_flusher)
        return capture

    def _wake_flusher(self) -> None:
        """A capture has news. On the run's loop the flusher starts at once; a tool's
        worker thread never calls into the loop (a print or a progress report must not
        wait for a busy loop, nor for the flusher holding the capture): while actions
        run, the flusher looks at every capture ``FLUSH_HZ`` times a second anyway."""
        if threading.get_ident() == self._loop_thread:
            self._want_flush()

    def _want_flush(self) -> None:
        """Start the flusher unless it is running (the run's loop only)."""
        if self._flush_scope is not None:
            return
        if self._tg is None or self.run.ended is not None:
            return  # after the run: each action's end sends what it wrote
        self._flush_scope = anyio.CancelScope()
        self._tg.start_soon(self._flusher, self._flush_scope)

    async def _flusher(self, scope: anyio.CancelScope) -> None:
        """Sends what the captures gathered, at most ``FLUSH_HZ`` times a second, for as
        long as an action that has a capture is running."""
        with scope:
            while True:
                await anyio.sleep(1 / FLUSH_HZ)
                self._flush_all()
                if not any(c.node.status == "running" for c in self._captures.values()):
                    break
        if self._flush_scope is scope:
            self._flush_scope = None

    def _flush_all(self) -> None:
        for capture in list(self._captures.values()):
            if capture.pending():
                self._emit_output(capture)

    def _stop_flusher(self) -> None:
        if self._flush_scope is not None:
            self._flush_scope.cancel()
        self._flush_scope = None
        self._flush_all()

    def _emit_output(self, capture: Capture, final: bool = False) -> None:
        event = capture.flush(final=final)
        if event is not None:
            self._emit(event)

    def _model_for(self, type: str, name: str, action_id: str) -> StreamingModel:
        """The model an ``llm`` action asks: the run's, or for a script its
        ``--- reply to ID ---`` section (never the script's next turn)."""
        model = self.model
        if model is None:
            raise NoModelConfigured(type, name)
        sub = getattr(model, "for_action", None)
        return sub(action_id) if sub is not None else model

    async def _run_llm(
        self, node: ActionNode, spec: ToolSpec, model: StreamingModel, call: _Call
    ) -> str:
        prompt = await call_tool(spec, *call, self.limiter)
        cap = self.spec.sampling.get("max_tokens")  # --max-tokens caps its reply too
        cut = functools.partial(self._note, node)  # the budget cut its reply: it says so
        return await ask(model, prompt, self.spec.spend, self.emit, self.request, cap, cut)

    async def _run_workflow(
        self, parent: ActionNode, spec: WorkflowSpec, params: dict[str, Any]
    ) -> Any:
        steps = [self._step_node(parent, index, step) for index, step in enumerate(spec.steps, 1)]
        scope: dict[str, Any] = dict(params)
        output: Any = None
        try:
            for node in steps:
                await self._run_node(node, scope)
                if node.status != "done":
                    raise WorkflowStepFailed(spec.name, node.id, node.name, node.error or "")
                output = node.output
                if node.output_key is not None:
                    scope[node.output_key] = output
        finally:
            now = time.monotonic()
            for node in steps:
                if node.status == "pending":
                    self._settle(node, "skipped", now, f"workflow {spec.name!r} stopped before it")
        return output

    def _free_id(self, wanted: str) -> str:
        """``wanted``, or ``wanted~N`` when a node of the run already has that id."""
        candidate, n = wanted, 1
        while candidate in self.run.actions:
            n += 1
            candidate = f"{wanted}~{n}"
        return candidate

    def _step_node(self, parent: ActionNode, index: int, step: Step) -> ActionNode:
        # ``w.2``, unless the model named an action of its own so.
        step_id = self._free_id(f"{parent.id}.{index}")
        action = Action(
            id=step_id,
            name=step.name,
            type=step.type,
            mode="sync",
            parameters=dict(step.parameters),
            output_key=step.output_key,
            timeout=step.timeout,
            retry=step.retry,
        )
        node = ActionNode(
            step_id, step.name, step.type, "sync", action, parent=parent.id,
            submitted=time.monotonic(),
        )  # fmt: skip
        self._track(node)
        return node

    async def _run_agent(self, parent: ActionNode, spec: AgentSpec, params: dict[str, Any]) -> Any:
        if self.depth + 1 > self.max_depth:
            raise AgentDepthExceeded(spec.name, self.depth)
        task = str(params["task"])
        if params.get("context") is not None:
            task += f"\n\nContext:\n{params['context']}"
        # Its answer text, or the validated object of an agent with an output_type.
        return await spec.agent.run_nested(task, scheduler=self, node=parent)

    # ---- events ---------------------------------------------------------------------

    def _acting(self, action_id: str) -> AbstractContextManager[object]:
        """What the observers keep current while the action's tool runs (a no-op when
        nobody watches)."""
        return acting(self._observers, action_id) if self._observers else nullcontext()

    def emit(self, event: AnyEvent) -> None:
        """Record a runtime event on the run and pass it on (the agent loop's turns)."""
        self._emit(event)

    def _emit(self, event: AnyEvent) -> None:
        at = getattr(event, "time", None)
        self.run.record(event, at if isinstance(at, float) else None)
        if self._observers:
            self._observers = notify(self._observers, event)
        if self._on_event is not None:
            self._on_event(event)
