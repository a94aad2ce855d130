"""How to reach an MCP server (``ServerConfig``) and the config files that list servers
(``read_config``: Claude Desktop's ``mcpServers``, VS Code's ``servers``).

Kept apart from the client because it is plain data and validation: it needs no event
loop and no SDK, and a wrong entry fails here, with one ``McpConfigError`` line, before
any process starts. ``${NAME}`` in a command, env, header or url is expanded from the
environment only when connecting, so a token set later is used and never stored.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from cortex_jupyter.runtime.core.trust.secrets import CREDENTIAL_NAME, redact, secrets
from cortex_jupyter.runtime.integrations.mcp.errors import McpConfigError

__all__ = ["DEFAULT_TIMEOUT", "ServerConfig", "read_config"]

#: Seconds a server has to start, answer the handshake and list its tools.
DEFAULT_TIMEOUT = 30.0

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")
_STDIO_TYPES = frozenset({"stdio"})
_HTTP_TYPES = frozenset({"http", "streamable-http", "streamable_http", "streamableHttp"})


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
