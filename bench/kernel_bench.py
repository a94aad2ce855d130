"""Benchmark of the live view through a real kernel: iopub messages, bytes, display work.

    python bench/kernel_bench.py [--chunk-size 8] [--rate 2000] [--seed 1]
                                 [--no-text-run] [--no-warmup] [--no-output-run]

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

A second scenario (issue 12, section 6) sends the same cell with two more actions at the start
of the thought: ``print_lines`` prints 1,000 lines over ~1 s (and logs 10 lines), and
``progress_ticks`` reports ``cortex_jupyter.progress`` 100 times a second for 2 s. Their output
is captured per action and reaches the view as coalesced ``action_output`` events; the bench
checks that none of it reaches the cell as a ``stream`` message, counts the ``action_output``
events per action, and shows where the view's messages in its busiest second went (by part).
Both scenarios are printed side by side against the same targets.

The script model paces its chunks against deadlines (``start + i * delay``), so
``--delay`` 0.5 ms really gives 2,000 chunks/s even though asyncio rounds each sleep up.
Prints markdown tables, with targets (issue 6, section 8; issue 12, section 6) and PASS/FAIL.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import table  # noqa: E402
from bench.display_bench import protocol_text  # noqa: E402
from tests.kernel.harness import Execution, Kernel, Message, max_per_window  # noqa: E402

TARGET_VIEW_RATE = 30  # messages a second, per view
TARGET_BYTES = 1_000_000  # iopub bytes, in all
TARGET_DISPLAY_SHARE = 0.25  # of the stream's duration
TARGET_OUTPUT_RATE = 20  # action_output events a second, per action (capture.FLUSH_HZ)

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

# Issue 12, section 6: tools whose output is captured per action.
import logging as _logging
import cortex_jupyter as _cj

@_registry.tool(name="print_lines")
def _print_lines(n: int) -> str:
    \"\"\"Print n lines over about n ms (and log every 100th).\"\"\"
    log = _logging.getLogger("kernel_bench")
    start = _time.perf_counter()
    for i in range(n):
        print(f"bench-line {i:04d} of {n}: some output a tool writes while it works")
        if i % 100 == 99:
            log.warning("bench-log %d", i)
        ahead = start + (i + 1) * 0.001 - _time.perf_counter()
        if ahead > 0:
            _time.sleep(ahead)
    return f"printed {n} lines"

@_registry.tool(name="progress_ticks")
def _progress_ticks(seconds: float, rate: float) -> str:
    \"\"\"Report progress rate times a second for seconds.\"\"\"
    total = int(seconds * rate)
    start = _time.perf_counter()
    for i in range(total):
        ahead = start + i / rate - _time.perf_counter()
        if ahead > 0:
            _time.sleep(ahead)
        _cj.progress(i + 1, total, f"bench-tick {i + 1}")
    return f"{total} reports"
"""

#: The two output tools' actions, put at the start of the thought (issue 12, section 6).
OUTPUT_ACTIONS = (
    '<action id="out">{"name": "print_lines", "parameters": {"n": 1000}}</action>\n'
    '<action id="prog">{"name": "progress_ticks", '
    '"parameters": {"seconds": 2.0, "rate": 100.0}}</action>\n'
)
#: What the output tools write; none of it may reach the cell as a ``stream`` message.
TOOL_MARKERS = ("bench-line", "bench-log", "bench-tick")

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

def _most(times):
    best = end = 0
    for first, at in enumerate(times):
        while end < len(times) and times[end] < at + 1.0:
            end += 1
        best = max(best, end - first)
    return best

