"""Benchmark of the pure display layer: reduce events, redraw at 25 Hz, markdown cost.

    python bench/display_bench.py [--chunk 8] [--rate 250] [--seed N]

A simulated model writes a ~2 KB thought with 10 actions in it, then a ~16 KB markdown
response (headings, lists, tables, code), ``--chunk`` characters per chunk at ``--rate``
chunks per second of simulated time; the actions run (hand-made runtime events) while
it writes. Every event goes through the real parser and ``ViewState.apply``; every 40 ms
of simulated time a view redraws the parts whose version moved (header, thought, graph
+ details, response), as the widget view will. The response is rendered twice over the
same redraws, incrementally (``IncrementalMarkdown``) and in full each time
(``render_markdown``), which is what NOTES.md measured at 1.4 s vs 3.9 s in a kernel.
Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ms, table
from cortex_jupyter.display import (
    IncrementalMarkdown,
    ViewState,
    details_html,
    graph_svg,
    header_html,
    render_markdown,
    thought_html,
)
from cortex_jupyter.protocol import Parser
from cortex_jupyter.runtime import ActionStatus, End

REDRAW = 1 / 25


def response_text(rng: random.Random, size: int = 16_000) -> str:
    """Markdown like a model's long answer: sections, lists, a table, code, $refs."""
    words = [
        "the",
        "results",
        "show",
        "that",
        "search",
        "found",
        "several",
        "relevant",
        "sources",
        "with",
        "clear",
        "evidence",
    ]
    blocks: list[str] = []
    n = 0
    while sum(map(len, blocks)) < size:
        n += 1
        kind = n % 6
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(30, 70)))
        if kind == 0:
            blocks.append(f"## Section {n}\n\n{sentence.capitalize()}, see $r{n % 10}.")
        elif kind == 1:
            blocks.append("\n".join(f"- **item {i}**: {sentence[:60]}" for i in range(5)))
        elif kind == 2:
            rows = "\n".join(f"| {i} | {sentence[:20]} | {i * 3.5} |" for i in range(6))
            blocks.append(f"| # | what | score |\n|---|---|---|\n{rows}")
        elif kind == 3:
            code = "\n".join(f"    total += item_{i}.score  # {i}" for i in range(8))
            blocks.append(
                f"```python\ndef score(items):\n    total = 0\n{code}\n    return total\n```"
            )
        else:
            blocks.append(sentence.capitalize() + ". " + sentence[:80] + " *emphasis* and `code`.")
    return "\n\n".join(blocks)


def protocol_text(rng: random.Random) -> tuple[str, int]:
    thought = []
    for i in range(10):
        thought.append(
            " ".join(
                rng.choice(["i", "should", "check", "the", "data", "first"]) for _ in range(30)
            )
        )
        deps = [f"a{i - 1}"] if i % 3 == 2 else []
        body = {
            "name": f"tool_{i}",
            "parameters": {"q": f"query {i}"},
            "output_key": f"r{i}",
            "depends_on": deps,
        }
        thought.append(f'<action id="a{i}">{json.dumps(body)}</action>')
    response = response_text(rng)
    return f"<thought>{chr(10).join(thought)}</thought>\n<response>\n{response}\n</response>", len(
        response
    )


@dataclass
class Timer:
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.samples.setdefault(name, []).append(seconds)

    def total(self, name: str) -> float:
        return sum(self.samples.get(name, []))


