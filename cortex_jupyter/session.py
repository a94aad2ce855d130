"""One notebook's cortex session: wires a cell to model -> protocol -> runtime -> display.

The magic parses arguments and calls ``Session.run_cell``; everything else happens
here. The run itself is async and goes to a worker thread through the bridge, while
the cell's own thread shows its events (widgets in a notebook, plain text elsewhere)
and keeps the kernel's Stop button working. After every cell the notebook variable
``_cortex`` is the run record, even when the run was stopped or failed. An unexpected
failure (a bug, ours or a host's) ends the cell with one ``cortex:`` line; the run is
``failed`` with the reason, the exception is ``_cortex.error`` and ``%cortex debug``
prints its traceback.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections import ChainMap
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

from anyio.abc import TaskGroup

from cortex_jupyter._bridge import Bridge, Emit, Loop
from cortex_jupyter.runtime import (
    ActionStatus,
    Agent,
    Nested,
    Registry,
    Run,
    RunHooks,
    default_registry,
)
from cortex_jupyter.runtime.core.errors import InvalidVariableName
from cortex_jupyter.runtime.core.scope import (
    Binding,
    Rule,
    Scope,
    add_rule,
    is_pattern,
    never_visible,
)
from cortex_jupyter.runtime.core.secrets import redact, shorten
from cortex_jupyter.runtime.core.variables import find_references
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.runtime.loop.feeds import FeedSet
from cortex_jupyter.runtime.loop.request import merge_requests
from cortex_jupyter.runtime.scheduler.approval import Approver, Decision, ask_line

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from cortex_jupyter.runtime.core.chunks import StreamingModel

RUN_VARIABLE = "_cortex"
#: How many finished widget views stay live by default (``CortexMagics.live_views``).
LIVE_VIEWS = 10
#: Run statuses that end a cell with an error line (the answer never came).
UNFINISHED = frozenset(("interrupted", "failed", "turn_limit", "truncated"))
#: Run statuses ``%cortex continue`` can pick up from.
CONTINUABLE = frozenset(("interrupted", "cancelled", "turn_limit", "truncated"))


class CortexRunError(Exception):
    """Raised when a cell's run ends without an answer (model failure, turn limit).

    IPython shows ``_render_traceback_``'s lines instead of a traceback: the reason is
    one sentence, and the full story is on ``_cortex`` and in the view above.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"cortex: {self}"]


class CortexInterrupt(KeyboardInterrupt):
    """Raised when the Stop button ended a run: a ``KeyboardInterrupt``, so "Run all" stops.

    The traceback through the magic, the session and the bridge says nothing a user can
    act on, so IPython shows this one line instead (the line above it says what was kept).
    """

    def _render_traceback_(self) -> list[str]:
        return ["KeyboardInterrupt: the cortex run was stopped"]


class NotebookRun(Run):
    """The run record as the notebook sees it (``_cortex``): a ``Run`` plus pictures, and
    a way to wait for the actions that outlive their cell."""

    #: Its reasons name the magic's commands and options, which the user typed.
    words: ClassVar[str] = "magic"
    #: Runs a no-op on the loop that runs the actions: once it returns, a step of that
    #: loop which settled an action has also bound its variable.
    _barrier: Callable[[], object] | None = None
    #: The unexpected exception that failed the run, if one did (``%cortex debug``
    #: prints its traceback); an action's own failure is on its node, ``.exception``.
    error: BaseException | None = None

    def wait(self, timeout: float | None = 30.0) -> NotebookRun:
        """Block until every action has ended, ``fire_and_forget`` ones too (their
        variables bound); returns the run. Raises ``TimeoutError`` naming the actions
        still running after ``timeout`` seconds (``None``: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while running := [node.id for node in _unfinished(self)]:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"after {timeout:g} s these actions are still running: "
                    f"{', '.join(running)} (%cortex stop cancels them)"
                )
            time.sleep(0.01)
        if self._barrier is not None:
            self._barrier()
        return self

    def timeline(self) -> Any:
        """A picture of the run over time: the stream's spans and one bar per action."""
        from IPython.display import SVG

        from cortex_jupyter.display import timeline_svg

        return SVG(timeline_svg(self))