def _bench_report():
    run = _cortex
    turn = next(e.time for e in run.events if e.kind == "turn")
    finish = next(e.time for e in run.events if e.kind == "chunk" and e.type == "finish")
    reply = next(e.content for e in run.events if e.kind == "message" and e.role == "assistant")
    outputs = {}
    for node in run.actions.values():
        times = sorted(e.time for e in run.events if e.kind == "action_output" and e.id == node.id)
        if not times:
            continue
        best = _most(times)
        gaps = [b - a for a, b in zip(times, times[1:])]
        progress = node.progress
        outputs[node.id] = {
            "min_gap": min(gaps, default=0.0),
            "min_gap_at": gaps.index(min(gaps)) + 2 if gaps else 0,
            "max_1s_but_last": best if len(times) < 2 else _most(times[:-1]),
            "events": len(times),
            "max_1s": best,
            "span": times[-1] - times[0],
            "stdout_lines": node.stdout.count("\\n"),
            "logs": len(node.logs),
            "progress": None if progress is None else [progress.done, progress.total],
        }
    return {
        **_bench,
        "process_cpu": _time.process_time() - _bench["process_cpu0"],
        "stream": finish - turn,
        "text_chars": len(reply),
        "status": run.status,
        "actions": {n.id: n.status for n in run.actions.values()},
        "outputs": outputs,
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


def workload(seed: int, with_output: bool = False) -> tuple[str, int]:
    """The cell's text and its response's length; ``with_output`` adds the output tools."""
    text, response_chars = protocol_text(random.Random(seed))
    if with_output:
        text = text.replace("<thought>", "<thought>" + OUTPUT_ACTIONS, 1)
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


def part_labels(execution: Execution) -> dict[str, str]:
    """comm id -> the view's part it belongs to: its own ``cortex-*`` class, else that of
    the nearest widget holding it as a child, else its model (a shared layout or style)."""
    names: dict[str, str] = {}
    for message in execution.of("comm_open"):
        model = message.state.get("_model_name")
        if message.comm_id is not None:
            names[message.comm_id] = str(model or "?").removesuffix("Model")
    classes = {
        comm: next((c.removeprefix("cortex-") for c in css.split() if c.startswith("cortex-")), "")
        for comm, css in execution.widget_classes().items()
    }
    parent: dict[str, str] = {}
    for message in execution.of("comm_open", "comm_msg"):
        kids = message.state.get("children")
        if message.comm_id is not None and isinstance(kids, list):
            for kid in kids:
                parent.setdefault(str(kid).removeprefix("IPY_MODEL_"), message.comm_id)
    labels: dict[str, str] = {}
    for comm in names:
        at: str | None = comm
        seen: set[str] = set()
        while at is not None and at not in seen and not classes.get(at):
            seen.add(at)
            at = parent.get(at)
        labels[comm] = classes[at] if at is not None and classes.get(at) else names[comm]
    return labels


def busiest_second(execution: Execution, messages: list[Message]) -> str:
    """What the view sent in its busiest second, by part: ``graph 9 (1 open)``, ..."""
    ordered = sorted(messages, key=lambda m: m.time)
    best, first, end = 0, 0, 0
    for start, message in enumerate(ordered):
        while end < len(ordered) and ordered[end].time < message.time + 1.0:
            end += 1
        if end - start > best:
            best, first = end - start, start
    labels = part_labels(execution)
    counts: Counter[str] = Counter()
    opens: Counter[str] = Counter()
    for message in ordered[first : first + best]:
        comm = message.comm_id
        label = message.type if comm is None else labels.get(comm, "?")
        counts[label] += 1
        opens[label] += message.type == "comm_open"
    return ", ".join(
        f"{label} {n}" + (f" ({opens[label]} open)" if opens[label] else "")
        for label, n in counts.most_common()
    )


def tool_text(execution: Execution) -> tuple[int, int]:
    """The output tools' text in the cell's ``stream`` messages: (messages carrying any of
    it at all, lines of it as the tools wrote them). The text view shows captured lines
    under their action (``  out │ bench-line ...``), so only the second is a leak there;
    the widget view writes no ``stream`` at all, so there both must be 0."""
    streams = execution.of("stream")
    carrying = sum(
        any(marker in str(m.content.get("text", "")) for marker in TOOL_MARKERS) for m in streams
    )
    raw = sum(
        line.lstrip().startswith(TOOL_MARKERS)
        for name in ("stdout", "stderr")
        for line in execution.stream(name).splitlines()
    )
    return carrying, raw


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
    streams = execution.of("stream")
    carrying, raw = tool_text(execution)
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
        "busiest": busiest_second(execution, view),
        "busiest_updates": busiest_second(execution, updates),
        "creation": len(creation),
        "updates": len(updates),
        "creation_opens": len([m for m in creation if m.type == "comm_open"]),
        "bytes": execution.total_bytes(),
        "view_bytes": execution.total_bytes(view),
        "final_bytes": execution.total_bytes(execution.of("update_display_data")),
        "stream_messages": len(streams),
        "stream_chars": sum(len(str(m.content.get("text", ""))) for m in streams),
        "leaked": carrying,
        "raw_lines": raw,
        "display_wall": display_wall,
        "display_cpu": display_cpu,
        "delivers": kernel_side.get("deliver_calls", 0),
        "deliver_wall": kernel_side.get("deliver_wall", 0.0),
        "close_wall": kernel_side.get("close_wall", 0.0),
        "init_wall": kernel_side.get("init_wall", 0.0),
        "process_cpu": kernel_side["process_cpu"],
        "status": kernel_side["status"],
        "actions": kernel_side["actions"],
        "outputs": kernel_side.get("outputs", {}),
    }


