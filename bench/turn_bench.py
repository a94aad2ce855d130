"""The overhead between turns, side by side with the OpenAI Agents SDK (issue 28, item 6).

    python bench/turn_bench.py [--repeats N] [--quick] [--no-tracing]

Both sides talk to the same paced OpenAI-compatible server on 127.0.0.1 (the test suite's
``FakeOpenAIServer`` with absolute-time pacing): one token (4 characters) a chunk, one
chunk every ``GAP`` seconds (100 tokens/s). The tools sleep a fixed time. Our side runs
through a real IPython ``InteractiveShell`` (``%load_ext cortex_jupyter``, then
``run_cell_magic("cortex", "--fresh --model ...", ...)``: text view, the store on, in a
temporary file; ``--fresh`` so each run starts a new conversation, as the peer's do); the peer
is ``openai-agents`` (``Runner.run_streamed`` over ``OpenAIChatCompletionsModel``, its own
tracing off). The server records each request's arrival (``time.monotonic`` in this
process), so the latencies are seen from the server's side:

- **cell start → first request**: from just before ``run_cell_magic`` (the peer: just
  before ``Runner.run_streamed``) to the first request's arrival;
- **last action's end → next request**: from the moment the last tool of a turn returns
  (the tool takes the time itself) to the next request's arrival.

The tasks:

- **one-level**: one turn that calls three tools (sleeping 1.5, 0.6 and 0.3 s, in that
  order), then a turn that answers. Ours with ``--native-tools`` (the same native tool-call
  stream the peer gets) and with the cortex protocol (the same calls written as actions).
- **three-level**: search, then three fetches that need its result, then a summary that
  needs all three. The peer takes four turns (one per level, then the answer); one Cortex
  turn writes the whole graph and an answer naming the summary.

**The limit** of a run is what the server and the tools cannot go below: the time the
paced server needs to stream the reply(ies) (``(chunks - 1) × GAP`` a reply) plus the
tools' sleep on the critical path, where a tool starts no earlier than the chunk that
completes its call (``</action>``, or for a native call the last fragment of its
arguments: a whole JSON object) and than the tools it needs, and a turn begins when its
predecessor's reply has ended and its tools are done. HTTP, parsing, prompts and our bookkeeping are
the overhead above it. The one-level goal is a ratio (the peer's time / ours: 1.27×);
the three-level goal is ours within 2% of its limit.

Every run is repeated ``--repeats`` times (ours and the peer alternating) and the medians
are printed, once with tracing off and once with it on (an OpenTelemetry SDK
``TracerProvider`` with a ``BatchSpanProcessor`` and an in-memory exporter, set after the
off rows: a process can set the global provider once).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ms, table, verdict
from tests.models import fake_openai_server as fake

GAP = 0.01  # seconds between chunks: 100 tokens/s
TOKEN = 4  # characters a chunk
MODEL = "gpt-bench"


# ---- the paced server ------------------------------------------------------------------


class _PacedHandler(fake._Handler):
    """Chunk ``i`` of a reply leaves at ``start + i × gap`` (no drift from sleep overshoot)."""

    def _stream_body(self, reply: fake.Stream) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        start = time.monotonic()
        for i, payload in enumerate(reply.chunks):
            delay = start + i * reply.gap - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            data = payload if isinstance(payload, str) else json.dumps(payload)
            self._send(f"data: {data}\n\n")
        self._send("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


class PacedServer(fake.FakeOpenAIServer):
    def __init__(self) -> None:
        super().__init__()
        server = self

        class Handler(_PacedHandler):
            fake = server

        self._httpd.RequestHandlerClass = Handler


# ---- the tasks -------------------------------------------------------------------------


@dataclass
class Call:
    id: str
    name: str
    args: dict[str, Any]
    sleep: float
    needs: tuple[str, ...] = ()


@dataclass
class Turn:
    calls: list[Call] = field(default_factory=list)
    answer: str = ""
    preamble: str = ""  # what the model says before its calls


def native_chunks(turn: Turn) -> tuple[list[Any], dict[str, int]]:
    """The turn as native tool calls (or its answer), and the chunk completing each call."""
    chunks: list[Any] = [fake.role(), *fake.texts(turn.preamble, TOKEN)]
    closes: dict[str, int] = {}
    for index, call in enumerate(turn.calls):
        arguments = json.dumps(call.args)
        pieces = -(-len(arguments) // TOKEN)
        chunks += fake.tool_call(index, f"call_{call.id}", call.name, arguments, pieces)
        # Complete once its arguments are a whole JSON object: at their last fragment.
        closes[call.id] = len(chunks) - 1
    if turn.answer:
        chunks += fake.texts(turn.answer, TOKEN)
    chunks.append(fake.finish("tool_calls" if turn.calls else "stop"))
    return chunks, closes


def cortex_chunks(
    turn: Turn, refer: Callable[[Call], dict[str, Any]] | None = None
) -> tuple[list[Any], dict[str, int]]:
    """The turn as cortex-protocol text, and the chunk completing each ``</action>``."""
    chunks: list[Any] = [fake.role()]
    if turn.preamble:
        chunks += fake.texts(f"<thought>{turn.preamble}</thought>\n", TOKEN)
    closes: dict[str, int] = {}
    for call in turn.calls:
        body = json.dumps(
            {"name": call.name, "parameters": call.args}
            if refer is None
            else {"name": call.name, "parameters": refer(call), "output_key": call.id}
        )
        piece = f'<action id="{call.id}">{body}</action>'
        first = len(chunks)
        chunks += fake.texts(piece + "\n", TOKEN)
        closes[call.id] = first + (len(piece) - 1) // TOKEN  # the chunk with its last ">"
    if turn.answer:
        chunks += fake.texts(f"<response>{turn.answer}</response>", TOKEN)
    chunks.append(fake.finish("stop"))
    return chunks, closes


def limit(replies: Sequence[tuple[list[Any], dict[str, int], Turn]]) -> float:
    """The floor of a run: streaming and the critical path of sleeps (module docstring)."""
    now = 0.0
    done: dict[str, float] = {}
    for chunks, closes, turn in replies:
        for call in turn.calls:  # in the order written: a call needs only earlier ones
            start = max([now + closes[call.id] * GAP] + [done[n] for n in call.needs])
            done[call.id] = start + call.sleep
        now = max([now + (len(chunks) - 1) * GAP] + [done[c.id] for c in turn.calls])
    return now


_SECOND = "the second record: the orders of the last quarter, by region and product"
_THIRD = "the third record: the returns of the last quarter, by region and reason"
ONE_LEVEL = [
    Turn([
        Call("w1", "lookup", {"key": "the first record, the slow one", "seconds": 1.0}, 1.0),
        Call("w2", "lookup", {"key": _SECOND, "seconds": 0.5}, 0.5),
        Call("w3", "lookup", {"key": _THIRD, "seconds": 0.3}, 0.3),
    ], preamble="I will look the three records up at once, the slow one first."),
    Turn(answer="The three records are in. The first one took longest; the orders and the "
                "returns of the last quarter agree on the totals for every region, and the "
                "reasons given for returns are listed with them."),
]  # fmt: skip

_FETCHES = [
    Call(f"f{i}", "fetch", {"url": f"result {i}", "seconds": 0.6}, 0.6, ("s",)) for i in (1, 2, 3)
]
_PLAN = "First a search, then the three pages it finds, then a summary of the three."
_SEARCH = Call("s", "search", {"query": "eager tool dispatch", "seconds": 0.4}, 0.4)
_PAGES = ["page 1", "page 2", "page 3"]
_SUMMARY = Call("m", "summarize", {"pages": _PAGES, "seconds": 0.4}, 0.4, ("f1", "f2", "f3"))
THREE_LEVEL_PEER = [
    Turn([_SEARCH], preamble=_PLAN),
    Turn(_FETCHES, preamble="The search found three pages; fetching all three now."),
    Turn([_SUMMARY], preamble="All three pages are here; summarizing them."),
    Turn(answer="Here is the summary of the three pages the search found."),
]  # fmt: skip
THREE_LEVEL_OURS = Turn(
    [*THREE_LEVEL_PEER[0].calls, *_FETCHES, *THREE_LEVEL_PEER[2].calls],
    answer="Here is the summary of the three pages the search found: $m",
    preamble=_PLAN,
)


def our_refs(call: Call) -> dict[str, Any]:
    """The three-level graph's parameters in one turn: the fetches name the search's
    output, the summary the three fetches'."""
    if call.name == "fetch":
        return {"url": "$s", "seconds": call.sleep}
    if call.name == "summarize":
        return {"pages": ["$f1", "$f2", "$f3"], "seconds": call.sleep}
    return call.args