def simulate(chunk: int, rate: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    text, response_chars = protocol_text(rng)
    chunks = [text[i : i + chunk] for i in range(0, len(text), chunk)]
    parser = Parser("cortex")
    state = ViewState(model="bench")
    incremental = IncrementalMarkdown()
    timer = Timer()
    seen: dict[str, int] = {}
    runtime: list[ActionStatus] = []  # pending runtime events, by time
    values = {f"r{i}": f"result {i}" for i in range(10)}
    full_chars = 0
    next_redraw = REDRAW
    events = 0
    clock = 0.0
    for index, piece in enumerate([*chunks, ""]):
        clock = index / rate
        batch: list[tuple[Any, float]] = []
        if piece:
            batch += [(e, clock) for e in parser.feed(piece)]
        else:
            batch += [(e, clock) for e in parser.close()]
        for event, _ in batch:
            if event.kind == "action":
                start = clock + 0.02
                end = start + rng.uniform(0.3, 1.5)
                runtime += [
                    ActionStatus(event.action.id, "running", start, attempt=1),
                    ActionStatus(event.action.id, "done", end, attempt=1, output="'ok'"),
                ]
        due = sorted((e for e in runtime if e.time <= clock), key=lambda e: e.time)
        runtime = [e for e in runtime if e.time > clock]
        started = time.perf_counter()
        for event, at in batch:
            state.apply(event, at)
        for event in due:
            state.apply(event)
        timer.add("reduce", time.perf_counter() - started)
        events += len(batch) + len(due)
        if clock >= next_redraw or not piece:
            next_redraw += REDRAW
            full_chars += redraw(state, seen, incremental, values, clock, timer)
    for event in sorted(runtime, key=lambda e: e.time):
        state.apply(event)
    state.apply(End("completed", max([clock, *(e.time for e in runtime)])))
    full_chars += redraw(state, seen, incremental, values, clock, timer)
    return {
        "chunks": len(chunks),
        "events": events,
        "response_chars": response_chars,
        "text_chars": len(text),
        "timer": timer,
        "incremental": incremental,
        "full_chars": full_chars,
        "simulated": clock,
    }


def redraw(
    state: ViewState,
    seen: dict[str, int],
    incremental: IncrementalMarkdown,
    values: dict[str, str],
    now: float,
    timer: Timer,
) -> int:
    """One tick of a view: redraw what changed (and the clock-driven parts)."""
    changed = state.changed_since(seen)
    seen.update(state.versions)
    started = time.perf_counter()
    header_html(state, now)
    if "thought" in changed:
        thought_html(state)
    if "graph" in changed or state.ticking:
        graph_svg(state, now)
    if "details" in changed:
        details_html(state)
    parts = time.perf_counter() - started
    full_chars = 0
    if "response" in changed:
        body = state.body
        started = time.perf_counter()
        incremental.render(body, values)
        timer.add("markdown_incremental", time.perf_counter() - started)
        started = time.perf_counter()
        render_markdown(body, values)
        timer.add("markdown_full", time.perf_counter() - started)
        full_chars = len(body)
    timer.add("other_parts", parts)
    return full_chars


def report(result: dict[str, Any]) -> str:
    timer: Timer = result["timer"]
    inc: IncrementalMarkdown = result["incremental"]
    redraws = len(timer.samples["other_parts"])
    md_redraws = len(timer.samples.get("markdown_full", []))
    inc_s, full_s = timer.samples["markdown_incremental"], timer.samples["markdown_full"]
    other = timer.total("other_parts")
    setup = table(
        "Workload",
        ["chunks", "events", "protocol chars", "response chars", "simulated s", "redraws (25 Hz)"],
        [[
            result["chunks"], result["events"], result["text_chars"], result["response_chars"],
            f"{result['simulated']:.1f}", f"{redraws} ({md_redraws} with a new response)",
        ]],
    )  # fmt: skip
    markdown = table(
        "Response markdown over the stream: incremental vs full re-render per redraw",
        ["strategy", "total", "mean / redraw", "p95 / redraw", "max", "chars parsed", "restarts"],
        [
            [
                "incremental (IncrementalMarkdown)", ms(sum(inc_s)), ms(statistics.mean(inc_s)),
                ms(_p95(inc_s)), ms(max(inc_s)), f"{inc.parsed_chars:,}", inc.restarts,
            ],
            [
                "full render_markdown each redraw", ms(sum(full_s)), ms(statistics.mean(full_s)),
                ms(_p95(full_s)), ms(max(full_s)), f"{result['full_chars']:,}", "-",
            ],
            ["speed-up", f"{sum(full_s) / sum(inc_s):.1f}×", "", "", "", "", ""],
        ],
    )  # fmt: skip
    per = redraws or 1
    total_incremental = timer.total("reduce") + other + sum(inc_s)
    budget = table(
        "Whole display cost (reduce + every redraw, incremental markdown)",
        ["part", "total", "per redraw / event"],
        [
            ["reduce (ViewState.apply)", ms(timer.total("reduce")),
             f"{timer.total('reduce') / result['events'] * 1e6:.1f} µs / event"],
            ["header + thought + graph SVG + details", ms(other), ms(other / per)],
            ["response (incremental markdown)", ms(sum(inc_s)), ms(sum(inc_s) / per)],
            ["all", ms(total_incremental), ms(total_incremental / per)],
        ],
    )  # fmt: skip
    return "\n".join([setup, markdown, budget])


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunk", type=int, default=8, help="characters per chunk")
    parser.add_argument("--rate", type=float, default=250.0, help="chunks per simulated second")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    # Import and look up Pygments' lexers once, so neither strategy pays for it.
    render_markdown("```python\nx = 1\n```")
    IncrementalMarkdown().render("```python\nx = 1\n```")
    print(report(simulate(args.chunk, args.rate, args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