@dataclass
class Scenario:
    """One cell's results: the widget run, the text run (or None), the response's length."""

    name: str
    widgets: dict[str, Any]
    text: dict[str, Any] | None
    response_chars: int


def report(scenarios: Sequence[Scenario], args: Any) -> str:
    names = [s.name for s in scenarios]
    ws = [s.widgets for s in scenarios]

    def row(label: str, cell: Callable[[dict[str, Any]], Any]) -> list[Any]:
        return [label, *(cell(w) for w in ws)]

    def done(w: dict[str, Any]) -> int:
        return sum(status == "done" for status in w["actions"].values())

    setup = table(
        "Workload",
        ["scenario", "chunks", "characters", "response chars", "chunk size", "asked rate",
         "actions"],
        [[
            s.name, f"{s.widgets['chunks']:,}", f"{s.widgets['text_chars']:,}",
            f"{s.response_chars:,}", args.chunk_size, f"{args.rate:,.0f} chunks/s",
            f"{len(s.widgets['actions'])} ({done(s.widgets)} done), run {s.widgets['status']}",
        ] for s in scenarios],
    )  # fmt: skip
    traffic = table(
        "Through the kernel (widgets)",
        ["measure", *names],
        [
            row("stream duration (Turn → finish chunk)", lambda w: fmt_s(w["stream"])),
            row("achieved chunk rate", lambda w: f"{w['chunk_rate']:,.0f} chunks/s"),
            row("cell duration (request → reply)", lambda w: fmt_s(w["cell"])),
            row("iopub messages, all", lambda w: f"{w['messages']:,}"),
            row("  of which the view's (comm_open / comm_msg / displays)",
                lambda w: f"{w['view_messages']:,} ({w['comm_open']} / {w['comm_msg']} / "
                f"{w['displays']})"),
            row("  of which `stream` (characters)",
                lambda w: f"{w['stream_messages']} ({w['stream_chars']:,})"),
            row("  `stream` messages carrying the tools' text (lines as written)",
                lambda w: f"{w['leaked']} ({w['raw_lines']})"),
            row("  messages with another parent meanwhile", lambda w: w["foreign"]),
            row("max in any 1 s, all messages", lambda w: w["max_all"]),
            row("max in any 1 s, the view (creation included)", lambda w: w["max_view"]),
            row("  that second, by part", lambda w: w["busiest"]),
            row("  the view's creation (messages up to its display_data; comm_open)",
                lambda w: f"{w['creation']} ({w['creation_opens']})"),
            row("max in any 1 s, the view's updates after creation", lambda w: w["max_updates"]),
            row("  that second, by part", lambda w: w["busiest_updates"]),
            row("the view's updates per second, on average over the cell",
                lambda w: f"{w['updates'] / w['cell']:.1f} ({w['updates']} in "
                f"{fmt_s(w['cell'])})"),
            row("iopub bytes, all", lambda w: f"{w['bytes']:,}"),
            row("  of which the final display update (static copy)",
                lambda w: f"{w['final_bytes']:,}"),
            row("display work in the kernel (view create + deliver + close, wall)",
                lambda w: f"{fmt_s(w['display_wall'])} ({w['delivers']} delivers: "
                f"{fmt_s(w['deliver_wall'])}; create {fmt_s(w['init_wall'])}; close "
                f"{fmt_s(w['close_wall'])})"),
            row("  same, CPU of the cell's thread", lambda w: fmt_s(w["display_cpu"])),
            row("  display work / cell duration", lambda w: f"{w['display_wall'] / w['cell']:.1%}"),
            row("kernel process CPU over the cell", lambda w: fmt_s(w["process_cpu"])),
        ],
    )  # fmt: skip
    parts = [setup, traffic]
    outputs = [
        [s.name, action, f"{o['events']}", f"{o['max_1s']} ({o['max_1s_but_last']})",
         f"{fmt_s(o['span'])}; shortest gap {o['min_gap'] * 1e3:.1f} ms "
         f"(before event {o['min_gap_at']} of {o['events']})",
         f"{o['stdout_lines']:,}", f"{o['logs']}",
         "-" if o["progress"] is None else f"{o['progress'][0]:g} / {o['progress'][1]:g}"]
        for s in scenarios
        for action, o in s.widgets["outputs"].items()
    ]  # fmt: skip
    if outputs:
        parts.append(
            table(
                "The tools' captured output (widgets run; `action_output` events per action)",
                ["scenario", "action", "events", "max in any 1 s (without the last)",
                 "first → last",
                 "stdout lines kept", "log lines", "last progress"],
                outputs,
            )
        )  # fmt: skip
    cpu_rows: list[list[Any]] = []
    for s in scenarios:
        if s.text is None:
            continue
        w, t = s.widgets, s.text
        extra = w["process_cpu"] - t["process_cpu"]
        cpu_rows += [
            [s.name, "widgets", fmt_s(w["stream"]), f"{w['chunk_rate']:,.0f}",
             fmt_s(w["process_cpu"]), fmt_s(w["display_wall"]), w["messages"],
             f"{w['leaked']} ({w['raw_lines']})"],
            [s.name, "text", fmt_s(t["stream"]), f"{t['chunk_rate']:,.0f}",
             fmt_s(t["process_cpu"]), fmt_s(t["display_wall"]), t["messages"],
             f"{t['leaked']} ({t['raw_lines']})"],
            [s.name, "widgets - text", "", "",
             f"{extra:+.3f} s ({extra / w['stream']:+.1%} of the stream)", "", "", ""],
        ]  # fmt: skip
    if cpu_rows:
        parts.append(
            table(
                "Kernel CPU: widgets vs plain-text display (same cell)",
                ["scenario", "display", "stream", "chunks/s", "process CPU", "view work (wall)",
                 "messages", "`stream` with tool text (lines as written)"],
                cpu_rows,
            )
        )  # fmt: skip

    parts.append(targets(ws, names, args))
    return "\n".join(parts)