# ---- the tools (both sides): they sleep, and note when they end ----------------------------

ENDS: list[float] = []


async def _work(seconds: float, value: Any) -> str:
    await asyncio.sleep(seconds)
    ENDS.append(time.monotonic())
    return f"done: {str(value)[:40]}"


# ---- one run of each side ----------------------------------------------------------------


@dataclass
class Result:
    total: float
    first: float  # start → first request
    gaps: list[float]  # last tool's end → next request, per later turn


def _result(start: float, end: float, server: PacedServer, ends_by_turn: list[float]) -> Result:
    arrivals = [r.at for r in server.requests]
    gaps = [
        arrivals[i + 1] - ends_by_turn[i] for i in range(len(arrivals) - 1) if i < len(ends_by_turn)
    ]
    return Result(end - start, arrivals[0] - start, gaps)


def _turn_ends(server: PacedServer) -> list[float]:
    """The last tool end before each next request."""
    arrivals = [r.at for r in server.requests]
    return [
        max((e for e in ENDS if e <= arrivals[i + 1]), default=arrivals[i])
        for i in range(len(arrivals) - 1)
    ]


def run_ours(ip: Any, server: PacedServer, replies: list[list[Any]], native: bool) -> Result:
    server.requests.clear()
    ENDS.clear()
    server.script(*[fake.Stream(chunks, gap=GAP) for chunks in replies])
    # --fresh: each run starts a new conversation, as each of the peer's runs does (a
    # session's cells otherwise carry their history into the next request).
    line = f"--fresh --model {MODEL}" + (" --native-tools" if native else "")
    start = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):  # the text view's lines
        ip.run_cell_magic("cortex", line, "Do the task with the tools.")
    end = time.monotonic()
    record = ip.user_ns["_cortex"]
    assert record.status == "completed", (record.status, getattr(record, "reason", None))
    assert all(a.status == "done" for a in record.actions.values()), record.actions
    return _result(start, end, server, _turn_ends(server))


