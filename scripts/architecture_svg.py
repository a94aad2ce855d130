"""Draw the package's layers as docs/images/architecture.svg (the Architecture page's picture).

    python scripts/architecture_svg.py          # write it
    python scripts/architecture_svg.py --check  # exit 1 if the committed picture is stale

The layers are data (``LAYERS``, ``EDGES``); edit them here, never the SVG. Plain SVG, no
script and no web font, so it shows the same on the docs site, offline and on GitHub.
tests/test_docs.py checks that the committed picture is what this script draws.
"""

from __future__ import annotations

import argparse
import sys
from html import escape
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "docs" / "images" / "architecture.svg"

# Top to bottom: each row imports only the rows below it. A row may hold boxes side by side
# (independent of each other). (folder, what it holds)
LAYERS: list[list[tuple[str, str]]] = [
    [("magic", "%%cortex / %cortex: parse arguments, call the session or a command")],
    [("commands", "the work of %cortex vars, views, mcp, cluster, local, eval, experiment, save")],
    [
        ("session/", "one cell: agent, reachable names, views, record"),
        ("evaluation · local · mcp", "evaluate(); the local server; notebook MCP"),
    ],
    [("experiments/", "cases, expectations, tries as ordinary runs, results, compare")],
    [
        ("models/", "OpenAI-compatible, script, replay"),
        ("display/", "widgets, text, static HTML, SVG"),
    ],
    [("runtime/loop/", "Agent, turns, prompt, context budget, transcripts, feeds")],
    [("runtime/scheduler/", "RunSpec, dispatch, tool calls, capture, approvals, retries")],
    [
        (
            "runtime/core/",
            "action graph, statuses, run record, events, errors, variables, scope, "
            "secrets; the registry and model interfaces",
        )
    ],
    [("protocol/", "the streaming parser: text chunks to events; stdlib only")],
]
# The edges: each plugs into the core's registry interface; none imports another, and the
# loop and the core never import them.
EDGES: list[tuple[str, str]] = [
    ("mcp", "MCP servers' tools and resources"),
    ("executors", "Dask, process pools"),
]

WIDTH = 860
MAIN_X, MAIN_W = 20, 540
SIDE_X, SIDE_W = 640, 200
ROW_H, GAP, TOP = 58, 18, 36
GAP_X = 16
FONT = "font-family:DejaVu Sans,Helvetica,Arial,sans-serif"
COLOURS = {
    "fill": "#eef2fb",
    "edge_fill": "#fdf3e7",
    "stroke": "#3f51b5",
    "edge_stroke": "#c56a00",
    "text": "#1a1a2e",
    "muted": "#4a4a5a",
}


def _box(x: float, y: float, w: float, h: float, title: str, note: str, edge: bool) -> str:
    fill = COLOURS["edge_fill" if edge else "fill"]
    stroke = COLOURS["edge_stroke" if edge else "stroke"]
    lines = _wrap(note, int(w / 6.4))
    texts = [
        f'<text x="{x + 10}" y="{y + 20}" style="{FONT};font-size:14px;font-weight:bold"'
        f' fill="{COLOURS["text"]}">{escape(title)}</text>'
    ]
    for i, line in enumerate(lines):
        texts.append(
            f'<text x="{x + 10}" y="{y + 37 + 13 * i}" style="{FONT};font-size:11px"'
            f' fill="{COLOURS["muted"]}">{escape(line)}</text>'
        )
    rect = (
        f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}"'
        f' stroke="{stroke}" stroke-width="1.5"/>'
    )
    return "\n".join([rect, *texts])


def _wrap(text: str, width: int) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _arrow(x1: float, y1: float, x2: float, y2: float, colour: str, dashed: bool = False) -> str:
    dash = ' stroke-dasharray="5,4"' if dashed else ""
    return (
        f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{colour}" stroke-width="1.5"'
        f'{dash} marker-end="url(#head)"/>'
    )


def render() -> str:
    """The SVG text (deterministic: the same input draws the same bytes)."""
    parts: list[str] = []
    row_y = [TOP + i * (ROW_H + GAP) for i in range(len(LAYERS))]
    for y, row in zip(row_y, LAYERS, strict=True):
        w = (MAIN_W - GAP_X * (len(row) - 1)) / len(row)
        for i, (title, note) in enumerate(row):
            parts.append(_box(MAIN_X + i * (w + GAP_X), y, w, ROW_H, title, note, edge=False))
    for y, row in zip(row_y[:-1], LAYERS[:-1], strict=True):  # each box points at the row below it
        w = (MAIN_W - GAP_X * (len(row) - 1)) / len(row)
        for i in range(len(row)):
            x = MAIN_X + i * (w + GAP_X) + w / 2
            parts.append(_arrow(x, y + ROW_H, x, y + ROW_H + GAP - 2, COLOURS["stroke"]))

    # The integrations, beside the loop, scheduler and core rows.
    first, last = 3, 5
    side_top = row_y[first]
    side_h = row_y[last] + ROW_H - side_top
    parts.append(
        f'<text x="{SIDE_X}" y="{side_top - 8}" style="{FONT};font-size:13px;font-weight:bold"'
        f' fill="{COLOURS["edge_stroke"]}">runtime/integrations/</text>'
    )
    inner = (side_h - GAP * (len(EDGES) - 1)) / len(EDGES)
    for i, (title, note) in enumerate(EDGES):
        y = side_top + i * (inner + GAP)
        parts.append(_box(SIDE_X, y, SIDE_W, inner, title, note, edge=True))
    core_y = row_y[last] + ROW_H / 2
    for i in range(len(EDGES)):  # each edge plugs into the core, on its own
        y = side_top + i * (inner + GAP) + inner / 2
        parts.append(
            _arrow(SIDE_X - 2, y, MAIN_X + MAIN_W + 3, core_y, COLOURS["edge_stroke"], True)
        )
    parts.append(
        f'<text x="{SIDE_X}" y="{side_top + side_h + 18}" style="{FONT};font-size:11px"'
        f' fill="{COLOURS["edge_stroke"]}">each plugs into the core\'s registry;</text>'
    )
    parts.append(
        f'<text x="{SIDE_X}" y="{side_top + side_h + 32}" style="{FONT};font-size:11px"'
        f' fill="{COLOURS["edge_stroke"]}">none imports another</text>'
    )
    height = row_y[-1] + ROW_H + 40
    legend = (
        f'<text x="{MAIN_X}" y="{height - 14}" style="{FONT};font-size:11px"'
        f' fill="{COLOURS["muted"]}">An arrow points at what a layer may import: each imports'
        " only those below it. Boxes side by side do not import each other.</text>"
    )
    title = (
        f'<text x="{MAIN_X}" y="20" style="{FONT};font-size:13px;font-weight:bold"'
        f' fill="{COLOURS["text"]}">cortex_jupyter: the layers</text>'
    )
    head = (
        '<defs><marker id="head" markerWidth="8" markerHeight="8" refX="7" refY="4"'
        ' orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>'
    )
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}"'
            f' viewBox="0 0 {WIDTH} {height}" role="img"'
            ' aria-label="The layers of cortex_jupyter, from magic down to protocol">',
            '<rect width="100%" height="100%" fill="#ffffff"/>',
            head,
            title,
            *parts,
            legend,
            "</svg>",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    args = parser.parse_args()
    svg = render()
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != svg:
            print(f"{OUT} is stale: run python scripts/architecture_svg.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(svg, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
