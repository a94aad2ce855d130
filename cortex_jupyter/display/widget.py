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
  durations in the graph are redrawn at most ``slow_hz`` times a second; only a new
  state word in the header goes out at once.
- **A message budget.** A token bucket holds each view to ``MAX_MESSAGES`` messages a
  second on average; a part that does not fit waits for the next redraw (text parts
  first: they are what the eye follows).
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
from .static import run_metadata, static_html, static_text
from .svg import details_html, graph_svg
from .text import header_parts
from .theme import FONT, esc, style_for

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: Messages a second one view sends on average (the server's cap is 1,000 for everyone).
#: With the burst and the odd overdraw (a freeze costs three) no second exceeds 30.
MAX_MESSAGES = 22.0
#: Messages a view may send at once after a quiet spell (a redraw touching every part).
BURST = 6.0
#: Characters of settled HTML the live tail may hold before they move into a piece.
FREEZE_CHARS = 1024
#: Shortest time between two freezes of one text: each costs three messages.
FREEZE_INTERVAL = 0.5

_PHASE_STATUS = {
    "streaming": "running",
    "running actions": "running",
    "done": "done",
    "failed": "failed",
    "interrupted": "cancelled",
}
# JupyterLab's theme variables, then VS Code's, then the light theme's colours.
_FG = "var(--jp-ui-font-color1,var(--vscode-foreground,#1f2328))"
_MUTED = "var(--jp-ui-font-color2,var(--vscode-descriptionForeground,#59636e))"
_BORDER = "var(--jp-border-color2,#d0d7de)"
#: A thought line longer than this is cut at a space (a visible line break), so that one
#: endless paragraph is not re-sent whole on every redraw.
_LONG_LINE = 8 * FREEZE_CHARS
_THOUGHT_STYLE = (
    "white-space:pre-wrap;word-break:break-word;font-style:italic;font-size:12.5px;"
    f"line-height:1.45;color:{_MUTED}"
)


class WidgetView:
    """The widgets of one run, redrawn from its reduced state (see the module docstring).

    ``values()`` gives what ``$name`` in the response shows (run outputs, then the
    notebook); it is called only when the response is redrawn. ``clock`` stamps events
    and drives the elapsed time; the run's own events carry ``time.monotonic()`` times.
    """

    def __init__(
        self,
        *,
        model: str = "",
        values: Callable[[], Mapping[str, Any]] = dict,
        clock: Callable[[], float] = time.monotonic,
        slow_hz: float = 4.0,
    ) -> None:
        self._values = values
        self._clock = clock
        self._slow = 1.0 / slow_hz
        now = clock()
        self.state = ViewState(model=model, started=now)
        self._markdown = IncrementalMarkdown()
        self._budget = _Budget(MAX_MESSAGES, BURST)
        self._seen: dict[str, int] = dict.fromkeys(PARTS, -1)
        self._drawn_at: dict[str, float] = {}
        self._phase = ""
        self._counts: dict[str, int] = {}

        # One style and one plain layout shared by the parts that need nothing of their
        # own: every widget, layout and style is a comm_open when the view is created.
        style = HTMLStyle()
        plain = ipywidgets.Layout(margin="0")
        self._header = _html("cortex-header", style=style, layout=plain)
        self._thought = _Pieces(_THOUGHT_STYLE, style=style, layout=plain)
        # column-reverse: a scroll container that starts, and stays, at its bottom.
        self._thought_box = _box(
            [self._thought.box],
            "cortex-thought",
            display="none",
            max_height="12em",
            overflow="hidden auto",
            flex_flow="column-reverse",
            border=f"1px solid {_BORDER}",
            padding="4px 10px",
            margin="2px 0 6px",
        )
        self._graph = _html("cortex-graph", style=style, display="none", margin="4px 0")
        self._details = _html("cortex-details", style=style, display="none", margin="0 0 4px")
        self._response = _Pieces(
            "line-height:var(--jp-content-line-height,1.6)",
            style=style,
            layout=plain,
            classes=("jp-RenderedHTMLCommon",),  # Lab's markdown look, in either theme
            box_class="cortex-response",
            hidden=True,
        )
        self.widget = _box(
            [self._header, self._thought_box, self._graph, self._details, self._response.box],
            "cortex-view",
            vertical=True,
            border_left=f"3px solid {_BORDER}",
            padding="2px 0 2px 10px",
            margin="2px 0",
        )
        self._draw("header", now)

    # ---- the contract -------------------------------------------------------------

    def apply(self, events: Sequence[Any]) -> None:
        """Reduce a batch of parser/runtime events, stamped with the clock's time."""
        now = self._clock()
        for event in events:
            self.state.apply(event, now)

    def redraw(self) -> None:
        """Redraw the parts that moved (and, at ``slow_hz``, the ones that tick)."""
        now = self._clock()
        self._budget.refill(now)
        for part, urgent in self._due(now):
            if not urgent and self._budget.tokens < 1:
                break  # the rest keep their changes for the next redraw
            self._budget.spend(self._draw(part, now))

    def stream_closed(self) -> None:
        """The model's stream ended: the state word moves on to "running actions"."""
        self.state.close_stream(self._clock())

    def finish(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Draw the final frame in full; return ``(data, metadata)`` for a display update.

        ``data`` is the widget's own bundle plus a static ``text/html`` and ``text/plain``
        copy (what GitHub, nbviewer and VS Code show without widget state); ``metadata``
        is ``{"cortex": run_metadata(...)}``.
        """
        now = self._clock()
        for part in PARTS:
            self._draw(part, now)
        data: dict[str, Any] = {}
        bundle = self.widget._repr_mimebundle_()
        if bundle and WIDGET_MIME in bundle:
            data[WIDGET_MIME] = bundle[WIDGET_MIME]
        values = self._read_values()
        data["text/html"] = static_html(self.state, values, now)
        data["text/plain"] = static_text(self.state, now, values)
        return data, {"cortex": run_metadata(self.state)}

    # ---- scheduling ---------------------------------------------------------------

    def _due(self, now: float) -> list[tuple[str, bool]]:
        """The parts to draw now, most wanted first, and whether each bypasses the budget."""
        state = self.state
        changed = state.changed_since(self._seen)
        due: list[tuple[str, bool]] = []
        # A new state word or new node counts go out at once (the graph shows them too,
        # and a header that disagrees with it reads as a bug); clocks wait for slow_hz.
        fresh = state.phase != self._phase or state.counts() != self._counts
        if fresh:
            due.append(("header", True))
        # A node changing status is rare and easy to miss (a fast tool is running for a
        # fraction of a second): it goes before the text. A running duration ticking on
        # goes after it.
        if "graph" in changed:
            due.append(("graph", False))
        due += [(part, False) for part in ("thought", "response") if part in changed]
        running = any(node.status == "running" for node in state.nodes.values())
        if "graph" not in changed and running and self._slow_due("graph", now):
            due.append(("graph", False))
        if "details" in changed:
            due.append(("details", False))
        ticks = "header" in changed or state.ticking
        if not fresh and ticks and self._slow_due("header", now):
            due.append(("header", False))
        return due

    def _slow_due(self, part: str, now: float) -> bool:
        return now - self._drawn_at.get(part, -math.inf) >= self._slow - 1e-9

    def _draw(self, part: str, now: float) -> int:
        """Draw one part; returns the number of messages that cost."""
        self._seen[part] = self.state.versions[part]
        self._drawn_at[part] = now
        if part == "header":
            self._phase = self.state.phase
            self._counts = self.state.counts()
            return _set(self._header, value=_header_html(self.state, now))
        if part == "thought":
            return self._draw_thought(now)
        if part == "graph":
            svg = graph_svg(self.state, now)
            value = f'<div style="overflow-x:auto;line-height:0">{svg}</div>' if svg else ""
            return _show(self._graph, value)
        if part == "details":
            return _show(self._details, _callout(details_html(self.state)))
        return self._draw_response(now)

    # ---- the parts ----------------------------------------------------------------

    def _draw_thought(self, now: float) -> int:
        text = self.state.thought.lstrip("\n")
        if not text:
            return 0
        # Up to the last line break the text is settled (it only grows); a piece ends at a
        # line break so splitting the text between pieces changes nothing on screen.
        cut = text.rfind("\n") + 1
        if len(text) - cut > _LONG_LINE:
            cut = text.rfind(" ", cut, len(text) - FREEZE_CHARS) + 1 or cut
        sent = self._thought.show(esc(text[:cut]), esc(text[cut:]), now)
        return sent + _set(self._thought_box.layout, display=None)

    def _draw_response(self, now: float) -> int:
        body = self.state.body
        if not body.strip():
            return 0
        html = self._markdown.render(body, self._read_values())
        stable = _cached_html(self._markdown)
        rest = html[len(stable) :]
        sent = self._response.show(stable, rest, now)
        return sent + _set(self._response.box.layout, display=None)

    def _read_values(self) -> Mapping[str, Any]:
        try:
            return self._values()
        except Exception:  # a broken namespace must not stop the answer from showing
            return {}


def _header_html(state: ViewState, now: float | None = None) -> str:
    """The live header: the state word as a badge (``data-phase``), then model, turn,
    elapsed, tokens, tokens/s and action counts, in the theme's own text colours."""
    style = style_for(_PHASE_STATUS.get(state.phase, "pending"))
    model, *rest = header_parts(state, now)
    del rest[1 if state.turn > 1 else 0]  # the state word, drawn as the badge
    badge = (
        f'<span data-phase="{esc(state.phase)}" style="background:{style.fill};'
        f"color:{style.ink};border:1px solid {style.stroke};border-radius:9px;"
        f'padding:0 7px;font-weight:600;white-space:nowrap">{style.icon} {esc(state.phase)}</span>'
    )
    fields = " · ".join(esc(part) for part in rest)
    return (
        f'<div style="font-family:{esc(FONT)};font-size:12.5px;line-height:1.7;color:{_FG};'
        f'display:flex;flex-wrap:wrap;align-items:center;gap:0 8px">{badge}'
        f'<b>{esc(model)}</b><span style="color:{_MUTED}">{fields}</span></div>'
    )


def _callout(details: str) -> str:
    """The details list on a light fill of the "failed" colour: its dark text then reads
    in a dark theme too."""
    if not details:
        return ""
    style = style_for("failed")
    return (
        f'<div style="background:{style.fill};border-left:3px solid {style.stroke};'
        f'border-radius:4px;padding:2px 10px;line-height:1.45">{details}</div>'
    )


def _cached_html(markdown: IncrementalMarkdown) -> str:
    """The HTML of the blocks ``markdown`` has cached: settled until its next restart.

    Every render returns it as a prefix, which is all the pieces rely on.
    """
    return markdown.cached_html


class _Pieces:
    """A growing HTML text shown as settled pieces, each sent once, plus a live tail.

    ``show(stable, rest, now)`` shows ``stable + rest``, where ``stable`` only grows
    (when it does not start with what the pieces hold, the text was re-rendered and the
    pieces are replaced). Settled HTML moves out of the tail in pieces of at least
    ``FREEZE_CHARS`` and at most every ``FREEZE_INTERVAL`` seconds: a freeze costs three
    messages, re-sending the tail one.
    """

    def __init__(
        self,
        style_css: str,
        classes: Sequence[str] = (),
        box_class: str | None = None,
        hidden: bool = False,
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
        self._frozen = ""
        self._frozen_at = -math.inf
        self.box = ipywidgets.VBox(
            [self._tail],
            layout=ipywidgets.Layout(flex="0 0 auto", display="none" if hidden else None),
            _dom_classes=(box_class,) if box_class else (),
        )

    @property
    def pieces(self) -> int:
        """How many settled pieces are shown (the tail not counted)."""
        return len(self._pieces)

    def show(self, stable: str, rest: str, now: float) -> int:
        """Show ``stable + rest``; returns the number of messages that cost."""
        stale: list[ipywidgets.HTML] = []
        if not stable.startswith(self._frozen):
            stale, self._pieces, self._frozen = self._pieces, [], ""
        sent = 0
        settled = len(stable) - len(self._frozen)
        if settled >= FREEZE_CHARS and now - self._frozen_at >= FREEZE_INTERVAL:
            # The tail becomes a piece; a new tail takes the rest. Children first: for a
            # moment the rest shows twice rather than not at all (no jump in the page).
            piece, self._tail = self._tail, self._piece(self._wrap(rest))
            self._pieces.append(piece)
            self.box.children = (*self._pieces, self._tail)
            sent += 2 + _set(piece, value=self._wrap(stable[len(self._frozen) :]))
            self._frozen, self._frozen_at = stable, now
        else:
            if stale:
                self.box.children = (self._tail,)
                sent += 1
            sent += _set(self._tail, value=self._wrap(stable[len(self._frozen) :] + rest))
        for piece in stale:
            piece.close()
        return sent + len(stale)

    def _wrap(self, inner: str) -> str:
        return f'<div style="{self._style}">{inner}</div>' if inner else ""

    def _piece(self, value: str) -> ipywidgets.HTML:
        return ipywidgets.HTML(
            value=value, layout=self._layout, style=self._html_style, _dom_classes=self._classes
        )


class _Budget:
    """A token bucket: ``rate`` messages a second on average, ``burst`` at most at once.

    Spending may overdraw it (a freeze costs three messages); later redraws then wait.
    """

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst, self.tokens = rate, burst, burst
        self._at: float | None = None

    def refill(self, now: float) -> None:
        if self._at is not None:
            self.tokens = min(self.burst, self.tokens + max(now - self._at, 0.0) * self.rate)
        self._at = now

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


def _show(widget: ipywidgets.HTML, value: str) -> int:
    """Set an HTML part's value, hiding the part while it is empty."""
    if value:
        return _set(widget, value=value) + _set(widget.layout, display=None)
    return _set(widget.layout, display="none") + _set(widget, value="")


# CSS classes are given to constructors: add_class() after creation is one more message.
def _html(
    css_class: str,
    *,
    style: HTMLStyle | None = None,
    layout: ipywidgets.Layout | None = None,
    **layout_traits: str,
) -> ipywidgets.HTML:
    return ipywidgets.HTML(
        layout=layout if layout is not None else ipywidgets.Layout(**layout_traits),
        style=style if style is not None else HTMLStyle(),
        _dom_classes=(css_class,),
    )


def _box(
    children: Sequence[ipywidgets.Widget], css_class: str, vertical: bool = False, **layout: str
) -> ipywidgets.Box:
    cls = ipywidgets.VBox if vertical else ipywidgets.Box
    return cls(list(children), layout=ipywidgets.Layout(**layout), _dom_classes=(css_class,))
