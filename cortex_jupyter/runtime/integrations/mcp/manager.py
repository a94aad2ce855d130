"""``McpManager``: the MCP servers of a session, each one's life (connect, list tools,
call, relist on ``list_changed``, close) and its tools registered as ``NAME.TOOL``.

``add`` starts a stdio server (``url=...`` connects to a streamable-HTTP one instead),
lists its tools and registers each as an ``McpTool`` whose ``func`` makes the call, so
the scheduler runs it like any async tool (eagerly, with timeouts, retries and Stop). A
tool annotated ``destructiveHint`` asks for approval first. Every session lives on the
manager's own loop (``portal.py``); cancelling a caller (Stop, a timeout) cancels the
request, which makes the SDK send ``notifications/cancelled``; the session stays usable.

A server that will not start, crashes or hangs fails with one ``McpServerError`` line;
its tools then fail with that reason, and nothing else is affected. Servers close on
``remove``, ``close_all`` and at interpreter exit, and no process is left behind (the
SDK's stdio transport ends the server's whole process group).

The connection uses the MCP initialize handshake (``mode="legacy"`` in the SDK): every
deployed server speaks it, and it carries ``tools/list_changed`` and log messages as
plain notifications (the 2026 protocol moves both behind per-request opt-ins). The SDK
itself is imported when a server is first connected, not with this module.
"""

from __future__ import annotations

import atexit
import math
import os
import shlex
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, suppress
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from cortex_jupyter._version import __version__
from cortex_jupyter.runtime.core.calls.registry import Registry, default_registry
from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.runtime.integrations.mcp.config import (
    DEFAULT_TIMEOUT,
    ServerConfig,
    read_config,
)
from cortex_jupyter.runtime.integrations.mcp.errors import (
    McpServerError,
    McpToolError,
    UnknownMcpServer,
)
from cortex_jupyter.runtime.integrations.mcp.portal import _LoopThread
from cortex_jupyter.runtime.integrations.mcp.schema import (
    McpTool,
    _decoded_size,
    _error_text,
    tool_output,
)
from cortex_jupyter.runtime.integrations.mcp.server import (
    ServerStatus,
    _Call,
    _ended,
    _reason,
    _route_log,
    _Server,
    _StderrPipe,
    _with_stderr,
)
from cortex_jupyter.runtime.scheduler.capture import current

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client import Transport
    from mcp.types import LoggingMessageNotificationParams, Tool

__all__ = ["McpManager"]

#: Longest wait for a server to close (its process group is killed within it).
CLOSE_WAIT = 15.0

_MAX_PAGES = 100


