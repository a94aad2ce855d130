"""The action graph as an SVG picture, and the list of what went wrong under it.

Plain SVG built as text: it needs no JavaScript or CDN, survives in a saved notebook
(NOTES.md, "Drawing the action graph"), and the live view sends the very same pieces to
its graph component (``live_graph``), which places them by key, so the picture a run
leaves is the last one its user saw. Positions come from the state's append-only layout
(``ViewState``): boxes do not jump while the model is still writing.

Each top-level action is a box: status icon and name, type and mode, status word and
duration, and under them its progress bar or the newest line it printed - or, for a
workflow's steps or an agent's sub-run, a row of small status chips, one per child.
Hovering any box or chip shows its details (an SVG ``<title>``). Solid edges are
``depends_on``; dashed edges are ``$name`` uses of an earlier action's output.

**Graphs of any size** (``arrange``). A level of the graph (the actions at one depth)
with more than ``ROWS`` actions is reorganised: the actions of one name there, when
there are at least ``GROUP_MIN`` of them, become one *group* box (``fetch ×60``, its
statuses counted and drawn as a bar); failed and waiting members are always shown as
boxes of their own beside it; a group can be expanded (live) into a grid of chips, one
per member. A level that still has more than ``ROWS`` boxes wraps into more columns, and
when the levels need more than ``COLUMNS`` columns side by side the picture goes on in a
band below, so it stays within a notebook cell's width. A run of up to ``ROWS`` actions
per level is drawn exactly as before.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .nodes import NodeView
from .state import ViewState
from .theme import (
    EDGE,
    FONT,
    MONO,
    MUTED,
    TEXT,
    esc,
    fmt_duration,
    shorten,
    shorten_middle,
    style_for,
)

BOX_W, BOX_H = 184, 74
COL_GAP, ROW_GAP = 44, 14
BAND_GAP = 34
MARGIN = 10
CHIP_W, CHIP_H, CHIP_GAP = 12, 9, 3
#: Boxes one column of a level holds before that level is reorganised (grouped, wrapped).
ROWS = 8
#: Columns side by side before the picture goes on in a band below (4 are 888 px).
COLUMNS = 4
#: Actions of one name on a crowded level that become one group box.
GROUP_MIN = 3
#: Statuses a group member is always drawn with a box of its own for.
ALWAYS_SHOWN = frozenset(("failed", "awaiting"))
SELECTED = "#1f6feb"
_MAX_CHIPS = (BOX_W - 16) // (CHIP_W + CHIP_GAP) - 1
_NAME_CHARS = 22
#: Characters of the 11 px line under the name (the box is 184 px wide).
_LINE_CHARS = 30
_GRID_CHIP = 12
_GRID_STEP = _GRID_CHIP + 3
_GRID_COLS = (BOX_W - 20) // _GRID_STEP
_GROUP_HEAD = 46
_STATUS_ORDER = ("done", "running", "awaiting", "starting", "pending", "skipped", "cancelled",
                 "failed")  # fmt: skip


@dataclass
class Item:
    """One box of the picture: an action (``node``) or a group of them (``members``).

    ``key`` names it for the live view (``n:<id>`` or ``g:<level>:<name>``); ``x``/``y``
    is its top-left corner and ``rows`` how many rows of the grid it covers.
    """

    key: str
    x: int = 0
    y: int = 0
    rows: int = 1
    node: NodeView | None = None
    members: tuple[NodeView, ...] = ()
    expanded: bool = False

    @property
    def height(self) -> int:
        return self.rows * (BOX_H + ROW_GAP) - ROW_GAP


@dataclass
class Picture:
    """The arranged graph: its size, its boxes, and the edges between boxes.

    ``where`` maps every drawn action id to the key of the box that shows it (a grouped
    action: its group). ``edges`` are ``(from key, to key, kind, how many)``.
    """

    width: int
    height: int
    items: list[Item] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)
    edges: list[tuple[str, str, str, int]] = field(default_factory=list)

    def item(self, key: str) -> Item | None:
        for item in self.items:
            if item.key == key:
                return item
        return None


# ---- arranging ----------------------------------------------------------------------


def arrange(state: ViewState, expanded: Iterable[str] = ()) -> Picture:
    """Where every box of ``state``'s graph goes (see the module docstring).

    ``expanded`` holds the keys of the groups shown as a grid of their members.
    """
    opened = frozenset(expanded)
    levels: dict[int, list[NodeView]] = {}
    for node in state.top_level():
        if node.layer is not None:
            levels.setdefault(node.layer, []).append(node)
    picture = Picture(0, 0)
    band_top, band_cols, band_rows = MARGIN, 0, 0
    width = height = 0
    for level in sorted(levels):
        members = sorted(levels[level], key=lambda n: n.slot or 0)
        block, cols, rows = _block(level, members, opened)
        if band_cols and band_cols + cols > COLUMNS:
            band_top += band_rows * (BOX_H + ROW_GAP) - ROW_GAP + BAND_GAP
            band_cols = band_rows = 0
        left = MARGIN + band_cols * (BOX_W + COL_GAP)
        for item, col, row in block:
            item.x = left + col * (BOX_W + COL_GAP)
            item.y = band_top + row * (BOX_H + ROW_GAP)
            picture.items.append(item)
            for member in item.members:
                picture.where.setdefault(member.id, item.key)
            if item.node is not None:
                picture.where[item.node.id] = item.key
            width = max(width, item.x + BOX_W + MARGIN)
            height = max(height, item.y + item.height + MARGIN)
        band_cols += cols
        band_rows = max(band_rows, rows)
    picture.width, picture.height = width, height
    picture.edges = _edges(state, picture.where)
    return picture


def _block(
    level: int, members: list[NodeView], expanded: frozenset[str]
) -> tuple[list[tuple[Item, int, int]], int, int]:
    """The boxes of one level with their (column, row) in the level's block, and the
    block's columns and rows."""
    if len(members) <= ROWS:
        # Uncrowded: one column, each action in its own slot (as it was placed), or one
        # under the other when the slots it was placed in lie further down than that.
        placed = all((n.slot or 0) < ROWS for n in members)
        spots = [(n.slot or 0) if placed else i for i, n in enumerate(members)]
        block = [(Item(f"n:{n.id}", node=n), 0, r) for n, r in zip(members, spots, strict=True)]
        return block, 1, 1 + max(spots)
    items = _grouped(level, members, expanded)
    total = sum(item.rows for item in items)
    per_column = ROWS if math.ceil(total / ROWS) <= COLUMNS else math.ceil(total / COLUMNS)
    per_column = max(per_column, max(item.rows for item in items))
    out: list[tuple[Item, int, int]] = []
    col = row = 0
    for item in items:
        if row and row + item.rows > per_column:
            col, row = col + 1, 0
        out.append((item, col, row))
        row += item.rows
    rows = max(r + i.rows for i, _, r in out)
    return out, col + 1, rows