def targets(ws: Sequence[dict[str, Any]], names: Sequence[str], args: Any) -> str:
    """The targets table: a measured value and PASS/FAIL per scenario."""

    def target(
        label: str, goal: str, measure: Callable[[dict[str, Any]], tuple[str, bool | None]]
    ) -> list[str]:
        cells = [label, goal]
        for w in ws:
            shown, ok = measure(w)
            cells += [shown, "-" if ok is None else check(ok)]
        return cells

    def has_output(w: dict[str, Any]) -> bool:
        return bool(w["outputs"])

    def output_rate(w: dict[str, Any]) -> tuple[str, bool | None]:
        if not has_output(w):
            return "-", None
        most = max(o["max_1s_but_last"] for o in w["outputs"].values())
        return str(most), most <= TARGET_OUTPUT_RATE

    def output_rate_all(w: dict[str, Any]) -> tuple[str, bool | None]:
        if not has_output(w):
            return "-", None
        return str(max(o["max_1s"] for o in w["outputs"].values())), None

    def kept(w: dict[str, Any]) -> tuple[str, bool | None]:
        out, prog = w["outputs"].get("out"), w["outputs"].get("prog")
        if out is None and prog is None:
            return "-", None
        lines = out["stdout_lines"] if out else 0
        logs = out["logs"] if out else 0
        ticks = prog["progress"][0] if prog and prog["progress"] else 0
        ok = lines == 1000 and logs == 10 and ticks == 200
        return f"{lines:,} lines, {logs} logs, progress {ticks:g}", ok

    rows = [
        target("view messages per second (updates, after creation)", f"<= {TARGET_VIEW_RATE}",
               lambda w: (str(w["max_updates"]), w["max_updates"] <= TARGET_VIEW_RATE)),
        target("view messages per second (everything, creation included)",
               f"<= {TARGET_VIEW_RATE}",
               lambda w: (str(w["max_view"]), w["max_view"] <= TARGET_VIEW_RATE)),
        target("iopub traffic in total", f"<= {TARGET_BYTES / 1e6:g} MB",
               lambda w: (f"{w['bytes'] / 1e6:.3f} MB", w["bytes"] <= TARGET_BYTES)),
        target("display work / stream duration", f"< {TARGET_DISPLAY_SHARE:.0%}",
               lambda w: (f"{w['display_wall'] / w['stream']:.1%}",
                          w["display_wall"] / w["stream"] < TARGET_DISPLAY_SHARE)),
        target("`stream` messages with the tools' text (widgets: none at all)", "0",
               lambda w: (str(w["leaked"]), w["leaked"] == 0)),
        target("  the text run: tool lines as written (the view's own lines aside)", "0",
               lambda w: ("-", None) if w.get("text_raw") is None
               else (str(w["text_raw"]), w["text_raw"] == 0)),
        target("`action_output` events per action in any 1 s, the flusher's",
               f"<= {TARGET_OUTPUT_RATE}", output_rate),
        target("  same, with the one each action sends as it ends", "info", output_rate_all),
        target("output kept on the nodes", "1,000 lines, 10 logs, progress 200", kept),
        target("chunks streamed", ">= 2,000",
               lambda w: (f"{w['chunks']:,}", w["chunks"] >= 2000)),
        target("achieved chunk rate", f">= {0.9 * args.rate:,.0f}/s",
               lambda w: (f"{w['chunk_rate']:,.0f}/s", w["chunk_rate"] >= 0.9 * args.rate)),
    ]  # fmt: skip
    header = ["check", "target"]
    for name in names:
        header += [name, ""]
    return table("Targets (issue 6, section 8; issue 12, section 6)", header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunk-size", type=int, default=8, help="characters per chunk")
    parser.add_argument("--rate", type=float, default=2000.0, help="chunks per second")
    parser.add_argument("--seed", type=int, default=1, help="workload seed (display_bench)")
    parser.add_argument("--no-text-run", action="store_true", help="skip the text-mode runs")
    parser.add_argument(
        "--no-warmup", action="store_true", help="count first-use imports in the run"
    )
    parser.add_argument(
        "--no-output-run", action="store_true", help="skip the scenario with tool output"
    )
    args = parser.parse_args(argv)

    delay = 1.0 / args.rate
    cells: list[tuple[str, str, int]] = []
    for name, with_output in (("streamed", False), ("+ tool output", True)):
        if with_output and args.no_output_run:
            continue
        text, response_chars = workload(args.seed, with_output)
        cell = f"%%cortex --script --chunk-size {args.chunk_size} --delay {delay:.6f}\n{text}\n"
        cells.append((name, cell, response_chars))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {load:.2f}\n",
        flush=True,
    )
    scenarios: list[Scenario] = []
    with Kernel() as kernel:
        kernel.execute("%load_ext cortex_jupyter")
        kernel.execute(TOOLS)
        kernel.execute(INSTRUMENT)
        if not args.no_warmup:  # first use imports ipywidgets, markdown-it, pygments
            kernel.execute('%config CortexMagics.display = "widgets"')
            kernel.execute(WARMUP)
        for name, cell, response_chars in cells:
            execution, kernel_side = run_cell(kernel, cell, "widgets")
            widgets = analyse(execution, kernel_side, args.chunk_size)
            text_result = None
            if not args.no_text_run:
                execution, kernel_side = run_cell(kernel, cell, "text")
                text_result = analyse(execution, kernel_side, args.chunk_size)
                widgets["text_raw"] = text_result["raw_lines"]
            scenarios.append(Scenario(name, widgets, text_result, response_chars))
    print(report(scenarios, args), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