def run_peer(server: PacedServer, replies: list[list[Any]]) -> Result:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI

    @function_tool
    async def lookup(key: str, seconds: float) -> str:
        """Look a record up."""
        return await _work(seconds, key)

    @function_tool
    async def search(query: str, seconds: float) -> str:
        """Search the web."""
        return await _work(seconds, query)

    @function_tool
    async def fetch(url: str, seconds: float) -> str:
        """Fetch a page."""
        return await _work(seconds, url)

    @function_tool
    async def summarize(pages: list[str], seconds: float) -> str:
        """Summarize pages."""
        return await _work(seconds, pages)

    async def go() -> Result:
        client = AsyncOpenAI(base_url=server.url, api_key="sk-bench")
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        agent = Agent(name="peer", instructions="Use the tools.", model=model,
                      tools=[lookup, search, fetch, summarize])  # fmt: skip
        start = time.monotonic()
        result = Runner.run_streamed(agent, "Do the task with the tools.")
        async for _ in result.stream_events():
            pass
        end = time.monotonic()
        assert result.final_output, "the peer gave no answer"
        return _result(start, end, server, _turn_ends(server))

    server.requests.clear()
    ENDS.clear()
    server.script(*[fake.Stream(chunks, gap=GAP) for chunks in replies])
    return asyncio.run(go())


def our_tools() -> None:
    from cortex_jupyter import default_registry

    @default_registry.tool(name="lookup")
    async def lookup(key: str, seconds: float) -> str:
        """Look a record up."""
        return await _work(seconds, key)

    @default_registry.tool(name="search")
    async def search(query: str, seconds: float) -> str:
        """Search the web."""
        return await _work(seconds, query)

    @default_registry.tool(name="fetch")
    async def fetch(url: Any, seconds: float) -> str:
        """Fetch a page."""
        return await _work(seconds, url)

    @default_registry.tool(name="summarize")
    async def summarize(pages: list[Any], seconds: float) -> str:
        """Summarize pages."""
        return await _work(seconds, pages)


# ---- the measurement ---------------------------------------------------------------------


@dataclass
class Row:
    task: str
    ours: list[Result] = field(default_factory=list)
    peer: list[Result] = field(default_factory=list)
    our_limit: float = 0.0
    peer_limit: float = 0.0


