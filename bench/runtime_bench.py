"""Benchmarks of the action runtime: dispatch latency, scheduling efficiency, overhead.

    python bench/runtime_bench.py [--quick] [--seed N]

Prints markdown tables with the targets of issue 4 and PASS/FAIL. The streaming
traces simulate a model by feeding protocol text through the real parser at a token
rate (1 token = 4 characters, one token per chunk) with anyio sleeps.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ms, quantile, table, verdict
from cortex_jupyter.protocol import Parser
from cortex_jupyter.protocol.events import Action, ActionReady
from cortex_jupyter.runtime import Registry, Run, Scheduler

# ---- 1. dispatch latency ---------------------------------------------------------------


async def dispatch_latency(samples: int, sync_tool: bool) -> list[float]:
    """Time from feeding the chunk that closes ``</action>`` to the tool's first line."""
    registry = Registry(builtins=False)
    first_line: list[float] = []
    done = anyio.Event()

    if sync_tool:

        def probe() -> None:
            first_line.append(time.perf_counter())
            anyio.from_thread.run_sync(done.set)

    else:

        async def probe() -> None:  # type: ignore[misc]
            first_line.append(time.perf_counter())
            done.set()

    registry.register(probe, name="probe")
    parser = Parser(dialect="cortex")
    latencies = []
    async with Scheduler(registry=registry) as scheduler:
        for event in parser.feed("<thought>measuring "):
            scheduler.submit(event)
        for i in range(samples):
            opening = f'<action id="p{i}">{{"name": "probe", "parameters": {{}}'
            for event in parser.feed(opening):
                scheduler.submit(event)
            await anyio.sleep(0)
            done = anyio.Event()
            start = time.perf_counter()
            for event in parser.feed("}</action> and "):
                scheduler.submit(event)
            await done.wait()
            latencies.append(first_line[-1] - start)
        for event in parser.feed("</thought>") + parser.close():
            scheduler.submit(event)
    return latencies


# ---- 2. scheduling efficiency on streaming traces ------------------------------------------


@dataclass
class Trace:
    text_parts: list[str]
    actions: list[str]
    deps: dict[str, list[str]]


@dataclass
class TraceResult:
    rate: int
    n_actions: int
    measured: float
    ideal: float
    after_stream: float
    one_by_one: float
    parse: float
    dispatch: float
    wakeup: float
    stream_end: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def efficiency(self) -> float:
        return self.ideal / self.measured


def make_trace(rng: random.Random) -> Trace:
    n = rng.randint(3, 12)
    parts: list[str] = ["<thought>"]
    deps: dict[str, list[str]] = {}
    ids: list[str] = []
    for i in range(n):
        parts.append("thinking " * rng.randint(2, 12))
        aid = f"a{i}"
        earlier = [x for x in ids if rng.random() < 0.3][:2]
        implicit = [x for x in ids if x not in earlier and rng.random() < 0.15][:1]
        params: list[str] = [f'"seconds": {rng.uniform(0.05, 0.6):.3f}']
        params += [f'"in_{x}": "$out_{x}"' for x in implicit]
        depends = ", ".join(f'"{x}"' for x in earlier)
        parts.append(
            f'<action id="{aid}">{{"name": "work", "parameters": {{{", ".join(params)}}}, '
            f'"depends_on": [{depends}], "output_key": "out_{aid}"}}</action>'
        )
        deps[aid] = earlier + implicit
        ids.append(aid)
    parts.append("done thinking</thought><response>" + "answer " * rng.randint(5, 30))
    parts.append("</response>")
    return Trace(parts, ids, deps)


def make_registry() -> Registry:
    registry = Registry(builtins=False)

    @registry.tool
    async def work(seconds: float, **inputs: Any) -> float:
        await anyio.sleep(seconds)
        return seconds

    return registry


