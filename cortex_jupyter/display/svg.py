"""The action graph as an SVG picture, and the list of what went wrong under it.

Plain SVG built as text: it needs no JavaScript or CDN, renders in an ``ipywidgets.HTML``
in JupyterLab and Notebook 7, and survives in a saved notebook (NOTES.md, "Drawing the
action graph"). Positions come from the state's append-only layout (``ViewState``), so
boxes never jump while the model is still writing; this module only turns grid
positions into pixels.

Each top-level action is a box: status icon and name, type and mode, status word and
duration, and - for a workflow's steps or an agent's sub-run - a row of small status
chips, one per child, inside the box (children drawn as boxes of their own would push
their neighbours around as they arrive). Hovering any box or chip shows its details,
the error of a failed node included (an SVG ``<title>``). Solid edges are
``depends_on``; dashed edges are ``$name`` uses of an earlier action's output.
"""

from __future__ import annotations

from .state import NodeView, ViewState
from .theme import EDGE, FONT, MUTED, TEXT, esc, fmt_duration, shorten, style_for

BOX_W, BOX_H = 184, 74
COL_GAP, ROW_GAP = 44, 14
MARGIN = 10
CHIP_W, CHIP_H, CHIP_GAP = 12, 9, 3
_MAX_CHIPS = (BOX_W - 16) // (CHIP_W + CHIP_GAP) - 1
_NAME_CHARS = 22


def _origin(node: NodeView) -> tuple[int, int]:
    layer, slot = node.layer or 0, node.slot or 0
    return MARGIN + layer * (BOX_W + COL_GAP), MARGIN + slot * (BOX_H + ROW_GAP)


def graph_size(state: ViewState) -> tuple[int, int]:
    """Pixel width and height of the graph: it grows with the grid, never shrinks."""
    placed = [n for n in state.top_level() if n.layer is not None]
    layers = max((n.layer or 0 for n in placed), default=0) + 1
    slots = max((n.slot or 0 for n in placed), default=0) + 1
    return (
        2 * MARGIN + layers * BOX_W + (layers - 1) * COL_GAP,
        2 * MARGIN + slots * BOX_H + (slots - 1) * ROW_GAP,
    )


def graph_svg(state: ViewState, now: float | None = None) -> str:
    """The action graph of ``state``; ``now`` drives running nodes' durations.

    An empty string when there are no actions, so a view can hide the area.
    """
    nodes = [n for n in state.top_level() if n.layer is not None]
    if not nodes:
        return ""
    now = now if now is not None else state.clock
    width, height = graph_size(state)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="action graph" '
        f'style="font-family:{esc(FONT)};max-width:none">',
        "<defs>"
        '<marker id="cxj-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        f'<path d="M0,0 L10,5 L0,10 z" fill="{EDGE}"/></marker></defs>',
    ]
    parts.extend(_edge(state, src, dst, kind) for src, dst, kind in state.edges())
    parts.extend(_box(state, node, now) for node in nodes)
    parts.append("</svg>")
    return "".join(parts)


def _edge(state: ViewState, src: str, dst: str, kind: str) -> str:
    a, b = state.nodes[src], state.nodes[dst]
    if a.layer is None or b.layer is None:
        return ""
    ax, ay = _origin(a)
    bx, by = _origin(b)
    x1, y1 = ax + BOX_W, ay + BOX_H // 2
    x2, y2 = bx - 2, by + BOX_H // 2
    # Forward edges curve gently; an edge to a column at or left of its source (a
    # dependency written after its dependent) loops out so it stays visible.
    bend = max((x2 - x1) / 2, 40)
    dash = ' stroke-dasharray="5 4"' if kind == "reference" else ""
    title = f"{dst} {'uses the output of' if kind == 'reference' else 'depends on'} {src}"
    return (
        f'<path d="M{x1},{y1} C{x1 + bend:.0f},{y1} {x2 - bend:.0f},{y2} {x2},{y2}" '
        f'fill="none" stroke="{EDGE}" stroke-width="1.5"{dash} marker-end="url(#cxj-arrow)">'
        f"<title>{esc(title)}</title></path>"
    )