@dataclass(frozen=True)
class CellOptions:
    """What one ``%%cortex`` cell asked for (already checked by the magic)."""

    model: str
    dialect: str = "cortex"
    script: bool = False
    chunk_size: int = 16
    delay: float = 0.0
    replay: str | None = None
    speed: float = 1.0
    fresh: bool = False
    max_turns: int = 10
    temperature: float | None = None
    max_tokens: int | None = None
    native_tools: bool = False
    #: ``--constrain``: False, or the grammar form ("gbnf", "vllm"; ``runtime.loop.grammar``).
    constrain: bool | str = False
    display: str = "auto"
    #: ``--agent NAME``: run a registered ``Agent`` instead of the session's defaults.
    agent: str | None = None
    #: The options the cell's line gave explicitly (they override a named agent's own).
    given: frozenset[str] = frozenset()
    #: ``--overwrite``: an ``output_key`` may replace a notebook name cortex did not bind.
    overwrite: bool = False
    #: The context budget in tokens (None: the model's window, else 32,000).
    context_tokens: int | None = None
    #: Approval policy for tools marked approve=True, and how long to wait for it.
    approval: Any = "ask"
    approve_timeout: float | None = None
    #: Extra request fields: ``CortexMagics.request``, and the cell's ``--request`` (which
    #: goes over the agent's own; see ``runtime.loop.request`` for the whole order).
    request_default: Mapping[str, Any] = field(default_factory=dict)
    request: Mapping[str, Any] = field(default_factory=dict)


#: A cell's run: given the emit callback and the task group that owns its
#: fire_and_forget actions (``None``: the run waits for them itself).
Job = Callable[[Emit, TaskGroup | None], Awaitable[Run]]


class _View(Protocol):
    #: Takes events that arrive after the cell ended (from any thread), or ``None``
    #: when the view cannot show them: the cell then waits for the run's last action.
    late: Callable[[list[Any]], None] | None
    #: Stops the run as the kernel's interrupt does (set by the session).
    stop: Callable[[], None] | None

    def deliver(self, events: list[Any]) -> bool | None: ...
    def close(self) -> None: ...


class _TextView:
    """Streams the run to stdout: IPython in a terminal, or a shell with no widget front end."""

    def __init__(self, model: str, approvals: Approvals, run: Run) -> None:
        from cortex_jupyter.display import TextRenderer

        self._out = sys.stdout
        # What the renderer wrote since the last send: a tool printing 100,000 lines
        # makes one write (and one redaction) per delivery, not one per line.
        self._pending: list[str] = []
        self._renderer = TextRenderer(self._pending.append, model=model)
        self._approvals = approvals
        self._run = run
        self._names: dict[str, str] = {}
        # Text printed after its cell ended would land in whatever cell runs then.
        self.late: Callable[[list[Any]], None] | None = None
        self.stop: Callable[[], None] | None = None

    def _send(self) -> None:
        """Write what gathered, redacted as one text (so a secret split across two
        writes is redacted as well)."""
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            self._out.write(redact(text))
        self._out.flush()

    def deliver(self, events: list[Any]) -> None:
        now = time.monotonic()
        for event in events:
            self._renderer.feed(event, now)
            path, inner = _unnest(event)
            if isinstance(inner, ActionStatus):
                self._names.setdefault(path + inner.id, inner.name or inner.id)
                if inner.status == "awaiting":
                    self._send()
                    self._ask(path + inner.id, inner)
        self._send()

    def _ask(self, node_id: str, event: ActionStatus) -> None:
        """Without widgets, "ask" is ``input()``, in the cell's thread (a kernel sends it
        to the front end as an input request). ``node_id`` is the action's path: an
        agent's inner action is ``agent/inner``."""
        if not self._put_to_person(node_id):
            return  # the policy decided alone ("deny", a function), or it has ended
        name = self._names.get(node_id, event.id)
        question = f"cortex: approve action {node_id!r}: {name} {event.parameters or ''}? [y/N] "
        run_id = self._run.id
        try:
            # Asked until answered, or until the run stops waiting (approve_timeout, Stop).
            answer = ask_line(question, lambda: self._approvals.ended(run_id, node_id))
        except Exception:  # no one can answer (no stdin: nbclient, a closed terminal)
            answer = False
            self._out.write("\ncortex: no one could be asked, so it was denied.\n")
        if answer is None:
            self._out.write(f"\ncortex: the question about {node_id!r} ended unanswered.\n")
            return
        self._approvals.answer(run_id, node_id, answer)

    def _put_to_person(self, node_id: str) -> bool:
        """Whether the run asks a person about ``node_id``: its "awaiting" arrives just
        before the policy is asked, and a policy may decide alone (``deny``, a function)."""
        node = _node_at(self._run, node_id)
        while not self._approvals.asked(self._run.id, node_id):
            if node is not None and node.status != "awaiting":
                return False
            time.sleep(0.01)
        return True

    def close(self) -> None:
        self._pending.append("\n")
        # The stream showed the raw text; when names were filled in, the answer as
        # _cortex.answer has it (and as the view shows it) follows.
        from cortex_jupyter.display.theme import clean  # no terminal control characters

        record = self._run
        if record.answer != record.final_response:
            self._pending.append(f"[answer] {clean(record.answer)}\n")
        self._send()


