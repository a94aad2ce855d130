"""What a cell shows while its run goes on: widgets in a notebook, text elsewhere.

Its own module because a view lives by other rules than the run: it is touched only in
the cell's thread, it may outlive its cell (``fire_and_forget`` actions report late),
and a notebook keeps only so many live at once (``CortexMagics.live_views``). The run
never calls into a view; the bridge hands it the run's events.

``cortex_jupyter.display`` (about 0.1 s to import) is imported when the first view
opens, not when the extension loads.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from IPython.display import display

from cortex_jupyter.runtime import ActionStatus, End, Interrupt, Nested, Run
from cortex_jupyter.runtime.core.trust.secrets import hide_edges, redact
from cortex_jupyter.runtime.scheduler.approval import ask_line
from cortex_jupyter.session.approvals import Approvals

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

#: How many finished widget views stay live by default (``CortexMagics.live_views``).
LIVE_VIEWS = 10


class CellView(Protocol):
    """What the session needs of a view, text or widgets."""

    #: Takes events that arrive after the cell ended (from any thread), or ``None``
    #: when the view cannot show them: the cell then waits for the run's last action.
    late: Callable[[list[Any]], None] | None
    #: Stops the run as the kernel's interrupt does (set by the session).
    stop: Callable[[], None] | None

    def deliver(self, events: list[Any]) -> bool | None: ...
    def close(self) -> None: ...


class LiveView(Protocol):
    """What ``LiveViews`` needs of a widget view it keeps: a run's (``WidgetOutput``) or a
    compare cell's (``compare_views.CompareWidgets``, one view a column)."""

    #: The notebook cell it runs in, and how ``%cortex views`` names it.
    cell: str | None
    label: str

    @property
    def states(self) -> list[Any]:
        """The view state of each run it shows (how many views it counts as)."""

    @property
    def finished(self) -> bool: ...
    @property
    def released(self) -> bool: ...
    def release(self) -> int: ...


class TextOutput:
    """Streams the run to stdout: IPython in a terminal, or a shell with no widget front end."""

    def __init__(self, model: str, approvals: Approvals, run: Run) -> None:
        from cortex_jupyter.display import TextRenderer

        self._out = sys.stdout
        # What the renderer wrote since the last send: a tool printing 100,000 lines
        # makes one write (and one redaction) per delivery, not one per line.
        self._pending: list[str] = []
        self._sent = False  # something was written: the next write goes on from a cut
        self._renderer = TextRenderer(self._pending.append, model=model)
        self._approvals = approvals
        self._run = run
        self._names: dict[str, str] = {}
        # Text printed after its cell ended would land in whatever cell runs then.
        self.late: Callable[[list[Any]], None] | None = None
        self.stop: Callable[[], None] | None = None

    def _send(self) -> None:
        """Write what gathered, redacted as one text (so a secret split across two
        writes is redacted as well). Each delivery is a cut in the stream: the part
        of a secret at either side of it (the model's chunks came in two deliveries)
        is hidden, as at every cut."""
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            self._out.write(hide_edges(redact(text), start=self._sent, end=True))
            self._sent = True
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


def history(events: list[Any]) -> list[Any]:
    """What a resumed run's view is shown first: its recorded events but how it stopped
    (its end, its interrupt) and the questions it was waiting on (asked again if they
    still matter), so the earlier nodes show as they ended and the run goes on live."""
    shown = []
    for event in events:
        inner = _unnest(event)[1]
        if isinstance(inner, End | Interrupt):
            continue
        if isinstance(inner, ActionStatus) and inner.status == "awaiting":
            continue
        shown.append(event)
    return shown


def _unnest(event: Any) -> tuple[str, Any]:
    """A nested run's event unwrapped: ``("agent/", inner event)``; others ``("", event)``."""
    path = ""
    while isinstance(event, Nested):
        path += f"{event.parent}/"
        event = event.event
    return path, event


class WidgetOutput:
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
    def states(self) -> list[Any]:
        return [self.view.state]

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


def close_view(view: CellView | None) -> Exception | None:
    """Close the view (its final frame and static copy); the error, if that failed.
    ``None``: the view could not even be made."""
    if view is None:
        return None
    try:
        view.close()
    except Exception as exc:
        return exc
    return None


def close_quietly(view: CellView | None) -> None:
    """Close the view (its final frame and static copy) even after a failure; a view that
    cannot close must not hide the failure that brought us here."""
    failure = close_view(view)
    if failure is not None:
        print(f"cortex: the view could not show its final frame: {failure!r}", file=sys.stderr)


class LiveViews:
    """A notebook's widget views still live, oldest first: ``CortexMagics.live_views``
    of them once finished; older ones let go (each shows its static copy and closes its
    widgets, which frees what they held). A compare cell counts as one view a column,
    and lets go whole."""

    def __init__(self, shell: InteractiveShell, approvals: Approvals) -> None:
        self.shell = shell
        self.approvals = approvals
        self.views: list[LiveView] = []

    def open(
        self, model: str, run: Run, display: str, values: Callable[[], Mapping[str, Any]]
    ) -> CellView:
        """The view of a new run: text or widgets as ``display`` says ("auto": widgets
        when a front end renders them). ``values`` is what ``$name`` shows."""
        if display == "text" or (display == "auto" and not self._has_widgets()):
            return TextOutput(model, self.approvals, run)
        cell, label = self.place()
        view = WidgetOutput(model, values, self.approvals, run, cell=cell, label=label)
        self.add(view)
        return view

    def place(self) -> tuple[str | None, str]:
        """The cell a new view opens in and its label; the view that cell showed before
        (it runs again) lets go."""
        cell, label = _cell_of(self.shell)
        if cell is not None:
            for old in [v for v in self.views if v.cell == cell]:
                self._release(old)
        return cell, label

    def add(self, view: LiveView) -> None:
        """Keep ``view`` live, the newest; older finished views beyond the limit let go."""
        self.views.append(view)
        self.release()

    @property
    def keep(self) -> int:
        """How many finished widget views stay live (``CortexMagics.live_views``)."""
        magics = getattr(getattr(self.shell, "magics_manager", None), "registry", {})
        value = getattr(magics.get("CortexMagics"), "live_views", LIVE_VIEWS)
        return value if isinstance(value, int) and value >= 0 else LIVE_VIEWS

    def release(self, keep: int | None = None) -> int:
        """Let finished views beyond the newest ``keep`` (default ``live_views``) go:
        each shows its static copy and closes its widgets. Returns how many let go; a
        view whose actions still run stays until they end."""
        keep = self.keep if keep is None else keep
        excess = sum(len(view.states) for view in self.views) - keep
        released = 0
        for view in list(self.views):
            if excess <= 0:
                break
            if view.released or view.finished:
                excess -= len(view.states)
                released += self._release(view)
        return released

    def _release(self, view: LiveView) -> int:
        """Let one view go; how many views it counted as, if it did (a broken view must
        not keep the others)."""
        self.views.remove(view)
        count = len(view.states)
        try:
            view.release()
        except Exception as exc:
            print(f"cortex: a view could not let go: {exc!r}", file=sys.stderr)
            return 0
        return count

    def _has_widgets(self) -> bool:
        """Whether a front end that renders widgets is attached (a kernel with comms)."""
        return getattr(self.shell, "kernel", None) is not None


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
