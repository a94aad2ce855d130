"""The run over time: what the model was writing while which action ran.

Time goes across. The top row is the model's stream, in stretches of thought, action
tags, response and outside text; below it one row per action, a thin grey bar while it
waited (from when it appeared to when it started) and a bar in its status colour while
it ran. An action bar that starts under a thought stretch is the point of the whole
protocol: the tool ran while the model was still writing. Backs ``_cortex.timeline()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from .state import NodeView, ViewState, from_run
from .theme import EDGE, FONT, MUTED, STREAM_COLOURS, TEXT, esc, fmt_duration, shorten, style_for

if TYPE_CHECKING:
    from cortex_jupyter.runtime.record import Run

LABEL_W = 170
ROW_H, BAR_H = 20, 12
TOP, AXIS_H, LEGEND_H = 8, 22, 20
_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)


def timeline_svg(source: ViewState | Run, now: float | None = None, width: int = 760) -> str:
    """The timeline of a run record or a view state, as SVG text."""
    state = source if isinstance(source, ViewState) else from_run(source)
    t0 = state.started if state.started is not None else 0.0
    t1 = _end_time(state, now)
    span = max(t1 - t0, 1e-3)
    plot_w = max(width - LABEL_W - 16, 100)
    rows = _rows(state)
    legend_y = TOP + ROW_H * (len(rows) + 1) + AXIS_H
    legend, legend_h = _legend(legend_y, width)
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
        colour = STREAM_COLOURS.get(seg.kind, STREAM_COLOURS["text"])
        left, right = x(seg.start), x(max(seg.end, seg.start))
        what = f"{seg.kind} {seg.id}" if seg.id else seg.kind
        tip = f"{what}: {seg.start - t0:.2f} to {seg.end - t0:.2f} s"
        parts.append(_bar(left, right, TOP + (ROW_H - BAR_H) / 2, BAR_H, colour, tip))
    for row, (node, depth) in enumerate(rows, start=1):
        parts.extend(_action_row(node, depth, TOP + row * ROW_H, x, t1))
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


def _legend(y: float, width: int) -> tuple[str, int]:
    """The colour key, wrapped to ``width``; returns the SVG and its height."""
    parts, px, line = [], 4, 0
    entries = list(STREAM_COLOURS.items())
    entries += [(s, style_for(s).stroke) for s in ("running", "done", "failed", "skipped")]
    for name, colour in entries:
        entry_w = 14 + 7 * len(name) + 12
        if px + entry_w > width and px > 4:
            px, line = 4, line + 1
        top = y + 4 + line * LEGEND_H
        parts.append(
            f'<rect x="{px}" y="{top}" width="10" height="10" rx="2" fill="{colour}"/>'
            f'<text x="{px + 14}" y="{top + 9}" font-size="10" fill="{MUTED}">{esc(name)}</text>'
        )
        px += entry_w
    return "".join(parts), (line + 1) * LEGEND_H