def _node_at(run: Run, path: str) -> Any:
    """The node at ``path`` in ``run`` (``agent/inner``: inside the agent's sub-run; an id
    may hold a slash itself), or None."""
    actions = run.actions
    if path in actions:
        return actions[path]
    head, slash, rest = path.partition("/")
    while slash:
        subrun = getattr(actions.get(head), "subrun", None)
        if subrun is not None and (found := _node_at(subrun, rest)) is not None:
            return found
        more, slash, rest = rest.partition("/")
        head = f"{head}/{more}"
    return None


def _unnest(event: Any) -> tuple[str, Any]:
    """A nested run's event unwrapped: ``("agent/", inner event)``; others ``("", event)``."""
    path = ""
    while isinstance(event, Nested):
        path += f"{event.parent}/"
        event = event.event
    return path, event


class _WidgetView:
    """The live widgets, and at the end a static copy for saved notebooks.

    The copy is a second output under the view's own (``display.static`` says why): it
    is shown when the cell's run ends, and only updated after that, wherever its cell is.

    Actions that outlive their cell (``fire_and_forget``) report through ``late``: the
    events are handed to the kernel's own event loop, which runs callbacks in the
    cell's thread (the only one that may touch widgets) once the cell has ended. The
    view redraws, and when the last action has ended the static copy is made again.
    """

    def __init__(
        self,
        model: str,
        values: Callable[[], Mapping[str, Any]],
        approvals: Approvals,
        record: Run | None = None,
        cell: str | None = None,
        label: str = "",
    ) -> None:
        from IPython.display import display

        from cortex_jupyter.display.widget import WidgetView

        #: The notebook cell it runs in (the front end's ``cellId``), when known.
        self.cell = cell
        #: How ``%cortex views`` names it (its cell's execution count).
        self.label = label
        self._record_meta: dict[str, Any] | None = None  # the live output's metadata
        self.stop: Callable[[], None] | None = None
        # The run record gives the inspector the real objects (outputs, parameters).
        run_id = record.id if record is not None else ""

        def decide(node_id: str, approved: bool) -> bool:  # a row answers its own run only
            return approvals.answer(run_id, node_id, approved)

        self.view = WidgetView(
            model=model, values=values, decide=decide, stop=self._stop, record=record
        )
        self._handle = display(self.view.widget, display_id=True)
        self._copy: Any = None  # an IPython DisplayHandle, once shown
        self._closed = False
        self._kernel_loop = _running_loop()
        self.late: Callable[[list[Any]], None] | None = None
        if self._kernel_loop is not None:
            self.late = self._late
        self._lock = threading.Lock()
        self._pending: list[Any] = []
        self._scheduled = False

    def _stop(self) -> None:
        if self.stop is not None:
            self.stop()

    def deliver(self, events: list[Any]) -> bool:
        self.view.apply(events)
        return self.view.redraw()  # true: call again soon, parts wait for the budget

    def close(self) -> None:
        if self.view.closed:
            return
        self.view.stream_closed()
        saved = self.view.finish()
        self._show_copy(*saved.static)
        # The view's own output last: its update carries the run's record.
        data, self._record_meta = saved.live
        if self._handle is not None:
            self._handle.update(data, metadata=self._record_meta, raw=True)

    @property
    def finished(self) -> bool:
        """Whether the run has ended and every action with it (nothing more to show)."""
        return self._closed and self.view.settled

    @property
    def released(self) -> bool:
        return self.view.closed

    def release(self) -> int:
        """Let the view go: its output keeps only the run's record (an empty text: the
        static copy under it shows the run, as in a saved notebook), then every widget
        closes and the view drops the run. Returns how many widgets were closed."""
        if self.view.closed:
            return 0
        if self._handle is not None and self._record_meta is not None:
            # First, so that the page never shows a closed widget's empty frame.
            self._handle.update({"text/plain": ""}, metadata=self._record_meta, raw=True)
        self._handle = None
        return self.view.close()

    def _show_copy(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        """Show the static copy under the view (in the cell), or update it (later)."""
        from IPython.display import display

        first, self._closed = not self._closed, True
        if self._copy is not None:
            self._copy.update(data, metadata=metadata, raw=True)
        elif first:  # once the cell has ended, a new display would land in another cell
            self._copy = display(data, metadata=metadata, raw=True, display_id=True)

    def _late(self, events: list[Any]) -> None:  # any thread
        assert self._kernel_loop is not None
        with self._lock:
            self._pending += events
            if self._scheduled:
                return
            self._scheduled = True
        self._kernel_loop.call_soon_threadsafe(self._show_late)

    def _show_late(self) -> None:  # the cell's thread, on the kernel's loop
        with self._lock:
            events, self._pending, self._scheduled = self._pending, [], False
        if self.view.closed:  # released: the run record still takes the events
            return
        try:
            self.view.apply(events)
            if self.view.settled:
                self.close()  # the final frame, and the static copy with it
            elif self.view.redraw():
                assert self._kernel_loop is not None
                self._kernel_loop.call_later(1 / 25, self._late, [])
        except Exception as exc:  # a callback's error would only reach the kernel's log
            print(f"cortex: the view could not show a late update: {exc!r}", file=sys.stderr)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread: the kernel's, when a kernel runs the cell."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Session:
    """A notebook's cortex state: its conversation, registry, feeds and last run."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        self.registry: Registry = default_registry
        self.conversation = Conversation()
        self.feeds: FeedSet | None = None
        self.last: NotebookRun | None = None
        self.last_options: CellOptions | None = None
        self.last_prompt = ""
        #: notebook names bound by runs -> the run and the object it bound (the name is
        #: the run's while it holds that object; see ``runtime.core.scope``)
        self.bound: dict[str, Binding] = {}
        #: ``%cortex expose`` and ``%cortex hide``, oldest first: the latest match decides
        self.rules: list[Rule] = []
        #: Approval questions of running actions, answered in the cell's thread.
        self.approvals = Approvals()
        #: Made for the first run whose fire_and_forget actions may outlive their cell.
        self._loop: Loop | None = None
        #: Runs whose fire_and_forget actions went to that loop (pruned when they end).
        self._background_runs: list[Run] = []
        #: The widget views still live, oldest first (``CortexMagics.live_views`` of them
        #: once finished; older ones let go: ``release_views``).
        self.views: list[_WidgetView] = []
        #: Model name -> (base URL, API key) of a server that answers for it, such as the
        #: local one ``%cortex local start`` runs: ``--model NAME`` asks that server.
        self.endpoints: dict[str, tuple[str, str]] = {}

    # ---- running a cell -----------------------------------------------------------

    def run_cell(self, prompt: str, options: CellOptions) -> NotebookRun:
        """Run one ``%%cortex`` cell; returns the run (also left in ``_cortex``)."""
        return self._execute(*self._cell(prompt, options))

    async def run_cell_async(self, prompt: str, options: CellOptions) -> NotebookRun:
        """``run_cell`` as an async cell on the kernel's loop (how a kernel runs
        ``%%cortex``): buttons in the view work while it runs."""
        return await self._execute_async(*self._cell(prompt, options))

    def _cell(self, prompt: str, options: CellOptions) -> tuple[Job, NotebookRun, str, str, Scope]:
        try:
            agent = self._agent(prompt, options)
        except ValueError as exc:  # a setting the agent refuses (it says which, and why)
            raise CortexRunError(redact(str(exc))) from None
        if options.fresh:
            self.conversation.reset()
        # A script or a replay is its own little conversation: it must not leak into the
        # notebook's memory of a real model.
        offline = options.script or options.replay is not None
        conversation = Conversation() if offline else self.conversation
        run = NotebookRun()
        # A replayed transcript is a model's text: only a prompt or a script is the user's.
        scope = self.scope("" if options.replay is not None else prompt, script=options.script)

        async def job(emit: Emit, background: TaskGroup | None) -> Run:
            return await agent.run(
                "" if options.script else prompt,
                namespace=scope,
                conversation=conversation,
                hooks=self._hooks(run, emit, background, options.overwrite),
                run=run,
            )

        self.last_options = options
        self.last_prompt = prompt
        return job, run, _model_name(agent), options.display, scope

    def continue_last(self) -> NotebookRun:
        """``%cortex continue``: go on with the last run where it stopped."""
        previous, options = self.last, self.last_options
        if previous is None or options is None:
            raise CortexRunError("there is no run to continue yet in this notebook.")
        if options.script:
            raise CortexRunError(
                "a --script run cannot be continued: its text is all there is. Run the "
                "cell again, or add the next turn after a line '--- next turn ---'."
            )
        if previous.status not in CONTINUABLE:
            raise CortexRunError(
                f"the last run ended {previous.status!r}, so there is nothing to continue; "
                "only interrupted, truncated, cancelled or turn-limited runs can be continued."
            )
        # The same agent and settings as the cell that ran it (its sampling settings too).
        agent = self._agent("", options)
        run = NotebookRun()
        scope = self.scope(self.last_prompt)  # what the cell it continues could reach

        async def job(emit: Emit, background: TaskGroup | None) -> Run:
            return await agent.continue_run(
                previous,
                namespace=scope,
                conversation=self.conversation,
                hooks=self._hooks(run, emit, background, options.overwrite),
                run=run,
            )

        return self._execute(job, run, _model_name(agent), options.display, scope)

    def _hooks(
        self, run: Run, emit: Emit, background: TaskGroup | None, overwrite: bool
    ) -> RunHooks:
        return RunHooks(
            on_event=emit,
            bind=lambda name, value: self._bind(run, name, value, overwrite),
            background=background,
            ask=self.approvals.asker(run.id),
        )

    # ---- what a model may reach --------------------------------------------------

    def scope(self, prompt: str, *, script: bool = False) -> Scope:
        """The notebook names a run of ``prompt`` may reach with ``$name``: the ones the
        prompt writes, the ones cortex runs bound, the ones exposed (ARCHITECTURE.md,
        "Scope"). For a ``--script`` cell ``prompt`` is the script, the user's own text."""
        self._release_taken_back()
        return Scope(
            self.shell.user_ns,
            prompt=find_references(prompt),
            bound=self.bound,
            rules=self.rules,
            script=script,
        )

    def _release_taken_back(self) -> None:
        """Forget the objects of names the user assigned since a run bound them (the
        name is theirs now), and the bindings of names deleted since."""
        namespace = self.shell.user_ns
        for name, binding in list(self.bound.items()):
            if name not in namespace:
                del self.bound[name]
            elif not binding.holds(namespace, name):
                self.bound[name] = binding.released()

    def expose(self, names: Iterable[str]) -> list[str]:
        """Let models reach ``names`` (names or glob patterns such as ``df_*``); returns
        the ones that can never be exposed, with why (IPython's own names, modules).
        A pattern covers every name it matches, also names a later ``hide`` named
        before: the latest expose or hide that matches a name decides."""
        refused = []
        for name in names:
            value = self.shell.user_ns.get(name)
            why = never_visible(name, value) if not is_pattern(name) else None
            if why is not None:
                refused.append(why)
                continue
            self.rules = add_rule(self.rules, Rule(name, expose=True))
        return refused

    def hide(self, names: Iterable[str]) -> None:
        """Take ``names`` (names or glob patterns) out of what models may reach: every
        name a pattern matches, exposed or bound by a run, now or bound later, until a
        later ``expose`` matches it. A prompt that writes ``$name`` still reaches it:
        the user wrote it there."""
        for name in names:
            self.rules = add_rule(self.rules, Rule(name, expose=False))

    def _agent(self, body: str, options: CellOptions) -> Agent:
        """The agent a cell runs: the session's defaults (the cell's options, the
        session's registry and feeds) or, with ``--agent NAME``, that registered agent
        with the options the cell gave explicitly (and the cell's model unless it has
        its own; a script or replay always stands in for the model)."""
        model = self._model(body, options)
        if options.agent is None:
            return Agent(
                model=model,
                registry=self.registry,
                dialect=options.dialect,
                max_turns=options.max_turns,
                feeds=self.feeds,
                native_tools=options.native_tools,
                constrain=options.constrain,
                context_tokens=options.context_tokens,
                approval=options.approval,
                approve_timeout=options.approve_timeout,
                request=merge_requests(options.request_default, options.request),
                **_sampling(options, None),
            )
        agent = self._named_agent(options.agent)
        offline = options.script or options.replay is not None
        changes: dict[str, Any] = {
            "model": model if offline or agent.model is None or "model" in options.given
            else agent.model,
        }  # fmt: skip
        if agent.feeds is None:
            changes["feeds"] = self.feeds
        for name in ("dialect", "max_turns", "native_tools", "constrain"):
            if name in options.given:
                changes[name] = getattr(options, name)
        changes["request"] = merge_requests(options.request_default, agent.request, options.request)
        changes.update(_sampling(options, agent))
        return agent.with_options(**changes)

    def _named_agent(self, name: str) -> Agent:
        from cortex_jupyter.runtime.core.registry import AgentSpec

        names = self.registry.names("agent")
        if name not in names:
            known = ", ".join(names) or "none yet"
            raise CortexRunError(
                f"no agent named {name!r}; registered agents: {known}. Create one with "
                f"cortex_jupyter.Agent({name!r}, instructions=...)."
            )
        spec = self.registry.get("agent", name)
        assert isinstance(spec, AgentSpec)
        return cast(Agent, spec.agent)

    def _model(self, body: str, options: CellOptions) -> StreamingModel:
        from cortex_jupyter.models import ModelError, ReplayModel, ScriptModel

        if options.agent is not None and not (options.script or options.replay):
            agent = self._named_agent(options.agent)
            if agent.model is not None and "model" not in options.given:
                return agent.model  # its own model: no key needed for the session's
        try:
            if options.script:
                return ScriptModel(body, chunk_size=options.chunk_size, delay=options.delay)
            if options.replay is not None:
                return ReplayModel(options.replay, speed=options.speed)
            from cortex_jupyter.models import OpenAIModel

            base_url, api_key = self.endpoints.get(options.model, (None, None))
            return OpenAIModel(options.model, base_url=base_url, api_key=api_key)
        except (ModelError, OSError, ValueError) as exc:
            raise CortexRunError(str(exc)) from None

    def _execute(
        self, job: Job, run: NotebookRun, model: str, display: str, scope: Scope
    ) -> NotebookRun:
        view: _View | None = None
        failure: BaseException | None = None
        try:
            bridge, view = self._prepare(job, run, model, display, scope)
            bridge.run()
        except (KeyboardInterrupt, Exception) as exc:
            failure = exc
        self._outcome(run, view, failure)
        return run

    async def _execute_async(
        self, job: Job, run: NotebookRun, model: str, display: str, scope: Scope
    ) -> NotebookRun:
        view: _View | None = None
        failure: BaseException | None = None
        try:
            bridge, view = self._prepare(job, run, model, display, scope)
            await bridge.run_async()
        except (KeyboardInterrupt, Exception) as exc:
            failure = exc
        self._outcome(run, view, failure)
        return run

    def _prepare(
        self, job: Job, run: NotebookRun, model: str, display: str, scope: Scope
    ) -> tuple[Bridge[Run], _View]:
        """The view and the bridge of one cell's run (``_cortex`` is the run from now on)."""
        self.shell.user_ns[RUN_VARIABLE] = run
        self.last = run
        view = self._view(model, run, display, scope)
        # When the view can show late events, fire_and_forget actions belong to the
        # session's loop and the cell ends with the run, not with them.
        loop = self._background_loop() if view.late is not None else None
        background = loop.background if loop is not None else None
        if loop is not None:
            self._background_runs = [*self._still_running(), run]
            portal = loop.portal
            run._barrier = lambda: portal.call(_nothing)
        bridge: Bridge[Run] = Bridge(
            lambda emit: job(emit, background), view.deliver, loop=loop, late=view.late
        )
        view.stop = bridge.request_stop
        return bridge, view

    def _outcome(self, run: NotebookRun, view: _View | None, failure: BaseException | None) -> None:
        """End the cell however the run ended: the view's final frame and static copy,
        and one line (or ``CortexInterrupt``/``CortexRunError``) for what went wrong.

        Called after the ``except`` that caught ``failure``, never inside it: an error
        raised while handling another carries it as its context, and IPython prints a
        whole traceback for any error whose context holds a task group's
        ``ExceptionGroup``, whatever its ``_render_traceback_`` says.
        """
        if isinstance(failure, KeyboardInterrupt):
            _close_quietly(view)
            if isinstance(view, _WidgetView):
                self.release_views()
            how = (
                "run the cell again"
                if self.last_options is not None and self.last_options.script
                else "continue with %cortex continue"
            )
            print(
                "cortex: interrupted: the stream was closed and running actions were "
                f"cancelled; what arrived is on _cortex ({how}).",
                file=sys.stderr,
            )
            raise CortexInterrupt()
        if failure is None:
            failure = _closed(view)
        else:
            _close_quietly(view)
        if isinstance(view, _WidgetView):
            self.release_views()  # older finished views let go, however this one ended
        if failure is not None:  # a bug of ours or a host's: still no traceback wall
            error = _innermost(failure)
            run.error = error
            run.status = "failed"
            run.ended = run.ended or time.monotonic()
            run.reason = run.reason or _failure(error)
            raise CortexRunError(
                f"the run failed: {_failure(error)}. What arrived is on _cortex; "
                "%cortex debug shows the traceback."
            )
        self._report(run)

    def _background_loop(self) -> Loop:
        if self._loop is None:
            self._loop = Loop()
        return self._loop

    def stop_background(self) -> list[str]:
        """``%cortex stop``: cancel the fire_and_forget actions still running (of any
        run); returns their ids."""
        running = [node.id for run in self._still_running() for node in _unfinished(run)]
        if self._loop is not None and running:
            self._loop.stop_background()
        return running

    def _still_running(self) -> list[Run]:
        return [run for run in self._background_runs if _unfinished(run)]

    def close(self) -> None:
        """``%unload_ext``: cancel background actions and stop the session's loop."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _view(self, model: str, run: Run, display: str, scope: Scope) -> _View:
        if display == "text" or (display == "auto" and not self._has_widgets()):
            return _TextView(model, self.approvals, run)
        scopes: list[Mapping[str, Any]] = [run.variables]
        if self.feeds is not None:
            scopes.append(self.feeds)
        scopes.append(scope)  # $name in the response shows only what the model may reach

        def values() -> Mapping[str, Any]:
            return ChainMap(*scopes)  # type: ignore[arg-type]

        cell, label = _cell_of(self.shell)
        if cell is not None:  # the cell runs again: the view it replaces lets go
            for old in [v for v in self.views if v.cell == cell]:
                self._release(old)
        view = _WidgetView(model, values, self.approvals, run, cell=cell, label=label)
        self.views.append(view)
        self.release_views()
        return view

    @property
    def live_views(self) -> int:
        """How many finished widget views stay live (``CortexMagics.live_views``)."""
        magics = getattr(getattr(self.shell, "magics_manager", None), "registry", {})
        value = getattr(magics.get("CortexMagics"), "live_views", LIVE_VIEWS)
        return value if isinstance(value, int) and value >= 0 else LIVE_VIEWS

    def release_views(self, keep: int | None = None) -> int:
        """Let finished views beyond the newest ``keep`` (default ``live_views``) go:
        each shows its static copy and closes its widgets. Returns how many let go; a
        view whose actions still run stays until they end."""
        keep = self.live_views if keep is None else keep
        excess = len(self.views) - keep
        released = 0
        for view in list(self.views):
            if excess <= 0:
                break
            if view.released or view.finished:
                excess -= 1
                released += self._release(view)
        return released

    def _release(self, view: _WidgetView) -> int:
        """Let one view go; 1 if it did (a broken view must not keep the others)."""
        self.views.remove(view)
        try:
            view.release()
        except Exception as exc:
            print(f"cortex: a view could not let go: {exc!r}", file=sys.stderr)
            return 0
        return 1

    def _has_widgets(self) -> bool:
        """Whether a front end that renders widgets is attached (a kernel with comms)."""
        return getattr(self.shell, "kernel", None) is not None

    def _bind(self, run: Run, name: str, value: Any, overwrite: bool) -> None:
        namespace = self.shell.user_ns
        binding = self.bound.get(name)
        if name in namespace and not overwrite:
            if binding is None:
                raise InvalidVariableName(
                    name,
                    f"the notebook already has {name!r}, which cortex did not bind "
                    "(%%cortex --overwrite replaces it on purpose)",
                )
            if not binding.holds(namespace, name):
                raise InvalidVariableName(
                    name,
                    f"the notebook's {name!r} is yours: you assigned it after cortex run "
                    f"{binding.run} bound it (%%cortex --overwrite replaces it on purpose)",
                )
        namespace[name] = value
        self.bound[name] = Binding(run.id, value)

    def _report(self, run: NotebookRun) -> None:
        """End the cell: a short line for failed actions, an error for a missing answer."""
        failed = [node for node in run.actions.values() if node.status == "failed"]
        if failed:
            names = ", ".join(f"{node.id} ({node.name})" for node in failed[:5])
            more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
            print(
                f"cortex: {len(failed)} action(s) failed: {names}{more}; see the details "
                "above or _cortex.actions[id].error.",
                file=sys.stderr,
            )
        for note in run.notes:
            print(f"cortex: {note}", file=sys.stderr)
        still = [node.id for node in _unfinished(run)]
        if still:
            print(
                f"cortex: {len(still)} fire_and_forget action(s) still running "
                f"({', '.join(still[:5])}); the graph, _cortex and their variables update "
                "when they end. %cortex stop cancels them."
            )
        if run.status in UNFINISHED:
            reason = run.reason or f"the run ended {run.status!r}"
            hint = " Continue it with %cortex continue." if run.status in CONTINUABLE else ""
            if run.status == "turn_limit":
                reason = f"the run stopped after {run.turns} turns without a final answer."
                hint = " Continue it with %cortex continue, or allow more turns with --max-turns N."
            if run.status == "truncated":
                hint = ""  # the reason names %cortex continue and --max-tokens already
            raise CortexRunError(redact(f"{reason}{hint}"))


def _nothing() -> None:
    """What ``NotebookRun.wait`` runs on the actions' loop, as a barrier."""


