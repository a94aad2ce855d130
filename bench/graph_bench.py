"""Benchmark of a large action graph through a real kernel: what the live graph costs.

    python bench/graph_bench.py [--delay 0.01] [--chunk-size 64]

A ``%%cortex --script`` cell writes 110 actions (issue 12, section 5): 60 independent
``fetch`` actions (one of them fails), 40 ``parse`` actions each using one page (``$page_N``),
6 ``summarize`` actions depending on ten fetches each, 3 ``rank`` actions on two summaries
each and one ``report`` on the ranks. The tools sleep 0.05-0.6 s, print a line and report
progress, so nodes change status and output all through the run.

Every iopub message the cell causes is recorded (``tests/kernel/harness.py``). Printed: the
traffic in all, the view's largest single update (``comm_msg``), the most view messages in
any one second, and the size of the picture the run leaves (the static copy's SVG). Targets:
0.5 MB in all, no view update over 20 KB, at most 30 view messages in any second.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import table  # noqa: E402
from tests.kernel.harness import Execution, Kernel, max_per_window  # noqa: E402

TARGET_BYTES = 500_000
TARGET_UPDATE = 20_000
TARGET_VIEW_RATE = 30

TOOLS = """
import random as _random
import time as _time
import cortex_jupyter as _cj
from cortex_jupyter import default_registry as _registry

_rng = _random.Random(11)

@_registry.tool(name="fetch")
def _fetch(url: str) -> dict:
    \"\"\"Fetch a page (sleeps).\"\"\"
    steps = 3
    for i in range(steps):
        _time.sleep(_rng.uniform(0.1, 0.4))
        _cj.progress(i + 1, steps, "bytes")
    print("fetched", url)
    if url.endswith("/13"):
        raise ConnectionError(f"{url} refused the connection")
    return {"url": url, "size": len(url) * 100}

@_registry.tool(name="parse")
def _parse(page: dict) -> int:
    \"\"\"Parse a page.\"\"\"
    _time.sleep(_rng.uniform(0.02, 0.1))
    return page["size"]

@_registry.tool(name="summarize")
def _summarize(topic: str) -> str:
    \"\"\"Summarize a topic.\"\"\"
    _time.sleep(_rng.uniform(0.05, 0.2))
    return f"summary of {topic}"

@_registry.tool(name="rank")
def _rank(items: list) -> list:
    \"\"\"Rank items.\"\"\"
    _time.sleep(0.05)
    return sorted(map(str, items))

@_registry.tool(name="report")
def _report(parts: list) -> str:
    \"\"\"Write the report.\"\"\"
    return " / ".join(map(str, parts))
