"""Benchmark of the live view through a real kernel: iopub messages, bytes, display work.

    python bench/kernel_bench.py [--chunk-size 8] [--rate 2000] [--seed 1]
                                 [--no-text-run] [--warmup | --no-warmup]

The workload of ``display_bench.py`` (a ~2 KB thought with 10 actions in it, then a ~16 KB
markdown response) is sent as one ``%%cortex --script --chunk-size N --delay 1/RATE`` cell to
a real ipykernel (this venv's, started with ``jupyter_client``), with 10 registered tools that
sleep 0.05-0.4 s each. Every iopub message the cell causes is recorded with its arrival time
and size (JSON of header, parent header, metadata and content, plus buffers).

Inside the kernel the session's widget view is wrapped with timers (``deliver``: reduce the
events and redraw; creation; ``close``: final frame and static copy): that main-thread time is
the kernel's display work, compared with the model stream's duration (``Turn`` to the finish
chunk, from ``_cortex.events``). A second run of the same cell with
``%config CortexMagics.display = "text"`` gives the kernel's CPU time without widgets.

The script model paces its chunks against deadlines (``start + i * delay``), so
``--delay`` 0.5 ms really gives 2,000 chunks/s even though asyncio rounds each sleep up.
Prints markdown tables, with targets (issue 6, section 8) and PASS/FAIL.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from display_bench import protocol_text, table  # noqa: E402

from tests.kernel.harness import Execution, Kernel, max_per_window  # noqa: E402

TARGET_VIEW_RATE = 30  # messages a second, per view
TARGET_BYTES = 1_000_000  # iopub bytes, in all
TARGET_DISPLAY_SHARE = 0.25  # of the stream's duration

TOOLS = """
import random as _random
import time as _time
from cortex_jupyter import default_registry as _registry

_rng = _random.Random(7)
for _i in range(10):
    def _make(i, seconds):
        def tool(q: str) -> str:
            _time.sleep(seconds)
            return f"result {i}"
        tool.__doc__ = f"Bench tool {i}: sleeps {seconds:.2f} s."
        return tool
    _registry.tool(name=f"tool_{_i}")(_make(_i, _rng.uniform(0.05, 0.4)))
"""

# Timers around the session's views, run in the kernel. Only measures; changes nothing.
INSTRUMENT = """
import time as _time
import cortex_jupyter.session as _cs

_bench = {}

def _bench_reset():
    _bench.clear()
    _bench["process_cpu0"] = _time.process_time()

def _bench_timed(name, fn):
    def timed(*args, **kwargs):
        wall, cpu = _time.perf_counter(), _time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _bench[name + "_wall"] = _bench.get(name + "_wall", 0.0) + _time.perf_counter() - wall
            _bench[name + "_cpu"] = _bench.get(name + "_cpu", 0.0) + _time.thread_time() - cpu
            _bench[name + "_calls"] = _bench.get(name + "_calls", 0) + 1
    return timed

for _cls in (_cs._WidgetView, _cs._TextView):
    for _name in ("__init__", "deliver", "close"):
        setattr(_cls, _name, _bench_timed(_name.strip("_"), getattr(_cls, _name)))

def _bench_report():
    run = _cortex
    turn = next(e.time for e in run.events if e.kind == "turn")
    finish = next(e.time for e in run.events if e.kind == "chunk" and e.type == "finish")
    reply = next(e.content for e in run.events if e.kind == "message" and e.role == "assistant")
    return {
        **_bench,
        "process_cpu": _time.process_time() - _bench["process_cpu0"],
        "stream": finish - turn,
        "text_chars": len(reply),
        "status": run.status,
        "actions": {n.id: n.status for n in run.actions.values()},
    }
"""

WARMUP = """%%cortex --script --chunk-size 64
<thought>warming up</thought>
<action id="w">{"name": "tool_0", "parameters": {"q": "w"}}</action>
<response>
## Warm

**bold**, a table:

| a | b |
|---|---|
| 1 | 2 |