async def run_trace(trace: Trace, rate: int) -> TraceResult:
    text = "".join(trace.text_parts)
    chunks = [text[i : i + 4] for i in range(0, len(text), 4)]
    parser = Parser(dialect="cortex")
    arrival: dict[str, float] = {}
    parse_time = 0.0
    run = Run()
    gap = 1.0 / rate
    async with Scheduler(registry=make_registry(), run=run) as scheduler:
        t0 = time.monotonic()
        next_at = t0
        for chunk in chunks:
            next_at += gap
            delay = next_at - time.monotonic()
            await anyio.sleep(max(0.0, delay))
            fed = time.monotonic()
            events = parser.feed(chunk)
            parsed = time.monotonic()
            for event in events:
                if isinstance(event, ActionReady):
                    arrival[event.action.id] = fed
                scheduler.submit(event)
            parse_time += parsed - fed
        for event in parser.close():
            scheduler.submit(event)
        stream_end = time.monotonic()
    nodes = run.actions
    last_finish = max(n.finished or 0.0 for n in nodes.values())
    measured = max(stream_end, last_finish) - t0
    duration = {i: (n.finished or 0.0) - (n.started or 0.0) for i, n in nodes.items()}

    ideal_finish: dict[str, float] = {}
    for aid in trace.actions:  # stream order is a topological order
        start = max([arrival[aid]] + [ideal_finish[d] for d in nodes[aid].depends_on])
        ideal_finish[aid] = start + duration[aid]
    ideal = max(stream_end, *ideal_finish.values()) - t0

    longest: dict[str, float] = {}
    for aid in trace.actions:
        longest[aid] = duration[aid] + max([longest[d] for d in nodes[aid].depends_on] or [0.0])
    after_stream = stream_end - t0 + max(longest.values())
    one_by_one = stream_end - t0 + sum(duration.values())

    dispatch = wakeup = 0.0
    for aid in trace.actions:
        node = nodes[aid]
        dep_ready = max([nodes[d].finished or 0.0 for d in node.depends_on] or [0.0])
        ready = max(arrival[aid], dep_ready)
        lag = (node.started or ready) - ready
        if dep_ready > arrival[aid]:
            wakeup += lag
        else:
            dispatch += lag
    assert all(n.status == "done" for n in nodes.values()), run
    return TraceResult(
        rate, len(trace.actions), measured, ideal, after_stream, one_by_one,
        parse_time, dispatch, wakeup, stream_end - t0,
    )  # fmt: skip


async def efficiency(rates: Sequence[int], traces: int, batch: int, seed: int) -> list[TraceResult]:
    rng = random.Random(seed)
    results: list[TraceResult] = []
    for rate in rates:
        pending = [make_trace(rng) for _ in range(traces)]
        for start in range(0, traces, batch):
            group = pending[start : start + batch]
            out: list[TraceResult] = []

            async def one(trace: Trace, into: list[TraceResult] = out, at: int = rate) -> None:
                into.append(await run_trace(trace, at))

            async with anyio.create_task_group() as tg:
                for trace in group:
                    tg.start_soon(one, trace)
            results += out
    return results


# ---- 3. overhead and scale ---------------------------------------------------------------


async def dag_overhead(n: int, seed: int) -> tuple[float, Run]:
    """Wall time to schedule and run ``n`` no-op tools in a random DAG."""
    rng = random.Random(seed)
    registry = Registry(builtins=False)

    @registry.tool
    async def noop(**inputs: Any) -> None:
        return None

    events = []
    for i in range(n):
        deps = tuple(f"n{j}" for j in rng.sample(range(i), min(i, rng.randint(0, 3))))
        events.append(ActionReady(Action(id=f"n{i}", name="noop", depends_on=deps)))
    run = Run()
    start = time.perf_counter()
    async with Scheduler(registry=registry, run=run) as scheduler:
        for event in events:
            scheduler.submit(event)
    return time.perf_counter() - start, run


async def many_concurrent(n: int, seconds: float) -> tuple[float, Run]:
    registry = Registry(builtins=False)

    @registry.tool
    async def nap() -> None:
        await anyio.sleep(seconds)

    run = Run()
    start = time.perf_counter()
    async with Scheduler(registry=registry, run=run) as scheduler:
        for i in range(n):
            scheduler.submit(ActionReady(Action(id=f"c{i}", name="nap")))
    return time.perf_counter() - start, run


# ---- report ------------------------------------------------------------------------------


