"""The live view of one cell's run: ipywidgets parts redrawn from a ``ViewState``.

The only module that imports ipywidgets (ARCHITECTURE.md, "Layers"). The session feeds
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
  of MB); with pieces it grows with the length.

The thought box stays pinned to its newest line with CSS alone (a ``column-reverse``
scroll container), and keeps a reader's scroll position when they scroll up to read.
Colours come from JupyterLab's CSS variables with light-theme fallbacks, or sit on
their own light fill (graph boxes, the details callout), so both themes read.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets
from ipywidgets.widgets.widget_string import HTMLStyle  # not re-exported at the top

from .markdown import IncrementalMarkdown
from .state import PARTS, ViewState
from .static import (
    WIDGET_MIME,
    callout,
    header_html,
    saved_bundle,
)
from .svg import details_html, graph_svg
from .theme import BORDER_VAR, MUTED_VAR, esc

#: Messages a second one view sends (the server's cap is 1,000 for everyone). With the
#: burst, no second of a streaming run holds more than 26 (issue 6, section 8: 30).
MAX_MESSAGES = 20.0
#: Messages a view may send at once after a quiet spell: enough to create the thought box.
BURST = 6.0
#: What creating and showing a view costs: the shared style and layout, the header, the
#: root box and its layout (five comm_open messages), and the display_data.
CREATION = 6
#: What creating each lazily made part costs, its place in the root box included.
_PART_COST = {"thought": 5, "graph": 2, "details": 2, "response": 3}
#: Characters of settled HTML the live tail may hold before they move into a piece.
FREEZE_CHARS = 1024
#: Shortest time between two freezes of one text: each costs three messages.
FREEZE_INTERVAL = 0.5

#: A thought line longer than this is cut at a space (a visible line break), so that one
#: endless paragraph is not re-sent whole on every redraw.
_LONG_LINE = 8 * FREEZE_CHARS
_THOUGHT_STYLE = (
    "white-space:pre-wrap;word-break:break-word;font-style:italic;font-size:12.5px;"
    f"line-height:1.45;color:{MUTED_VAR}"
)


class WidgetView:
    """The widgets of one run, redrawn from its reduced state (see the module docstring).

    ``values()`` gives what ``$name`` in the response shows (run outputs, then the
    notebook); it is called only when the response is redrawn. ``clock`` stamps events
    and drives the elapsed time; the run's own events carry ``time.monotonic()`` times.
    ``sent`` counts the messages the view has cost so far, creation and display included.
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
    ) -> None:
        # What the view's own buttons call: approve/deny an awaiting action, stop the run.
        self._decide = decide
        self._stop = stop
        self._values = values
        self._clock = clock
        self._slow = 1.0 / slow_hz
        now = clock()
        self.state = ViewState(model=model, started=now)
        self._markdown = IncrementalMarkdown()
        self._budget = _Budget(MAX_MESSAGES, BURST, now)
        self._seen: dict[str, int] = dict.fromkeys(PARTS, -1)
        self._drawn_at: dict[str, float] = {"header": now}
        self._phase = self.state.phase
        self._counts = self.state.counts()
        self._waiting: str | None = None  # the part the budget held back last time
        self.sent = CREATION

        # One style and one plain layout shared by the parts that need nothing of their
        # own: every widget, layout and style is a comm_open when it is created.
        self._style = HTMLStyle()
        self._plain = ipywidgets.Layout(margin="0", flex="0 0 auto")
        self._header = ipywidgets.HTML(
            value=header_html(self.state, now),
            layout=self._plain,
            style=self._style,
            _dom_classes=("cortex-header",),
        )
        self._seen["header"] = self.state.versions["header"]
        self.widget = ipywidgets.VBox(
            [self._header],
            layout=ipywidgets.Layout(
                border_left=f"3px solid {BORDER_VAR}", padding="2px 0 2px 10px", margin="2px 0"
            ),
            _dom_classes=("cortex-view",),
        )
        self._budget.spend(CREATION)
        # The other parts are made when first needed (``_attach``), in PARTS order.
        self._parts: dict[str, ipywidgets.Widget] = {"header": self._header}
        self._thought: _Pieces | None = None
        self._response: _Pieces | None = None

    # ---- the contract -------------------------------------------------------------

    def apply(self, events: Sequence[Any]) -> None:
        """Reduce a batch of parser/runtime events, stamped with the clock's time."""
        now = self._clock()
        for event in events:
            self.state.apply(event, now)

    def redraw(self) -> bool:
        """Redraw the parts that moved (and, at ``slow_hz``, the ones that tick), as far
        as the message budget allows; the rest keep their changes for the next redraw.

        Returns whether something is still waiting for the budget: redraw again soon.
        """
        now = self._clock()
        budget = self._budget
        budget.refill(now)
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
        behind = self._waiting is not None
        for pieces in (self._thought, self._response):
            if pieces is not None and budget.tokens >= 1:  # leftovers of a re-render
                self._spend(pieces.close_stale(int(budget.tokens)))
            behind = behind or (pieces is not None and pieces.stale > 0)
        return behind

    def _worst_case(self, part: str) -> int:
        """What drawing ``part`` may cost, checked before drawing it: creating it and
        its first value, or for a text three (moving settled text into a piece; the
        reserve also lets the tail go out in the same redraw as a re-render)."""
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
        if part == "graph":
            return bool(state.nodes)
        return bool(details_html(state))

    def _spend(self, messages: int) -> None:
        self._budget.spend(messages)
        self.sent += messages

    @property
    def settled(self) -> bool:
        """Whether every action has reached its final status."""
        return all(node.final for node in self.state.nodes.values())

    def stream_closed(self) -> None:
        """The model's stream ended: the state word moves on to "running actions"."""
        self.state.close_stream(self._clock())

    def finish(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Draw the final frame in full; return ``(data, metadata)`` for a display update.

        ``data`` is the widget's own bundle plus a static ``text/html`` and ``text/plain``
        copy (what GitHub, nbviewer and VS Code show without widget state); ``metadata``
        is ``{"cortex": run_metadata(...)}``. The final frame ignores the budget: it is
        the last thing the view sends.
        """
        now = self._clock()
        for part in PARTS:
            self.sent += self._draw(part, now, math.inf)
        for pieces in (self._thought, self._response):
            if pieces is not None:
                self.sent += pieces.close_stale(None)
        self.sent += 1  # the display update that carries this
        bundle = self.widget._repr_mimebundle_()
        widget = bundle.get(WIDGET_MIME) if bundle else None
        return saved_bundle(self.state, self._read_values(), now, widget=widget)

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
        # A node changing status is rare and easy to miss (a fast tool is running for a
        # fraction of a second): it goes before the text. A running duration ticking on
        # goes after it.
        if "graph" in changed:
            due.append("graph")
        due += [part for part in ("thought", "response") if part in changed]
        running = any(node.status == "running" for node in state.nodes.values())
        if "graph" not in changed and running and self._slow_due("graph", now):
            due.append("graph")
        if "details" in changed:
            due.append("details")
        ticks = "header" in changed or state.ticking
        if not fresh and ticks and self._slow_due("header", now):
            due.append("header")
        return due

    def _slow_due(self, part: str, now: float) -> bool:
        return now - self._drawn_at.get(part, -math.inf) >= self._slow - 1e-9

    def _draw(self, part: str, now: float, allowance: float) -> int:
        """Draw one part, creating it first if it has something to show; returns the
        number of messages that cost. ``allowance`` is what it may cost at most, but
        for a re-render's replaced pieces (see ``_Pieces.show``)."""
        self._seen[part] = self.state.versions[part]
        self._drawn_at[part] = now
        if part == "header":
            self._phase = self.state.phase
            self._counts = self.state.counts()
            return _set(self._header, value=header_html(self.state, now))
        if part == "thought":
            return self._draw_thought(now, allowance)
        if part == "graph":
            svg = graph_svg(self.state, now)
            value = f'<div style="overflow-x:auto;line-height:0;margin:4px 0">{svg}</div>'
            return self._show_html("graph", value if svg else "")
        if part == "details":
            return self._show_html("details", callout(details_html(self.state)))
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
                value=value, layout=self._plain, style=self._style, _dom_classes=(f"cortex-{part}",)
            )
            return 1 + self._attach(part, widget)
        return _set(widget, value=value)

    def _attach(self, part: str, widget: ipywidgets.Widget) -> int:
        """Put a newly made part in its place in the root box; one message."""
        self._parts[part] = widget
        self.widget.children = tuple(self._parts[p] for p in PARTS if p in self._parts)
        return 1

    # ---- the parts ----------------------------------------------------------------

    def _draw_thought(self, now: float, allowance: float) -> int:
        if not self._has_content("thought"):
            return 0
        text = self.state.thought.lstrip("\n")
        sent = 0
        if self._thought is None:
            self._thought = _Pieces(_THOUGHT_STYLE, style=self._style, layout=self._plain)
            # column-reverse: a scroll container that starts, and stays, at its bottom.
            box = ipywidgets.Box(
                [self._thought.box],
                layout=ipywidgets.Layout(
                    max_height="12em",
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
        return sent + self._thought.show(esc(text[:cut]), esc(text[cut:]), now, allowance - sent)

    def _draw_response(self, now: float, allowance: float) -> int:
        if not self._has_content("response"):
            return 0
        html = self._markdown.render(self.state.body, self._read_values())
        stable = _cached_html(self._markdown)
        rest = html[len(stable) :]
        sent = 0
        if self._response is None:
            self._response = _Pieces(
                "line-height:var(--jp-content-line-height,1.6)",
                style=self._style,
                layout=self._plain,
                classes=("jp-RenderedHTMLCommon",),  # Lab's markdown look, in either theme
                box_class="cortex-response",
            )
            sent = 2 + self._attach("response", self._response.box)
        return sent + self._response.show(stable, rest, now, allowance - sent)

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


class _Pieces:
    """A growing HTML text shown as settled pieces, each sent once, plus a live tail.

    ``show(stable, rest, now, allowance)`` shows ``stable + rest``, where ``stable`` only
    grows. Settled HTML moves out of the tail in pieces of at least ``FREEZE_CHARS`` and
    at most every ``FREEZE_INTERVAL`` seconds, when the allowance covers it: a freeze
    costs three messages, re-sending the tail one.

    When ``stable`` does not start with what the pieces hold, the text was re-rendered
    (a ``$name`` got its value): the pieces that still match stay, the rest leave the box
    in the same message, and closing them waits for ``close_stale`` (a message each).
    """

    def __init__(
        self,
        style_css: str,
        classes: Sequence[str] = (),
        box_class: str | None = None,
        *,
        style: HTMLStyle,
        layout: ipywidgets.Layout,
    ) -> None:
        self._style = style_css
        self._classes = tuple(classes)
        # Shared by every piece, so a new piece is one comm message, not three.
        self._layout = layout
        self._html_style = style
        self._tail = ipywidgets.HTML(
            layout=self._layout, style=self._html_style, _dom_classes=self._classes
        )
        self._pieces: list[ipywidgets.HTML] = []
        self._texts: list[str] = []  # what each piece holds, unwrapped
        self._frozen = ""
        self._frozen_at = -math.inf
        self._stale: list[ipywidgets.HTML] = []
        self.box = ipywidgets.VBox(
            [self._tail], layout=layout, _dom_classes=(box_class,) if box_class else ()
        )

    @property
    def pieces(self) -> int:
        """How many settled pieces are shown (the tail not counted)."""
        return len(self._pieces)

    def show(self, stable: str, rest: str, now: float, allowance: float = math.inf) -> int:
        """Show ``stable + rest``; returns the number of messages that cost."""
        sent = 0
        if not stable.startswith(self._frozen):
            sent += self._keep_matching(stable)
        settled = len(stable) - len(self._frozen)
        if (
            settled >= FREEZE_CHARS
            and now - self._frozen_at >= FREEZE_INTERVAL
            and allowance - sent >= 3
        ):
            # The tail becomes a piece; a new tail takes the rest. Children first: for a
            # moment the rest shows twice rather than not at all (no jump in the page).
            text = stable[len(self._frozen) :]
            piece, self._tail = self._tail, self._piece(self._wrap(rest))
            self._pieces.append(piece)
            self._texts.append(text)
            self.box.children = (*self._pieces, self._tail)
            sent += 2 + _set(piece, value=self._wrap(text))
            self._frozen, self._frozen_at = stable, now
            return sent
        return sent + _set(self._tail, value=self._wrap(stable[len(self._frozen) :] + rest))

    @property
    def stale(self) -> int:
        """How many replaced pieces still wait to be closed."""
        return len(self._stale)

    def close_stale(self, limit: int | None) -> int:
        """Close up to ``limit`` (``None``: all) pieces a re-render replaced; returns
        how many (a comm_close message each)."""
        count = len(self._stale) if limit is None else min(limit, len(self._stale))
        for piece in self._stale[:count]:
            piece.close()
        del self._stale[:count]
        return count

    def _keep_matching(self, stable: str) -> int:
        """Keep the pieces ``stable`` still starts with; the others leave the box."""
        kept, at = 0, 0
        for text in self._texts:
            if not stable.startswith(text, at):
                break
            kept, at = kept + 1, at + len(text)
        self._stale += self._pieces[kept:]
        del self._pieces[kept:], self._texts[kept:]
        self._frozen = stable[:at]
        self.box.children = (*self._pieces, self._tail)
        return 1

    def _wrap(self, inner: str) -> str:
        return f'<div style="{self._style}">{inner}</div>' if inner else ""

    def _piece(self, value: str) -> ipywidgets.HTML:
        return ipywidgets.HTML(
            value=value, layout=self._layout, style=self._html_style, _dom_classes=self._classes
        )


class _Budget:
    """A token bucket: ``rate`` messages a second on average, ``burst`` at most at once.

    Spending may overdraw it (creating the view, the final frame); later redraws wait.
    """

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst, self.tokens = rate, burst, burst
        self._at = now

    def refill(self, now: float) -> None:
        # Rounded: a clock's float steps must not leave 0.9999... where 1 was earned.
        gained = max(now - self._at, 0.0) * self.rate
        self.tokens = min(self.burst, round(self.tokens + gained, 6))
        self._at = max(now, self._at)

    def spend(self, messages: int) -> None:
        self.tokens -= messages


def _set(widget: ipywidgets.Widget, **traits: Any) -> int:
    """Set the traits that differ, in one message; returns how many messages (0 or 1)."""
    changes = {name: value for name, value in traits.items() if getattr(widget, name) != value}
    if not changes:
        return 0
    with widget.hold_sync():
        for name, value in changes.items():
            setattr(widget, name, value)
    return 1