```python
x = 1
```
</response>
"""


def workload(seed: int) -> tuple[str, int]:
    text, response_chars = protocol_text(random.Random(seed))
    return text, response_chars


def run_cell(kernel: Kernel, cell: str, display: str) -> tuple[Execution, dict[str, Any]]:
    kernel.execute(f'%config CortexMagics.display = "{display}"')
    kernel.execute("_bench_reset()")
    execution = kernel.execute(cell, timeout=120)
    report = json.loads(kernel.evaluate("__import__('json').dumps(_bench_report())")[1:-1])
    return execution, report


def fmt_s(seconds: float) -> str:
    return f"{seconds:.3f} s"


def check(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def analyse(execution: Execution, kernel_side: dict[str, Any], chunk_size: int) -> dict[str, Any]:
    view = execution.view_messages()
    opens = execution.of("comm_open")
    # The view is created, then displayed: everything up to its display_data is creation.
    shown = next((i for i, m in enumerate(view) if m.type == "display_data"), -1)
    creation, updates = view[: shown + 1], view[shown + 1 :]
    chunks = math.ceil(kernel_side["text_chars"] / chunk_size)
    parts = ("init", "deliver", "close")
    display_wall = sum(kernel_side.get(f"{part}_wall", 0.0) for part in parts)
    display_cpu = sum(kernel_side.get(f"{part}_cpu", 0.0) for part in parts)
    return {
        "chunks": chunks,
        "text_chars": kernel_side["text_chars"],
        "stream": kernel_side["stream"],
        "chunk_rate": chunks / kernel_side["stream"],
        "cell": execution.replied - execution.sent,
        "messages": len(execution.messages),
        "foreign": execution.foreign,
        "view_messages": len(view),
        "comm_open": len(opens),
        "comm_msg": len(execution.of("comm_msg")),
        "displays": len(execution.of("display_data", "update_display_data")),
        "max_all": max_per_window(m.time for m in execution.messages),
        "max_view": max_per_window(m.time for m in view),
        "max_updates": max_per_window(m.time for m in updates),
        "creation": len(creation),
        "updates": len(updates),
        "creation_opens": len([m for m in creation if m.type == "comm_open"]),
        "bytes": execution.total_bytes(),
        "view_bytes": execution.total_bytes(view),
        "final_bytes": execution.total_bytes(execution.of("update_display_data")),
        "display_wall": display_wall,
        "display_cpu": display_cpu,
        "delivers": kernel_side.get("deliver_calls", 0),
        "deliver_wall": kernel_side.get("deliver_wall", 0.0),
        "close_wall": kernel_side.get("close_wall", 0.0),
        "init_wall": kernel_side.get("init_wall", 0.0),
        "process_cpu": kernel_side["process_cpu"],
        "status": kernel_side["status"],
        "actions": kernel_side["actions"],
    }


def report(
    widgets: dict[str, Any], text: dict[str, Any] | None, response_chars: int, args: Any
) -> str:
    w = widgets
    share = w["display_wall"] / w["stream"]
    done = sum(status == "done" for status in w["actions"].values())
    setup = table(
        "Workload",
        ["chunks", "characters", "response chars", "chunk size", "asked rate", "actions"],
        [[
            f"{w['chunks']:,}", f"{w['text_chars']:,}", f"{response_chars:,}",
            args.chunk_size, f"{args.rate:,.0f} chunks/s",
            f"{len(w['actions'])} ({done} done), run {w['status']}",
        ]],
    )  # fmt: skip
    traffic = table(
        "Through the kernel (widgets)",
        ["measure", "value"],
        [
            ["stream duration (Turn → finish chunk)", fmt_s(w["stream"])],
            ["achieved chunk rate", f"{w['chunk_rate']:,.0f} chunks/s"],
            ["cell duration (request → reply)", fmt_s(w["cell"])],
            ["iopub messages, all", f"{w['messages']:,}"],
            ["  of which the view's (comm_open / comm_msg / displays)",
             f"{w['view_messages']:,} ({w['comm_open']} / {w['comm_msg']} / {w['displays']})"],
            ["  messages with another parent meanwhile", w["foreign"]],
            ["max in any 1 s, all messages", w["max_all"]],
            ["max in any 1 s, the view (creation included)", w["max_view"]],
            ["  the view's creation (messages up to its display_data; comm_open)",
             f"{w['creation']} ({w['creation_opens']})"],
            ["max in any 1 s, the view's updates after creation", w["max_updates"]],
            ["the view's updates per second, on average over the cell",
             f"{w['updates'] / w['cell']:.1f} ({w['updates']} in {fmt_s(w['cell'])})"],
            ["iopub bytes, all", f"{w['bytes']:,}"],
            ["  of which the final display update (static copy)", f"{w['final_bytes']:,}"],
            ["display work in the kernel (view create + deliver + close, wall)",
             f"{fmt_s(w['display_wall'])} ({w['delivers']} delivers: {fmt_s(w['deliver_wall'])}"
             f"; create {fmt_s(w['init_wall'])}; close {fmt_s(w['close_wall'])})"],
            ["  same, CPU of the cell's thread", fmt_s(w["display_cpu"])],
            ["kernel process CPU over the cell", fmt_s(w["process_cpu"])],
        ],
    )  # fmt: skip
    rows = [
        ["view messages per second (updates, after creation)", w["max_updates"],
         f"<= {TARGET_VIEW_RATE}", check(w["max_updates"] <= TARGET_VIEW_RATE)],
        ["view messages per second (everything, creation included)", w["max_view"],
         f"<= {TARGET_VIEW_RATE}", check(w["max_view"] <= TARGET_VIEW_RATE)],
        ["iopub traffic in total", f"{w['bytes'] / 1e6:.3f} MB", f"<= {TARGET_BYTES / 1e6:g} MB",
         check(w["bytes"] <= TARGET_BYTES)],
        ["display work / stream duration", f"{share:.1%}", f"< {TARGET_DISPLAY_SHARE:.0%}",
         check(share < TARGET_DISPLAY_SHARE)],
        ["chunks streamed", f"{w['chunks']:,}", ">= 2,000", check(w["chunks"] >= 2000)],
        ["achieved chunk rate", f"{w['chunk_rate']:,.0f}/s", f">= {0.9 * args.rate:,.0f}/s",
         check(w["chunk_rate"] >= 0.9 * args.rate)],
    ]  # fmt: skip
    parts = [setup, traffic]
    if text is not None:
        extra = w["process_cpu"] - text["process_cpu"]
        cpu_rows = [
            ["widgets", fmt_s(w["stream"]), f"{w['chunk_rate']:,.0f}",
             fmt_s(w["process_cpu"]), fmt_s(w["display_wall"]), w["messages"]],
            ["text", fmt_s(text["stream"]), f"{text['chunk_rate']:,.0f}",
             fmt_s(text["process_cpu"]), fmt_s(text["display_wall"]), text["messages"]],
            ["widgets - text", "", "",
             f"{extra:+.3f} s ({extra / w['stream']:+.1%} of the stream)", "", ""],
        ]  # fmt: skip
        parts.append(
            table(
                "Kernel CPU: widgets vs plain-text display (same cell)",
                ["display", "stream", "chunks/s", "process CPU", "view work (wall)", "messages"],
                cpu_rows,
            )
        )
    parts.append(table("Targets (issue 6, section 8)", ["check", "measured", "target", ""], rows))
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunk-size", type=int, default=8, help="characters per chunk")
    parser.add_argument("--rate", type=float, default=2000.0, help="chunks per second")
    parser.add_argument("--seed", type=int, default=1, help="workload seed (display_bench)")
    parser.add_argument("--no-text-run", action="store_true", help="skip the text-mode run")
    parser.add_argument(
        "--no-warmup", action="store_true", help="count first-use imports in the run"
    )
    args = parser.parse_args(argv)

    text, response_chars = workload(args.seed)
    delay = 1.0 / args.rate
    cell = f"%%cortex --script --chunk-size {args.chunk_size} --delay {delay:.6f}\n{text}\n"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {load:.2f}\n",
        flush=True,
    )
    with Kernel() as kernel:
        kernel.execute("%load_ext cortex_jupyter")
        kernel.execute(TOOLS)
        kernel.execute(INSTRUMENT)
        if not args.no_warmup:  # first use imports ipywidgets, markdown-it, pygments
            kernel.execute('%config CortexMagics.display = "widgets"')
            kernel.execute(WARMUP)
        execution, kernel_side = run_cell(kernel, cell, "widgets")
        widgets = analyse(execution, kernel_side, args.chunk_size)
        text_result = None
        if not args.no_text_run:
            execution, kernel_side = run_cell(kernel, cell, "text")
            text_result = analyse(execution, kernel_side, args.chunk_size)
    print(report(widgets, text_result, response_chars, args), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