def _grouped(level: int, members: list[NodeView], expanded: frozenset[str]) -> list[Item]:
    """A crowded level's boxes: actions of one name grouped, failed and waiting members
    right after their group, everything else in slot order."""
    names = Counter(n.label for n in members if not n.streaming)
    grouped = {name for name, count in names.items() if count >= GROUP_MIN}
    out: list[Item] = []
    done: set[str] = set()
    for node in members:
        name = node.label
        if node.streaming or name not in grouped:
            out.append(Item(f"n:{node.id}", node=node))
            continue
        if name in done:
            continue
        done.add(name)
        group = tuple(n for n in members if n.label == name and not n.streaming)
        key = f"g:{level}:{name}"
        item = Item(key, members=group, expanded=key in expanded)
        if item.expanded:
            grid = math.ceil(len(group) / _GRID_COLS) * _GRID_STEP
            item.rows = math.ceil((_GROUP_HEAD + grid + 8 + ROW_GAP) / (BOX_H + ROW_GAP))
        out.append(item)
        out += [Item(f"n:{n.id}", node=n) for n in group if n.status in ALWAYS_SHOWN]
    return out


def _edges(state: ViewState, where: Mapping[str, str]) -> list[tuple[str, str, str, int]]:
    """Edges between boxes: one per pair of boxes, however many actions they join."""
    found: dict[tuple[str, str], list[str]] = {}
    for src, dst, kind in state.edges():
        a, b = where.get(src), where.get(dst)
        if a is None or b is None or a == b:
            continue
        found.setdefault((a, b), []).append(kind)
    return [
        (a, b, "depends_on" if "depends_on" in kinds else "reference", len(kinds))
        for (a, b), kinds in found.items()
    ]


