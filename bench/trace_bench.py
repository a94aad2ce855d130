"""What tracing costs a run: a 110-action run with tracing unplugged, off, and on.

    python bench/trace_bench.py [--rounds N]

The run: an agent whose (script) model streams one reply of 110 actions, 16 characters a
chunk with a 1 ms pause between chunks: 55 async tools that sleep 5-25 ms and 55 sync
tools that compute for a moment in worker threads, a quarter of them using an earlier
output (``$name``), and the answer after them. Three modes, each in a process of
its own (OpenTelemetry's global provider can be set only once), alternated ``--rounds``
times so the machine's load falls on all three alike:

- **unplugged**: no observer factory registered at all (as if tracing did not exist);
- **off**: OpenTelemetry imported, no tracer provider configured (the API's no-op): the
  factory finds no provider and makes no observer;
- **on**: the SDK's ``TracerProvider`` with a ``BatchSpanProcessor`` and an in-memory
  exporter: every run is 112 spans (the run, its chat, 110 tools).

Prints a markdown table: the median wall time and CPU time of a run per mode, and the
overhead against unplugged. The target (issue 28): on costs at most 3% of the run's wall
time; off costs nothing measurable.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import table, verdict

ACTIONS = 110
MODES = ("unplugged", "off", "on")
RUNS_PER_PROCESS = 3


def script(seed: int = 28) -> str:
    """The reply: 110 actions, half async sleeps, half sync work, some using outputs."""
    rng = random.Random(seed)
    parts = ["<thought>planning the work</thought>\n"]
    for i in range(ACTIONS):
        if i % 2:
            params: dict[str, Any] = {"seconds": round(rng.uniform(0.005, 0.025), 3)}
            name = "nap"
        else:
            params = {"n": rng.randint(2_000, 6_000)}
            name = "crunch"
        if i > 4 and rng.random() < 0.25:
            params["after"] = f"$out{rng.randrange(i)}"
        body = json.dumps({"name": name, "parameters": params, "output_key": f"out{i}"})
        parts.append(f'<action id="a{i}">{body}</action>\n')
    parts.append('<response final="true">all 110 done</response>')
    return "".join(parts)


def one_process(mode: str, runs: int) -> list[tuple[float, float]]:
    """``runs`` measured runs (after one warm-up) in this process: (wall, cpu) seconds."""
    import anyio

    from cortex_jupyter.models import ScriptModel
    from cortex_jupyter.runtime import Agent, Registry
    from cortex_jupyter.runtime.core.record import observer as observe

    if mode == "unplugged":
        observe._factories.clear()
    import opentelemetry.trace as otel

    exporter = None
    if mode == "on":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        otel.set_tracer_provider(provider)

    registry = Registry(builtins=False)

    @registry.tool
    async def nap(seconds: float, after: Any = None) -> float:
        await anyio.sleep(seconds)
        return seconds

    @registry.tool
    def crunch(n: int, after: Any = None) -> int:
        return sum(i * i for i in range(n))

    text = script()
    out: list[tuple[float, float]] = []
    for i in range(runs + 1):
        agent = Agent(registry=registry, model=ScriptModel(text, chunk_size=16, delay=0.001))
        wall, cpu = time.perf_counter(), time.process_time()
        run = agent.run_sync("do the work")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert run.status == "completed", run.reason
        assert sum(n.status == "done" for n in run.actions.values()) == ACTIONS
        if i:  # the first run warms up imports and caches
            out.append((wall, cpu))
    if exporter is not None:
        provider.force_flush()
        spans = exporter.get_finished_spans()
        assert len(spans) >= (runs + 1) * (ACTIONS + 2), len(spans)
    return out


def measure(rounds: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            done = subprocess.run(
                [sys.executable, __file__, "--child", mode],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            results[mode] += [tuple(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]
    return results


def report(results: dict[str, list[tuple[float, float]]]) -> str:
    base_wall = statistics.median(w for w, _ in results["unplugged"])
    base_cpu = statistics.median(c for _, c in results["unplugged"])
    rows = []
    for mode in MODES:
        wall = statistics.median(w for w, _ in results[mode])
        cpu = statistics.median(c for _, c in results[mode])
        wall_over = (wall / base_wall - 1) * 100
        cpu_over = (cpu / base_cpu - 1) * 100
        target = {"unplugged": "baseline", "off": "nothing measurable", "on": "≤ 3% wall"}[mode]
        ok = mode == "unplugged" or (wall_over <= 3.0 if mode == "on" else wall_over <= 1.0)
        rows.append([
            mode, len(results[mode]), f"{wall:.3f} s", f"{wall_over:+.1f}%", f"{cpu:.3f} s",
            f"{cpu_over:+.1f}%", target, "—" if mode == "unplugged" else verdict(ok),
        ])  # fmt: skip
    header = ["tracing", "runs", "wall (median)", "wall vs unplugged", "CPU (median)",
              "CPU vs unplugged", "target", "result"]  # fmt: skip
    return table(f"Tracing a {ACTIONS}-action run", header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=4, help="processes per mode")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(one_process(args.child, RUNS_PER_PROCESS)))
        return 0
    text = report(measure(args.rounds))
    print(text)
    return 1 if "FAIL" in text else 0


if __name__ == "__main__":
    sys.exit(main())
