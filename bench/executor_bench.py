"""Heavy tools on a cluster (issue 13 §2): CPU-bound actions in threads vs on Dask.

    python bench/executor_bench.py [--actions N] [--seconds S] [--runs R] [--noops M]
                                   [--wait-quiet SECONDS]

Runs N CPU-bound actions (pure-Python loops of about S seconds each, calibrated here)
through the real runtime (an ``Agent`` replaying a one-turn script that writes them all)
three ways, side by side: as plain sync tools (kernel threads, sharing the GIL), with
``executor="dask"`` (the session's ``LocalCluster``: one single-threaded worker process
per core), and, for comparison, with a ``ProcessPoolExecutor`` of one process per core.
Then the per-action overhead on the cluster: M no-op actions one after another
(``mode: sync``), each node's ``started`` -> ``finished``. Prints markdown tables and
PASS/FAIL for the targets: >= 1.6× faster than threads, < 20 ms overhead per action.
The cluster's start and the workers' first import of cortex_jupyter are timed apart
(warm-up), not counted in the runs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ms, table, verdict
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.integrations import executors

# ---- the tools ------------------------------------------------------------------------------


def burn(loops: int) -> int:
    """CPU-bound pure Python: holds the GIL the whole time."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total


def noop() -> None:
    """Near-zero work: what remains is the cost of the trip."""


def calibrate(seconds: float) -> int:
    """Loops of ``burn`` that take about ``seconds`` here (best of three)."""
    loops = 200_000
    best = min(_timed(burn, loops) for _ in range(3))
    return max(1, int(loops * seconds / best))


def _timed(func: Any, *args: Any) -> float:
    start = time.perf_counter()
    func(*args)
    return time.perf_counter() - start


# ---- runs through the runtime ---------------------------------------------------------------


def script(name: str, count: int, parameters: dict[str, Any], mode: str = "async") -> str:
    body = json.dumps({"name": name, "parameters": parameters})
    return "".join(f'<action id="{name}{i}" mode="{mode}">{body}</action>' for i in range(count))


async def run_script(registry: Registry, text: str) -> tuple[float, Run]:
    agent = Agent(model=ScriptModel(text, chunk_size=4096), registry=registry)
    start = time.perf_counter()
    run = await agent.run("go")
    elapsed = time.perf_counter() - start
    failed = [n.error for n in run.actions.values() if n.status != "done"]
    if failed:
        raise SystemExit(f"an action failed: {failed[0]}")
    return elapsed, run


def registry_for(executor: Any) -> Registry:
    registry = Registry(builtins=False)
    registry.register(burn, executor=executor)
    registry.register(noop, executor=executor)
    return registry


def warm_up(registry: Registry, workers: int) -> float:
    """Start the executor's processes and let each import cortex_jupyter once."""
    elapsed, _ = anyio.run(run_script, registry, script("burn", workers * 2, {"loops": 1000}))
    return elapsed


def heavy_runs(
    ways: dict[str, Registry], actions: int, loops: int, runs: int
) -> dict[str, list[float]]:
    """Wall times of ``runs`` runs each way, interleaved (run 1 of every way, then run 2...),
    so that load from elsewhere on the machine falls on every way alike."""
    text = script("burn", actions, {"loops": loops})
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(runs):
        for name, registry in ways.items():
            times[name].append(anyio.run(run_script, registry, text)[0])
    return times


def noop_latencies(registry: Registry, count: int) -> list[float]:
    """Each no-op's ``started`` -> ``finished``, one at a time (no queueing)."""
    _, run = anyio.run(run_script, registry, script("noop", count, {}, mode="sync"))
    return [(n.finished or 0.0) - (n.started or 0.0) for n in run.actions.values()]


