"""The run over time: what the model was writing while which action ran.

Time goes across. The top row is the model's stream, in stretches of thought, action
tags, response and outside text; below it one row per action, a thin grey bar while it
waited (from when it appeared to when it started) and a bar in its status colour while
it ran. An action bar that starts under a thought stretch is the point of the whole
protocol: the tool ran while the model was still writing. Backs ``_cortex.timeline()``.

On each bar, marks say when the tool wrote something (a dark tick for stdout, a
vermillion one for stderr, log records and warnings) and when it reported progress (a
white notch). They come from the run record's ``ActionOutput`` events, which the
capture sends at most ``FLUSH_HZ`` times a second: a mark stands for everything written
since the one before it (its tooltip shows the newest lines), so its time is exact to
about 50 ms. A view state alone keeps no such history: drawn from one, bars have no marks.

The stream row's colours are its own: the response is sky blue, never the green of a
``done`` action below it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cortex_jupyter.runtime.core.trust import secrets

from .nodes import NodeView
from .state import ViewState, from_run
from .theme import (
    EDGE,
    FONT,
    MUTED,
    STREAM_COLOURS,
    TEXT,
    esc,
    fmt_duration,
    shorten,
    style_for,
)

if TYPE_CHECKING:
    from cortex_jupyter.runtime.core.record.run import Run

LABEL_W = 170
ROW_H, BAR_H = 20, 12
TOP, AXIS_H, LEGEND_H = 8, 22, 20
#: The stream row's colours (the response's is one no action status uses).
STREAM: dict[str, str] = STREAM_COLOURS
#: Mark colours: what a tool printed, what it wrote to stderr / logged / warned, progress.
MARK_COLOURS = {"output": TEXT, "stderr": "#a84a00", "progress": "#ffffff"}
#: Marks closer than this many pixels on one row are drawn as one.
_MARK_PX = 3.0
#: Lines of a mark's text its tooltip shows.
_TIP_LINES = 6
_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)


def timeline_svg(source: ViewState | Run, now: float | None = None, width: int = 760) -> str:
    """The timeline of a run record or a view state, as SVG text."""
    state = source if isinstance(source, ViewState) else from_run(source)
    marks = {} if isinstance(source, ViewState) else _marks(source.events)
    t0 = state.started if state.started is not None else 0.0
    t1 = _end_time(state, now)
    span = max(t1 - t0, 1e-3)
    plot_w = max(width - LABEL_W - 16, 100)
    rows = _rows(state)
    legend_y = TOP + ROW_H * (len(rows) + 1) + AXIS_H
    legend, legend_h = _legend(legend_y, width, _shown(state, rows, marks))
    height = legend_y + legend_h

    def x(t: float) -> float:
        return LABEL_W + (min(max(t, t0), t1) - t0) / span * plot_w

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="run timeline" '
        f'style="font-family:{esc(FONT)};max-width:none">',
    ]
    parts.extend(_axis(t0, span, plot_w, TOP + ROW_H * (len(rows) + 1)))
    parts.append(_label(TOP, "model stream", bold=True))
    for seg in state.segments:
        colour = STREAM.get(seg.kind, STREAM["text"])
        left, right = x(seg.start), x(max(seg.end, seg.start))
        what = f"{seg.kind} {seg.id}" if seg.id else seg.kind
        tip = f"{what}: {seg.start - t0:.2f} to {seg.end - t0:.2f} s"
        parts.append(_bar(left, right, TOP + (ROW_H - BAR_H) / 2, BAR_H, colour, tip))
    for row, (node, depth) in enumerate(rows, start=1):
        parts.extend(_action_row(node, depth, TOP + row * ROW_H, x, t1))
        parts.extend(_mark_row(marks.get(node.id, ()), TOP + row * ROW_H, x, t0))
    parts.append(legend)
    parts.append("</svg>")
    return "".join(parts)


def _end_time(state: ViewState, now: float | None) -> float:
    times = [state.clock or 0.0, state.ended or 0.0, now or 0.0]
    times.extend(n.finished for n in state.nodes.values() if n.finished is not None)
    if now is None and any(n.status == "running" for n in state.nodes.values()):
        times.append(state.clock or 0.0)
    return max(times)


def _rows(state: ViewState) -> list[tuple[NodeView, int]]:
    """Top-level actions in order, each followed by its children (indented)."""
    out: list[tuple[NodeView, int]] = []

    def visit(node: NodeView, depth: int) -> None:
        out.append((node, depth))
        for child in node.children:
            if child in state.nodes and depth < 4:
                visit(state.nodes[child], depth + 1)

    for node in state.top_level():
        visit(node, 0)
    return out


def _action_row(
    node: NodeView, depth: int, y: float, x: Callable[[float], float], t1: float
) -> list[str]:
    style = style_for(node.shown_status)
    label = "  " * depth + shorten(f"{node.label} ({node.id})", 28 - 2 * depth)
    parts = [_label(y, label)]
    waited_from = node.seen if node.seen is not None else node.started
    if waited_from is not None:
        until = node.started if node.started is not None else (node.finished or t1)
        tip = f"{node.label}: waiting {fmt_duration(until - waited_from)}"
        parts.append(_bar(x(waited_from), x(until), y + ROW_H / 2 - 1.5, 3, EDGE, tip))
    if node.started is not None:
        end = node.finished if node.finished is not None else t1
        tip = f"{node.label} ({node.id}): {style.label} {fmt_duration(end - node.started)}"
        if node.error:
            tip += f"\n{shorten(node.error, 400)}"
        parts.append(
            _bar(x(node.started), x(end), y + (ROW_H - BAR_H) / 2, BAR_H, style.stroke, tip)
        )
    return parts


@dataclass(frozen=True)
class Mark:
    """Something an action reported at ``time``: ``kind`` is "output", "stderr" or
    "progress"; ``text`` what it wrote (or the progress, as text)."""

    time: float
    kind: str
    text: str


def _marks(events: Iterable[Any]) -> dict[str, list[Mark]]:
    """The marks of every action, by node id (a nested agent's as ``parent/id``), from a
    run record's events."""
    marks: dict[str, list[Mark]] = {}
    for event in events:
        prefix = ""
        while getattr(event, "kind", "") == "nested":
            prefix += f"{event.parent}/"
            event = event.event
        if getattr(event, "kind", "") != "action_output":
            continue
        found = marks.setdefault(prefix + event.id, [])
        if event.stdout:
            found.append(Mark(event.time, "output", event.stdout))
        wrote = "".join(f"{line}\n" for line in event.logs) + event.stderr
        if wrote:
            found.append(Mark(event.time, "stderr", wrote))
        if event.progress is not None:
            found.append(Mark(event.time, "progress", str(event.progress)))
    return marks


def _mark_row(marks: Iterable[Mark], y: float, x: Callable[[float], float], t0: float) -> list[str]:
    """The marks on one action's bar; marks of a kind closer than ``_MARK_PX`` merge
    (their tooltip keeps the newest text)."""
    merged: dict[tuple[str, int], list[Mark]] = {}
    for mark in marks:
        merged.setdefault((mark.kind, round(x(mark.time) / _MARK_PX)), []).append(mark)
    parts = []
    top = y + (ROW_H - BAR_H) / 2
    for (kind, _), group in merged.items():
        px, last = x(group[-1].time), group[-1]
        what = {"output": "printed", "stderr": "stderr / log", "progress": "progress"}[kind]
        lines = "".join(m.text for m in group).rstrip("\n").split("\n")[-_TIP_LINES:]
        tip = f"{what} at {last.time - t0:.2f} s:\n" + secrets.tail("\n".join(lines), 600)
        if kind == "progress":
            tip = f"progress {shorten(last.text, 200)} at {last.time - t0:.2f} s"
            parts.append(
                f'<rect class="cxj-mark" data-kind="progress" x="{px - 1:.1f}" '
                f'y="{top + 2:.1f}" width="2" height="{BAR_H - 4}" '
                f'fill="{MARK_COLOURS[kind]}" fill-opacity="0.9"><title>{esc(tip)}</title></rect>'
            )
            continue
        # A tick from above the bar into it: "output" above, stderr/logs below.
        y0, y1 = (
            (top - 4, top + BAR_H / 2) if kind == "output" else (top + BAR_H / 2, top + BAR_H + 4)
        )
        parts.append(
            f'<rect class="cxj-mark" data-kind="{kind}" x="{px - 1:.1f}" y="{y0:.1f}" '
            f'width="2" height="{y1 - y0:.1f}" fill="{MARK_COLOURS[kind]}">'
            f"<title>{esc(tip)}</title></rect>"
        )
    return parts


def _bar(left: float, right: float, y: float, h: float, colour: str, tip: str) -> str:
    width = max(right - left, 1.5)
    return (
        f'<rect x="{left:.1f}" y="{y:.1f}" width="{width:.1f}" height="{h}" rx="2" '
        f'fill="{colour}"><title>{esc(tip)}</title></rect>'
    )


def _label(y: float, text: str, bold: bool = False) -> str:
    weight = ' font-weight="600"' if bold else ""
    return (
        f'<text x="4" y="{y + ROW_H / 2 + 4:.1f}" font-size="11" fill="{TEXT}"{weight} '
        f'xml:space="preserve">{esc(text)}</text>'
    )


def _axis(t0: float, span: float, plot_w: float, y: float) -> list[str]:
    step = next((s for s in _TICKS if span / s <= 8), _TICKS[-1] * math.ceil(span / 8 / 3600))
    parts = [
        f'<line x1="{LABEL_W}" y1="{y}" x2="{LABEL_W + plot_w:.1f}" y2="{y}" stroke="{EDGE}"/>'
    ]
    tick = 0.0
    while tick <= span + 1e-9:
        px = LABEL_W + tick / span * plot_w
        parts.append(
            f'<line x1="{px:.1f}" y1="{TOP}" x2="{px:.1f}" y2="{y + 4}" stroke="{EDGE}" '
            f'stroke-opacity="0.35"/>'
            f'<text x="{px:.1f}" y="{y + 15}" font-size="10" fill="{MUTED}" '
            f'text-anchor="middle">{tick:g} s</text>'
        )
        tick = round(tick + step, 6)
    return parts


#: The statuses an action's bar is drawn in (a bar is drawn once it started).
_BAR_STATUSES = ("running", "done", "failed", "skipped", "cancelled")
#: The legend's name for each kind of mark.
_MARK_NAMES = {"output": "printed", "stderr": "stderr / log", "progress": "progress"}


def _shown(
    state: ViewState, rows: list[tuple[NodeView, int]], marks: dict[str, list[Mark]]
) -> set[str]:
    """The names of what the picture draws: the stream's kinds, the statuses of the bars
    drawn, the kinds of marks on them (the legend lists these only)."""
    shown = {seg.kind if seg.kind in STREAM else "text" for seg in state.segments}
    for node, _ in rows:
        if node.started is not None:
            shown.add(node.shown_status)
        shown.update(_MARK_NAMES[m.kind] for m in marks.get(node.id, ()))
    return shown


def _legend(y: float, width: int, shown: set[str]) -> tuple[str, int]:
    """The colour key of what the picture shows (``shown``), wrapped to ``width``;
    returns the SVG and its height."""
    parts, px, line = [], 4, 0
    entries = list(STREAM.items())
    entries += [(s, style_for(s).stroke) for s in _BAR_STATUSES]
    entries += [(name, MARK_COLOURS[kind]) for kind, name in _MARK_NAMES.items()]
    for name, colour in [(n, c) for n, c in entries if n in shown]:
        entry_w = 14 + 7 * len(name) + 12
        if px + entry_w > width and px > 4:
            px, line = 4, line + 1
        top = y + 4 + line * LEGEND_H
        # Marks are thin ticks on a bar: their key is a tick on a grey bar.
        swatch = (
            f'<rect x="{px}" y="{top}" width="10" height="10" rx="2" fill="{colour}"/>'
            if name in STREAM or name in _BAR_STATUSES
            else f'<rect x="{px}" y="{top + 2}" width="10" height="6" rx="1" fill="{EDGE}"/>'
            f'<rect x="{px + 4}" y="{top}" width="2" height="10" fill="{colour}"/>'
        )
        parts.append(
            f'{swatch}<text x="{px + 14}" y="{top + 9}" font-size="10" fill="{MUTED}">'
            f"{esc(name)}</text>"
        )
        px += entry_w
    return "".join(parts), (line + 1) * LEGEND_H