def graph_size(state: ViewState) -> tuple[int, int]:
    """Pixel width and height of the graph."""
    picture = arrange(state)
    return picture.width, picture.height


# ---- drawing --------------------------------------------------------------------------


def graph_svg(state: ViewState, now: float | None = None) -> str:
    """The whole action graph of ``state``; ``now`` drives running nodes' durations.

    An empty string when there are no actions, so a view can hide the area.
    """
    picture = arrange(state)
    if not picture.items:
        return ""
    now = now if now is not None else state.clock
    pieces = draw(state, picture, now)
    return svg_open(picture.width, picture.height) + "".join(pieces.values()) + "</svg>"


def svg_open(width: int, height: int) -> str:
    """The ``<svg>`` element a picture of ``width`` × ``height`` is drawn in (with the
    arrow head its edges use); it shrinks to fit a narrower cell."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="action graph" '
        f'style="font-family:{esc(FONT)};max-width:100%;height:auto">' + ARROW_DEFS
    )


ARROW_DEFS = (
    "<defs>"
    '<marker id="cxj-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="10" '
    'markerHeight="10" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
    f'<path d="M0,0 L10,5 L0,10 z" fill="{EDGE}"/></marker></defs>'
)


def draw(
    state: ViewState,
    picture: Picture,
    now: float | None,
    *,
    live: bool = False,
    selected: str | None = None,
) -> dict[str, str]:
    """Every piece of ``picture`` as SVG text, by key: edges (``e:...``) first, then the
    boxes. ``live`` adds what the live view needs: clickable targets and the times its
    clock ticks from (``data-cxj-since``, seconds after the run started)."""
    pieces: dict[str, str] = {}
    boxes = {item.key: item for item in picture.items}
    for src, dst, kind, count in picture.edges:
        key = f"e:{src}>{dst}"
        pieces[key] = _edge(boxes[src], boxes[dst], kind, count, key)
    t0 = state.started or 0.0
    for item in picture.items:
        if item.node is not None:
            pieces[item.key] = box(state, item.node, item.x, item.y, now,
                                   live=live, t0=t0, selected=selected)  # fmt: skip
        else:
            pieces[item.key] = _group(item, now, live=live, selected=selected)
    return pieces


def _edge(a: Item, b: Item, kind: str, count: int, key: str) -> str:
    x1, y1 = a.x + BOX_W, a.y + min(a.height, BOX_H) // 2
    x2, y2 = b.x - 2, b.y + min(b.height, BOX_H) // 2
    # Forward edges curve gently; an edge to a column at or left of its source (a
    # dependency written after its dependent, or the next band) loops out to stay visible.
    bend = max((x2 - x1) / 2, 40)
    dash = ' stroke-dasharray="5 4"' if kind == "reference" else ""
    width = "2.5" if count > 1 else "1.5"
    what = "uses the output of" if kind == "reference" else "depends on"
    title = f"{_who(b)} {what} {_who(a)}" + (f" ({count} edges)" if count > 1 else "")
    return (
        f'<path data-key="{esc(key)}" d="M{x1},{y1} C{x1 + bend:.0f},{y1} {x2 - bend:.0f},{y2} '
        f'{x2},{y2}" fill="none" stroke="{EDGE}" stroke-width="{width}"{dash} '
        f'marker-end="url(#cxj-arrow)"><title>{esc(title)}</title></path>'
    )


def _who(item: Item) -> str:
    if item.node is not None:
        return item.node.id
    return f"{item.members[0].label} ×{len(item.members)}" if item.members else item.key


def box(
    state: ViewState,
    node: NodeView,
    x: int,
    y: int,
    now: float | None,
    *,
    live: bool = False,
    t0: float = 0.0,
    selected: str | None = None,
) -> str:
    """One action's box with its top-left corner at ``x``, ``y``. A ``live`` box does
    not depend on ``now``: the page's clock ticks its running duration."""
    if live:
        now = None
    shown = node.shown_status
    style = style_for(shown)
    dash = ' stroke-dasharray="4 3"' if node.mode == "fire_and_forget" else ""
    width = 2.5 if node.mode == "sync" else 1.5
    label = f"{style.icon} {style.label}"
    tail = _progress_words(node)
    status = label
    if node.retry_in is not None or node.retry_error:
        status += f" (attempt {node.attempt})"
    elif duration := fmt_duration(node.duration(now)):
        status += f" · {duration}"
    ticking = ""
    if live and node.status == "running" and node.started is not None and not node.retry_error:
        ticking = (
            f' data-cxj-since="{node.started - t0:.3f}" data-cxj-label="{esc(label)}"'
            f' data-cxj-tail="{esc(tail)}"'
        )
    parts = [
        f'<g class="cxj-node" data-id="{esc(node.id)}" data-status="{esc(shown)}" '
        f'data-key="n:{esc(node.id)}"{_clickable(live, "select", node.id)}>',
        f"<title>{esc(node_tooltip(node, now))}</title>",
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{style.fill}" '
        f'stroke="{style.stroke}" stroke-width="{width}"{dash}/>',
        f'<rect x="{x}" y="{y}" width="5" height="{BOX_H}" rx="2" fill="{style.stroke}"/>',
        _text(x + 12, y + 19, shorten_middle(node.label, _NAME_CHARS), 13, TEXT, bold=True),
        _text(x + 12, y + 35, _kind_line(node), 11, MUTED),
        _text(x + 12, y + 51, status + tail, 11, style.ink, extra=ticking),
    ]
    if node.children:
        parts.extend(_chips(state, node, x + 12, y + BOX_H - CHIP_H - 5, now, live))
    else:
        parts.append(_footer(node, x, y))
    if live and selected == node.id:
        parts.append(_ring(x, y, BOX_W, BOX_H))
    parts.append("</g>")
    return "".join(parts)


