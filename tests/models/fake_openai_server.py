"""A small OpenAI-compatible server for tests: scripted replies over real HTTP on 127.0.0.1.

Tests talk to it through the real ``openai`` SDK, so what is pinned is what users get:
the SDK's request, its retries and its server-sent-event decoding. Each test scripts what
the server does next, one reply per request, in order:

- ``Stream(chunks)``: ``200`` with ``data: {...}`` events and ``data: [DONE]``, in a
  chunked body. A ``str`` in ``chunks`` is sent as an event's raw data; a ``Raw`` is sent
  verbatim (``event:`` frames, ``:`` comments, blank keep-alive lines: see ``event``,
  ``comment``, ``blank_lines``). ``done=False`` leaves out ``[DONE]``. ``cut=True``
  closes the connection after the chunks instead (no ``[DONE]``, chunked body
  unfinished); ``stall=True`` keeps it open until the client closes it (and records
  when); ``gates=[(n, event)]`` sends the first ``n`` chunks, then waits for the test to
  set ``event``. ``at_cap=True`` reports, in its usage chunks, no more completion tokens
  than the request's ``max_tokens`` (or ``max_completion_tokens``) allowed, as a server that
  stopped the reply there does.
- ``Error(status, body, headers)``: an error status with a JSON body.

``max_reply = N`` makes it a model that allows replies of at most N tokens: a request whose
``max_tokens`` (or ``max_completion_tokens``) asks for more gets OpenAI's 400 saying so
(``too_large``), and no scripted reply is used up.

Every request is recorded (path, headers, JSON body, arrival time) in ``requests``.
``GET /props`` and ``GET /v1/models`` answer ``props`` and ``models`` when a test sets
them (a 404 otherwise); their paths go to ``gets``. A
request with nothing scripted gets a 500 saying so, which the test then reports.

The chunk helpers build the SSE payloads servers send: text, reasoning (under either
field name), refusals, tool-call fragments, usage (alone or on any chunk; OpenAI's with
its cached and reasoning token details), finish, and the frames around them.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A handler never waits longer than this for anything (a gate, a client closing).
MAX_WAIT = 5.0


# --------------------------------------------------------------------------- chunks


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    index: int = 0,
    usage: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with one choice (``index``), with ``usage`` if given."""
    out: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "fake-model",
        "choices": [{"index": index, "delta": delta or {}, "finish_reason": finish}],
    }
    if usage is not None:
        out["usage"] = _usage(*usage)
    return out


def role() -> dict[str, Any]:
    """The first chunk OpenAI sends: the role, no content."""
    return chunk({"role": "assistant", "content": ""})


def text(content: str) -> dict[str, Any]:
    return chunk({"content": content})


def texts(content: str, size: int) -> list[dict[str, Any]]:
    """``content`` as text chunks of ``size`` characters."""
    return [text(content[i : i + size]) for i in range(0, len(content), size)]


def refusal(content: str) -> dict[str, Any]:
    """A refusal delta as OpenAI streams it: ``refusal`` text, ``content`` null."""
    return chunk({"content": None, "refusal": content})


def reasoning(content: str, field: str = "reasoning_content") -> dict[str, Any]:
    """A reasoning delta: ``reasoning_content`` (DeepSeek, older vLLM) or ``reasoning``."""
    return chunk({"content": None, field: content})


