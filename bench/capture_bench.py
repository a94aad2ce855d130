"""Benchmark of captured output (issue 19 §5): what a tool's printing costs inside a run.

    python bench/capture_bench.py [--lines 1000,10000,100000] [--runs 3]

A sync tool prints N short lines (``for i in range(n): print(i)``). It is timed three ways:

- **direct**: the function called directly, its output going to an in-memory stream (the
  cheapest place output can go, so the ratios below are if anything pessimistic);
- **runtime**: one ``sync`` action running it through ``Agent(model=ScriptModel(...)).run``
  (parser, scheduler, capture, run record; no IPython);
- **cell (text)**: the same action as a ``%%cortex --script`` cell in a real
  ``InteractiveShell`` (session, the text view, variables), the whole cell timed;
- **cell (widgets)**: the same cell with ``%config CortexMagics.display = "widgets"`` (the
  widget view reduces the events, redraws and makes its static copy; no front end is
  attached, so nothing is sent).

For the two captured paths the table gives the tool's own time (the node's ``started`` to
``finished``) and the whole call, each against the direct call, plus the ``action_output``
events the node sent and the characters it kept. Best of ``--runs``. Target: the tool's
time for 100,000 lines within 10x of the direct call.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import table

TARGET_RATIO = 10.0


def print_lines(n: int) -> int:
    """Print the numbers 0 to n - 1, one a line."""
    for i in range(n):
        print(i)
    return n


def script(n: int) -> str:
    return (
        f'<action type="tool" mode="sync" id="p">'
        f'{{"name": "print_lines", "parameters": {{"n": {n}}}}}</action>'
        "<response>printed</response>"
    )


def best(runs: int, measure: Callable[[], tuple[float, ...]]) -> tuple[float, ...]:
    results = [measure() for _ in range(runs)]
    return min(results, key=lambda r: r[0])


def direct(n: int) -> tuple[float]:
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        print_lines(n)
        return (time.perf_counter() - start,)


def node_figures(run: Any) -> tuple[float, int, int]:
    node = run.actions["p"]
    assert node.status == "done", (node.status, node.error)
    events = sum(1 for e in run.events if e.kind == "action_output" and e.id == "p")
    return node.finished - node.started, events, len(node.stdout)


def runtime(n: int) -> tuple[float, float, int, int]:
    import anyio

    from cortex_jupyter.models import ScriptModel
    from cortex_jupyter.runtime import Agent, Registry

    registry = Registry(builtins=False)
    registry.register(print_lines)
    agent = Agent(model=ScriptModel(script(n), chunk_size=64), registry=registry, max_turns=1)
    start = time.perf_counter()
    run = anyio.run(agent.run, "print")
    whole = time.perf_counter() - start
    tool, events, kept = node_figures(run)
    return tool, whole, events, kept


class Cell:
    """A real ``InteractiveShell`` with the extension loaded and the tool registered."""

    def __init__(self, display: str) -> None:
        os.environ.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="capture-bench-"))
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config

        config = Config()
        config.HistoryManager.hist_file = ":memory:"
        self.shell = InteractiveShell.instance(config=config)
        if "cortex" not in self.shell.magics_manager.magics["cell"]:
            self.shell.run_line_magic("load_ext", "cortex_jupyter")
        from cortex_jupyter import default_registry

        default_registry.register(print_lines)
        self.display = display

    def __call__(self, n: int) -> tuple[float, float, int, int]:
        self.shell.run_line_magic("config", f"CortexMagics.display = {self.display!r}")
        with contextlib.redirect_stdout(io.StringIO()):  # the cell's own output
            start = time.perf_counter()
            self.shell.run_cell_magic("cortex", "--script --chunk-size 64", script(n))
            whole = time.perf_counter() - start
        tool, events, kept = node_figures(self.shell.user_ns["_cortex"])
        return tool, whole, events, kept


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = [int(part) for part in args.lines.split(",")]
    paths: list[tuple[str, Callable[[int], tuple[float, float, int, int]]]] = [
        ("runtime", runtime),
        ("cell (text)", Cell("text")),
        ("cell (widgets)", Cell("widgets")),
    ]
    for _, measure in paths:  # warm up: imports, first-run caches
        measure(10)
    rows = []
    verdicts = []
    for n in sizes:
        (plain,) = best(args.runs, lambda n=n: direct(n))
        for path, measure in paths:
            tool, whole, events, kept = best(args.runs, lambda m=measure, n=n: m(n))
            ratio = tool / plain
            rows.append(
                [f"{n:,}", path, f"{plain * 1000:.1f} ms", f"{tool * 1000:.1f} ms",
                 f"{ratio:.1f}x", f"{whole * 1000:.1f} ms", f"{whole / plain:.1f}x",
                 events, f"{kept:,}"]
            )  # fmt: skip
            if n == max(sizes):
                verdicts.append((path, ratio))
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} cores; best of {args.runs}\n")
    header = ["lines", "path", "direct", "tool in run", "ratio", "whole call", "ratio",
              "action_output events", "chars kept"]  # fmt: skip
    print(table("A sync tool printing N lines", header, rows))
    for path, ratio in verdicts:
        ok = ratio <= TARGET_RATIO
        print(
            f"- {path}: {max(sizes):,} lines at {ratio:.1f}x the direct call "
            f"(target <= {TARGET_RATIO:.0f}x): {'PASS' if ok else 'FAIL'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