# ---- report -------------------------------------------------------------------------------


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def wait_quiet(seconds: float) -> float:
    """Wait up to ``seconds`` for the machine to be idle; the 1-minute load average."""
    deadline = time.monotonic() + seconds
    while _load() >= 0.5 and time.monotonic() < deadline:
        time.sleep(1.0)
    return _load()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--actions", type=int, default=6, help="CPU-bound actions per run")
    parser.add_argument("--seconds", type=float, default=0.2, help="work per action")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per way")
    parser.add_argument("--noops", type=int, default=50, help="no-op actions for the overhead")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to SECONDS for the 1-minute load average to fall below 0.5",
    )
    args = parser.parse_args(argv)

    from dask.system import CPU_COUNT

    load = wait_quiet(args.wait_quiet)
    print(
        f"machine: {platform.machine()}, {CPU_COUNT} cores, Python {platform.python_version()}, "
        f"load average {load:.2f}\n",
        flush=True,
    )
    loops = calibrate(args.seconds)
    one = min(_timed(burn, loops) for _ in range(3))

    start = time.perf_counter()
    executors.dask_client()
    cluster_start = time.perf_counter() - start
    ways: dict[str, Registry] = {
        "threads (plain sync tool)": registry_for(None),
        'executor="dask" (LocalCluster)': registry_for("dask"),
    }
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(CPU_COUNT, mp_context=spawn) as pool:
        ways[f"ProcessPoolExecutor({CPU_COUNT})"] = registry_for(pool)
        warm = {name: warm_up(registry, CPU_COUNT) for name, registry in ways.items()}
        times = heavy_runs(ways, args.actions, loops, args.runs)
        latencies = {name: noop_latencies(reg, args.noops) for name, reg in ways.items()}
    info = str(executors.cluster_info())
    executors.close_all()

    threads = statistics.median(next(iter(times.values())))
    rows = []
    for name, values in times.items():
        median = statistics.median(values)
        rows.append([name, args.actions, f"{median:.3f} s", f"{min(values):.3f} s",
                     f"{threads / median:.2f}×", f"{warm[name]:.2f} s"])  # fmt: skip
    heavy = table(
        f"{args.actions} CPU-bound actions of {one:.3f} s each (alone, in this process), "
        f"median of {args.runs} runs",
        ["where", "actions", "wall time (median)", "best", "speedup vs threads", "warm-up"],
        rows,
    )
    overhead_rows = []
    for name, values in latencies.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        row = [name, len(values), ms(statistics.median(values)), ms(p90), ms(max(values))]
        overhead_rows.append(row)
    overhead = table(
        f"Per-action overhead: {args.noops} no-op actions one after another (started -> finished)",
        ["where", "actions", "median", "p90", "max"],
        overhead_rows,
    )
    dask_name = 'executor="dask" (LocalCluster)'
    speedup = threads / statistics.median(times[dask_name])
    best_speedup = min(next(iter(times.values()))) / min(times[dask_name])
    per_action = statistics.median(latencies[dask_name])
    speed_ok, overhead_ok = speedup >= 1.6, per_action < 0.020
    targets = table(
        "Targets (issue 13 §2)",
        ["check", "measured", "target", "result"],
        [
            [
                "dask vs threads, CPU-bound (medians)",
                f"{speedup:.2f}×",
                ">= 1.6×",
                verdict(speed_ok),
            ],
            [
                "dask vs threads, CPU-bound (best runs; for information)",
                f"{best_speedup:.2f}×",
                ">= 1.6×",
                "-",
            ],
            [
                "overhead per action on the cluster (median)",
                ms(per_action),
                "< 20 ms",
                verdict(overhead_ok),
            ],
        ],
    )
    print(f"cluster: {info}; started in {cluster_start:.2f} s\n")
    print(heavy)
    print(overhead)
    print(targets)
    after = _load()
    print(f"load average after: {after:.2f}")
    if max(load, after) >= 0.5:
        print(
            "note: other processes were using the cores (load average >= 0.5); the speed-up "
            "needs both cores free and reads low on a busy machine (see --wait-quiet)"
        )
    return 1 if "FAIL" in targets else 0


if __name__ == "__main__":  # required: the cluster's and the pool's processes are spawned
    sys.exit(main())