def _unfinished(run: Run) -> list[Any]:
    """The run's actions that have not reached a final status (fire_and_forget ones,
    once the run has ended)."""
    return [node for node in list(run.actions.values()) if not node.final]


_SESSIONS: dict[int, Session] = {}


def session_for(shell: InteractiveShell) -> Session:
    """The session of this shell (one per kernel)."""
    key = id(shell)
    found = _SESSIONS.get(key)
    if found is None:
        found = _SESSIONS[key] = Session(shell)
    return found


def current_session(what: str) -> Session:
    """The session of the running IPython shell (for ``cortex_jupyter.expose`` and
    friends); a clear error outside IPython."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError(
            f"cortex_jupyter.{what}() works in a notebook or IPython, where %%cortex runs; "
            "in a plain script pass the names an Agent may reach as its namespace"
        )
    return session_for(shell)


def forget(shell: InteractiveShell) -> None:
    """Drop this shell's session (``%unload_ext``): a new load starts afresh."""
    session = _SESSIONS.pop(id(shell), None)
    if session is not None:
        session.close()


def _cell_of(shell: InteractiveShell) -> tuple[str | None, str]:
    """The notebook cell running now, as its front end names it (the ``cellId`` that
    JupyterLab and Notebook 7 put in an execute request's metadata), and its label for
    ``%cortex views`` (the execution count)."""
    label = f"In [{getattr(shell, 'execution_count', '?')}]"
    kernel = getattr(shell, "kernel", None)
    try:
        parent = kernel.get_parent("shell") if kernel is not None else None
    except Exception:
        parent = None
    metadata = parent.get("metadata") if isinstance(parent, Mapping) else None
    cell = metadata.get("cellId") if isinstance(metadata, Mapping) else None
    return (cell if isinstance(cell, str) and cell else None), label


