"""Three columns at once against the slowest column alone (issue 35, "How it is checked").

    python bench/compare_bench.py [--runs N] [--profile]

Three models, each answered by its own paced OpenAI-compatible server on 127.0.0.1
(``turn_bench.PacedServer``: chunk ``i`` of a reply leaves at ``start + i × 10 ms``, one
4-character token a chunk). Each reply is one cortex-protocol turn: a thought, one
``lookup`` action (its tool sleeps) and an answer; the replies differ in length, so
``bench-c`` is the slowest column (about 2 s of streaming).

Measured two ways, each the same workload:

- **the magic**: a real IPython ``InteractiveShell`` (``%load_ext cortex_jupyter``, the
  store on, in a temporary file), ``%%cortex --text --compare bench-a,bench-b,bench-c``
  against ``%%cortex --text --fresh --model bench-c`` (the slowest column as an ordinary
  cell) and ``%%cortex --text --compare bench-c`` (as a one-column comparison); the
  models are found through the session's endpoints, one server each;
- **``Agent.compare``**: three ``Agent(model=OpenAIModel(...))`` against the slowest
  agent's ``run_sync`` alone (and a one-column ``Agent.compare``).

Runs are interleaved (one of each way, then again...) so load from elsewhere falls on
each alike; the medians are printed with the machine's load average before and after.
**Goal**: three at once ≤ 1.1× the slowest column alone (medians). The **limit** of a
column is what its server and tool cannot go below: ``(chunks - 1) × GAP`` of streaming,
or the tool's end if later. ``--profile`` runs the three-column magic cell under
``cProfile`` once more and prints where its time went.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import table, verdict
from bench.turn_bench import GAP, Call, PacedServer, Turn, cortex_chunks, limit
from tests.models import fake_openai_server as fake

KEY = "sk-bench"
PROMPT = "Look the record up and say what it holds."
GOAL = 1.1


def _words(count: int, seed: str) -> str:
    return " ".join(f"{seed}{i % 10}" for i in range(count))


# name -> its one turn: a thought, one action, an answer of a different length each.
TURNS = {
    "bench-a": Turn([Call("r", "compare_lookup", {"key": "a", "seconds": 0.2}, 0.2)],
                    answer=_words(20, "alpha"), preamble="One lookup, then a short answer."),
    "bench-b": Turn([Call("r", "compare_lookup", {"key": "b", "seconds": 0.3}, 0.3)],
                    answer=_words(70, "beta"), preamble="One lookup, then a longer answer."),
    "bench-c": Turn([Call("r", "compare_lookup", {"key": "c", "seconds": 0.4}, 0.4)],
                    answer=_words(150, "gamma"),
                    preamble="One lookup, then the longest answer of the three."),
}  # fmt: skip
SLOWEST = "bench-c"


def replies() -> dict[str, tuple[list[Any], float]]:
    """Model -> (its reply's chunks, its limit in seconds)."""
    out = {}
    for name, turn in TURNS.items():
        chunks, closes = cortex_chunks(turn)
        out[name] = (chunks, limit([(chunks, closes, turn)]))
    return out


def lookup_tool() -> None:
    import asyncio

    from cortex_jupyter import default_registry

    @default_registry.tool(name="compare_lookup")
    async def compare_lookup(key: str, seconds: float) -> str:
        """Look a record up."""
        await asyncio.sleep(seconds)
        return f"record {key}"


# ---- the ways ------------------------------------------------------------------------------


class Bench:
    def __init__(self, ip: Any, servers: dict[str, PacedServer]) -> None:
        self.ip = ip
        self.servers = servers
        self.replies = replies()

    def _script(self, names: Sequence[str]) -> None:
        for name in names:
            self.servers[name].requests.clear()
            self.servers[name].script(fake.Stream(self.replies[name][0], gap=GAP))

    def _cell(self, line: str, names: Sequence[str]) -> float:
        self._script(names)
        start = time.monotonic()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            self.ip.run_cell_magic("cortex", line, PROMPT)
        return time.monotonic() - start

    def magic_three(self) -> float:
        took = self._cell("--text --compare " + ",".join(TURNS), list(TURNS))
        runs = [c.run for c in self.ip.user_ns["_compare"].values()]
        assert [r.status for r in runs] == ["completed"] * 3, [(r.status, r.reason) for r in runs]
        return took

    def magic_alone(self) -> float:
        took = self._cell(f"--text --fresh --model {SLOWEST}", [SLOWEST])
        assert self.ip.user_ns["_cortex"].status == "completed"
        return took

    def magic_one_column(self) -> float:
        took = self._cell(f"--text --compare {SLOWEST}", [SLOWEST])
        assert self.ip.user_ns["_compare"][SLOWEST].run.status == "completed"
        return took

    def _agent(self, name: str) -> Any:
        from cortex_jupyter import Agent
        from cortex_jupyter.models import OpenAIModel

        model = OpenAIModel(name, api_key=KEY, base_url=self.servers[name].url)
        return Agent(model=model)

    def agent_three(self) -> float:
        from cortex_jupyter import Agent

        agents = {name: self._agent(name) for name in TURNS}
        self._script(list(TURNS))
        start = time.monotonic()
        runs = Agent.compare(PROMPT, agents)
        took = time.monotonic() - start
        assert [r.status for r in runs.values()] == ["completed"] * 3, runs
        return took

    def agent_alone(self) -> float:
        agent = self._agent(SLOWEST)
        self._script([SLOWEST])
        start = time.monotonic()
        run = agent.run_sync(PROMPT)
        took = time.monotonic() - start
        assert run.status == "completed", run.reason
        return took

    def agent_one_column(self) -> float:
        from cortex_jupyter import Agent

        agents = {SLOWEST: self._agent(SLOWEST)}
        self._script([SLOWEST])
        start = time.monotonic()
        runs = Agent.compare(PROMPT, agents)
        took = time.monotonic() - start
        assert runs[SLOWEST].status == "completed"
        return took


def measure(bench: Bench, runs: int) -> dict[str, list[float]]:
    ways: dict[str, Callable[[], float]] = {
        "magic: three columns": bench.magic_three,
        "magic: slowest alone (ordinary cell)": bench.magic_alone,
        "magic: slowest alone (one-column --compare)": bench.magic_one_column,
        "Agent.compare: three columns": bench.agent_three,
        "Agent: slowest alone (run_sync)": bench.agent_alone,
        "Agent.compare: slowest alone (one column)": bench.agent_one_column,
    }
    for way in ways.values():  # warm-up: imports, first connections, the store's schema
        way()
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(runs):
        for name, way in ways.items():
            times[name].append(way())
    return times


def report(times: dict[str, list[float]], column_limits: dict[str, float]) -> str:
    med = {name: statistics.median(values) for name, values in times.items()}
    slowest_limit = max(column_limits.values())
    rows = []
    for name, values in times.items():
        rows.append([name, f"{med[name]:.3f} s", f"{min(values):.3f} s", f"{max(values):.3f} s",
                     f"{med[name] / slowest_limit:.3f}×"])  # fmt: skip
    n = len(next(iter(times.values())))
    out = table(f"Three columns at once and the slowest alone (median of {n} runs)",
                ["way", "median", "best", "worst", "/ slowest column's limit"], rows)  # fmt: skip
    checks = []
    for path, three, alone in (
        ("magic", "magic: three columns", "magic: slowest alone (ordinary cell)"),
        ("magic", "magic: three columns", "magic: slowest alone (one-column --compare)"),
        ("Agent.compare", "Agent.compare: three columns", "Agent: slowest alone (run_sync)"),
        ("Agent.compare", "Agent.compare: three columns",
         "Agent.compare: slowest alone (one column)"),
    ):  # fmt: skip
        ratio = med[three] / med[alone]
        checks.append([f"{path}: three / {alone.split(': ', 1)[1]}", f"{ratio:.3f}×",
                       f"≤ {GOAL}×", verdict(ratio <= GOAL)])  # fmt: skip
    out += "\n" + table("Goal: three at once ≤ 1.1× the slowest alone (medians)",
                        ["check", "measured", "goal", "result"], checks)  # fmt: skip
    limits = [[name, f"{len(replies()[name][0])}", f"{value:.3f} s"]
              for name, value in column_limits.items()]  # fmt: skip
    out += "\n" + table("The columns (10 ms a chunk)", ["model", "chunks", "limit"], limits)
    return out


def profile(bench: Bench) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    took = bench.magic_three()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(25)
    return f"three-column magic cell under cProfile: {took:.3f} s\n{text.getvalue()}"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min), {os.cpu_count()} cores"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each way (5)")
    parser.add_argument("--profile", action="store_true", help="profile a three-column cell")
    args = parser.parse_args(argv)

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from cortex_jupyter.session import session_for

    folder = tempfile.mkdtemp(prefix="compare-bench-")
    os.environ["IPYTHONDIR"] = folder
    os.environ["CORTEX_STORE"] = str(Path(folder) / "runs.db")
    os.environ["OPENAI_API_KEY"] = KEY
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "cortex_jupyter")
    lookup_tool()
    print(f"load: {load()}\n")
    with contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(PacedServer()) for name in TURNS}
        endpoints = session_for(ip).endpoints
        for name, server in servers.items():
            endpoints[name] = (server.url, KEY)
        bench = Bench(ip, servers)
        times = measure(bench, args.runs)
        print(report(times, {name: lim for name, (_, lim) in bench.replies.items()}))
        if args.profile:
            print(profile(bench))
    print(f"load after: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
