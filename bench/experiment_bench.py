"""An experiment's throughput against a paced server, side by side with pydantic_evals (issue 34).

    python bench/experiment_bench.py [--tries 200] [--latency 0.25] [--runs 3] [--quick]

One paced OpenAI-compatible server on 127.0.0.1, in its own process (so its threads do not
share this process's GIL): every reply takes ``--latency`` seconds, streamed as
``CHUNKS`` chunks, chunk ``i`` leaving at ``start + i × latency / (CHUNKS - 1)`` (a request
that does not ask for a stream gets the same reply whole, after the same time). A
``ThreadingHTTPServer``: each request its own thread, sleeping per reply; the script first
checks that 8 requests at once take one latency, not eight.

The reply depends on the request (tries run in any order), from the prompt's task marker
and case number:

- ``[answer] case N``: one text answer (one request a try);
- ``[tool] case N``: a native tool call ``lookup(key="record N")``, then, once the request
  carries the tool's result, the answer (two requests a try; the tool sleeps ``TOOL``);
- ``[cortex] case N``: ours only: one cortex-protocol reply, the action first and then an
  answer naming its output (``$found``); the tool runs while the reply streams.

Three measurements, each of ``--tries`` tries (``cases × 2 agent columns × 2 repeats``):

1. ``dataset.run(agents, concurrency=8, store=None, progress=False)`` against the ideal
   ``requests × latency / 8`` (+ the tool's sleep for the tool task). The server on
   127.0.0.1 would get one try at a time by default (a local llama.cpp); the server's
   count of requests in flight shows ``concurrency=8`` overrides that.
2. The same cases by ``pydantic_evals`` (``Dataset.evaluate(task, max_concurrency=8)``,
   ``repeat=2``) with a ``pydantic_ai`` agent whose model is ``OpenAIChatModel`` on the
   same server: same prompts, same replies, a ``Contains`` evaluator where ours has
   ``expect.answer(contains=...)``. Its agent runs with ``agent.run`` (pydantic-ai's own
   default: one non-streamed request a turn).
3. The store: the answer task with ``store=`` a temporary file against ``store=None``
   (median of ``--runs``), and the rows and bytes the store file gained.

Every figure is the median of ``--runs`` runs (ours, the peer's and ours with the store
in turn, after a warm-up of each). Needs the ``bench`` extra (``pydantic-evals``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import table, verdict
from tests.models import fake_openai_server as fake

CHUNKS = 26  # chunks a reply: role, 24 text/tool chunks, finish
TOOL = 0.1  # seconds the lookup tool sleeps
MODEL = "gpt-bench"
CONCURRENCY = 8


# ---- the paced server (its own process) --------------------------------------------------


def _marker(body: Any) -> tuple[str, int, bool]:
    """(task, case number, whether the request carries a tool's result)."""
    messages = body.get("messages", []) if isinstance(body, dict) else []
    results = any(m.get("role") == "tool" for m in messages)
    prompt = ""
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and "] case " in content:
            prompt = content
        elif message.get("role") == "user" and isinstance(content, list):  # content parts
            for part in content:
                if isinstance(part, dict) and "] case " in str(part.get("text", "")):
                    prompt = str(part["text"])
    task = prompt[prompt.find("[") + 1 : prompt.find("]")] if "[" in prompt else "answer"
    digits = "".join(ch for ch in prompt.split("] case ", 1)[-1] if ch.isdigit())
    return task, int(digits or 0), results


def answer_text(number: int) -> str:
    return f"The lookup says: record {number} is in order, filed and checked twice."


def _padded(text: str, pieces: int) -> list[str]:
    """``text`` cut into exactly ``pieces`` non-empty pieces."""
    size = max(1, -(-len(text) // pieces))
    out = [text[i : i + size] for i in range(0, len(text), size)]
    while len(out) < pieces:
        out.append(" ")
    return out[:pieces]


def reply_chunks(task: str, number: int, results: bool) -> tuple[list[Any], str]:
    """The reply's ``CHUNKS`` chunks and its whole text (for a request that is not streamed)."""
    body = CHUNKS - 2
    if task == "cortex":
        action = json.dumps(
            {"name": "lookup", "parameters": {"key": f"record {number}"}, "output_key": "found"}
        )
        text = f'<action id="a1">{action}</action><response>Done: $found</response>'
        # The action closes about a third of the way in; the answer streams after it.
        head, tail = text.split("<response>")
        pieces = _padded(head, 8) + _padded("<response>" + tail, body - 8)
        return [fake.role(), *map(fake.text, pieces), fake.finish("stop")], text
    if task == "tool" and not results:
        arguments = json.dumps({"key": f"record {number}"})
        preamble = _padded(f"I will look record {number} up first, then answer. ", body - 2)
        call = fake.tool_call(0, f"call_{number}", "lookup", arguments, 1)
        return [fake.role(), *map(fake.text, preamble), *call, fake.finish("tool_calls")], ""
    text = answer_text(number)
    return [fake.role(), *map(fake.text, _padded(text, body)), fake.finish("stop")], text


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.requests = 0
        self.late = 0.0  # the most a chunk left after its time
        self.log: list[tuple[float, float, int]] = []  # (arrival, reply sent, case number)


class _Paced(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: _State
    gap: float

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        s = self.state
        with s.lock:
            data = {"most": s.most, "requests": s.requests, "late": s.late, "log": s.log}
            if self.path == "/reset":
                s.most, s.requests, s.late, s.log = s.in_flight, 0, 0.0, []
        self._json(200 if self.path in ("/stats", "/reset") else 404, data)

    def _json(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(raw)
        self.close_connection = True

    def do_POST(self) -> None:
        start = time.monotonic()
        s = self.state
        with s.lock:
            s.in_flight += 1
            s.requests += 1
            s.most = max(s.most, s.in_flight)
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
            task, number, results = _marker(body)
            chunks, text = reply_chunks(task, number, results)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if body.get("stream"):
                    self._stream(chunks, start)
                else:
                    self._whole(chunks, text, start)
            with s.lock:
                s.log.append((start, time.monotonic(), number))
        finally:
            with s.lock:
                s.in_flight -= 1
        self.close_connection = True

    def _stream(self, chunks: list[Any], start: float) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        for i, payload in enumerate(chunks):
            delay = start + i * self.gap - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                with self.state.lock:
                    self.state.late = max(self.state.late, -delay)
            self._send(f"data: {json.dumps(payload)}\n\n")
        self._send("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _send(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _whole(self, chunks: list[Any], text: str, start: float) -> None:
        calls = [
            {"id": c["id"], "type": "function", "function": c["function"]}
            for chunk in chunks
            for c in chunk["choices"][0]["delta"].get("tool_calls", [])
            if "id" in c
        ]
        for chunk in chunks:  # the arguments came in fragments
            for c in chunk["choices"][0]["delta"].get("tool_calls", []):
                if "id" not in c and calls:
                    calls[c["index"]]["function"]["arguments"] += c["function"]["arguments"]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        delay = start + (CHUNKS - 1) * self.gap - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        self._json(200, {
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000,
            "model": MODEL, "choices": [{"index": 0, "message": message,
                                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 24, "total_tokens": 74},
        })  # fmt: skip


class _Listening(ThreadingHTTPServer):
    daemon_threads = True
    # listen()'s backlog, set before it is called: the default 5 drops the SYNs of 8
    # connections opened at once, and a dropped SYN is sent again only after a second.
    request_queue_size = 128


def serve(latency: float, port_out: Any) -> None:
    """The server process: answers until it is terminated."""
    handler = type("Handler", (_Paced,), {"state": _State(), "gap": latency / (CHUNKS - 1)})
    httpd = _Listening(("127.0.0.1", 0), handler)
    port_out.put(httpd.server_address[1])
    httpd.serve_forever(poll_interval=0.05)


class Server:
    def __init__(self, latency: float) -> None:
        context = multiprocessing.get_context("spawn")
        ports: Any = context.Queue()
        self.process = context.Process(target=serve, args=(latency, ports), daemon=True)
        self.process.start()
        self.port = ports.get(timeout=30)
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self, reset: bool = False) -> dict[str, Any]:
        path = "/reset" if reset else "/stats"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return dict(json.loads(r.read()))

    def close(self) -> None:
        self.process.terminate()
        self.process.join(5)


def check_server(server: Server, latency: float) -> tuple[float, int]:
    """8 streamed requests at once, from 8 threads: (wall time, most in flight)."""
    server.stats(reset=True)
    message = {"role": "user", "content": "[answer] case 1"}
    body = json.dumps({"model": MODEL, "stream": True, "messages": [message]}).encode()

    def one() -> None:
        request = urllib.request.Request(
            f"{server.url}/chat/completions", body, {"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            r.read()

    threads = [threading.Thread(target=one) for _ in range(CONCURRENCY)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - start, int(server.stats()["most"])


# ---- the cases ---------------------------------------------------------------------------


def prompts(task: str, cases: int) -> list[tuple[str, str]]:
    """(prompt, what the answer must contain), one per case."""
    contains = "Done: record" if task == "cortex" else "record"
    return [(f"[{task}] case {n}", f"{contains} {n}") for n in range(cases)]


async def _lookup_work(key: str) -> str:
    await asyncio.sleep(TOOL)
    return key


# ---- ours --------------------------------------------------------------------------------


def our_agents(url: str) -> dict[str, Any]:
    from cortex_jupyter import Agent, Registry
    from cortex_jupyter.models import OpenAIModel

    registry = Registry()

    @registry.tool(name="lookup")
    async def lookup(key: str) -> str:
        """Look a record up."""
        await asyncio.sleep(TOOL)
        return key

    def agent(native: bool) -> Any:
        model = OpenAIModel(MODEL, base_url=url, api_key="sk-bench", max_retries=0)
        return Agent(model=model, registry=registry, tools=["lookup"], native_tools=native)

    return {"native": agent(True), "cortex": agent(False)}


def run_ours(task: str, cases: int, agents: dict[str, Any], store: Any) -> tuple[float, Any]:
    from cortex_jupyter import Case, Dataset, expect

    dataset = Dataset(
        [Case(p, name=f"c{i}", expect=[expect.answer(contains=c)])
         for i, (p, c) in enumerate(prompts(task, cases))],
        name=f"bench-{task}",
    )  # fmt: skip
    agent = agents["cortex" if task == "cortex" else "native"]
    columns = {"a": agent, "b": agent.with_options()}
    start = time.monotonic()
    experiment = dataset.run(
        columns, repeat=2, concurrency=CONCURRENCY, store=store, progress=False, view=False
    )
    wall = time.monotonic() - start
    frame = experiment.to_pandas()
    assert len(frame) == cases * 4, len(frame)
    failed = frame[~frame["passed"].astype(bool)]
    assert failed.empty, failed.head().to_dict("records")
    return wall, experiment


# ---- pydantic_evals with a pydantic-ai agent ------------------------------------------------


def run_peer(task: str, cases: int, url: str) -> float:
    from pydantic_ai import Agent as PeerAgent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_evals import Case as PeerCase
    from pydantic_evals import Dataset as PeerDataset
    from pydantic_evals.evaluators import Contains

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=url, api_key="sk-bench"))
    agent = PeerAgent(model, instructions="Use the tools.")

    @agent.tool_plain
    async def lookup(key: str) -> str:
        """Look a record up."""
        return await _lookup_work(key)

    columns = {"a": agent, "b": agent}  # two columns: two evaluations, as ours has two agents

    async def go() -> None:
        for column in columns.values():
            dataset = PeerDataset[str, str, Any](
                name=f"bench-{task}",
                cases=[PeerCase(name=f"c{i}", inputs=p, evaluators=(Contains(c),))
                       for i, (p, c) in enumerate(prompts(task, cases))],
            )  # fmt: skip

            async def run_task(prompt: str, peer: Any = column) -> str:
                result = await peer.run(prompt)
                return str(result.output)

            report = await dataset.evaluate(
                run_task, max_concurrency=CONCURRENCY, progress=False, repeat=2
            )
            assert len(report.cases) == cases * 2 and not report.failures, report.failures
            bad = [c.name for c in report.cases if not all(a.value for a in c.assertions.values())]
            assert not bad, bad[:5]

    start = time.monotonic()
    asyncio.run(go())
    return time.monotonic() - start


# ---- the store ---------------------------------------------------------------------------


def store_figures(path: str) -> tuple[int, int]:
    """(rows in every table, bytes of the file and its WAL)."""
    size = sum(os.path.getsize(path + end) for end in ("", "-wal") if os.path.exists(path + end))
    with contextlib.closing(sqlite3.connect(path)) as db:
        names = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        rows = sum(db.execute(f'select count(*) from "{n}"').fetchone()[0] for n in names)
    return rows, size


# ---- the measurement ---------------------------------------------------------------------


@dataclass
class Timed:
    label: str
    ideal: float
    walls: list[float]
    most: int = 0
    requests: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.walls)


def timed(
    server: Server, group: list[tuple[str, float, Callable[[], float]]], runs: int
) -> list[Timed]:
    """Each of ``group`` warmed up once, then run in turn ``runs`` times (interleaved, so
    load from elsewhere falls on each alike)."""
    out = [Timed(label, floor, []) for label, floor, _ in group]
    for _, _, go in group:
        go()  # warm-up: imports, the first connections, genai-prices' tables
    for _ in range(runs):
        for row, (_, _, go) in zip(out, group, strict=True):
            server.stats(reset=True)
            row.walls.append(go())
            stats = server.stats()
            row.most, row.requests = max(row.most, stats["most"]), stats["requests"]
    return out


def ideal(requests_a_try: int, tries: int, latency: float, tool: bool) -> float:
    per_try = requests_a_try * latency + (TOOL if tool else 0.0)
    return tries * per_try / CONCURRENCY


def measure(args: argparse.Namespace, server: Server) -> tuple[list[Timed], list[Any]]:
    cases, runs, lat = args.tries // 4, args.runs, args.latency
    tries = cases * 4
    agents = our_agents(server.url)
    rows: list[Timed] = []
    folder = tempfile.mkdtemp(prefix="experiment-bench-")
    stored: list[Any] = []

    def ours(task: str, store: Any = None) -> Callable[[], float]:
        def go() -> float:
            path = None if store is None else f"{folder}/{store}-{len(stored)}.db"
            wall, _ = run_ours(task, cases, agents, path)
            if path is not None:
                stored.append((wall, *store_figures(path)))
            return wall

        return go

    def peer(task: str) -> Callable[[], float]:
        return lambda: run_peer(task, cases, server.url)

    answer, tool = ideal(1, tries, lat, False), ideal(2, tries, lat, True)
    groups = [
        [("answer: ours, dataset.run", answer, ours("answer")),
         ("answer: pydantic_evals + pydantic-ai", answer, peer("answer")),
         ("answer: ours, store=file", answer, ours("answer", "store"))],
        [("tool: ours, native tool calls", tool, ours("tool")),
         ("tool: pydantic_evals + pydantic-ai", tool, peer("tool")),
         ("tool: ours, one cortex turn", answer, ours("cortex"))],
    ]  # fmt: skip
    for group in groups:
        if args.quick:
            group = [g for g in group if "store" not in g[0]]
        rows += timed(server, group, runs)
        for row in rows[-len(group) :]:
            print(f"  {row.label}: {', '.join(f'{w:.2f} s' for w in row.walls)}", flush=True)
    return rows, stored[1:]  # the warm-up's store is not counted


HEADER = ["run", "wall (median)", "range", "tries/s", "ideal", "/ ideal", "most in flight",
          "requests", "goal"]  # fmt: skip


def report(rows: list[Timed], stored: list[Any], tries: int) -> str:
    out = []
    by = {r.label: r for r in rows}
    for r in rows:
        goal = ""
        if r.label.startswith(("answer: ours, dataset", "tool: ours, native")):
            goal = f"≤ 1.15× ideal: {verdict(r.median <= 1.15 * r.ideal)}"
        out.append([r.label, f"{r.median:.2f} s", f"{min(r.walls):.2f}-{max(r.walls):.2f} s",
                    f"{tries / r.median:.1f}", f"{r.ideal:.2f} s", f"{r.median / r.ideal:.3f}×",
                    r.most, r.requests, goal])  # fmt: skip
    text = table(
        f"{tries} tries at concurrency {CONCURRENCY} (median of {len(rows[0].walls)})",
        HEADER,
        out,
    )
    pairs = [("answer: ours, dataset.run", "answer: pydantic_evals + pydantic-ai"),
             ("tool: ours, native tool calls", "tool: pydantic_evals + pydantic-ai"),
             ("tool: ours, one cortex turn", "tool: pydantic_evals + pydantic-ai")]  # fmt: skip
    side = [[a, b, f"{by[b].median / by[a].median:.2f}×"] for a, b in pairs if a in by and b in by]
    text += "\n" + table("Side by side", ["ours", "pydantic_evals", "theirs / ours"], side)
    if stored and "answer: ours, store=file" in by:
        plain, kept = by["answer: ours, dataset.run"], by["answer: ours, store=file"]
        rows_ = statistics.median(s[1] for s in stored)
        size = statistics.median(s[2] for s in stored)
        slot = (kept.median - plain.median) / tries * 1000 * CONCURRENCY
        text += "\n" + table("The store's overhead (answer task)", [
            "store=None", "store=file", "overhead", "per try", "rows written", "bytes written",
        ], [[f"{plain.median:.2f} s", f"{kept.median:.2f} s",
             f"{(kept.median / plain.median - 1) * 100:+.1f}%",
             f"{slot:+.1f} ms of a try's slot", f"{rows_:,.0f} ({rows_ / tries:.1f} a try)",
             f"{size:,.0f} ({size / tries:,.0f} a try)"]])  # fmt: skip
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tries", type=int, default=200, help="tries a run (200)")
    parser.add_argument("--latency", type=float, default=0.25, help="seconds a reply (0.25)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each (3)")
    parser.add_argument("--quick", action="store_true", help="1 run, no store rows")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 1
    from importlib.metadata import version

    os.environ.setdefault("CORTEX_STORE", str(Path(tempfile.mkdtemp()) / "runs.db"))
    load = os.getloadavg()
    peers = f"pydantic-ai {version('pydantic-ai-slim')}, pydantic-evals {version('pydantic-evals')}"
    print(f"load: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min), {os.cpu_count()} cores; "
          f"{peers}")  # fmt: skip
    server = Server(args.latency)
    try:
        wall, most = check_server(server, args.latency)
        print(f"server check: {CONCURRENCY} streamed requests at once took {wall:.3f} s "
              f"(one reply: {args.latency:.3f} s), {most} in flight at most\n")  # fmt: skip
        rows, stored = measure(args, server)
        print()
        print(report(rows, stored, args.tries // 4 * 4))
    finally:
        server.close()
    load = os.getloadavg()
    print(f"load after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