def plans() -> list[tuple[str, bool, list[list[Any]], float, list[list[Any]], float]]:
    """(task, native, our replies, our limit, peer replies, peer limit)."""
    peer_one = [native_chunks(t) for t in ONE_LEVEL]
    peer_three = [native_chunks(t) for t in THREE_LEVEL_PEER]
    ours_cortex_one = [cortex_chunks(t) for t in ONE_LEVEL]
    ours_three = [cortex_chunks(THREE_LEVEL_OURS, our_refs)]

    # Ours start each call's tool at its close (eager); the peer only after the reply.
    def eager(pairs: list[tuple[list[Any], dict[str, int]]], turns: list[Turn]) -> float:
        return limit([(c, k, t) for (c, k), t in zip(pairs, turns, strict=True)])

    def after_reply(pairs: list[tuple[list[Any], dict[str, int]]], turns: list[Turn]) -> float:
        return limit(
            [(c, dict.fromkeys(k, len(c) - 1), t) for (c, k), t in zip(pairs, turns, strict=True)]
        )

    return [
        ("one-level, native tools", True, [c for c, _ in peer_one], eager(peer_one, ONE_LEVEL),
         [c for c, _ in peer_one], after_reply(peer_one, ONE_LEVEL)),
        ("one-level, cortex protocol", False, [c for c, _ in ours_cortex_one],
         eager(ours_cortex_one, ONE_LEVEL), [c for c, _ in peer_one],
         after_reply(peer_one, ONE_LEVEL)),
        ("three-level, one cortex turn", False, [c for c, _ in ours_three],
         eager(ours_three, [THREE_LEVEL_OURS]), [c for c, _ in peer_three],
         after_reply(peer_three, THREE_LEVEL_PEER)),
    ]  # fmt: skip


def measure(ip: Any, server: PacedServer, repeats: int) -> list[Row]:
    rows = []
    for task, native, ours, our_limit, peer, peer_limit in plans():
        row = Row(task, our_limit=our_limit, peer_limit=peer_limit)
        run_ours(ip, server, ours, native)  # warm-up (imports, first connections)
        run_peer(server, peer)
        for _ in range(repeats):
            row.ours.append(run_ours(ip, server, ours, native))
            row.peer.append(run_peer(server, peer))
        rows.append(row)
    return rows


def report(rows: list[Row], tracing: str) -> str:
    med = statistics.median
    out = []
    for row in rows:
        ours = med(r.total for r in row.ours)
        peer = med(r.total for r in row.peer)
        ratio = peer / ours
        if "native" in row.task:
            goal, ok = "≥ 1.27×", ratio >= 1.27
        else:
            goal, ok = "≤ 1.02× limit", ours <= 1.02 * row.our_limit
        out.append([row.task, f"{ours:.3f} s", f"{peer:.3f} s", f"{ratio:.2f}×",
                    f"{row.our_limit:.3f} s ({ours / row.our_limit:.3f}×)",
                    f"{row.peer_limit:.3f} s ({peer / row.peer_limit:.3f}×)", goal,
                    verdict(ok)])  # fmt: skip
    firsts = [r.first for row in rows for r in row.ours]
    peer_firsts = [r.first for row in rows for r in row.peer]
    gaps = [g for row in rows for r in row.ours for g in r.gaps]
    peer_gaps = [g for row in rows for r in row.peer for g in r.gaps]
    out.append(["cell start → first request", ms(med(firsts)), ms(med(peer_firsts)), "", "", "",
                "≤ 30 ms", verdict(med(firsts) <= 0.030)])  # fmt: skip
    out.append(["last action's end → next request", ms(med(gaps)), ms(med(peer_gaps)), "", "", "",
                "≤ 20 ms", verdict(med(gaps) <= 0.020)])  # fmt: skip
    header = ["task", "ours (median)", "peer (median)", "peer / ours", "our limit (ours/limit)",
              "peer limit (peer/limit)", "goal", "result"]  # fmt: skip
    n = len(rows[0].ours)
    return table(
        f"Turn overhead vs the OpenAI Agents SDK, tracing {tracing} ({n} repeats)", header, out
    )


def tracing_on() -> Any:
    import opentelemetry.trace as otel
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    otel.set_tracer_provider(provider)
    return provider, exporter


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs a task and side (7)")
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    parser.add_argument("--no-tracing", action="store_true", help="skip the tracing-on rows")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else args.repeats

    from agents import set_tracing_disabled
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    set_tracing_disabled(True)
    folder = tempfile.mkdtemp(prefix="turn-bench-")
    os.environ["IPYTHONDIR"] = folder
    os.environ["CORTEX_STORE"] = str(Path(folder) / "runs.db")
    os.environ["OPENAI_API_KEY"] = "sk-bench"
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "cortex_jupyter")
    our_tools()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"(1/5/15 min), {os.cpu_count()} cores\n")  # fmt: skip
    with PacedServer() as server:
        os.environ["OPENAI_BASE_URL"] = server.url
        print(report(measure(ip, server, repeats), "off"))
        if not args.no_tracing:
            provider, exporter = tracing_on()
            rows = measure(ip, server, repeats)
            provider.force_flush()
            spans = exporter.get_finished_spans()
            assert spans, "tracing on but no span was exported"
            print(report(rows, f"on ({len(spans)} spans exported)"))
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
