"""Tools from Model Context Protocol servers: each server's tools as ``NAME.TOOL`` entries.

``McpManager.add("fs", ["npx", "-y", "@modelcontextprotocol/server-filesystem", "."])``
starts a stdio server (``url=...`` connects to a streamable-HTTP one instead), lists its
tools and registers each as an ``McpTool``: a ``ToolSpec`` whose ``check`` validates the
arguments against the tool's JSON schema and whose ``func`` makes the call, so the
scheduler runs it like any async tool (eagerly, with timeouts, retries and Stop). A tool
annotated ``destructiveHint`` asks for approval first.

Sessions outlive a cell, while each cell's run may be on its own event loop and thread.
So a manager owns one event loop in a daemon thread where every server's client session
lives; a call made from any other loop hops there and back (``_hop``): the work is
started on the manager's loop through its portal, and the caller waits in a worker thread
that relays the call's log lines and progress to the action's capture as they arrive.
Cancelling the caller (Stop, a timeout) cancels the request, which makes the SDK send
``notifications/cancelled``; the session stays usable.

What a server writes to stderr goes to a bounded buffer (``stderr(name)``), never into a
cell. A server that will not start, crashes or hangs fails with one ``McpServerError``
line; its tools then fail with that reason, and nothing else is affected. Servers close
on ``remove``, ``close_all`` and at interpreter exit, and no process is left behind (the
SDK's stdio transport ends the server's whole process group).

The connection uses the MCP initialize handshake (``mode="legacy"`` in the SDK): every
deployed server speaks it, and it carries ``tools/list_changed`` and log messages as plain
notifications (the 2026 protocol moves both behind per-request opt-ins).
"""

from __future__ import annotations

import atexit
import codecs
import functools
import hashlib
import json
import math
import os
import queue
import re
import shlex
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO, TypeVar
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup, TaskStatus
from anyio.from_thread import BlockingPortal

from cortex_jupyter._version import __version__
from cortex_jupyter.runtime.core.errors import CortexRuntimeError, InvalidArguments
from cortex_jupyter.runtime.core.registry import Registry, ToolSpec, default_registry
from cortex_jupyter.runtime.core.schema import Kinds, schema_kinds
from cortex_jupyter.runtime.core.secrets import CREDENTIAL_NAME, redact, secrets
from cortex_jupyter.runtime.loop.prompt import truncate
from cortex_jupyter.runtime.scheduler.capture import Capture, current

if TYPE_CHECKING:
    from jsonschema.protocols import Validator
    from mcp import Client
    from mcp.client import Transport
    from mcp.types import CallToolResult, LoggingMessageNotificationParams, Tool

__all__ = [
    "DEFAULT_TIMEOUT",
    "NATIVE_NAME",
    "InvalidMcpArguments",
    "McpConfigError",
    "McpContent",
    "McpManager",
    "McpResource",
    "McpServerError",
    "McpTool",
    "McpToolError",
    "NativeNames",
    "ServerConfig",
    "ServerStatus",
    "UnknownMcpServer",
    "default_manager",
    "read_config",
    "read_resource",
    "tool_output",
]

#: Seconds a server has to start, answer the handshake and list its tools.
DEFAULT_TIMEOUT = 30.0
#: What OpenAI-style native tool names may look like.
NATIVE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: Lines of a server's stderr (and of its logs outside calls) that are kept.
KEPT_LINES = 200
#: Longest kept line; the rest of a longer one is cut.
KEPT_LINE_CHARS = 2000
#: Longest wait for a server to close (its process group is killed within it).
CLOSE_WAIT = 15.0

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")
_STDIO_TYPES = frozenset({"stdio"})
_HTTP_TYPES = frozenset({"http", "streamable-http", "streamable_http", "streamableHttp"})
_MAX_PROBLEMS = 8
_MAX_PAGES = 100
State = Literal["starting", "ready", "failed", "closed"]
T = TypeVar("T")


# ---- errors --------------------------------------------------------------------------


class McpServerError(CortexRuntimeError):
    """Raised when an MCP server will not start, crashes, hangs or is not running; its
    tools fail with this error too."""

    def __init__(self, name: str, what: str, reason: str) -> None:
        self.name = name
        self.what = what
        self.reason = reason
        super().__init__(f"MCP server {name!r} {what}: {reason}")


