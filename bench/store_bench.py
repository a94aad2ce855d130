"""Benchmarks of the run store: what recording costs a run, how fast search is, how big it gets.

    python bench/store_bench.py [--quick]

1. Recording overhead: the same 110-action run (one streamed turn of 110 tool calls whose
   outputs are JSON dicts and numpy arrays, then an answer) with and without a store,
   alternated; the target is at most 5% of the run's time.
2. ``%cortex runs TEXT`` over 10,000 stored runs (copies of a real stored 110-action run's
   row and search text, each with its own prompt words): the target is at most 100 ms.
3. The database's size per run (after a checkpoint), for that 110-action run.

Prints markdown tables with PASS/FAIL.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ms, table, verdict
from cortex_jupyter import commands, store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry

ACTIONS = 110
WORDS = [
    "amber",
    "basalt",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "glacier",
    "harbor",
    "iris",
    "jade",
    "kelp",
    "lagoon",
]


def registry() -> Registry:
    tools = Registry(builtins=False)

    @tools.tool
    async def measure(i: int) -> Any:
        await anyio.sleep(0.02)
        if i % 2:
            return np.arange(64, dtype=float) * i  # pickled
        return {"i": i, "values": list(range(20)), "note": f"reading {i}"}  # JSON

    return tools


def script() -> str:
    calls = "".join(
        f'step {i} <action id="m{i}">{{"name": "measure", "parameters": {{"i": {i}}}, '
        f'"output_key": "m{i}"}}</action>\n'
        for i in range(ACTIONS)
    )
    return (
        f"<thought>measuring everything\n{calls}</thought>\n--- next turn ---\n"
        "<response>All 110 readings are in.</response>"
    )


def one_run(kept: store.Store | None) -> float:
    agent = Agent(model=ScriptModel(script(), chunk_size=16, delay=0.002), registry=registry())
    start = time.perf_counter()
    run = agent.run_sync("measure the 110 readings", store=kept)
    took = time.perf_counter() - start
    assert run.status == "completed" and len(run.actions) == ACTIONS, run
    return took


def report_overhead(pairs: int, folder: Path) -> tuple[str, store.Store]:
    kept = store.open_store(folder / "overhead.db")
    one_run(kept)  # warm both paths (imports, the schema)
    one_run(None)
    bare, stored = [], []
    for _ in range(pairs):
        bare.append(one_run(None))
        stored.append(one_run(kept))
    kept.flush()
    b, s = statistics.median(bare), statistics.median(stored)
    overhead = s / b - 1
    rows = [
        ["110-action run, no store (median)", f"{b:.3f} s", "", ""],
        ["110-action run, stored (median)", f"{s:.3f} s", "", ""],
        ["recording overhead", f"{overhead * 100:+.1f}%", "<= 5%", verdict(overhead <= 0.05)],
    ]
    return table(f"Recording overhead ({pairs} pairs, alternated)", ["", "value", "target", ""],
                 rows), kept  # fmt: skip


def fill(path: Path, count: int, rng: random.Random) -> None:
    """``count`` copies of the one stored run's row and search text (its action names,
    outputs and answer), each with its own prompt words. The events, nodes and outputs
    are not copied: ``%cortex runs`` reads only ``runs`` and ``search``."""
    db = sqlite3.connect(path)
    (source,) = db.execute("SELECT id FROM runs").fetchone()
    now = time.time()
    # Read once: a search table (FTS5) has no index on ``run``, so selecting the source's
    # rows again for every copy would scan the whole, growing table each time.
    texts = db.execute(
        "SELECT field, text FROM search WHERE run = ? AND field != 'prompt'", (source,)
    ).fetchall()
    # Every column of the schema in force is copied but the three each copy has its own:
    # the bench follows the store's migrations instead of naming a column list of its own.
    columns = [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    own = {"id", "started", "prompt"}
    copied = ", ".join(f"? AS {name}" if name in own else name for name in columns)
    names = ", ".join(columns)
    db.execute("BEGIN")
    for n in range(count):
        new = f"copy{n:08d}"
        prompt = " ".join(rng.choice(WORDS) for _ in range(6)) + f" question {n}"
        values = {"id": new, "started": now - n, "prompt": prompt}
        db.execute(
            f"INSERT INTO runs ({names}) SELECT {copied} FROM runs WHERE id = ?",
            (*(values[name] for name in columns if name in own), source),
        )
        db.executemany(
            "INSERT INTO search (run, field, text) VALUES (?, ?, ?)",
            [(new, field, text) for field, text in texts],
        )
        db.execute("INSERT INTO search (run, field, text) VALUES (?, 'prompt', ?)", (new, prompt))
    db.execute("COMMIT")
    db.close()


def report_search(folder: Path, count: int) -> str:
    path = folder / "search.db"
    kept = store.open_store(path)
    agent = Agent(model=ScriptModel(script(), chunk_size=64), registry=registry())
    agent.run_sync("the one real run", store=kept)
    kept.close()
    fill(path, count, random.Random(7))
    store.configure(path)
    times = []
    for word in [*WORDS, "readings", "question 42", "amber dune"]:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()) as out:
            commands.show_runs(word, 20)
        times.append(time.perf_counter() - start)
        # Outside a kernel the table is its display bundle, printed: a row was found.
        assert "data-run=" in out.getvalue(), out.getvalue()[:500]
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        commands.show_runs(None, 20)
    newest = time.perf_counter() - start
    worst = max(times)
    rows = [
        ["%cortex runs TEXT, median", ms(statistics.median(times)), "", ""],
        ["%cortex runs TEXT, slowest", ms(worst), "<= 100 ms", verdict(worst <= 0.1)],
        ["%cortex runs (newest 20)", ms(newest), "<= 100 ms", verdict(newest <= 0.1)],
    ]
    return table(f"Search over {count + 1:,} stored runs", ["", "time", "target", ""], rows)


def report_size(kept: store.Store, folder: Path) -> str:
    path = folder / "overhead.db"
    runs = len(store.runs(limit=10_000, store=path))
    kept.close()  # a checkpoint: the WAL's pages are in the database now
    with sqlite3.connect(path) as db:
        db.execute("VACUUM")
    size = os.path.getsize(path)
    rows = [
        ["110-action runs stored", str(runs)],
        ["database size", f"{size / 1e6:.2f} MB"],
        ["per 110-action run", f"{size / runs / 1e3:.0f} kB"],
    ]
    return table("Database size", ["", "value"], rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer pairs and runs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        overhead, kept = report_overhead(3 if args.quick else 7, folder)
        print(overhead)
        print(report_size(kept, folder))
        print(report_search(folder, 1_000 if args.quick else 10_000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