class McpManager:
    """The MCP servers of a session and their tools, registered on ``registry``.

    Its methods may be called from any thread except its own loop's: ``add``,
    ``load_config``, ``remove`` and ``close_all`` block until done; ``call_tool`` and
    ``read_resource`` are awaited on any anyio event loop.
    """

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry if registry is not None else default_registry
        self._servers: dict[str, _Server] = {}
        self._loop: _LoopThread | None = None
        self._lock = threading.Lock()
        atexit.register(_close_at_exit, weakref.ref(self))

    # ---- from any thread ------------------------------------------------------------

    def add(
        self,
        name: str,
        command: Sequence[str] | str | None = None,
        *,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> ServerStatus:
        """Start a stdio server (``command``: a list, or a string split like a shell)
        or connect to a streamable-HTTP one (``url``), and register its tools as
        ``NAME.TOOL`` (replacing a server of the same name).

        ``env`` is added to the server's environment (the SDK passes only a safe few
        variables of ours, such as PATH and HOME); ``headers`` are sent with every HTTP
        request. Values may use ``${NAME}``, read from the environment at connect time,
        e.g. ``headers={"Authorization": "Bearer ${GITHUB_TOKEN}"}``. ``timeout``:
        seconds to start, answer and list tools. Raises ``McpServerError`` when the
        server does not start (it stays listed, failed, with the reason).
        """
        parts = tuple(shlex.split(command) if isinstance(command, str) else command or ())
        config = ServerConfig(
            name, parts, url, dict(env or {}), dict(headers or {}),
            os.fspath(cwd) if cwd is not None else None, timeout,
        )  # fmt: skip
        status = self._ensure_loop().run_sync(self._start, config)
        if status.state != "ready":
            raise McpServerError(name, "did not start", status.error or status.state)
        return status

    def load_config(self, source: str | os.PathLike[str] | Mapping[str, Any]) -> list[ServerStatus]:
        """Add every server of a config file (see ``read_config``), all at once. A server
        that fails is listed failed with its reason; the others are added regardless."""
        configs = read_config(source)
        return self._ensure_loop().run_sync(self._start_all, configs)

    def remove(self, name: str) -> None:
        """Close a server and unregister its tools."""
        if name not in self._servers:
            raise UnknownMcpServer(name, self._servers)
        self._ensure_loop().run_sync(self._remove, name)

    def servers(self) -> list[ServerStatus]:
        """Every added server: state, tools, last error, last stderr lines."""
        return [server.status() for server in list(self._servers.values())]

    def status(self, name: str) -> ServerStatus:
        """One server's state, tools, last error and last stderr lines (``.details()`` as
        text); raises ``UnknownMcpServer``."""
        return self._server(name).status()

    def stderr(self, name: str) -> str:
        """What the server wrote to stderr (the last ``KEPT_LINES`` lines), redacted."""
        return redact("\n".join(self._server(name).stderr.lines()))

    def logs(self, name: str) -> str:
        """Log messages the server sent while none of its tool calls ran."""
        return redact("\n".join(self._server(name).logs.lines()))

    def close_all(self) -> None:
        """Close every server (their tools are unregistered) and stop the loop; the
        manager can be used again after. Done at interpreter exit too."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        if loop.alive and threading.get_ident() != loop.ident:
            with suppress(Exception):
                loop.portal.call(self._close_all)
        loop.close()
        for server in list(self._servers.values()):
            self._unregister(server)
        self._servers.clear()

    # ---- from any event loop ------------------------------------------------------------

    async def call_tool(self, server: str, tool: str, arguments: Mapping[str, Any]) -> Any:
        """Call ``tool`` of ``server`` (see ``tool_output`` for what it returns).

        The server's log messages and progress during the call go to the running
        action's capture. Raises ``McpToolError`` for the server's errors and
        ``McpServerError`` when the server is not running or stops during the call.
        """
        capture = current()  # the action's, from this context: read before hopping
        return await self._ensure_loop().hop(
            capture, self._call_on_loop, server, tool, dict(arguments)
        )

    async def read_resource(self, server: str, uri: str) -> str:
        """A resource's text (several contents joined by newlines; binary ones
        described, not decoded): what a context feed with ``source: mcp`` reads."""
        return str(await self._ensure_loop().hop(None, self._read_on_loop, server, uri))

    # ---- its event loop (portal.py) ---------------------------------------------------

    def _ensure_loop(self) -> _LoopThread:
        with self._lock:
            if self._loop is None or not self._loop.alive:
                self._loop = _LoopThread()
            return self._loop

    # ---- on the manager's loop --------------------------------------------------------------

    def _server(self, name: str) -> _Server:
        server = self._servers.get(name)
        if server is None:
            raise UnknownMcpServer(name, self._servers)
        return server

    async def _start(self, config: ServerConfig) -> ServerStatus:
        old = self._servers.get(config.name)
        if old is not None:
            await self._close(old)
            self._unregister(old)
        server = self._servers[config.name] = _Server(config)
        assert self._loop is not None
        await self._loop.tasks.start(self._run, server)
        return server.status()

    async def _start_all(self, configs: Sequence[ServerConfig]) -> list[ServerStatus]:
        async with anyio.create_task_group() as tg:
            for config in configs:
                tg.start_soon(self._start, config)
        return [self._servers[config.name].status() for config in configs]

    async def _remove(self, name: str) -> None:
        server = self._servers.pop(name, None)
        if server is not None:
            await self._close(server)
            self._unregister(server)

    async def _close_all(self) -> None:
        async with anyio.create_task_group() as tg:
            for server in list(self._servers.values()):
                tg.start_soon(self._close, server)

    async def _close(self, server: _Server) -> None:
        server.stopping = True
        server.stop.set()
        if server.state == "starting" and server.scope is not None:
            server.scope.cancel()
        with anyio.move_on_after(CLOSE_WAIT):
            await server.closed.wait()
        if not server.closed.is_set() and server.scope is not None:
            server.scope.cancel()  # the transport would not close: cut it off
            with anyio.move_on_after(CLOSE_WAIT):
                await server.closed.wait()

    def _unregister(self, server: _Server, names: Iterable[str] | None = None) -> None:
        """Unregister the server's tools (or those of ``names``), leaving any entry of the
        same name that is not the server's own."""
        for name in list(server.tools if names is None else names):
            if ("tool", name) in self.registry and self.registry.get("tool", name) is (
                server.tools.get(name)
            ):
                self.registry.remove("tool", name)

    async def _run(self, server: _Server, *, task_status: TaskStatus[None]) -> None:
        """A server's whole life: connect, list tools, wait until stopped, close."""
        config = server.config
        started = False
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + config.timeout) as scope:
                server.scope = scope
                async with AsyncExitStack() as stack:
                    await self._connect(server, stack)
                    await self._list_tools(server)
                    scope.deadline = math.inf
                    server.state = "ready"
                    task_status.started()
                    started = True
                    await server.stop.wait()
            if scope.cancelled_caught and server.state == "starting" and not server.stopping:
                server.fail(
                    await _with_stderr(
                        server,
                        f"did not answer within {config.timeout:g} s "
                        "(raise timeout= if it is only slow to start)",
                    )
                )
        except Exception as exc:
            server.fail(await _reason(server, exc))
        finally:
            server.client = None
            if server.state in ("starting", "ready"):
                server.state = "closed"
            if server.pipe is not None:
                server.pipe.close_writer()
            server.closed.set()
            if not started:
                task_status.started()

    async def _connect(self, server: _Server, stack: AsyncExitStack) -> None:
        from mcp import Client
        from mcp.types import Implementation, ToolListChangedNotification

        async def on_log(params: LoggingMessageNotificationParams) -> None:
            _route_log(server, params)

        async def on_message(message: Any) -> None:
            if isinstance(message, ToolListChangedNotification):
                # In a task of its own: this handler may run inside the session's
                # receive loop, which has to go on to read the answer to tools/list.
                self._ensure_loop().tasks.start_soon(self._relist, server)

        client = Client(
            await self._transport(server, stack),
            mode="legacy",
            cache=None,
            logging_callback=on_log,
            message_handler=on_message,
            client_info=Implementation(name="cortex-jupyter", version=__version__),
        )
        try:
            await stack.enter_async_context(client)
        finally:
            if server.pipe is not None:  # spawned (or not): the server has its own copy
                server.pipe.close_writer()
        server.client = client

    async def _transport(self, server: _Server, stack: AsyncExitStack) -> Transport:
        config = server.config
        if config.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async def refused(response: Any) -> None:  # the SDK keeps only "an error"
                if response.status_code >= 400:
                    server.http_error = f"HTTP {response.status_code} {response.reason_phrase}"

            http = create_mcp_http_client(headers=config.expanded_headers())
            http.event_hooks["response"].append(refused)
            await stack.enter_async_context(http)
            return streamable_http_client(config.expanded_url(), http_client=http)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        command = config.expanded_command()
        params = StdioServerParameters(
            command=command[0], args=command[1:], env=config.expanded_env() or None, cwd=config.cwd
        )
        portal = self._ensure_loop().portal

        def exited() -> None:  # the reader thread saw the end of the server's stderr
            portal.start_task_soon(self._check_alive, server)

        server.pipe = _StderrPipe(server.stderr, exited)
        stack.callback(server.pipe.close_writer)
        return stdio_client(params, errlog=server.pipe.writer)

    async def _list_tools(self, server: _Server) -> None:
        """(Re)list the server's tools and make the registry match: new and changed
        tools registered, removed ones unregistered."""
        client = server.client
        assert client is not None
        async with server.listing:
            listed: list[Tool] = []
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                listed.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            name = server.config.name
            specs = {f"{name}.{tool.name}": _tool_spec(self, name, tool) for tool in listed}
            if self._servers.get(name) is not server:
                return  # replaced or removed meanwhile
            self._unregister(server, server.tools.keys() - specs.keys())
            for spec in specs.values():
                self.registry.add(spec)
            server.tools = specs

    async def _relist(self, server: _Server) -> None:
        """The server said its tools changed (``notifications/tools/list_changed``)."""
        if server.state != "ready" or server.stopping or server.client is None:
            return
        try:
            await self._list_tools(server)
        except Exception as exc:  # the old tools stay; the reason is kept
            server.logs.add(redact(f"relisting tools after list_changed failed: {exc}"))

    def _ready(self, name: str) -> tuple[_Server, Client]:
        server = self._server(name)
        if server.state != "ready" or server.client is None:
            reason = server.error or f"it is {server.state}"
            raise McpServerError(name, "is not running", f"{reason}; add it again to restart it")
        return server, server.client

    async def _call_on_loop(
        self, name: str, tool: str, arguments: dict[str, Any], post: Callable[..., None]
    ) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        server, client = self._ready(name)
        call = _Call(post)
        server.calls.add(call)
        try:
            result = await client.call_tool(tool, arguments, progress_callback=call.progress)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise McpToolError(name, tool, exc.message) from None
            raise await self._lost(server, f"during the call to {tool!r}") from None
        except (McpServerError, McpToolError):
            raise
        except Exception as exc:
            raise McpToolError(name, tool, f"{type(exc).__name__}: {exc}") from exc
        finally:
            server.calls.discard(call)
        if result.is_error:
            raise McpToolError(name, tool, _error_text(result))
        spec = server.tools.get(f"{name}.{tool}")
        return tool_output(result, spec.output_schema if spec is not None else None)

    async def _read_on_loop(self, name: str, uri: str, post: Callable[..., None]) -> str:
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        server, client = self._ready(name)
        try:
            result = await client.read_resource(uri)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise McpServerError(name, f"could not read {uri!r}", exc.message) from None
            raise await self._lost(server, f"while reading {uri!r}") from None
        texts = []
        for content in result.contents:
            text = getattr(content, "text", None)
            if text is None:
                size = _decoded_size(getattr(content, "blob", "") or "")
                text = f"[{content.mime_type or 'binary'} content of {content.uri}: {size:,} bytes]"
            texts.append(text)
        return "\n".join(texts)

    async def _lost(self, server: _Server, when: str) -> McpServerError:
        """The connection ended ``when`` (during a call...): unless we were closing it,
        the server is failed, with its last stderr line. Returns the error to raise."""
        name = server.config.name
        if server.stopping:
            return McpServerError(name, "was closed", f"it was removed or closed {when}".strip())
        what = _ended(server.config, when)
        if server.state == "ready":
            server.fail(await _with_stderr(server, what))
        return McpServerError(name, "stopped", server.error or what)

    async def _check_alive(self, server: _Server) -> None:
        """The server closed its stderr (it exited, usually): if it no longer answers a
        ping, it is failed now rather than at its next call."""
        from mcp.types import EmptyResult, PingRequest, RequestParams

        client = server.client
        if server.state != "ready" or server.stopping or server.calls or client is None:
            return  # a call in flight finds out itself, and says which call it was
        with anyio.move_on_after(5.0) as scope:
            try:  # Client.send_ping warns (deprecated in 2026); the request is the same
                await client.session.send_request(PingRequest(params=RequestParams()), EmptyResult)
                return
            except Exception:
                pass
        if scope.cancelled_caught:
            return  # still connected, only slow: its next call will tell
        await self._lost(server, "")


def _tool_spec(manager: McpManager, server: str, tool: Tool) -> McpTool:
    name = f"{server}.{tool.name}"

    async def call(arguments: dict[str, Any]) -> Any:
        return await manager.call_tool(server, tool.name, arguments)

    call.__name__ = call.__qualname__ = name
    annotations = tool.annotations.model_dump(by_alias=True) if tool.annotations else {}
    return McpTool(
        name=name,
        type="tool",
        func=call,
        description=tool.description or tool.title or "",
        parameters=dict(tool.input_schema),
        approve=annotations.get("destructiveHint") is True,
        server=server,
        tool=tool.name,
        annotations={k: v for k, v in annotations.items() if v is not None},
        output_schema=tool.output_schema,
    )


def _close_at_exit(ref: weakref.ref[McpManager]) -> None:
    manager = ref()
    if manager is not None:
        with suppress(Exception):
            manager.close_all()