def _sampling(options: CellOptions, agent: Agent | None) -> dict[str, Any]:
    """``temperature`` and ``max_tokens`` for a cell's agent (``agent``: the named one).

    Typed on the line, they win over everything. A field of the same name in the cell's
    ``--request`` wins over a default (``CortexMagics.temperature``) or the agent's own
    (the cell is more specific); so does ``CortexMagics.request`` over the trait.
    """
    chosen: dict[str, Any] = {}
    for name in ("temperature", "max_tokens"):
        if name in options.given:
            chosen[name] = getattr(options, name)
        elif name in options.request or (agent is None and name in options.request_default):
            chosen[name] = None  # the request's field goes through
        elif agent is None:
            chosen[name] = getattr(options, name)
    return chosen


def _model_name(agent: Agent) -> str:
    return str(getattr(agent.model, "name", "") or "model")


def _innermost(exc: BaseException) -> BaseException:
    """The error a task group's ``ExceptionGroup`` wraps (its first, at any depth)."""
    # A (Base)ExceptionGroup (3.10 has only the backport, so no isinstance here).
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner, tuple):
        exc = inner[0]
    return exc


def _failure(exc: BaseException) -> str:
    """One line for an unexpected failure: the innermost error of a task group's
    ``ExceptionGroup``, with its type, secrets redacted."""
    exc = _innermost(exc)
    text = shorten(" ".join(str(exc).split()), 300)  # redacted first, no part of a secret
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _closed(view: _View | None) -> Exception | None:
    """Close the view (its final frame and static copy); the error, if that failed.
    ``None``: the view could not even be made."""
    if view is None:
        return None
    try:
        view.close()
    except Exception as exc:
        return exc
    return None