class McpToolError(CortexRuntimeError):
    """Raised when an MCP tool reports an error (an ``isError`` result or an error
    response): the message is the server's own text."""

    def __init__(self, server: str, tool: str, message: str) -> None:
        self.server = server
        self.tool = tool
        self.message = message
        super().__init__(f"MCP tool {tool!r} of server {server!r} failed: {message}")


class InvalidMcpArguments(InvalidArguments):
    """Raised when an action's parameters do not fit an MCP tool's input schema (checked
    before the call, so the server never sees them). An ``InvalidArguments``, with each
    problem the schema validator found in ``problems``."""

    def __init__(
        self,
        name: str,
        problems: Sequence[str],
        takes: str,
        missing: Sequence[str] = (),
        unexpected: Sequence[str] = (),
    ) -> None:
        self.type = "tool"
        self.name = name
        self.problems = tuple(problems)
        self.missing = tuple(missing)
        self.unexpected = tuple(unexpected)
        self.takes = takes
        # Not InvalidArguments.__init__: the message lists the schema's problems.
        CortexRuntimeError.__init__(
            self,
            f"MCP tool {name!r} cannot be called: {'; '.join(self.problems)}; it takes ({takes})",
        )


class McpConfigError(CortexRuntimeError):
    """Raised when an MCP server's configuration is wrong (a bad name, both or neither of
    command and url, an unset ``${VARIABLE}``, an unreadable config file)."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"MCP configuration {where}: {problem}")


class UnknownMcpServer(CortexRuntimeError):
    """Raised when a server name names no added MCP server."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(sorted(known))
        listed = ", ".join(self.known) if self.known else "none"
        super().__init__(f"no MCP server named {name!r} was added; servers: {listed}")


# ---- configuration -------------------------------------------------------------------


def _expand(text: str, where: str) -> str:
    """``text`` with ``${NAME}`` (or VS Code's ``${env:NAME}``) replaced from the
    environment, read now (at connect time), so a token set later is used."""

    def value(match: re.Match[str]) -> str:
        found = os.environ.get(match.group(1))
        if found is None:
            raise McpConfigError(
                where, f"uses ${{{match.group(1)}}}, which is not set in the environment"
            )
        return found

    return _VARIABLE.sub(value, text)


def _strings(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) for k, v in value.items()
    ):
        raise McpConfigError(where, "must map names to strings")
    return {k: str(v) for k, v in value.items()}