def report_latency(samples: int) -> str:
    rows = []
    for label, sync_tool in (("async tool", False), ("sync tool (worker thread)", True)):
        values = anyio.run(dispatch_latency, samples, sync_tool)
        median, p99 = statistics.median(values), quantile(values, 0.99)
        rows.append(
            [label, samples, ms(median, 3), ms(p99, 3), ms(max(values), 3),
             verdict(median < 0.001 and p99 < 0.005)]
        )  # fmt: skip
    return table(
        "Dispatch latency: chunk closing </action> fed -> tool's first line "
        "(target median < 1 ms, p99 < 5 ms)",
        ["tool", "samples", "median", "p99", "max", "result"],
        rows,
    )


def report_efficiency(results: list[TraceResult]) -> str:
    rows = []
    for rate in sorted({r.rate for r in results}):
        rs = [r for r in results if r.rate == rate]
        eff = [r.efficiency for r in rs]
        med, worst = statistics.median(eff), min(eff)
        rows.append(
            [
                rate,
                len(rs),
                f"{statistics.median([r.stream_end for r in rs]):.2f} s",
                f"{med:.4f}",
                f"{worst:.4f}",
                f"{statistics.median([r.after_stream / r.measured for r in rs]):.2f}x",
                f"{statistics.median([r.one_by_one / r.measured for r in rs]):.2f}x",
                verdict(med >= 0.99 and worst >= 0.97),
            ]
        )
    all_eff = [r.efficiency for r in results]
    losses = [
        [
            rate,
            ms(statistics.mean([r.measured - r.ideal for r in results if r.rate == rate]), 3),
            ms(statistics.mean([r.parse for r in results if r.rate == rate]), 3),
            ms(statistics.mean([r.dispatch for r in results if r.rate == rate]), 3),
            ms(statistics.mean([r.wakeup for r in results if r.rate == rate]), 3),
        ]
        for rate in sorted({r.rate for r in results})
    ]
    header = ["tokens/s", "traces", "median stream", "median eff.", "worst eff."]
    header += ["speedup vs after-stream", "speedup vs one-by-one", "result"]
    summary = table(
        "Scheduling efficiency on streaming traces (3-12 actions, 0.05-0.6 s each; "
        "target median >= 0.99, worst >= 0.97)",
        header,
        rows,
    )
    overall = f"All traces: median {statistics.median(all_eff):.4f}, worst {min(all_eff):.4f}."
    loss_header = ["tokens/s", "measured - ideal", "parse (in feed, whole trace)"]
    loss_header += ["dispatch lag (sum)", "dependency wake-up lag (sum)"]
    return "\n".join(
        [summary, overall, "", table("Where the loss goes (mean per trace)", loss_header, losses)]
    )


def report_scale(quick: bool, seed: int) -> str:
    rows = []
    overhead, run = anyio.run(dag_overhead, 1000, seed)
    ok = all(n.status == "done" for n in run.actions.values())
    rows.append(["1,000-action DAG of no-op tools", f"{overhead:.3f} s", "< 0.2 s",
                 verdict(ok and overhead < 0.2)])  # fmt: skip
    n = 2000 if quick else 10_000
    elapsed, run = anyio.run(many_concurrent, n, 0.5)
    ok = sum(n.status == "done" for n in run.actions.values()) == n
    rows.append([f"{n:,} concurrent actions sleeping 0.5 s", f"{elapsed:.3f} s",
                 "all complete", verdict(ok)])  # fmt: skip
    return table("Overhead and scale", ["case", "wall time", "target", "result"], rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples and traces")
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args(argv)
    samples = 300 if args.quick else 2000
    traces = 10 if args.quick else 40
    sections: list[Callable[[], str]] = [
        lambda: report_latency(samples),
        lambda: report_efficiency(anyio.run(efficiency, (60, 200, 2000), traces, 10, args.seed)),
        lambda: report_scale(args.quick, args.seed),
    ]
    out = []
    for section in sections:
        text = section()
        print(text, flush=True)
        out.append(text)
    return 1 if "FAIL" in "".join(out) else 0


if __name__ == "__main__":
    sys.exit(main())