"""


def script(fetches: int = 60, parses: int = 40) -> str:
    """The protocol text of the 110-action run."""
    out = ["<thought>Fetch every page, parse some, summarise in groups, rank, report."]
    for i in range(fetches):
        out.append(
            f'<action id="f{i}">{{"name": "fetch", "parameters": {{"url": '
            f'"https://example.com/{i}"}}, "output_key": "page_{i}", "on_error": "skip"}}</action>'
        )
    for i in range(parses):
        out.append(
            f'<action id="p{i}">{{"name": "parse", "parameters": {{"page": "$page_{i}"}}}}</action>'
        )
    for g in range(6):
        deps = ", ".join(f'"f{g * 10 + k}"' for k in range(10))
        out.append(
            f'<action id="s{g}">{{"name": "summarize", "parameters": {{"topic": "group {g}"}}, '
            f'"depends_on": [{deps}], "output_key": "sum_{g}"}}</action>'
        )
    for r in range(3):
        out.append(
            f'<action id="r{r}">{{"name": "rank", "parameters": {{"items": '
            f'["$sum_{2 * r}", "$sum_{2 * r + 1}"]}}, "output_key": "rank_{r}"}}</action>'
        )
    out.append(
        '<action id="report">{"name": "report", "parameters": {"parts": '
        '["$rank_0", "$rank_1", "$rank_2"]}}</action>'
    )
    out.append("Waiting for the pages.</thought>")
    out.append("<response>\nThe report is ready.\n</response>")
    return "\n".join(out)


SVG_SIZE = re.compile(r'<svg[^>]*?width="(\d+)" height="(\d+)"')


def analyse(execution: Execution) -> dict[str, Any]:
    view = execution.view_messages()
    updates = execution.of("comm_msg")
    largest = max(updates, key=lambda m: m.size) if updates else None
    final = execution.of("update_display_data")
    static = final[-1].content["data"].get("text/html", "") if final else ""
    size = SVG_SIZE.search(static)
    return {
        "messages": len(execution.messages),
        "view_messages": len(view),
        "comm_open": len(execution.of("comm_open")),
        "comm_msg": len(updates),
        "bytes": execution.total_bytes(),
        "view_bytes": execution.total_bytes(view),
        "final_bytes": execution.total_bytes(final),
        "largest_update": largest.size if largest else 0,
        "largest_open": max((m.size for m in execution.of("comm_open")), default=0),
        "max_view": max_per_window(m.time for m in view),
        "cell": execution.replied - execution.sent,
        "picture": (int(size.group(1)), int(size.group(2))) if size else (0, 0),
    }


def check(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(r: dict[str, Any], statuses: dict[str, int]) -> str:
    width, height = r["picture"]
    rows = [
        ["actions (final statuses)", ", ".join(f"{n} {s}" for s, n in statuses.items())],
        ["cell duration", f"{r['cell']:.2f} s"],
        ["iopub messages, all", f"{r['messages']:,}"],
        ["  the view's (comm_open / comm_msg)",
         f"{r['view_messages']:,} ({r['comm_open']} / {r['comm_msg']})"],
        ["iopub bytes, all", f"{r['bytes']:,}"],
        ["  the view's", f"{r['view_bytes']:,}"],
        ["  of which the final display update (static copy)", f"{r['final_bytes']:,}"],
        ["largest view update (comm_msg)", f"{r['largest_update']:,}"],
        ["largest comm_open", f"{r['largest_open']:,}"],
        ["max view messages in any 1 s", r["max_view"]],
        ["saved picture (SVG width × height)", f"{width} × {height} px"],
    ]  # fmt: skip
    targets = [
        ["iopub bytes in all", f"{r['bytes'] / 1e6:.3f} MB", "<= 0.5 MB",
         check(r["bytes"] <= TARGET_BYTES)],
        ["largest view update", f"{r['largest_update'] / 1e3:.1f} KB", "<= 20 KB",
         check(r["largest_update"] <= TARGET_UPDATE)],
        ["view messages in any second", r["max_view"], f"<= {TARGET_VIEW_RATE}",
         check(r["max_view"] <= TARGET_VIEW_RATE)],
    ]  # fmt: skip
    return "\n".join(
        [
            table("110 actions through the kernel (widgets)", ["measure", "value"], rows),
            table("Targets (issue 12, section 5)", ["check", "measured", "target", ""], targets),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--delay", type=float, default=0.01, help="seconds between chunks")
    parser.add_argument("--chunk-size", type=int, default=64, help="characters per chunk")
    args = parser.parse_args(argv)
    cell = f"%%cortex --script --chunk-size {args.chunk_size} --delay {args.delay}\n{script()}\n"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average {load:.2f}\n",
        flush=True,
    )
    with Kernel() as kernel:
        kernel.execute("%load_ext cortex_jupyter")
        kernel.execute(TOOLS)
        kernel.execute('%config CortexMagics.display = "widgets"')
        kernel.execute("%%cortex --script\n<response>warm</response>\n")
        execution = kernel.execute(cell, timeout=180)
        counts = kernel.evaluate(
            "__import__('json').dumps(__import__('collections').Counter("
            "n.status for n in _cortex.actions.values()))"
        )
    import json

    statuses = json.loads(counts[1:-1])
    print(report(analyse(execution), statuses), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