@dataclass(frozen=True, repr=False)
class ServerConfig:
    """How to reach one MCP server: a ``command`` to run (stdio) or a ``url``
    (streamable HTTP). ``env``, ``headers``, ``url`` and the command's arguments may use
    ``${NAME}``, expanded from the environment when connecting; values are never shown
    (the repr lists the names of env variables and headers only)."""

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        where = f"of server {self.name!r}"
        if not isinstance(self.name, str) or not _SERVER_NAME.match(self.name):
            raise McpConfigError(
                f"server name {self.name!r}",
                "a name is 1-64 letters, digits, '_' or '-' (its tools are NAME.TOOL)",
            )
        if bool(self.command) == bool(self.url):
            raise McpConfigError(where, "give either a command (stdio) or a url (HTTP)")
        if self.command and not all(isinstance(part, str) for part in self.command):
            raise McpConfigError(where, f"the command must be strings, not {self.command!r}")
        if self.url is not None and urlsplit(self.url).scheme not in ("http", "https"):
            raise McpConfigError(where, "the url must start with http:// or https://")
        if self.headers and not self.url:
            raise McpConfigError(where, "headers are for HTTP servers (give a url)")
        ok = isinstance(self.timeout, int | float) and not isinstance(self.timeout, bool)
        if not ok or not 0 < self.timeout < math.inf:
            raise McpConfigError(where, f"timeout must be a positive number, not {self.timeout!r}")
        object.__setattr__(self, "env", _strings(self.env, f"env {where}"))
        object.__setattr__(self, "headers", _strings(self.headers, f"headers {where}"))

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "http" if self.url else "stdio"

    @property
    def target(self) -> str:
        """What the server is, safe to show: the command as written (``${NAME}`` not
        expanded), or the url without credentials, query or fragment."""
        if self.url is None:
            return redact(shlex.join(self.command))
        parts = urlsplit(self.url)
        host = parts.netloc.rpartition("@")[2]
        return redact(f"{parts.scheme}://{host}{parts.path}")

    def __repr__(self) -> str:
        shown = [f"name={self.name!r}", f"{'url' if self.url else 'command'}={self.target!r}"]
        if self.env:
            shown.append(f"env={sorted(self.env)}")
        if self.headers:
            shown.append(f"headers={sorted(self.headers)}")
        if self.cwd:
            shown.append(f"cwd={self.cwd!r}")
        return f"ServerConfig({', '.join(shown)})"

    @classmethod
    def from_entry(cls, name: str, entry: Any, where: str = "") -> ServerConfig | None:
        """A config from one entry of an ``mcpServers`` (Claude Desktop, Cursor) or
        ``servers`` (VS Code) mapping; None for an entry marked ``disabled``. Keys other
        clients add (``alwaysAllow``, ``description``...) are ignored."""
        place = f"{where}server {name!r}"
        if not isinstance(entry, Mapping):
            raise McpConfigError(place, f"must be a mapping of fields, not {entry!r}")
        if entry.get("disabled") is True:
            return None
        kind = entry.get("type")
        if kind is not None and kind not in _STDIO_TYPES | _HTTP_TYPES:
            raise McpConfigError(
                place,
                f"type {kind!r} is not supported; use stdio (a command) or http "
                "(streamable HTTP: a url)",
            )
        command = entry.get("command")
        args = entry.get("args") or []
        if kind in _STDIO_TYPES and "url" in entry:
            raise McpConfigError(place, f"type {kind!r} runs a command, but it has a url")
        if kind in _HTTP_TYPES and command is not None:
            raise McpConfigError(place, f"type {kind!r} connects to a url, but it has a command")
        if command is not None and not isinstance(command, str):
            raise McpConfigError(place, f"command must be a string, not {command!r}")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise McpConfigError(place, f"args must be a list of strings, not {args!r}")
        timeout = entry.get("timeout", DEFAULT_TIMEOUT)
        return cls(
            name=name,
            command=(command, *args) if command else (),
            url=entry.get("url"),
            env=entry.get("env") or {},
            headers=entry.get("headers") or {},
            cwd=entry.get("cwd"),
            timeout=timeout,
        )

    def expanded_command(self) -> list[str]:
        return [_expand(part, f"the command of server {self.name!r}") for part in self.command]

    def expanded_env(self) -> dict[str, str]:
        env = {k: _expand(v, f"env {k!r} of server {self.name!r}") for k, v in self.env.items()}
        for key, value in env.items():
            if CREDENTIAL_NAME.search(key):
                secrets.add(value)
        return env

    def expanded_headers(self) -> dict[str, str]:
        """The headers to send, with their values registered as secrets (redacted from
        everything cortex shows, saves or sends)."""
        headers = {
            k: _expand(v, f"header {k!r} of server {self.name!r}") for k, v in self.headers.items()
        }
        for value in headers.values():
            secrets.add(value)
            secrets.add(value.partition(" ")[2])  # the token of "Bearer <token>"
        return headers

    def expanded_url(self) -> str:
        assert self.url is not None
        return _expand(self.url, f"the url of server {self.name!r}")


def read_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> list[ServerConfig]:
    """The servers of a config file (JSON or YAML) or of its parsed content.

    Accepts Claude Desktop's shape ``{"mcpServers": {NAME: {"command": ..., "args": [...],
    "env": {...}} | {"url": ..., "headers": {...}}}}``, VS Code's ``{"servers": {NAME:
    {"type": "stdio" | "http", ...}}}`` (also inside ``"mcp"``, as in its settings.json),
    or the mapping of servers itself.
    """
    where = "" if isinstance(source, Mapping) else f"file {os.fspath(source)!r}: "
    data = source if isinstance(source, Mapping) else _load_file(Path(source))
    if isinstance(data.get("mcp"), Mapping):
        data = data["mcp"]
    servers = data.get("mcpServers", data.get("servers", data))
    if not isinstance(servers, Mapping):
        raise McpConfigError(where.rstrip(": ") or "mapping", "mcpServers must be a mapping")
    configs = [ServerConfig.from_entry(str(name), e, where) for name, e in servers.items()]
    return [config for config in configs if config is not None]