def _box(state: ViewState, node: NodeView, now: float | None) -> str:
    x, y = _origin(node)
    style = style_for(node.shown_status)
    dash = ' stroke-dasharray="4 3"' if node.mode == "fire_and_forget" else ""
    width = 2.5 if node.mode == "sync" else 1.5
    status = f"{style.icon} {style.label}"
    duration = fmt_duration(node.duration(now))
    if node.retry_in is not None or node.retry_error:
        status += f" (attempt {node.attempt})"
    elif duration:
        status += f" · {duration}"
    parts = [
        f'<g class="cxj-node" data-id="{esc(node.id)}" data-status="{esc(node.shown_status)}">',
        f"<title>{esc(node_tooltip(node, now))}</title>",
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{style.fill}" '
        f'stroke="{style.stroke}" stroke-width="{width}"{dash}/>',
        f'<rect x="{x}" y="{y}" width="5" height="{BOX_H}" rx="2" fill="{style.stroke}"/>',
        _text(x + 12, y + 19, shorten(node.label, _NAME_CHARS), 13, TEXT, bold=True),
        _text(x + 12, y + 35, f"{node.type} · {node.mode}  {shorten(node.id, 12)}", 11, MUTED),
        _text(x + 12, y + 51, status, 11, style.ink),
    ]
    parts.extend(_chips(state, node, x + 12, y + BOX_H - CHIP_H - 5, now))
    parts.append("</g>")
    return "".join(parts)


def _chips(state: ViewState, node: NodeView, x: int, y: int, now: float | None) -> list[str]:
    children = [state.nodes[c] for c in node.children if c in state.nodes]
    shown = children if len(children) <= _MAX_CHIPS + 1 else children[:_MAX_CHIPS]
    out = []
    for i, child in enumerate(shown):
        style = style_for(child.shown_status)
        cx = x + i * (CHIP_W + CHIP_GAP)
        out.append(
            f'<rect x="{cx}" y="{y}" width="{CHIP_W}" height="{CHIP_H}" rx="2" '
            f'fill="{style.stroke}"><title>{esc(node_tooltip(child, now))}</title></rect>'
        )
    if len(shown) < len(children):
        rest = len(children) - len(shown)
        out.append(_text(x + len(shown) * (CHIP_W + CHIP_GAP), y + CHIP_H, f"+{rest}", 10, MUTED))
    return out


def _text(x: int, y: int, text: str, size: int, fill: str, bold: bool = False) -> str:
    weight = ' font-weight="600"' if bold else ""
    return f'<text x="{x}" y="{y}" font-size="{size}" fill="{fill}"{weight}>{esc(text)}</text>'


def node_tooltip(node: NodeView, now: float | None = None) -> str:
    """Everything about a node in a few lines (plain text; escape before use)."""
    lines = [f"{node.label} ({node.id})", f"{node.type} · {node.mode}"]
    status = node.shown_status
    duration = fmt_duration(node.duration(now))
    lines.append(
        f"{status} {duration}".strip() + (f", attempt {node.attempt}" if node.attempt > 1 else "")
    )
    if node.depends_on:
        lines.append("depends on " + ", ".join(node.depends_on))
    if node.retry_error:
        lines.append(f"retrying after: {shorten(node.retry_error, 300)}")
    if node.error:
        lines.append(f"error: {shorten(node.error, 600)}")
    if node.output is not None and node.status == "done":
        lines.append(f"output: {shorten(node.output, 300)}")
    if node.note:
        lines.append(f"note: {shorten(node.note, 300)}")
    if node.response:
        lines.append(f"answer: {shorten(node.response, 300)}")
    return "\n".join(lines)


def details_html(state: ViewState) -> str:
    """The list under the graph: failed, skipped and cancelled actions with their
    reasons, retries in progress, notes, and the run's own errors. Empty when all is well."""
    items = []
    for node_id in state.order:
        node = state.nodes[node_id]
        style = style_for(node.shown_status)
        who = f'<b>{esc(node.label)}</b> <span style="color:{MUTED}">({esc(node.id)})</span>'
        if node.status in ("failed", "skipped", "cancelled"):
            message = esc(node.error or node.status)
            items.append(_item(style.ink, f"{style.icon} {style.label}", who, message))
        elif node.retry_error:
            message = esc(node.retry_error)
            items.append(_item(style.ink, f"↻ attempt {node.attempt} failed", who, message))
        if node.note:
            items.append(_item(MUTED, "note", who, esc(node.note)))
    for error in state.errors:
        items.append(_item(style_for("failed").ink, "✗ error", "", esc(error)))
    if not items:
        return ""
    return (
        f'<ul style="list-style:none;padding:0;margin:4px 0;font-family:{esc(FONT)};'
        f'font-size:12.5px;color:{TEXT}">' + "".join(items) + "</ul>"
    )


def _item(colour: str, label: str, who: str, message: str) -> str:
    head = f'<span style="color:{colour};font-weight:600">{esc(label)}</span>'
    body = f" {who}: " if who else " "
    return (
        f'<li style="margin:2px 0;white-space:pre-wrap;word-break:break-word">{head}{body}'
        f"{message}</li>"
    )
