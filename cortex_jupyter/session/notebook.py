"""One notebook's cortex session: a cell's run, from its options to its end.

``Session.run_cell`` takes what the magic parsed: it picks the agent (``cell``), the
names the model may reach (``names``), opens the view (``views``), and hands the run to
a worker thread through the bridge, while the cell's own thread shows its events and
keeps the kernel's Stop button working. After every cell the notebook variable
``_cortex`` is the run record (``record``), even when the run was stopped or failed. An
unexpected failure (a bug, ours or a host's) ends the cell with one ``cortex:`` line;
the run is ``failed`` with the reason, the exception is ``_cortex.error`` and
``%cortex debug`` prints its traceback.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import ChainMap
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anyio.abc import TaskGroup
from IPython import get_ipython

from cortex_jupyter import store
from cortex_jupyter._bridge import Bridge, Emit, Loop
from cortex_jupyter.runtime import Agent, Registry, Run, RunHooks, default_registry
from cortex_jupyter.runtime.core.cost.budget import Budget
from cortex_jupyter.runtime.core.errors import BadOutputType, InvalidVariableName
from cortex_jupyter.runtime.core.events import AnyEvent
from cortex_jupyter.runtime.core.record.observer import Recording
from cortex_jupyter.runtime.core.trust.scope import Binding, Scope
from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.runtime.core.values.typed import type_from_text
from cortex_jupyter.runtime.core.values.variables import check_variable_name
from cortex_jupyter.runtime.loop.conversation import Conversation
from cortex_jupyter.runtime.loop.feeds import FeedSet
from cortex_jupyter.session.approvals import Approvals
from cortex_jupyter.session.cell import CellOptions, cell_agent, cell_settings, model_name
from cortex_jupyter.session.names import Names
from cortex_jupyter.session.record import (
    CONTINUABLE,
    RUN_VARIABLE,
    CortexInterrupt,
    CortexRunError,
    NotebookRun,
    adopt,
    nothing,
    report,
    unfinished,
)
from cortex_jupyter.session.views import (
    CellView,
    LiveViews,
    WidgetOutput,
    close_quietly,
    close_view,
    history,
)

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

#: A cell's run: given the emit callback and the task group that owns its
#: fire_and_forget actions (``None``: the run waits for them itself).
Job = Callable[[Emit, TaskGroup | None], Awaitable[Run]]


@dataclass
class _Cell:
    """One cell's run on its way: the job that runs it, the record it fills, how it is
    shown and what it may reach; then its view, and what went wrong, if anything."""

    job: Job
    run: NotebookRun
    model: str
    display: str
    scope: Scope
    view: CellView | None = None
    failure: BaseException | None = None
    #: Where the run is being kept (``cortex_jupyter.store``); None: not stored.
    recording: Recording | None = None
    #: What the view shows before the run goes on (a resumed run's recorded events).
    history: list[AnyEvent] | None = None
    #: ``--output-key``: where the validated answer goes, and whether it may overwrite.
    output_key: str | None = None
    overwrite: bool = False


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
        #: What models may reach: names runs bound, ``%cortex expose`` and ``hide``.
        self.names = Names(shell)
        #: Approval questions of running actions, answered in the cell's thread.
        self.approvals = Approvals()
        #: The widget views still live (``%cortex views``).
        self.live = LiveViews(shell, self.approvals)
        #: Made for the first run whose fire_and_forget actions may outlive their cell.
        self._loop: Loop | None = None
        #: Runs whose fire_and_forget actions went to that loop (pruned when they end).
        self._background_runs: list[Run] = []
        #: Model name -> (base URL, API key) of a server that answers for it, such as the
        #: local one ``%cortex local start`` runs: ``--model NAME`` asks that server.
        self.endpoints: dict[str, tuple[str, str]] = {}

    @property
    def bound(self) -> dict[str, Binding]:
        """Notebook names bound by runs -> the run and the object it bound."""
        return self.names.bound

    # ---- running a cell -----------------------------------------------------------

    def run_cell(self, prompt: str, options: CellOptions) -> NotebookRun:
        """Run one ``%%cortex`` cell; returns the run (also left in ``_cortex``)."""
        return self._execute(self._cell(prompt, options))

    async def run_cell_async(self, prompt: str, options: CellOptions) -> NotebookRun:
        """``run_cell`` as an async cell on the kernel's loop (how a kernel runs
        ``%%cortex``): buttons in the view work while it runs."""
        cell = self._cell(prompt, options)
        try:
            await self._prepare(cell).run_async()
        except (KeyboardInterrupt, Exception) as exc:
            cell.failure = exc
        return self._outcome(cell)

    def _cell(self, prompt: str, options: CellOptions) -> _Cell:
        agent = self._agent(prompt, options)
        self._check_output_key(agent, options)
        if options.fresh:
            self.conversation.reset()
        # A script or a replay is its own little conversation: it must not leak into the
        # notebook's memory of a real model.
        offline = options.script or options.replay is not None
        conversation = Conversation() if offline else self.conversation
        run = NotebookRun()
        # A replayed transcript is a model's text: only a prompt or a script is the user's.
        scope = self.names.scope(
            "" if options.replay is not None else prompt, script=options.script
        )
        recording = self._recording(run, prompt, options, agent)

        async def job(emit: Emit, background: TaskGroup | None) -> Run:
            return await agent.run(
                "" if options.script else prompt,
                namespace=scope,
                conversation=conversation,
                hooks=self._hooks(run, emit, background, options.overwrite, recording),
                run=run,
            )

        self.last_options = options
        self.last_prompt = prompt
        cell = _Cell(job, run, model_name(agent), options.display, scope, recording=recording)
        cell.output_key, cell.overwrite = options.output_key, options.overwrite
        return cell

    def continue_last(self, budget: Budget | None = None) -> NotebookRun:
        """``%cortex continue``: go on with the last run where it stopped (under
        ``budget`` when given, else the budget of the cell that ran it)."""
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
                "only interrupted, truncated, cancelled, turn-limited or budget-stopped runs "
                "can be continued."
            )
        if budget is not None:
            options = dataclasses.replace(options, budget=budget, given=options.given | {"budget"})
            self.last_options = options
        # The same agent and settings as the cell that ran it (its sampling settings too).
        agent = self._agent("", options)
        run = NotebookRun()
        scope = self.names.scope(self.last_prompt)  # what the cell it continues could reach
        recording = self._recording(run, self.last_prompt, options, agent)

        async def job(emit: Emit, background: TaskGroup | None) -> Run:
            return await agent.continue_run(
                previous,
                namespace=scope,
                conversation=self.conversation,
                hooks=self._hooks(run, emit, background, options.overwrite, recording),
                run=run,
            )

        cell = _Cell(job, run, model_name(agent), options.display, scope, recording=recording)
        cell.output_key, cell.overwrite = options.output_key, options.overwrite
        return self._execute(cell)

    def resume(self, stored: Run, prompt: str, options: CellOptions) -> NotebookRun:
        """``%cortex resume ID``: go on with the stored run ``stored`` (asked ``prompt``,
        run with ``options``) as itself: its id, its record, its view's earlier nodes
        as they ended (``Agent.resume``). It is ``_cortex`` from now on."""
        run = adopt(stored)
        agent = self._agent(prompt, options)
        offline = options.script or options.replay is not None
        conversation = Conversation() if offline else self.conversation
        if not offline and self.last is not None and self.last.id == run.id:
            conversation.drop_last()  # this kernel's copy of its messages: the record's win
        scope = self.names.scope(prompt, script=options.script)
        # Before the recording takes the run: a Stop while a long run's history is read
        # would leave it running in this kernel, never finished, never resumable here.
        earlier = history(run.events)
        recording = self._recording(run, prompt, options, agent)

        async def job(emit: Emit, background: TaskGroup | None) -> Run:
            return await agent.resume(
                run,
                prompt="" if options.script else prompt,
                namespace=scope,
                conversation=conversation,
                hooks=self._hooks(run, emit, background, options.overwrite, recording),
            )

        self.last_options, self.last_prompt = options, prompt
        cell = _Cell(job, run, model_name(agent), options.display, scope, recording=recording)
        cell.history = earlier
        cell.output_key, cell.overwrite = options.output_key, options.overwrite
        return self._execute(cell)

    def _agent(self, body: str, options: CellOptions) -> Agent:
        """The cell's agent; a setting it refuses, or an ``--output`` type that does not
        evaluate (in the notebook's namespace) or that pydantic cannot use, is one line."""
        try:
            output_type = None
            if options.output is not None:
                output_type = type_from_text(options.output, self.shell.user_ns)
            return cell_agent(body, options, self.registry, self.feeds, self.endpoints, output_type)
        except (ValueError, BadOutputType) as exc:  # it says which, and why
            raise CortexRunError(redact(str(exc))) from None

    def _check_output_key(self, agent: Agent, options: CellOptions) -> None:
        """``--output-key``: refused before the run when the name cannot be bound."""
        key = options.output_key
        if key is None:
            return
        if agent.typed is None:
            raise CortexRunError(
                f"--output-key {key} binds a typed answer: give its type with --output T"
            )
        try:
            check_variable_name(key)
            self.names.check(key, options.overwrite)
        except InvalidVariableName as exc:
            raise CortexRunError(f"--output-key {key!r} cannot be bound: {exc.reason}") from None

    def _bind_output(self, cell: _Cell) -> None:
        """Bind the validated answer to ``--output-key`` once the run completed; a name
        the user took meanwhile is a note (the object stays on ``_cortex.output``)."""
        run, key = cell.run, cell.output_key
        if key is None or run.status != "completed":
            return
        try:
            self.names.bind(run.id, key, run.output, cell.overwrite)
        except InvalidVariableName as exc:
            run.notes.append(
                f"--output-key {key!r} was not bound: {exc.reason}; the answer is on _cortex.output"
            )
            return
        run.variables[key] = run.output

    def _execute(self, cell: _Cell) -> NotebookRun:
        try:
            self._prepare(cell).run()
        except (KeyboardInterrupt, Exception) as exc:
            cell.failure = exc
        return self._outcome(cell)

    def _hooks(
        self,
        run: Run,
        emit: Emit,
        background: TaskGroup | None,
        overwrite: bool,
        recording: Recording | None = None,
    ) -> RunHooks:
        return RunHooks(
            on_event=emit,
            # The store only queues each event: it writes on its own thread.
            observers=(recording,) if recording is not None else (),
            bind=lambda name, value: self.names.bind(run.id, name, value, overwrite),
            background=background,
            ask=self.approvals.asker(run.id),
        )

    def _recording(
        self,
        run: Run,
        prompt: str,
        options: CellOptions,
        agent: Agent,
        tags: Mapping[str, Any] | None = None,
    ) -> Recording | None:
        """Where ``run`` is kept as it happens (``CortexMagics.store``); None when the
        store is off, or cannot be opened: then one ``cortex:`` line, and the run goes on.
        ``tags`` join its stored options (a ``--compare`` column's ``compare``, ``column``)."""
        if store.current_path() is None:
            return None
        try:
            kept = store.open_store()
        except store.StoreUnavailable as exc:
            print(redact(f"cortex: %%cortex: {exc}; this run is not stored."), file=sys.stderr)
            return None
        settings = {**agent.settings(), **cell_settings(options), **(tags or {})}
        return kept.record(run, prompt, settings)

    def _prepare(self, cell: _Cell) -> Bridge[Run]:
        """The view and the bridge of one cell's run (``_cortex`` is the run from now on)."""
        run = cell.run
        self.shell.user_ns[RUN_VARIABLE] = run
        self.last = run
        view = cell.view = self._view(cell)
        if cell.history:
            view.deliver(cell.history)
        # Every run goes on the session's loop (a loop and its thread made once, not at
        # each cell's start and end: 4-8 ms a cell). When the view can show late events,
        # fire_and_forget actions belong to that loop's task group and the cell ends with
        # the run, not with them; otherwise they are the run's own and the cell waits.
        # A cell run by an async tool, on that loop's thread, cannot wait for the loop
        # it blocks: it gets a loop of its own (as every cell once did).
        session_loop = self._background_loop()
        loop = None if session_loop.is_current() else session_loop
        background = loop.background if loop is not None and view.late is not None else None
        if loop is not None and background is not None:
            self._background_runs = [*self._still_running(), run]
            portal = loop.portal
            run._barrier = lambda: portal.call(nothing)
        job = cell.job
        bridge: Bridge[Run] = Bridge(
            lambda emit: job(emit, background), view.deliver, loop=loop, late=view.late
        )
        view.stop = bridge.request_stop
        return bridge

    def _view(self, cell: _Cell) -> CellView:
        scopes: list[Mapping[str, Any]] = [cell.run.variables]
        if self.feeds is not None:
            scopes.append(self.feeds)
        scopes.append(cell.scope)  # $name in the response shows only what the model may reach

        def values() -> Mapping[str, Any]:
            return ChainMap(*scopes)  # type: ignore[arg-type]

        return self.live.open(cell.model, cell.run, cell.display, values)

    def _outcome(self, cell: _Cell) -> NotebookRun:
        """End the cell however the run ended: the view's final frame and static copy,
        and one line (or ``CortexInterrupt``/``CortexRunError``) for what went wrong.

        Called after the ``except`` that caught the failure, never inside it: an error
        raised while handling another carries it as its context, and IPython prints a
        whole traceback for any error whose context holds a task group's
        ``ExceptionGroup``, whatever its ``_render_traceback_`` says.
        """
        run, view, failure = cell.run, cell.view, cell.failure
        if isinstance(failure, KeyboardInterrupt):
            self._finish(cell, "cancelled")
            close_quietly(view)
            if isinstance(view, WidgetOutput):
                self.live.release()
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
            failure = close_view(view)
        else:
            close_quietly(view)
        if isinstance(view, WidgetOutput):
            self.live.release()  # older finished views let go, however this one ended
        if failure is not None:  # a bug of ours or a host's: still no traceback wall
            error = run.fail(failure)
            self._finish(cell)
            raise error
        self._bind_output(cell)
        self._finish(cell)
        report(run)
        return run

    def _finish(self, cell: _Cell, status: str | None = None) -> None:
        """Keep how the cell's run ended in the store (and say once if writing failed)."""
        if cell.recording is None:
            return
        if status is not None and cell.run.status == "running":
            cell.run.status = status
        cell.recording.finish()
        problem = store.take_problem()
        if problem is not None:
            print(f"cortex: %%cortex: {problem}", file=sys.stderr)

    # ---- actions that outlive their cell -----------------------------------------

    def _background_loop(self) -> Loop:
        if self._loop is None:
            self._loop = Loop()
        return self._loop

    def stop_background(self) -> list[str]:
        """``%cortex stop``: cancel the fire_and_forget actions still running (of any
        run); returns their ids."""
        running = [node.id for run in self._still_running() for node in unfinished(run)]
        if self._loop is not None and running:
            self._loop.stop_background()
        return running

    def _still_running(self) -> list[Run]:
        return [run for run in self._background_runs if unfinished(run)]

    def close(self) -> None:
        """``%unload_ext``: cancel background actions and stop the session's loop."""
        self.names.close()
        if self._loop is not None:
            self._loop.close()
            self._loop = None


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
