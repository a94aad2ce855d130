"""One notebook's cortex session: wires a cell to model -> protocol -> runtime -> display.

The magic parses arguments and calls ``Session.run_cell``; everything else happens
here. The run itself is async and goes to a worker thread through the bridge, while
the cell's own thread shows its events (widgets in a notebook, plain text elsewhere)
and keeps the kernel's Stop button working. After every cell the notebook variable
``_cortex`` is the run record, even when the run was stopped or failed.
"""

from __future__ import annotations

import sys
import time
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cortex_jupyter._bridge import Bridge, Emit
from cortex_jupyter.runtime import Registry, Run, default_registry
from cortex_jupyter.runtime.feeds import FeedSet
from cortex_jupyter.runtime.loop import Conversation, continue_run, run_agent

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from cortex_jupyter.runtime.chunks import StreamingModel

RUN_VARIABLE = "_cortex"
#: Run statuses that end a cell with an error line (the answer never came).
UNFINISHED = frozenset(("interrupted", "failed", "turn_limit"))
#: Run statuses ``%cortex continue`` can pick up from.
CONTINUABLE = frozenset(("interrupted", "cancelled", "turn_limit"))


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
    """The run record as the notebook sees it (``_cortex``): a ``Run`` plus pictures."""

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
    display: str = "auto"


class _View(Protocol):
    def deliver(self, events: list[Any]) -> bool | None: ...
    def close(self) -> None: ...


class _TextView:
    """Streams the run to stdout: IPython in a terminal, or a shell with no widget front end."""

    def __init__(self, model: str) -> None:
        from cortex_jupyter.display import TextRenderer

        self._out = sys.stdout
        self._renderer = TextRenderer(self._write, model=model)

    def _write(self, text: str) -> None:
        self._out.write(text)

    def deliver(self, events: list[Any]) -> None:
        now = time.monotonic()
        for event in events:
            self._renderer.feed(event, now)
        self._out.flush()

    def close(self) -> None:
        self._out.write("\n")
        self._out.flush()


class _WidgetView:
    """The live widgets, and at the end a static copy for saved notebooks."""

    def __init__(self, model: str, values: Callable[[], Mapping[str, Any]]) -> None:
        from IPython.display import display

        from cortex_jupyter.display.widget import WidgetView

        self.view = WidgetView(model=model, values=values)
        self._handle = display(self.view.widget, display_id=True)

    def deliver(self, events: list[Any]) -> bool:
        self.view.apply(events)
        return self.view.redraw()  # true: call again soon, parts wait for the budget

    def close(self) -> None:
        self.view.stream_closed()
        data, metadata = self.view.finish()
        if self._handle is not None:
            self._handle.update(data, metadata=metadata, raw=True)


class Session:
    """A notebook's cortex state: its conversation, registry, feeds and last run."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        self.registry: Registry = default_registry
        self.conversation = Conversation()
        self.feeds: FeedSet | None = None
        self.last: NotebookRun | None = None
        self.last_options: CellOptions | None = None
        #: notebook names bound by runs -> the id of the run that bound them
        self.bound: dict[str, str] = {}

    # ---- running a cell -----------------------------------------------------------

    def run_cell(self, prompt: str, options: CellOptions) -> NotebookRun:
        """Run one ``%%cortex`` cell; returns the run (also left in ``_cortex``)."""
        model = self._model(prompt, options)
        if options.fresh:
            self.conversation.reset()
        # A script or a replay is its own little conversation: it must not leak into the
        # notebook's memory of a real model.
        offline = options.script or options.replay is not None
        conversation = Conversation() if offline else self.conversation
        run = NotebookRun()

        async def job(emit: Emit) -> Run:
            return await run_agent(
                "" if options.script else prompt,
                model=model,
                conversation=conversation,
                registry=self.registry,
                namespace=self.shell.user_ns,
                dialect=options.dialect,
                max_turns=options.max_turns,
                feeds=self.feeds,
                on_event=emit,
                bind=lambda name, value: self._bind(run, name, value),
                native_tools=options.native_tools,
                temperature=options.temperature,
                max_tokens=options.max_tokens,
                run=run,
            )

        self.last_options = options
        return self._execute(job, run, model.name, options.display)

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
                "only interrupted, cancelled or turn-limited runs can be continued."
            )
        model = self._model("", options)
        run = NotebookRun()

        async def job(emit: Emit) -> Run:
            return await continue_run(
                previous,
                model=model,
                conversation=self.conversation if not options.script else None,
                namespace=self.shell.user_ns,
                dialect=options.dialect,
                registry=self.registry,
                max_turns=options.max_turns,
                feeds=self.feeds,
                on_event=emit,
                bind=lambda name, value: self._bind(run, name, value),
                native_tools=options.native_tools,
                run=run,
            )

        return self._execute(job, run, model.name, options.display)

    def _model(self, body: str, options: CellOptions) -> StreamingModel:
        from cortex_jupyter.models import ModelError, ReplayModel, ScriptModel

        try:
            if options.script:
                return ScriptModel(body, chunk_size=options.chunk_size, delay=options.delay)
            if options.replay is not None:
                return ReplayModel(options.replay, speed=options.speed)
            from cortex_jupyter.models import OpenAIModel

            return OpenAIModel(options.model)
        except (ModelError, OSError, ValueError) as exc:
            raise CortexRunError(str(exc)) from None

    def _execute(
        self,
        job: Callable[[Emit], Any],
        run: NotebookRun,
        model: str,
        display: str,
    ) -> NotebookRun:
        self.shell.user_ns[RUN_VARIABLE] = run
        self.last = run
        view = self._view(model, run, display)
        try:
            Bridge(job, view.deliver).run()
        except KeyboardInterrupt:
            view.close()
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
            raise CortexInterrupt() from None
        view.close()
        self._report(run)
        return run

    def _view(self, model: str, run: Run, display: str) -> _View:
        if display == "text" or (display == "auto" and not self._has_widgets()):
            return _TextView(model)
        scopes: list[Mapping[str, Any]] = [run.variables]
        if self.feeds is not None:
            scopes.append(self.feeds)
        scopes.append(self.shell.user_ns)

        def values() -> Mapping[str, Any]:
            return ChainMap(*scopes)  # type: ignore[arg-type]

        return _WidgetView(model, values)

    def _has_widgets(self) -> bool:
        """Whether a front end that renders widgets is attached (a kernel with comms)."""
        return getattr(self.shell, "kernel", None) is not None

    def _bind(self, run: Run, name: str, value: Any) -> None:
        self.shell.user_ns[name] = value
        self.bound[name] = run.id

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
        if run.status in UNFINISHED:
            reason = run.reason or f"the run ended {run.status!r}"
            hint = " Continue it with %cortex continue." if run.status in CONTINUABLE else ""
            if run.status == "turn_limit":
                reason = f"the run stopped after {run.turns} turns without a final answer."
                hint = " Continue it with %cortex continue, or allow more turns with --max-turns N."
            raise CortexRunError(f"{reason}{hint}")


_SESSIONS: dict[int, Session] = {}


def session_for(shell: InteractiveShell) -> Session:
    """The session of this shell (one per kernel)."""
    key = id(shell)
    found = _SESSIONS.get(key)
    if found is None:
        found = _SESSIONS[key] = Session(shell)
    return found


def forget(shell: InteractiveShell) -> None:
    """Drop this shell's session (``%unload_ext``): a new load starts afresh."""
    _SESSIONS.pop(id(shell), None)