def _close_quietly(view: _View | None) -> None:
    """Close the view (its final frame and static copy) even after a failure; a view that
    cannot close must not hide the failure that brought us here."""
    failure = _closed(view)
    if failure is not None:
        print(f"cortex: the view could not show its final frame: {failure!r}", file=sys.stderr)


class Approvals:
    """The approval questions of running actions, answered from the cell's thread: a
    button in the view, or ``input()`` in the text view.

    A question is keyed by its run and its node's path in that run (``agent/inner`` for a
    nested agent's action), never by the action id alone: two cells' ``a1`` are two
    questions, and a row answers only the one it shows. A question that has ended (its
    node was answered, timed out or was stopped, or its run ended) takes no answer.
    """

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], Decision] = {}
        #: Answers given before their question was registered (the node's "awaiting"
        #: reaches the view just before the run starts waiting): kept for it.
        self._early: dict[tuple[str, str], bool] = {}
        self._ended: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def asker(self, run_id: str) -> Approver:
        """``RunHooks.ask`` for the run ``run_id``."""

        async def ask(node: Any) -> bool:  # the run's loop
            return await self._ask((run_id, str(node.id)))

        return ask

    async def _ask(self, key: tuple[str, str]) -> bool:
        decision = Decision()
        with self._lock:
            self._ended.discard(key)
            self._pending[key] = decision
            early = self._early.pop(key, None)
        if early is not None:
            decision.set(early)
        try:
            return await decision.wait()
        finally:
            with self._lock:
                if self._pending.get(key) is decision:
                    del self._pending[key]
                self._ended.add(key)

    def answer(self, run_id: str, node_id: str, approved: bool) -> bool:  # any thread
        """Answer the question about ``node_id`` of the run ``run_id``; False when it has
        ended (already answered, timed out, or the run was stopped)."""
        key = (run_id, node_id)
        with self._lock:
            decision = self._pending.get(key)
            if decision is None:
                if key in self._ended:
                    return False
                self._early[key] = bool(approved)
                return True
        decision.set(approved)
        return True

    def asked(self, run_id: str, node_id: str) -> bool:
        """Whether the question about ``node_id`` of ``run_id`` was put (waiting or ended)."""
        with self._lock:
            key = (run_id, node_id)
            return key in self._pending or key in self._ended

    def ended(self, run_id: str, node_id: str) -> bool:
        """Whether the question about ``node_id`` of ``run_id`` was asked and has ended."""
        with self._lock:
            return (run_id, node_id) in self._ended

    def waiting(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._pending)
