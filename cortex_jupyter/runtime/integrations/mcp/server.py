"""One MCP server's state as the manager keeps it (``_Server``), what ``servers()``
shows of it (``ServerStatus``), and where its stderr and log lines go.

What a server writes to stderr goes to a bounded buffer (``stderr(name)``), never into
a cell; its log messages go to the capture of the tool call in flight, or else to its
logs. The one-line reasons a server failed (it exited, it answered HTTP 401...) are
worded here too. Kept apart from the manager so the manager reads as the server's life
(start, list, call, close) and this as the state that life changes.
"""

from __future__ import annotations

import codecs
import json
import os
import threading
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TextIO

import anyio
import anyio.to_thread

from cortex_jupyter.runtime.core.trust.secrets import redact, secrets
from cortex_jupyter.runtime.integrations.mcp.config import ServerConfig
from cortex_jupyter.runtime.integrations.mcp.errors import McpConfigError
from cortex_jupyter.runtime.integrations.mcp.schema import McpTool

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import LoggingMessageNotificationParams

__all__ = ["KEPT_LINES", "KEPT_LINE_CHARS", "ServerStatus", "State"]

#: Lines of a server's stderr (and of its logs outside calls) that are kept.
KEPT_LINES = 200
#: Longest kept line; the rest of a longer one is cut.
KEPT_LINE_CHARS = 2000
State = Literal["starting", "ready", "failed", "closed"]


@dataclass(frozen=True)
class ServerStatus:
    """One server as ``servers()`` lists it: never a header or env value."""

    name: str
    transport: Literal["stdio", "http"]
    target: str
    state: State
    tools: tuple[str, ...] = ()
    error: str | None = None
    #: The last lines the server wrote to stderr (``stderr(name)`` has all that is kept).
    stderr: tuple[str, ...] = ()
    #: Names of the headers sent (values are never shown).
    headers: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line: ``fs  ready  stdio  npx -y ...  (14 tools)``, or the error."""
        count = len(self.tools)
        how = self.error or f"{count} tool{'' if count == 1 else 's'}"
        return f"{self.name}  {self.state}  {self.transport}  {self.target}  ({how})"

    def details(self) -> str:
        """The summary, then the tools, the headers sent and the last stderr lines."""
        lines = [self.summary()]
        if self.tools:
            lines.append("tools: " + ", ".join(self.tools))
        if self.headers:
            lines.append("headers: " + ", ".join(self.headers) + " (values not shown)")
        if self.stderr:
            lines.append("stderr (last lines):")
            lines.extend(f"  {line}" for line in self.stderr)
        return "\n".join(lines)


class _Lines:
    """The last lines of a text stream, bounded; fed and read from any thread."""

    def __init__(self) -> None:
        self._lines: deque[str] = deque(maxlen=KEPT_LINES)
        self._partial = ""
        self._lock = threading.Lock()
        self.eof = threading.Event()

    def feed(self, text: str) -> None:
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            # Cut lines keep no part of a secret (they are redacted again when read).
            self._lines.extend(secrets.head(line.rstrip("\r"), KEPT_LINE_CHARS) for line in lines)
            self._partial = self._partial[: KEPT_LINE_CHARS * 4]

    def add(self, line: str) -> None:
        with self._lock:
            self._lines.append(secrets.head(line, KEPT_LINE_CHARS))

    def lines(self) -> list[str]:
        with self._lock:
            return [*self._lines, *([self._partial] if self._partial else [])]

    def last(self, n: int) -> tuple[str, ...]:
        return tuple(line for line in self.lines() if line.strip())[-n:]


class _StderrPipe:
    """A pipe the server's stderr is written to, read into ``lines`` by a daemon thread;
    ``on_eof`` runs when every holder of the write end (the server) closed it."""

    def __init__(self, lines: _Lines, on_eof: Callable[[], None]) -> None:
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w", encoding="utf-8")
        self._lines = lines
        self._on_eof = on_eof
        threading.Thread(
            target=self._read, args=(read_fd,), name="cortex-mcp-stderr", daemon=True
        ).start()

    def close_writer(self) -> None:
        """Our copy of the write end: closed once the server has its own."""
        with suppress(OSError):
            self.writer.close()

    def _read(self, fd: int) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        try:
            with os.fdopen(fd, "rb", buffering=0) as pipe:
                while chunk := pipe.read(65536):
                    self._lines.feed(decoder.decode(chunk))
        finally:
            self._lines.feed(decoder.decode(b"", final=True))
            self._lines.eof.set()
            with suppress(Exception):
                self._on_eof()


class _Call:
    """A tool call in flight: where the server's log lines and progress for it go."""

    def __init__(self, post: Callable[[tuple[str, Any]], None]) -> None:
        self.post = post

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.post(("progress", (progress, total, message or "")))