def _progress_words(node: NodeView) -> str:
    """`` · 3/5`` for a running node's progress (empty without one)."""
    if node.progress is None or node.final:
        return ""
    done, total = node.progress.done, node.progress.total
    return f" · {done:g}/{total:g}" if total else f" · {done:g}"


def _footer(node: NodeView, x: int, y: int) -> str:
    """Under the status: the progress bar, else the newest line the tool wrote."""
    if node.final:
        return ""
    fraction = node.progress.fraction if node.progress is not None else None
    if fraction is not None:
        track = BOX_W - 24
        style = style_for("running")
        return (
            f'<rect x="{x + 12}" y="{y + 60}" width="{track}" height="5" rx="2.5" '
            f'fill="#ffffff" stroke="{style.stroke}" stroke-width="0.5"/>'
            f'<rect class="cxj-progress" x="{x + 12}" y="{y + 60}" '
            f'width="{track * fraction:.1f}" height="5" rx="2.5" fill="{style.stroke}"/>'
        )
    if node.last_line:
        return _text(x + 12, y + 67, shorten(node.last_line, 30), 10, MUTED, mono=True)
    return ""


def _ring(x: int, y: int, w: int, h: int) -> str:
    return (
        f'<rect class="cxj-selected" x="{x - 3}" y="{y - 3}" width="{w + 6}" height="{h + 6}" '
        f'rx="8" fill="none" stroke="{SELECTED}" stroke-width="2.5"/>'
    )


