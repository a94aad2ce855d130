"""The live view of one cell's run: ipywidgets parts redrawn from a ``ViewState``.

With its parts (``controls.py``, ``pieces.py``, ``live_graph.py``), the only modules
that import ipywidgets (ARCHITECTURE.md, "Layers"). The session feeds
it batches of events (``apply``) and asks it to ``redraw`` at most ~25 times a second;
``finish`` leaves the final frame plus a static copy for saved notebooks.

What it costs is what shapes it (NOTES.md, "Streaming text into widgets" and "Limits of
the Jupyter channel"): every trait change is one iopub message carrying the whole new
value, and the server drops messages past its rate limit. So:

- **Only moved parts are redrawn**, from ``ViewState.versions``; a value equal to what
  the front end already has is not sent at all.
- **Clocks tick slowly.** The header (elapsed, tokens, tokens/s) and running actions'
  durations in the graph are redrawn at most ``slow_hz`` times a second; a new state
  word or node count in the header goes first, at once if the budget allows.
- **A message budget.** A token bucket holds each view to ``MAX_MESSAGES`` messages a
  second with at most ``BURST`` at once, and everything the view sends is charged to it:
  creating widgets (each is a ``comm_open``), showing it, every update. A part whose
  worst-case cost does not fit waits, first in line, for the next redraw (which the
  session brings forward: ``redraw`` says so), and the parts after it wait too (the
  state word first, then node statuses, then the text the eye follows). After the
  view's creation the budget is never overdrawn, so no second holds more than
  ``BURST + MAX_MESSAGES`` messages, plus the final frame.
- **Parts are created when first needed.** A view starts as its header alone (five
  ``comm_open`` messages and the display); the thought box, graph, details list and
  response join it when they first have something to show.
- **Growing text is sent once.** The thought and the response only grow, so the part
  that can no longer change moves into *pieces* (HTML widgets sent once) and only the
  unfinished tail is re-sent. Re-sending the whole text each redraw costs traffic that
  grows with the square of its length (a 16 KB answer at 25 Hz from a slow model: tens
  of MB); with pieces it grows with the length. The budget and the pieces are ``pieces.py``.

The thought box stays pinned to its newest line with CSS alone (a ``column-reverse``
scroll container), and keeps a reader's scroll position when they scroll up to read.
Colours come from JupyterLab's CSS variables with light-theme fallbacks, or sit on
their own light fill (graph boxes, the details callout), so both themes read.

**What a person can do in it**, while the cell runs (an async cell: the kernel handles
widget messages meanwhile) and after:

- **Click an action** (a box, a chip, a group member, a row of the details list, a
  link in an inspector): its *inspector* opens under the graph (``inspector.py``), and
  stays live as the action goes on. Clicking it again, or its ✕, closes it. A failed
  action's inspector opens by itself, unless the person chose what to look at. Clicks
  travel through the graph component (``live_graph.py``), an ``anywidget`` whose
  patches carry only the pieces of the picture that changed.
- **Expand a group** (``fetch ×60``) into a grid of its members, and fold it again.
- **Approve or Deny** an action that waits for approval: a row with its parameters
  and two buttons appears under the graph; a click calls ``decide(node_id, approved)``
  (the session ties it to this view's run). A row whose node no longer waits, or whose
  run has ended, answers nothing: its buttons are disabled, a stale click is ignored.
- **Stop** the run with the view's own button (``stop()``: the session makes it the
  kernel's interrupt). The buttons and rows are ``controls.py``.

Buttons are ipywidgets' own (they work even where the graph's front-end module could
not load). What a click draws goes out at once, charged to the budget (a person's
click is worth a message or two over it).

**Secrets never reach the page** (runtime/core/trust/secrets.py): every text the view sends (each
part, each piece of the graph and of a growing text, the inspector, a tooltip) has the
API key and credential-looking environment values redacted, as the static copy does;
texts cut to a length are redacted before the cut. The run's own objects (an
``output_key`` variable, ``_cortex.actions[id].output``) stay exact.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets
from ipywidgets.widgets.widget_string import (  # not re-exported at the top
    HTMLMathStyle,
    HTMLStyle,
)

from cortex_jupyter.runtime.core.trust import secrets

from .controls import ROW_COST, Controls
from .inspector import inspector_html
from .live_graph import LiveGraph, frame, graph_code, patch
from .markdown import IncrementalMarkdown
from .pieces import FREEZE_CHARS, Budget, Pieces, set_traits, widget_tree
from .rich import pre
from .state import PARTS, ViewState
from .static import (
    WIDGET_MIME,
    SavedCopy,
    callout,
    header_html,
    saved_copy,
)
from .svg import ARROW_DEFS, Picture, arrange, details_html, draw
from .theme import BORDER_VAR, MUTED_VAR, esc, redact_markup
from .typed import typed_html, typed_shows

#: Messages a second one view sends (the server's cap is 1,000 for everyone). With the
#: burst, no second of a streaming run holds more than 26 (issue 6, section 8: 30).
MAX_MESSAGES = 20.0
#: Messages a view may send at once after a quiet spell: enough to create the thought box.
BURST = 6.0
#: What creating and showing a view costs: the shared styles (HTML's, and HTMLMath's for
#: the response) and layout, the header, the root box and its layout (six comm_open
#: messages), and the display_data.
CREATION = 7
#: What its Stop button adds: the row it shares with the header and that row's layout,
#: the button, and the style and layout every button of the view shares.
STOP_COST = 5
#: What creating each lazily made part costs, its place in the root box included (the
#: approvals: its box, one row of four widgets).
_PART_COST = {"thought": 5, "graph": 2, "details": 2, "response": 3, "inspector": 2,
              "approvals": 6, "output": 2}  # fmt: skip
#: The parts in the order of the page.
_ORDER = ("header", "thought", "graph", "approvals", "inspector", "details", "response",
          "output")  # fmt: skip
#: Longest a due part waits behind busier ones before it goes first (seconds).
STARVE = 0.3
#: A typed answer's tree larger than this (characters of HTML) is redrawn at ``slow_hz``:
#: the whole tree is re-sent each time (it is bounded, ``rich.TREE_ENTRIES``).
BIG_OUTPUT = 20_000
# An allowance that lets a text's tail be re-sent but never split into a new piece.
_NO_FREEZE = 2.0

#: A thought line longer than this is cut at a space (a visible line break), so that one
#: endless paragraph is not re-sent whole on every redraw.
_LONG_LINE = 8 * FREEZE_CHARS
#: The thought box shows whole lines: its height is this many lines of this height, plus
#: its padding and border (a widget box is border-box), so no line is cut in half.
_THOUGHT_LINES, _THOUGHT_LINE_PX = 8, 18
_THOUGHT_STYLE = (
    "white-space:pre-wrap;word-break:break-word;font-style:italic;font-size:12.5px;"
    f"line-height:{_THOUGHT_LINE_PX}px;color:{MUTED_VAR}"
)


class WidgetView:
    """The widgets of one run, redrawn from its reduced state (see the module docstring).

    ``values()`` gives what ``$name`` in the response shows (run outputs, then the
    notebook); it is called only when the response is redrawn. ``clock`` stamps events
    and drives the elapsed time; the run's own events carry ``time.monotonic()`` times.
    ``sent`` counts the messages the view has cost so far, creation and display included.

    ``decide(node_id, approved)`` answers an action of this view's run waiting for
    approval (the session's ``Approvals.answer`` for this run; without it the rows have
    no buttons); ``stop()`` stops the run
    (without it the view has no Stop button); ``record`` is the run record, or a function
    returning it, for the inspector's rich outputs (without it, the events' summaries).
    """

    def __init__(
        self,
        *,
        model: str = "",
        values: Callable[[], Mapping[str, Any]] = dict,
        clock: Callable[[], float] = time.monotonic,
        slow_hz: float = 4.0,
        decide: Callable[[str, bool], object] | None = None,
        stop: Callable[[], None] | None = None,
        record: Any = None,
    ) -> None:
        # The run record (``_cortex``, or a function returning it): the inspector reads
        # the output objects, resolved parameters and captured text from it.
        self._record = record
        self._values = values
        self._clock = clock
        self._slow = 1.0 / slow_hz
        now = clock()
        self.state = ViewState(model=model, started=now)
        self._markdown = IncrementalMarkdown()
        self._budget = Budget(MAX_MESSAGES, BURST, now)
        self._seen: dict[str, int] = dict.fromkeys(PARTS, -1)
        self._drawn_at: dict[str, float] = {"header": now}
        self._phase = self.state.phase
        self._counts = self.state.counts()
        self._waiting: str | None = None  # the part the budget held back last time
        self._due_since: dict[str, float] = {}  # part -> when it became due, undrawn since
        self.sent = CREATION
        # What the person chose: the action the inspector shows (``_chosen``: by a
        # click, so a failure does not take the inspector away), the groups expanded.
        # ``_ui`` moves with every such choice.
        self._selected: str | None = None
        self._chosen = False
        self._expanded: set[str] = set()
        self._ui = 0
        self._ui_drawn: dict[str, Any] = {}
        self._graph: LiveGraph | None = None
        self._graph_sent: dict[str, str] = {}
        self._graph_size = (0, 0)
        self._graph_behind = False
        self._inspector: ipywidgets.HTML | None = None
        self._rich: dict[Any, str] = {}
        self._finishing = False  # drawing the final frame (``finish``)
        self._placed = True  # every part made is in the root box
        self._closed = False  # ``close``: the widgets are closed, the run let go

        # One style and one plain layout shared by the parts that need nothing of their
        # own: every widget, layout and style is a comm_open when it is created.
        self._style = HTMLStyle()
        # Made with the view, not with the response: its message then goes out before the
        # view is shown, not in the busiest second of the stream.
        self._math_style = HTMLMathStyle()
        self._plain = ipywidgets.Layout(margin="0", flex="0 0 auto")
        self._header = ipywidgets.HTML(
            value=redact_markup(header_html(self.state, now)),
            layout=self._plain,
            style=self._style,
            _dom_classes=("cortex-header",),
        )
        self._seen["header"] = self.state.versions["header"]
        # What the view's own buttons call: approve/deny an awaiting action, stop the run.
        self._controls = Controls(
            self.state,
            self._header,
            decide=decide,
            stop=stop,
            style=self._style,
            plain=self._plain,
            charge=self._spend,
            count=self._count,
        )
        top = self._controls.top
        if stop is not None:
            self.sent += STOP_COST
        self.widget = ipywidgets.VBox(
            [top],
            layout=ipywidgets.Layout(
                border_left=f"3px solid {BORDER_VAR}", padding="2px 0 2px 10px", margin="2px 0"
            ),
            _dom_classes=("cortex-view",),
        )
        self._budget.spend(self.sent)
        # The other parts are made when first needed (``_attach``), in _ORDER.
        self._parts: dict[str, ipywidgets.Widget] = {"header": top}
        self._thought: Pieces | None = None
        self._response: Pieces | None = None
        self._output_size = 0  # characters of the typed answer's last drawn HTML
        self._output_held = False  # a large typed answer waits for its slow redraw

    # ---- the contract -------------------------------------------------------------

    def apply(self, events: Sequence[Any]) -> None:
        """Reduce a batch of parser/runtime events, stamped with the clock's time."""
        if self._closed:
            return
        now = self._clock()
        for event in events:
            self.state.apply(event, now)

    def redraw(self) -> bool:
        """Redraw the parts that moved (and, at ``slow_hz``, the ones that tick), as far
        as the message budget allows; the rest keep their changes for the next redraw.

        Returns whether something is still waiting for the budget: redraw again soon.
        """
        if self._closed:
            return False
        now = self._clock()
        budget = self._budget
        budget.refill(now)
        self._auto_open()
        due = self._due(now)
        if self._waiting in due:  # it waited for the budget: nothing jumps ahead of it
            due.remove(self._waiting)
            due.insert(0, self._waiting)
        self._waiting = None
        for part in due:
            if budget.tokens < self._worst_case(part):
                self._waiting = part
                break
            self._spend(self._draw(part, now, budget.tokens))
        behind = self._waiting is not None or self._graph_behind or self._output_held
        for pieces in (self._thought, self._response):
            if pieces is not None and budget.tokens >= 1:  # leftovers of a re-render
                self._spend(pieces.close_stale(int(budget.tokens)))
            behind = behind or (pieces is not None and pieces.stale > 0)
        ended = self.state.end_status is not None
        controls = self._controls
        if ended and controls.stop_button is not None and budget.tokens >= 1:
            self._spend(controls.drop_stop())  # the run ended: its Stop button leaves
        if controls.stale and budget.tokens >= 1:
            self._spend(controls.close_stale(int(budget.tokens)))
        return behind or controls.stale or controls.behind()

    def _worst_case(self, part: str) -> int:
        """What drawing ``part`` may cost, checked before drawing it: creating it and
        its first value, or for a text three (moving settled text into a piece; the
        reserve also lets the tail go out in the same redraw as a re-render)."""
        if part == "approvals":  # a question to the person may overdraw a little
            cost = _PART_COST[part] + 1 if part not in self._parts else 1 + ROW_COST
            return min(int(BURST), cost)
        if part not in self._parts:
            return _PART_COST[part] + 1 if self._has_content(part) else 0
        return 3 if part in ("thought", "response") else 1

    def _has_content(self, part: str) -> bool:
        """Whether a part has anything to show (a part is made only when it has)."""
        state = self.state
        if part == "thought":
            return bool(state.thought.strip())
        if part == "response":
            return bool(state.body.strip())
        if part == "output":
            return typed_shows(state.typed)
        if part == "graph":
            return bool(state.nodes)
        if part == "approvals":
            return bool(self._controls.awaiting())
        if part == "inspector":
            return self._selected is not None
        return bool(details_html(state))

    def _spend(self, messages: int) -> None:
        self._budget.spend(messages)
        self.sent += messages

    def _count(self, messages: int) -> None:
        """Messages a click sent (over the budget: a person's click is worth them)."""
        self.sent += messages

    def _draw_approvals(self, allowance: float) -> int:
        made = self._controls.box is None
        sent = self._controls.draw(allowance)
        if made and self._controls.box is not None:
            sent += self._attach("approvals", self._controls.box)
        return sent

    @property
    def settled(self) -> bool:
        """Whether every action has reached its final status."""
        return all(node.final for node in self.state.nodes.values())

    def stream_closed(self) -> None:
        """The model's stream ended: the state word moves on to "running actions"."""
        self.state.close_stream(self._clock())

    def finish(self) -> SavedCopy:
        """Draw the final frame in full; return the two outputs the run leaves.

        ``.live`` updates the view's own output (the widget, an empty text, and
        ``{"cortex": run_metadata(...)}``); ``.static`` is a second output, the static
        copy every renderer without the widget's model shows (``static.py`` says why it
        is a second output). The final frame ignores the budget: it is the last thing
        the view sends.
        """
        now = self._clock()
        self._auto_open()
        # The final frame sends as little as it can: parts it makes join the root box in
        # one message, and settled text is not split into pieces (it grows no more).
        self._finishing, self._placed = True, True
        self._controls.cut = self.state.end_status is None
        for part in _ORDER:
            self.sent += self._draw(part, now, math.inf)
        self.sent += self._controls.settle()  # rows whose run has ended answer nothing
        if not self._placed:
            self.widget.children = tuple(self._parts[p] for p in _ORDER if p in self._parts)
            self.sent += 1
        self._finishing = False
        while self._graph_behind:  # a patch that was cut: the rest, now
            self.sent += self._draw("graph", now, math.inf)
        for pieces in (self._thought, self._response):
            if pieces is not None:
                self.sent += pieces.close_stale(None)
        # The Stop button leaves first, so that closing what left the page closes it too.
        self.sent += self._controls.drop_stop()
        self.sent += self._controls.close_stale(None)
        self.sent += 2  # the view's display update, and the static copy's display
        bundle = self.widget._repr_mimebundle_()
        widget = bundle.get(WIDGET_MIME) if bundle else None
        return saved_copy(self.state, self._read_values(), now, widget=widget)

    @property
    def closed(self) -> bool:
        """Whether ``close`` let the view go (its widgets are closed)."""
        return self._closed

    def close(self) -> int:
        """Close every widget of the view and let go of the run; returns how many.

        Each widget, its layout and its style is a comm of its own: closing one sends a
        ``comm_close``, after which neither the kernel nor the front end holds its state.
        The graph's shared code (``live_graph.GraphCode``) stays for the next view. The
        view then drops the run record, the namespace and the reduced state, so what the
        run produced is freed with the record the user holds, not kept by the view.
        Closing twice does nothing; a closed view ignores further events.
        """
        if self._closed:
            return 0
        self._closed = True
        roots: list[Any] = [self.widget, *self._parts.values(), *self._controls.widgets()]
        roots += [self._graph, self._inspector, self._style, self._math_style, self._plain]
        for pieces in (self._thought, self._response):
            if pieces is not None:
                roots += [pieces.box, *pieces.widgets()]
        widgets = widget_tree(roots)
        for widget in widgets:
            widget.close()
        self._parts = {}
        self._controls.close()
        self._graph = self._inspector = None
        self._thought = self._response = None
        self._graph_sent, self._rich, self._selected = {}, {}, None
        self._record, self._values = None, dict
        self._markdown = IncrementalMarkdown()
        self.state = ViewState(model=self.state.model, started=self.state.started)
        return len(widgets)

    # ---- scheduling ---------------------------------------------------------------

    def _due(self, now: float) -> list[str]:
        """The parts to draw now, most wanted first."""
        state = self.state
        changed = state.changed_since(self._seen)
        due: list[str] = []
        # A new state word or new node counts go first (the graph shows them too, and a
        # header that disagrees with it reads as a bug); clocks wait for slow_hz.
        fresh = state.phase != self._phase or state.counts() != self._counts
        if fresh:
            due.append("header")
        # A question to the person goes first: the run may be waiting for the answer.
        if self._controls.moved():
            due.append("approvals")
        # A node changing status is rare and easy to miss (a fast tool is running for a
        # fraction of a second): it goes before the text. Running durations tick in the
        # page (live_graph.js), so they cost no messages.
        if "graph" in changed or self._graph_behind or self._ui_drawn.get("graph") != self._ui:
            due.append("graph")
        due += [part for part in ("thought", "response") if part in changed]
        self._output_held = "output" in changed and not (
            self._output_size < BIG_OUTPUT or self._slow_due("output", now)
        )
        if "output" in changed and not self._output_held:
            due.append("output")
        if self._ui_drawn.get("inspector") != self._inspector_key():
            due.append("inspector")
        if "details" in changed:
            due.append("details")
        ticks = "header" in changed or state.ticking
        if not fresh and ticks and self._slow_due("header", now):
            due.append("header")
        # A part kept waiting longer than STARVE (the budget spent on busier parts every
        # time) goes first: the details of a failure must not wait for the run's end.
        for part in [p for p in self._due_since if p not in due]:
            del self._due_since[part]
        for part in due:
            self._due_since.setdefault(part, now)
        overdue = sorted(
            (p for p in due if now - self._due_since[p] >= STARVE), key=lambda p: self._due_since[p]
        )
        return overdue + [p for p in due if p not in overdue]

    def _slow_due(self, part: str, now: float) -> bool:
        return now - self._drawn_at.get(part, -math.inf) >= self._slow - 1e-9

    def _draw(self, part: str, now: float, allowance: float) -> int:
        """Draw one part, creating it first if it has something to show; returns the
        number of messages that cost. ``allowance`` is what it may cost at most, but
        for a re-render's replaced pieces (see ``Pieces.show``)."""
        if part in self.state.versions:  # (the approvals and inspector follow nodes)
            self._seen[part] = self.state.versions[part]
        self._drawn_at[part] = now
        self._due_since.pop(part, None)
        if part == "header":
            self._phase = self.state.phase
            self._counts = self.state.counts()
            return set_traits(self._header, value=header_html(self.state, now))
        if part == "thought":
            return self._draw_thought(now, allowance)
        if part == "graph":
            return self._draw_graph(now)
        if part == "approvals":
            return self._draw_approvals(allowance)
        if part == "inspector":
            return self._draw_inspector(now)
        if part == "details":
            return self._show_html("details", callout(details_html(self.state, live=True)))
        if part == "output":
            return self._draw_output()
        return self._draw_response(now, allowance)

    def _show_html(self, part: str, value: str) -> int:
        """Show an HTML part (the graph, the details); made when it first has a value.

        Empty again later (a failure retried away), it stays, empty and without height.
        """
        widget = self._parts.get(part)
        if widget is None:
            if not value:
                return 0
            widget = ipywidgets.HTML(
                value=redact_markup(value),
                layout=self._plain,
                style=self._style,
                _dom_classes=(f"cortex-{part}",),
            )
            return 1 + self._attach(part, widget)
        return set_traits(widget, value=value)

    def _attach(self, part: str, widget: ipywidgets.Widget) -> int:
        """Put a newly made part in its place in the root box; one message (in the final
        frame, one for all the parts it makes: ``finish`` places them together)."""
        self._parts[part] = widget
        if self._finishing:
            self._placed = False
            return 0
        self.widget.children = tuple(self._parts[p] for p in _ORDER if p in self._parts)
        return 1

    # ---- the graph ------------------------------------------------------------------

    def _draw_graph(self, now: float) -> int:
        """Send the pieces of the picture that changed (``live_graph.patch``); the first
        time, make the graph component with the whole picture."""
        self._ui_drawn["graph"] = self._ui
        picture = arrange(self.state, self._expanded)
        pieces = self._graph_pieces(picture)
        self._graph_size = (picture.width, picture.height)
        if self._graph is None:
            if not picture.items:
                return 0
            self._graph_sent = dict(pieces)
            code, made = graph_code()  # the module's code: once per kernel session
            self._graph = LiveGraph(
                code=code,
                full=self._graph_full,
                value=self._graph_full(),
                layout=self._plain,
                _dom_classes=("cortex-graph",),
            )
            self._graph.on_msg(self._on_graph_message)
            return 1 + made + self._attach("graph", self._graph)
        head = frame("patch", *self._graph_size, self._since_start(now))
        value, self._graph_behind = patch(self._graph_sent, pieces, head)
        if not value:
            return 0
        self._graph.value = value
        return 1

    def _graph_pieces(self, picture: Picture) -> dict[str, str]:
        """The live picture's pieces: boxes before edges (when a patch must be cut, a
        box's new status goes first). Durations are left to the page's clock."""
        drawn = draw(self.state, picture, None, live=True, selected=self._selected)
        pieces = {"defs": ARROW_DEFS.replace("<defs>", '<defs data-key="defs">', 1)}
        pieces.update((k, redact_markup(v)) for k, v in drawn.items() if not k.startswith("e:"))
        pieces.update((k, v) for k, v in drawn.items() if k.startswith("e:"))
        return pieces

    def _graph_full(self) -> str:
        """Everything the front end has been sent, as one frame (``get_state``)."""
        head = frame("full", *self._graph_size, self._since_start(self._clock()))
        return head + "".join(self._graph_sent.values())

    def _since_start(self, now: float) -> float:
        return now - (self.state.started if self.state.started is not None else now)

    def _on_graph_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A click in the view (``live_graph.js``): select, close, expand or fold."""
        if not isinstance(content, Mapping):
            return
        act, target = content.get("act"), str(content.get("id") or "")
        if act == "select" and target in self.state.nodes:
            self.select(None if target == self._selected else target)
        elif act == "close":
            self.select(None)
        elif act == "toggle" and target.startswith("g:"):
            self._expanded ^= {target}
            self._ui += 1
            self._draw_now()

    def select(self, node_id: str | None) -> None:
        """Show ``node_id``'s inspector (None: close it), at once: a person chose it."""
        self._selected = node_id if node_id in self.state.nodes else None
        self._chosen = True
        self._ui += 1
        self._draw_now()

    @property
    def selected(self) -> str | None:
        """The action whose inspector is open."""
        return self._selected

    def _draw_now(self) -> None:
        """What a click changed, drawn now (clicks also come when no redraw follows:
        after the run). Charged to the budget, which may go below zero for it."""
        now = self._clock()
        self._budget.refill(now)
        try:
            for part in ("graph", "inspector"):
                if part == "graph" or self._ui_drawn.get(part) != self._inspector_key():
                    self._spend(self._draw(part, now, math.inf))
        except Exception as exc:  # a click must never raise into the kernel's handler
            self.state.errors.append(f"the view could not show that: {exc!r}")

    def _auto_open(self) -> None:
        """A failed action's inspector opens by itself, unless the person chose."""
        if self._chosen:
            return
        for node_id in self.state.order:
            node = self.state.nodes[node_id]
            if node.parent is None and node.status == "failed":
                if self._selected != node_id:
                    self._selected = node_id
                    self._ui += 1
                return

    # ---- the inspector ----------------------------------------------------------------

    def _inspector_key(self) -> tuple[Any, ...]:
        node = self.state.nodes.get(self._selected) if self._selected is not None else None
        return (self._selected, node.version if node is not None else -1)

    def _draw_inspector(self, now: float) -> int:
        self._ui_drawn["inspector"] = self._inspector_key()
        value = ""
        if self._selected is not None:
            try:
                value = inspector_html(
                    self.state, self._selected, now, record=self._read_record(), cache=self._rich
                )
            except Exception as exc:  # the user's data must not break the view
                value = pre(f"the inspector could not show {self._selected}: {exc!r}")
        if self._inspector is None:
            if not value:
                return 0
            self._inspector = ipywidgets.HTML(
                value=redact_markup(value),
                layout=self._plain,
                style=self._style,
                _dom_classes=("cortex-inspector",),
            )
            return 1 + self._attach("inspector", self._inspector)
        return set_traits(self._inspector, value=value)

    def _read_record(self) -> Any:
        record = self._record
        if callable(record) and not hasattr(record, "actions"):
            try:
                return record()
            except Exception:
                return None
        return record

    # ---- the parts ----------------------------------------------------------------

    def _draw_thought(self, now: float, allowance: float) -> int:
        if not self._has_content("thought"):
            return 0
        text = secrets.redact(self.state.thought.lstrip("\n"))
        if self.state.stream_open:  # its end may be the first characters of a secret
            text = secrets.hide_edges(text, start=False)
        sent = 0
        if self._thought is None:
            self._thought = Pieces(
                _THOUGHT_STYLE, style=self._style, layout=self._plain, freeze_chars=FREEZE_CHARS
            )
            # column-reverse: a scroll container that starts, and stays, at its bottom.
            box = ipywidgets.Box(
                [self._thought.box],
                layout=ipywidgets.Layout(
                    max_height=f"{_THOUGHT_LINES * _THOUGHT_LINE_PX + 2 * 4 + 2}px",
                    overflow="hidden auto",
                    flex_flow="column-reverse",
                    border=f"1px solid {BORDER_VAR}",
                    padding="4px 10px",
                    margin="2px 0 6px",
                ),
                _dom_classes=("cortex-thought",),
            )
            sent = 4 + self._attach("thought", box)
        # Up to the last line break the text is settled (it only grows); a piece ends at a
        # line break so splitting the text between pieces changes nothing on screen.
        cut = text.rfind("\n") + 1
        if len(text) - cut > _LONG_LINE:
            cut = text.rfind(" ", cut, len(text) - FREEZE_CHARS) + 1 or cut
        room = _NO_FREEZE if self._finishing else allowance - sent
        if self._finishing and "thought" in self._parts:
            # Finished, it is read from its first line: pinned to its newest line (which
            # the live stream wanted), a thought taller than the box hid its beginning.
            layout = self._parts["thought"].layout
            if layout.flex_flow != "column":
                layout.flex_flow = "column"
                sent += 1
        return sent + self._thought.show(esc(text[:cut]), esc(text[cut:]), now, room)

    def _draw_response(self, now: float, allowance: float) -> int:
        if not self._has_content("response"):
            return 0
        body = self.state.body  # (redacted as it is rendered: ``IncrementalMarkdown``)
        if self.state.stream_open:  # its end may be the first characters of a secret
            body = secrets.hide_edges(body, start=False)
        html = self._markdown.render(body, self._read_values())
        stable = _cached_html(self._markdown)
        rest = html[len(stable) :]
        sent = 0
        if self._response is None:
            # HTMLMath: the front end's MathJax typesets the formulas markdown.py keeps
            # (each other $ is marked for MathJax to ignore). Its own style: one message.
            self._response = Pieces(
                # A long URL or hash wraps rather than widening the cell.
                "line-height:var(--jp-content-line-height,1.6);overflow-wrap:anywhere",
                style=self._math_style,
                layout=self._plain,
                classes=("jp-RenderedHTMLCommon",),  # Lab's markdown look, in either theme
                box_class="cortex-response",
                widget=ipywidgets.HTMLMath,
                freeze_chars=FREEZE_CHARS,
            )
            sent = 2 + self._attach("response", self._response.box)
        room = _NO_FREEZE if self._finishing else allowance - sent
        return sent + self._response.show(stable, rest, now, room)

    def _draw_output(self) -> int:
        """The typed answer: the object as it fills in, then as checked (``typed.py``).
        Parsed here, at redraw time, never per delta."""
        typed = self.state.typed
        if typed is None or not typed_shows(typed):
            return 0
        value = typed_html(typed, live=self.state.stream_open)
        self._output_size = len(value)
        return self._show_html("output", value)

    def _read_values(self) -> Mapping[str, Any]:
        try:
            return self._values()
        except Exception:  # a broken namespace must not stop the answer from showing
            return {}


def _cached_html(markdown: IncrementalMarkdown) -> str:
    """The HTML of the blocks ``markdown`` has cached: settled until its next restart.

    Every render returns it as a prefix, which is all the pieces rely on.
    """
    return markdown.cached_html