class _Server:
    """A server's state; changed only on the manager's loop, read from anywhere."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state: State = "starting"
        self.error: str | None = None
        self.tools: dict[str, McpTool] = {}
        self.stderr = _Lines()
        self.logs = _Lines()
        self.client: Client | None = None
        self.calls: set[_Call] = set()
        self.stopping = False
        self.stop = anyio.Event()
        self.closed = anyio.Event()
        self.listing = anyio.Lock()
        self.scope: anyio.CancelScope | None = None
        self.pipe: _StderrPipe | None = None
        #: The last HTTP error status the server answered with.
        self.http_error: str | None = None

    def fail(self, reason: str) -> None:
        """The server is unusable (first reason wins); its session is closed."""
        if self.state in ("starting", "ready"):
            self.state = "failed"
            self.error = redact(reason)
        self.stop.set()

    def status(self) -> ServerStatus:
        return ServerStatus(
            name=self.config.name,
            transport=self.config.transport,
            target=self.config.target,
            state=self.state,
            tools=tuple(sorted(self.tools)),
            error=self.error,
            stderr=tuple(redact(line) for line in self.stderr.last(5)),
            headers=tuple(sorted(self.config.headers)),
        )


def _failure(server: _Server, root: BaseException) -> str:
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED

    config = server.config
    if isinstance(root, OSError) and config.url is None and root.filename is not None:
        return f"command {config.command[0]!r} could not be started ({root.strerror})"
    if isinstance(root, MCPError) and root.code == CONNECTION_CLOSED:
        return _ended(config, "before it answered" if server.state == "starting" else "")
    if isinstance(root, MCPError) and server.http_error is not None:
        hint = " (are its headers right, e.g. its token?)" if " 40" in server.http_error else ""
        return f"it answered {server.http_error}{hint}"
    detail = str(root).strip().splitlines()
    text = f"{type(root).__name__}: {detail[0]}" if detail else type(root).__name__
    return f"could not connect to {config.target} ({text})" if config.url else text


def _ended(config: ServerConfig, when: str) -> str:
    """How a server's connection ending reads: a process exits, an HTTP server closes."""
    what = "closed the connection" if config.url else "exited"
    return f"{what} {when}" if when else what


def _root_cause(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    cancelled = anyio.get_cancelled_exc_class()
    while True:
        inner = getattr(exc, "exceptions", None)
        if not isinstance(inner, tuple) or not inner:
            return exc
        exc = next((e for e in inner if not isinstance(e, cancelled)), inner[0])


def _route_log(server: _Server, params: LoggingMessageNotificationParams) -> None:
    """A log message goes to the calls of the server in flight (the protocol does not
    say which request it belongs to; usually there is one), or else to its logs."""
    data = params.data if isinstance(params.data, str) else json.dumps(params.data, default=str)
    line = redact(f"{params.level.upper()} {params.logger or server.config.name}: {data}")
    calls = list(server.calls)
    if not calls:
        server.logs.add(line)
    for call in calls:
        call.post(("log", line))


async def _with_stderr(server: _Server, text: str) -> str:
    """``text`` and the server's last stderr line (waiting briefly for the rest of
    its output when it is exiting)."""
    if server.pipe is not None:
        await anyio.to_thread.run_sync(server.stderr.eof.wait, 1.0, abandon_on_cancel=True)
    last = server.stderr.last(1)
    return redact(f"{text} (last stderr line: {last[0]})" if last else text)


async def _reason(server: _Server, exc: BaseException) -> str:
    """Why a server did not start (or stopped), in one line."""
    root = _root_cause(exc)
    if isinstance(root, McpConfigError):
        return f"{root.where} {root.problem}"
    return await _with_stderr(server, _failure(server, root))