def tool_call(
    index: int, call_id: str | None, name: str | None, arguments: str, pieces: int = 1
) -> list[dict[str, Any]]:
    """A tool call as OpenAI streams it: id and name first, then argument fragments."""
    first: dict[str, Any] = {"index": index, "type": "function", "function": {"arguments": ""}}
    if call_id is not None:
        first["id"] = call_id
    if name is not None:
        first["function"]["name"] = name
    out = [chunk({"tool_calls": [first]})]
    size = max(1, -(-len(arguments) // pieces))
    for i in range(0, len(arguments), size):
        fragment = {"index": index, "function": {"arguments": arguments[i : i + size]}}
        out.append(chunk({"tool_calls": [fragment]}))
    return out


def finish(reason: str = "stop") -> dict[str, Any]:
    return chunk({}, finish=reason)


def usage(prompt: int, completion: int, **details: Any) -> dict[str, Any]:
    """The extra chunk ``stream_options.include_usage`` asks for: no choices, usage
    (with ``details``, as given, beside the counts)."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "fake-model",
        "choices": [],
        "usage": {**_usage(prompt, completion), **details},
    }


def openai_usage(prompt: int, completion: int, cached: Any, reasoning: int = 0) -> dict[str, Any]:
    """The usage chunk as OpenAI streams it: ``cached`` prompt tokens (sent as given:
    tests put nonsense there too) in ``prompt_tokens_details``, ``reasoning`` tokens
    in ``completion_tokens_details``, and the fields around them."""
    out = usage(
        prompt,
        completion,
        prompt_tokens_details={"cached_tokens": cached, "audio_tokens": 0},
        completion_tokens_details={
            "reasoning_tokens": reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    )
    out.update(
        model="gpt-4o-mini-2024-07-18",
        service_tier="default",
        system_fingerprint="fp_fake",
        obfuscation="x1y2",
    )
    return out


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class Raw:
    """Bytes of the event stream sent exactly as written (a frame, a comment, blank lines);
    ``bytes`` for what is no UTF-8."""

    text: str | bytes


def event(name: str, data: dict[str, Any] | str) -> Raw:
    """A named SSE event: ``event: NAME`` then its ``data:`` line (JSON unless a str)."""
    payload = data if isinstance(data, str) else json.dumps(data)
    return Raw(f"event: {name}\ndata: {payload}\n\n")


def comment(text: str) -> Raw:
    """An SSE comment line (``: text``), as OpenRouter sends ``: OPENROUTER PROCESSING``."""
    return Raw(f": {text}\n\n")


def blank_lines(count: int = 1) -> Raw:
    """Empty lines between events, as servers send to keep a connection open."""
    return Raw("\n" * count)


# --------------------------------------------------------------------------- replies


@dataclass
class Stream:
    """A streamed 200 reply (see the module docstring)."""

    chunks: Sequence[dict[str, Any] | str | Raw]  # a str: an event's raw data; Raw: verbatim
    done: bool = True
    cut: bool = False
    stall: bool = False
    gates: Sequence[tuple[int, threading.Event]] = ()  # (n, event): wait before chunk n
    gap: float = 0.0  # seconds between chunks
    at_cap: bool = False  # usage: completion tokens no more than the request's cap


@dataclass
class Error:
    """An error status with a JSON body (``body`` is sent as it is when it is a str)."""

    status: int
    body: dict[str, Any] | str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    """A request the server received."""

    path: str
    headers: dict[str, str]  # names in lower case
    json: Any
    at: float  # time.monotonic()


class FakeOpenAIServer:
    """The server; use as a context manager (it stops and joins at exit)."""

    def __init__(self) -> None:
        self.replies: deque[Stream | Error] = deque()
        self.requests: list[Request] = []
        #: What ``GET /props`` (llama.cpp) and ``GET /v1/models`` answer (404 when None);
        #: the paths asked are kept in ``gets``, apart from the chat requests.
        self.props: dict[str, Any] | None = None
        self.models: dict[str, Any] | None = None
        self.gets: list[str] = []
        #: The most completion tokens a reply may ask for (None: any): see ``too_large``.
        self.max_reply: int | None = None
        self.gate_timed_out = False
        self.client_closed = threading.Event()
        self.client_closed_at: float | None = None
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        # Join handler threads at exit, so nothing of a test outlives it.
        self._httpd.daemon_threads = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The base URL, as OPENAI_BASE_URL would give it."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Stream | Error) -> None:
        """What the next requests get, in order."""
        with self._lock:
            self.replies.extend(replies)

    def next_reply(self) -> Stream | Error:
        with self._lock:
            if self.replies:
                return self.replies.popleft()
        return Error(500, {"error": {"message": "fake server: no reply scripted"}})

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()  # joins the handler threads
        self._thread.join(MAX_WAIT)


def too_large(body: Any, limit: int | None) -> Error | None:
    """OpenAI's 400 for a request whose reply cap is above ``limit`` (None: it is not)."""
    if limit is None or not isinstance(body, dict):
        return None
    for name in ("max_tokens", "max_completion_tokens"):
        cap = body.get(name)
        if isinstance(cap, int) and cap > limit:
            message = (
                f"{name} is too large: {cap}. This model supports at most {limit} "
                f"completion tokens, whereas you provided {cap}."
            )
            error = {
                "message": message,
                "type": "invalid_request_error",
                "param": name,
                "code": "invalid_value",
            }
            return Error(400, {"error": error})
    return None


def _capped(reply: Stream, body: Any) -> Stream:
    """``reply`` with its usage held to the request's reply cap (``Stream.at_cap``)."""
    cap = None
    if isinstance(body, dict):
        cap = body.get("max_tokens", body.get("max_completion_tokens"))
    if not reply.at_cap or not isinstance(cap, int):
        return reply
    chunks: list[dict[str, Any] | str | Raw] = []
    for payload in reply.chunks:
        if isinstance(payload, dict) and isinstance(payload.get("usage"), dict):
            counts = payload["usage"]
            completion = min(int(counts["completion_tokens"]), cap)
            counts = {
                **counts,
                "completion_tokens": completion,
                "total_tokens": int(counts["prompt_tokens"]) + completion,
            }
            payload = {**payload, "usage": counts}
        chunks.append(payload)
    return replace(reply, chunks=chunks)


def _handler_for(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        fake = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = MAX_WAIT  # socket timeout: a handler never blocks forever
    fake: FakeOpenAIServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_GET(self) -> None:
        self.close_connection = True
        self.fake.gets.append(self.path)
        body = {"/props": self.fake.props, "/v1/models": self.fake.models}.get(self.path)
        if body is None:
            self._error(Error(404, {"error": {"message": "File Not Found"}}))
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = Request(self.path, headers, json.loads(raw or b"null"), time.monotonic())
        self.fake.record(request)
        # Every connection serves one request, so no handler thread lingers on keep-alive.
        self.close_connection = True
        refused = too_large(request.json, self.fake.max_reply)
        reply = refused if refused is not None else self.fake.next_reply()
        if isinstance(reply, Error):
            self._error(reply)
        else:
            self._stream(_capped(reply, request.json))

    def _error(self, reply: Error) -> None:
        body = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
        data = body.encode()
        self.send_response(reply.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("connection", "close")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, reply: Stream) -> None:
        # The client may hang up first (it read an error event, or stopped early).
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._stream_body(reply)

    def _stream_body(self, reply: Stream) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        for i, payload in enumerate(reply.chunks):
            for at, gate in reply.gates:
                if at == i:
                    self._wait_for_gate(gate)
            if i and reply.gap:
                time.sleep(reply.gap)
            if isinstance(payload, Raw):
                self._send(payload.text)
                continue
            data = payload if isinstance(payload, str) else json.dumps(payload)
            self._send(f"data: {data}\n\n")
        for at, gate in reply.gates:
            if at >= len(reply.chunks):
                self._wait_for_gate(gate)
        if reply.cut:
            # Abruptly: no [DONE], no last chunk of the chunked body. FIN, not RST, so the
            # client still reads every byte sent before it.
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply.stall:
            self._wait_for_client_to_close()
            return
        if reply.done:
            self._send("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _send(self, text: str | bytes) -> None:
        data = text if isinstance(text, bytes) else text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _wait_for_gate(self, gate: threading.Event) -> None:
        if not gate.wait(MAX_WAIT):
            self.fake.gate_timed_out = True

    def _wait_for_client_to_close(self) -> None:
        deadline = time.monotonic() + MAX_WAIT
        sock = self.connection
        while time.monotonic() < deadline and not self.fake.stopping.is_set():
            readable, _, _ = select.select([sock], [], [], 0.01)
            if not readable:
                continue
            try:
                closed = sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                closed = True
            if closed:
                self.fake.client_closed_at = time.monotonic()
                self.fake.client_closed.set()
                return


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unreachable(monkeypatch: Any) -> str:
    """A base URL nothing answers at (a free port), with an API key set so the client
    tries it."""
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    return f"http://127.0.0.1:{free_port()}/v1"


def serve() -> Iterator[FakeOpenAIServer]:
    """For a fixture: a started server, stopped at teardown."""
    with FakeOpenAIServer() as server:
        yield server