def _load_file(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise McpConfigError(f"file {str(path)!r}", f"cannot be read ({exc.strerror})") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml  # YAML is a superset of JSON: other names are read as YAML

            data = yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError and yaml.YAMLError's subclasses
        raise McpConfigError(f"file {str(path)!r}", f"is not valid JSON or YAML ({exc})") from None
    except Exception as exc:
        raise McpConfigError(f"file {str(path)!r}", f"is not valid YAML ({exc})") from None
    if not isinstance(data, Mapping):
        raise McpConfigError(f"file {str(path)!r}", "must hold a mapping (mcpServers: ...)")
    return data


# ---- results -------------------------------------------------------------------------


@dataclass(frozen=True)
class McpResource:
    """A resource an MCP tool returned: embedded (``text`` or base64 ``blob``) or only
    linked (neither)."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None
    name: str | None = None

    def __repr__(self) -> str:
        if self.text is not None:
            body = f"{len(self.text):,} characters"
        elif self.blob is not None:
            body = f"{_decoded_size(self.blob):,} bytes"
        else:
            body = "link"
        mime = f" {self.mime_type}" if self.mime_type else ""
        return f"<resource {self.uri}{mime}: {body}>"


@dataclass(frozen=True)
class McpContent:
    """What an MCP tool returned when it is more than text: its text parts joined
    (``text``), its ``images`` and ``audio`` as ``(mime type, base64 data)`` pairs, and
    the ``resources`` it embedded or linked.

    The repr says what is there without the data (the model reads it); in a notebook the
    first PNG, JPEG or GIF image is shown (``_repr_mimebundle_``).
    """

    text: str = ""
    images: tuple[tuple[str, str], ...] = ()
    audio: tuple[tuple[str, str], ...] = ()
    resources: tuple[McpResource, ...] = ()

    def __repr__(self) -> str:
        shown = [f"text={truncate(self.text, 2000)!r}"] if self.text else []
        for label, items in (("images", self.images), ("audio", self.audio)):
            if items:
                sizes = ", ".join(f"{mime} {_decoded_size(data):,} bytes" for mime, data in items)
                shown.append(f"{label}=[{sizes}]")
        if self.resources:
            shown.append(f"resources={list(self.resources)!r}")
        return f"McpContent({', '.join(shown)})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": repr(self)}
        for mime, data in self.images:
            if mime in ("image/png", "image/jpeg", "image/gif") and mime not in bundle:
                bundle[mime] = data
        return bundle


def _decoded_size(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=")


def tool_output(result: CallToolResult, output_schema: Mapping[str, Any] | None = None) -> Any:
    """The output of a successful call, as a node keeps it.

    Structured content is the output (a dict; a plain value the server wrapped as
    ``{"result": value}``, as the SDK's ``MCPServer`` does for non-object return types,
    is unwrapped); otherwise text parts joined by newlines (a ``str``); with images,
    audio or resources an ``McpContent``; no content at all is ``None``.
    """
    if result.structured_content is not None:
        data = result.structured_content
        return data["result"] if _wraps_result(data, output_schema) else data
    texts: list[str] = []
    images: list[tuple[str, str]] = []
    audio: list[tuple[str, str]] = []
    resources: list[McpResource] = []
    for part in result.content:
        kind = part.type
        if kind == "text":
            texts.append(part.text)  # type: ignore[union-attr]
        elif kind in ("image", "audio"):
            media: Any = part
            (images if kind == "image" else audio).append((str(media.mime_type), str(media.data)))
        elif kind == "resource":
            inner: Any = part.resource  # type: ignore[union-attr]
            text, blob = getattr(inner, "text", None), getattr(inner, "blob", None)
            resources.append(McpResource(str(inner.uri), inner.mime_type, text, blob))
        elif kind == "resource_link":
            link: Any = part
            resources.append(McpResource(str(link.uri), link.mime_type, name=link.name))
    if images or audio or resources:
        return McpContent("\n".join(texts), tuple(images), tuple(audio), tuple(resources))
    return "\n".join(texts) if texts else None


def _wraps_result(data: Mapping[str, Any], schema: Mapping[str, Any] | None) -> bool:
    """Whether ``data`` is a plain value wrapped as ``{"result": value}``: its only key,
    and the only property its output schema (when there is one) declares."""
    if list(data) != ["result"]:
        return False
    if not schema:
        return True
    properties = schema.get("properties")
    return isinstance(properties, Mapping) and list(properties) == ["result"]


def _error_text(result: CallToolResult) -> str:
    texts = [part.text for part in result.content if part.type == "text"]
    return "\n".join(texts) or "the server reported an error without a message"


# ---- tools ---------------------------------------------------------------------------


@dataclass(frozen=True)
class McpTool(ToolSpec):
    """An MCP server's tool as a registry entry named ``SERVER.TOOL``.

    ``parameters`` is the tool's input schema, ``check`` validates against it (raising
    ``InvalidMcpArguments``) and ``func(arguments)`` calls the tool.
    """

    server: str = ""
    #: The server's own name for the tool.
    tool: str = ""
    annotations: Mapping[str, Any] = field(default_factory=dict)
    output_schema: Mapping[str, Any] | None = None

    @functools.cached_property
    def _validator(self) -> Validator | None:
        """A validator for the input schema, or None when the schema is itself invalid
        (the server checks then)."""
        from jsonschema import SchemaError
        from jsonschema.validators import Draft202012Validator, validator_for

        cls = validator_for(self.parameters, default=Draft202012Validator)
        try:
            cls.check_schema(self.parameters)
        except SchemaError:
            return None
        return cls(self.parameters)

    def check(self, params: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """``([arguments], {})`` for ``func``; raises ``InvalidMcpArguments``."""
        arguments = dict(params)
        validator = self._validator
        if validator is not None:
            errors = sorted(validator.iter_errors(arguments), key=lambda e: list(map(str, e.path)))
            if errors:
                problems = [_problem(error) for error in errors[:_MAX_PROBLEMS]]
                if len(errors) > _MAX_PROBLEMS:
                    problems.append(f"and {len(errors) - _MAX_PROBLEMS} more")
                missing, unexpected = self._missing_and_unexpected(arguments)
                raise InvalidMcpArguments(self.name, problems, self.takes(), missing, unexpected)
        return [arguments], {}

    def _missing_and_unexpected(self, arguments: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """Top-level names the schema requires and lacks, and names it does not allow."""
        required = self.parameters.get("required")
        missing = [k for k in required if k not in arguments] if isinstance(required, list) else []
        properties = self.parameters.get("properties")
        closed = self.parameters.get("additionalProperties") is False
        if (
            not closed
            or not isinstance(properties, Mapping)
            or "patternProperties" in self.parameters
        ):
            return missing, []
        return missing, [k for k in arguments if k not in properties]

    def wants(self, name: str) -> Kinds | None:
        """The JSON types the input schema declares for ``name`` (None: unchecked)."""
        properties = self.parameters.get("properties")
        return schema_kinds(properties.get(name)) if isinstance(properties, Mapping) else None

    def takes(self) -> str:
        """The parameters from the schema, e.g. ``a: integer, n: integer = 2``."""
        properties = self.parameters.get("properties")
        if not isinstance(properties, Mapping):
            return "any arguments"
        required = set(self.parameters.get("required") or ())
        shown = []
        for key, prop in properties.items():
            prop = prop if isinstance(prop, Mapping) else {}
            kind = prop.get("type", "any")
            label = f"{key}: {'|'.join(kind) if isinstance(kind, list) else kind}"
            if key in required:
                shown.append(label)
            elif "default" in prop:
                shown.append(f"{label} = {json.dumps(prop['default'])}")
            else:
                shown.append(f"{label} (optional)")
        return ", ".join(shown) or "no parameters"


def _problem(error: Any) -> str:
    """One validation error as a line: where (``items[0].name``) and what."""
    where = ""
    for part in error.absolute_path:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    text = f"{where}: {error.message}" if where else str(error.message)
    return truncate(text, 300)


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


class NativeNames:
    """Registry names (``fs.read_file``) to native function names (``fs__read_file``,
    matching ``NATIVE_NAME``) and back, unique within one table.

    A dot becomes ``__`` and any other character outside ``[A-Za-z0-9_-]`` ``_``; a name
    that is then too long or already taken ends in a short hash of the original instead.
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._native: dict[str, str] = {}
        self._original: dict[str, str] = {}
        # Names that are native already keep themselves: they go first.
        for name in sorted(names, key=lambda name: not NATIVE_NAME.match(name)):
            self.native(name)

    def native(self, name: str) -> str:
        """The native name for ``name`` (the same one every time)."""
        if name in self._native:
            return self._native[name]
        base = re.sub(r"[^A-Za-z0-9_-]", "_", name.replace(".", "__")) or "_"
        native = base
        if len(native) > 64 or native in self._original:
            digest = hashlib.sha256(name.encode()).hexdigest()[:10]
            native = f"{base[:53]}_{digest}"
        self._native[name] = native
        self._original[native] = name
        return native

    def original(self, native: str) -> str:
        """The registry name a native name stands for (an unknown one as it is)."""
        return self._original.get(native, native)