def _clickable(live: bool, act: str, target: str) -> str:
    if not live:
        return ""
    return f' data-cxj-act="{act}" data-cxj-id="{esc(target)}" tabindex="0" role="button"'


def _group(item: Item, now: float | None, *, live: bool, selected: str | None) -> str:
    """A group's box: ``name ×N``, its statuses in words and as a bar; expanded, a grid
    of chips, one per member (each opens that action's inspector)."""
    members = item.members
    counts = Counter(n.shown_status for n in members)
    status = _group_status(counts)
    style = style_for(status)
    x, y, h = item.x, item.y, item.height
    first = members[0]
    summary = ", ".join(f"{counts[s]} {s}" for s in _STATUS_ORDER if counts.get(s))
    toggle = "▾" if item.expanded else "▸"
    hint = "click to hide the members" if item.expanded else "click to show each member"
    title = f"{first.label} ×{len(members)} (a group of actions)\n{summary}"
    parts = [
        f'<g class="cxj-group" data-group="{esc(item.key)}" data-status="{esc(status)}" '
        f'data-key="{esc(item.key)}"{_clickable(live, "toggle", item.key)}>',
        f"<title>{esc(title + (chr(10) + hint if live else ''))}</title>",
        # Two edges behind the box: it reads as a stack of boxes.
        f'<rect x="{x + 6}" y="{y - 6}" width="{BOX_W}" height="{h}" rx="6" fill="{style.fill}" '
        f'stroke="{style.stroke}" stroke-width="1"/>',
        f'<rect x="{x + 3}" y="{y - 3}" width="{BOX_W}" height="{h}" rx="6" fill="{style.fill}" '
        f'stroke="{style.stroke}" stroke-width="1"/>',
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{h}" rx="6" fill="{style.fill}" '
        f'stroke="{style.stroke}" stroke-width="1.5"/>',
        f'<rect x="{x}" y="{y}" width="5" height="{h}" rx="2" fill="{style.stroke}"/>',
        _text(
            x + 12,
            y + 19,
            f"{shorten_middle(first.label, 17)} ×{len(members)}",
            13,
            TEXT,
            bold=True,
        ),
        _text(x + 12, y + 35, f"{first.type} · {first.mode}  group", 11, MUTED),
        _text(x + 12, y + 51, shorten(summary, 30), 11, style.ink),
    ]
    if live:
        parts.append(_text(x + BOX_W - 18, y + 19, toggle, 12, MUTED))
    if item.expanded:
        parts.extend(_grid(members, x + 12, y + _GROUP_HEAD + 4, now, live, selected))
    else:
        parts.append(_bar(counts, len(members), x + 12, y + 60, BOX_W - 24))
    if live and selected is not None and any(n.id == selected for n in members):
        parts.append(_ring(x, y, BOX_W, h))
    parts.append("</g>")
    return "".join(parts)


def _group_status(counts: Mapping[str, int]) -> str:
    """The colour a group is drawn in: what it is doing, else how it ended."""
    for status in ("running", "awaiting", "starting", "pending"):
        if counts.get(status):
            return "running" if status != "awaiting" else "awaiting"
    for status in ("failed", "cancelled", "skipped"):
        if counts.get(status):
            return status
    return "done"


def _bar(counts: Mapping[str, int], total: int, x: int, y: int, width: int) -> str:
    """The members' statuses as one stacked bar, in a fixed order."""
    out, at = [], float(x)
    for status in _STATUS_ORDER:
        n = counts.get(status, 0)
        if n:
            w = width * n / total
            out.append(
                f'<rect x="{at:.1f}" y="{y}" width="{w:.1f}" height="6" '
                f'fill="{style_for(status).stroke}"/>'
            )
            at += w
    return "".join(out)