# ---- what servers() shows ----------------------------------------------------------


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


# ---- the manager's event loop ----------------------------------------------------------


class _LoopThread:
    """An event loop in a daemon thread (a kernel that exits never waits for it), with a
    portal other threads start work through and a task group for the servers."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._portal: BlockingPortal | None = None
        self._tasks: TaskGroup | None = None
        self._closing: anyio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="cortex-mcp-loop", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=10.0):
            raise RuntimeError("the MCP event loop did not start within 10 s")

    @property
    def portal(self) -> BlockingPortal:
        assert self._portal is not None
        return self._portal

    @property
    def tasks(self) -> TaskGroup:
        assert self._tasks is not None
        return self._tasks

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self._portal is not None

    def close(self) -> None:
        if self.alive and self._closing is not None:
            with suppress(Exception):
                self.portal.call(self._closing.set)
            self._thread.join(timeout=10.0)

    def _main(self) -> None:
        anyio.run(self._serve)

    async def _serve(self) -> None:
        async with BlockingPortal() as portal, anyio.create_task_group() as tasks:
            self._portal, self._tasks, self._closing = portal, tasks, anyio.Event()
            self._ready.set()
            await self._closing.wait()
            tasks.cancel_scope.cancel()
        self._portal = None


# ---- one server, on the manager's loop --------------------------------------------------


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


# ---- the manager -----------------------------------------------------------------------


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
        status = self._run_sync(self._start, config)
        if status.state != "ready":
            raise McpServerError(name, "did not start", status.error or status.state)
        return status

    def load_config(self, source: str | os.PathLike[str] | Mapping[str, Any]) -> list[ServerStatus]:
        """Add every server of a config file (see ``read_config``), all at once. A server
        that fails is listed failed with its reason; the others are added regardless."""
        configs = read_config(source)
        return self._run_sync(self._start_all, configs)

    def remove(self, name: str) -> None:
        """Close a server and unregister its tools."""
        if name not in self._servers:
            raise UnknownMcpServer(name, self._servers)
        self._run_sync(self._remove, name)

    def servers(self) -> list[ServerStatus]:
        """Every added server: state, tools, last error, last stderr lines."""
        return [server.status() for server in list(self._servers.values())]

    def status(self, name: str) -> ServerStatus:
        return self._server(name).status()

    def stderr(self, name: str) -> str:
        """What the server wrote to stderr (the last ``KEPT_LINES`` lines), redacted."""
        return redact("\n".join(self._server(name).stderr.lines()))

    def logs(self, name: str) -> str:
        """Log messages the server sent while none of its tool calls ran."""
        return redact("\n".join(self._server(name).logs.lines()))

    def close_all(self) -> None:
        """Close every server (their tools are unregistered) and stop the loop; the
        manager can be used again after."""
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
        return await self._hop(capture, self._call_on_loop, server, tool, dict(arguments))

    async def read_resource(self, server: str, uri: str) -> str:
        """A resource's text (several contents joined by newlines; binary ones
        described, not decoded): what a context feed with ``source: mcp`` reads."""
        return str(await self._hop(None, self._read_on_loop, server, uri))

    # ---- hopping between loops ----------------------------------------------------------

    def _ensure_loop(self) -> _LoopThread:
        with self._lock:
            if self._loop is None or not self._loop.alive:
                self._loop = _LoopThread()
            return self._loop

    def _run_sync(self, func: Callable[..., Awaitable[T]], *args: Any) -> T:
        loop = self._ensure_loop()
        if threading.get_ident() == loop.ident:
            raise RuntimeError("McpManager's blocking methods cannot run on its own loop")
        start: Callable[..., Future[T]] = loop.portal.start_task_soon
        future = start(func, *args)
        try:
            return future.result()
        except BaseException:  # the kernel's interrupt while waiting: stop the work too
            future.cancel()
            raise

    async def _hop(
        self, capture: Capture | None, func: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        """``await func(*args, post)`` on the manager's loop, from this loop.

        ``post((kind, payload))`` (log lines, progress) reaches this side through a
        queue a worker thread waits on; cancelling this side cancels the work there.
        """
        outbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        start: Callable[..., Future[T]] = self._ensure_loop().portal.start_task_soon
        future = start(func, *args, outbox.put)
        future.add_done_callback(lambda _: outbox.put(("end", None)))
        try:
            while True:
                kind, payload = await anyio.to_thread.run_sync(
                    _next_item, outbox, abandon_on_cancel=True
                )
                if kind == "end":
                    break
                if capture is not None:
                    _deliver(capture, kind, payload)
        finally:
            if not future.done():
                future.cancel()
        if future.cancelled():
            raise McpServerError(str(args[0]), "was closed", "the call was cancelled by close")
        return future.result()

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
                    await self._with_stderr(
                        server,
                        f"did not answer within {config.timeout:g} s "
                        "(raise timeout= if it is only slow to start)",
                    )
                )
        except Exception as exc:
            server.fail(await self._reason(server, exc))
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
            server.fail(await self._with_stderr(server, what))
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

    async def _with_stderr(self, server: _Server, text: str) -> str:
        """``text`` and the server's last stderr line (waiting briefly for the rest of
        its output when it is exiting)."""
        if server.pipe is not None:
            await anyio.to_thread.run_sync(server.stderr.eof.wait, 1.0, abandon_on_cancel=True)
        last = server.stderr.last(1)
        return redact(f"{text} (last stderr line: {last[0]})" if last else text)

    async def _reason(self, server: _Server, exc: BaseException) -> str:
        """Why a server did not start (or stopped), in one line."""
        root = _root_cause(exc)
        if isinstance(root, McpConfigError):
            return f"{root.where} {root.problem}"
        return await self._with_stderr(server, _failure(server, root))


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


def _next_item(outbox: queue.SimpleQueue[tuple[str, Any]]) -> tuple[str, Any]:
    """The next thing a hop relays, or ``("idle", None)`` after a second (so an
    abandoned waiting thread ends soon)."""
    try:
        return outbox.get(timeout=1.0)
    except queue.Empty:
        return ("idle", None)


def _deliver(capture: Capture, kind: str, payload: Any) -> None:
    if kind == "log":
        capture.log(payload)
    elif kind == "progress":
        done, total, note = payload
        capture.progress(done, total, note)


def _close_at_exit(ref: weakref.ref[McpManager]) -> None:
    manager = ref()
    if manager is not None:
        with suppress(Exception):
            manager.close_all()


# ---- the default manager ---------------------------------------------------------------

_default: McpManager | None = None
_default_lock = threading.Lock()


def default_manager() -> McpManager:
    """The manager of the default registry (what ``cortex_jupyter.mcp`` and the
    ``%cortex mcp`` magic use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = McpManager(default_registry)
        return _default


async def read_resource(server: str, uri: str) -> str:
    """``default_manager().read_resource(server, uri)``: a context feed's ``mcp`` source."""
    return await default_manager().read_resource(server, uri)


Registry.read_resource = read_resource  # what a context feed with source: mcp reads