def _grid(
    members: tuple[NodeView, ...],
    x: int,
    y: int,
    now: float | None,
    live: bool,
    selected: str | None,
) -> list[str]:
    out = []
    for i, node in enumerate(members):
        cx = x + (i % _GRID_COLS) * _GRID_STEP
        cy = y + (i // _GRID_COLS) * _GRID_STEP
        stroke = f' stroke="{SELECTED}" stroke-width="2"' if node.id == selected else ""
        out.append(
            f'<rect class="cxj-chip" data-id="{esc(node.id)}" x="{cx}" y="{cy}" '
            f'width="{_GRID_CHIP}" height="{_GRID_CHIP}" rx="2" '
            f'fill="{style_for(node.shown_status).stroke}"{stroke}'
            f"{_clickable(live, 'select', node.id)}>"
            f"<title>{esc(node_tooltip(node, now))}</title></rect>"
        )
    return out


def _chips(
    state: ViewState, node: NodeView, x: int, y: int, now: float | None, live: bool = False
) -> list[str]:
    children = [state.nodes[c] for c in node.children if c in state.nodes]
    shown = children if len(children) <= _MAX_CHIPS + 1 else children[:_MAX_CHIPS]
    out = []
    for i, child in enumerate(shown):
        style = style_for(child.shown_status)
        cx = x + i * (CHIP_W + CHIP_GAP)
        out.append(
            f'<rect x="{cx}" y="{y}" width="{CHIP_W}" height="{CHIP_H}" rx="2" '
            f'fill="{style.stroke}"{_clickable(live, "select", child.id)}>'
            f"<title>{esc(node_tooltip(child, now))}</title></rect>"
        )
    if len(shown) < len(children):
        rest = len(children) - len(shown)
        out.append(_text(x + len(shown) * (CHIP_W + CHIP_GAP), y + CHIP_H, f"+{rest}", 10, MUTED))
    return out


def _kind_line(node: NodeView) -> str:
    """``tool · async  #fetch_page_12``: the id, marked as one and apart from the kind and
    mode (``tool · async weather`` read as a type), keeps its end (where ids of one tool
    differ) and as much of the line as type and mode leave it, never fewer than 10."""
    kind = f"{node.type} · {node.mode}  "
    return kind + "#" + shorten_middle(node.id, max(10, _LINE_CHARS - len(kind) - 1))


def _text(
    x: int,
    y: int,
    text: str,
    size: int,
    fill: str,
    bold: bool = False,
    mono: bool = False,
    extra: str = "",
) -> str:
    weight = ' font-weight="600"' if bold else ""
    family = f' font-family="{esc(MONO)}"' if mono else ""
    return (
        f'<text x="{x}" y="{y}" font-size="{size}" fill="{fill}"{weight}{family}{extra}>'
        f"{esc(text)}</text>"
    )


# ---- a sub-run's own graph (the inspector of an agent or a workflow) ---------------------


def subgraph_svg(
    state: ViewState,
    parent: str,
    now: float | None = None,
    *,
    live: bool = False,
    selected: str | None = None,
) -> str:
    """The graph of a node's children (an agent's sub-run, a workflow's steps), laid out
    as the top-level graph is (levels from their dependencies on each other)."""
    node = state.nodes.get(parent)
    children = [state.nodes[c] for c in node.children if c in state.nodes] if node else []
    if not children:
        return ""
    level: dict[str, int] = {}
    rows: Counter[int] = Counter()
    spots: dict[str, tuple[int, int]] = {}
    for child in children:
        deps = [level[d] for d in child.depends_on if d in level]
        level[child.id] = 1 + max(deps, default=-1)
        spots[child.id] = (level[child.id], rows[level[child.id]])
        rows[level[child.id]] += 1
    picture = Picture(0, 0)
    for child in children:
        col, row = spots[child.id]
        item = Item(f"n:{child.id}", node=child)
        item.x = MARGIN + col * (BOX_W + COL_GAP)
        item.y = MARGIN + row * (BOX_H + ROW_GAP)
        picture.items.append(item)
        picture.where[child.id] = item.key
        picture.width = max(picture.width, item.x + BOX_W + MARGIN)
        picture.height = max(picture.height, item.y + BOX_H + MARGIN)
    picture.edges = _edges(state, picture.where)
    pieces = draw(state, picture, now, live=live, selected=selected)
    return svg_open(picture.width, picture.height) + "".join(pieces.values()) + "</svg>"


# ---- words ------------------------------------------------------------------------------


def node_tooltip(node: NodeView, now: float | None = None) -> str:
    """Everything about a node in a few lines (plain text; escape before use)."""
    lines = [f"{node.label} ({node.id})", f"{node.type} · {node.mode}"]
    status = node.shown_status
    duration = fmt_duration(node.duration(now))
    lines.append(
        f"{status} {duration}".strip() + (f", attempt {node.attempt}" if node.attempt > 1 else "")
    )
    if node.status == "awaiting":
        lines.append("waiting for your approval")
    if node.resolved and not node.final:
        lines.append(f"parameters: {shorten(node.resolved, 300)}")
    if node.depends_on:
        lines.append("depends on " + ", ".join(node.depends_on))
    if node.progress is not None and not node.final:
        lines.append(f"progress: {node.progress}")
    if node.last_line and not node.final:
        lines.append(f"last line: {shorten(node.last_line, 200)}")
    if node.retry_error:
        lines.append(f"retrying after: {shorten(node.retry_error, 300)}")
    if node.error:
        lines.append(f"error: {shorten(node.error, 600)}")
    if node.output is not None and node.status == "done":
        lines.append(f"output: {shorten(node.output, 300)}")
    if node.note:
        lines.append(f"note: {shorten(node.note, 300)}")
    if node.response:
        lines.append(f"replies: {shorten(node.response, 300)}")  # its answer is the output
    return "\n".join(lines)


def details_html(state: ViewState, *, live: bool = False) -> str:
    """The list under the graph: retries in progress and the run's own errors (the text
    the model wrote, when it was refused). Empty when all is well. A failed, skipped or
    cancelled action and an action's note are not repeated here: its own panel (the
    inspector, which opens by itself for a failed one; the copy's list of actions) says
    it, and one line under the cell (issue 37: one report per failure). ``live``: each
    row opens its inspector when clicked."""
    items = []
    for node_id in state.order:
        node = state.nodes[node_id]
        style = style_for(node.shown_status)
        who = f'<b>{esc(node.label)}</b> <span style="color:{MUTED}">({esc(node.id)})</span>'
        if node.retry_error and not node.final:
            message = esc(node.retry_error)
            row = _clickable(live, "select", node.id)
            items.append(_item(style.ink, f"↻ attempt {node.attempt} failed", who, message, row))
    for index, error in enumerate(state.errors):
        refused = state.refused.get(index)
        message = esc(error) + (_refused(refused) if refused else "")
        items.append(_item(style_for("failed").ink, "✗ error", "", message))
    if not items:
        return ""
    return (
        f'<ul style="list-style:none;padding:0;margin:4px 0;font-family:{esc(FONT)};'
        f'font-size:12.5px;color:{TEXT}">' + "".join(items) + "</ul>"
    )


def _refused(source: str) -> str:
    """The refused text the model wrote, short, as code under its error."""
    return (
        f'<div style="color:{MUTED}">the model wrote: '
        f'<code style="font-family:{esc(MONO)};font-size:11.5px;color:{TEXT}">'
        f"{esc(shorten(source, 240))}</code></div>"
    )


def _item(colour: str, label: str, who: str, message: str, attrs: str = "") -> str:
    head = f'<span style="color:{colour};font-weight:600">{esc(label)}</span>'
    body = f" {who}: " if who else " "
    cursor = "cursor:pointer;" if attrs else ""
    return (
        f'<li style="margin:2px 0;white-space:pre-wrap;word-break:break-word;{cursor}"{attrs}>'
        f"{head}{body}{message}</li>"
    )
