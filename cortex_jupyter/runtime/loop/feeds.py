"""Context feeds: data the agent sees in its prompt and reads as ``$id``, kept fresh.

A ``FeedSpec`` declares one feed, in Python or in a YAML manifest: where its value comes
from (``internal``: the clock, an environment variable, a random number or static text;
a registered ``tool``, ``relic``, ``workflow`` or ``llm`` entry called with ``params``; or
``mcp``: a resource of an added MCP server, ``source: {type: mcp, server: NAME, uri: URI}``),
when it is refreshed (``on_demand``: when a turn's prompt is built, at most once per
``cache_ttl`` seconds; ``periodic``: every ``interval`` seconds in the background, only
while a run is active), how much of it the prompt shows (``max_tokens``, about four
characters a token, cut with a visible marker) and whether it is ``enabled``.

A ``FeedSet`` holds the specs and their current values, and is the scheduler's
``feeds`` mapping: ``$id`` reads a feed's value, and the ``add_feed`` / ``update_feed`` /
``remove_feed`` internal actions (and ``<context_feed>`` blocks the model writes) add,
set and remove static feeds through it.
"""

from __future__ import annotations

import math
import os
import random
import re
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from cortex_jupyter.protocol.events import Action, ActionReady
from cortex_jupyter.runtime.core.calls.registry import Registry
from cortex_jupyter.runtime.core.errors import CortexRuntimeError, UnknownFeed
from cortex_jupyter.runtime.core.model.chunks import StreamingModel
from cortex_jupyter.runtime.core.record.run import Run
from cortex_jupyter.runtime.core.trust.secrets import head, redact, render_value
from cortex_jupyter.runtime.scheduler.dispatch import Scheduler
from cortex_jupyter.runtime.scheduler.spec import RunSpec

__all__ = [
    "FEED_SOURCES",
    "FEED_TYPES",
    "INTERNAL_SOURCES",
    "FeedError",
    "FeedSet",
    "FeedSourceFailed",
    "FeedSpec",
    "FeedUnavailable",
]

FEED_TYPES: tuple[str, ...] = ("on_demand", "periodic")
FEED_SOURCES: tuple[str, ...] = ("internal", "tool", "relic", "workflow", "llm", "mcp")
INTERNAL_SOURCES: tuple[str, ...] = ("clock", "env", "random", "static")
CHARS_PER_TOKEN = 4
#: Seconds an MCP server has to answer a feed's resources/read.
MCP_READ_TIMEOUT = 30.0
_FIELDS = frozenset(
    ("id", "type", "interval", "source", "name", "params", "cache_ttl", "max_tokens", "enabled")
)
# Environment variables that hold credentials never become feeds: a feed's value goes
# into the prompt and the transcript.
_SECRET_NAME = re.compile(r"(?i)key|token|secret|passw|credential|auth|cookie|session")


class FeedError(CortexRuntimeError):
    """Raised when a context feed is declared wrongly (a bad field, a missing parameter...)."""

    def __init__(self, id: str, problem: str) -> None:
        self.id = id
        self.problem = problem
        super().__init__(f"context feed {id!r}: {problem}")


class FeedUnavailable(CortexRuntimeError):
    """Raised when ``$id`` reads a feed that has no value because its refresh failed."""

    def __init__(self, id: str, error: str) -> None:
        self.id = id
        self.error = error
        super().__init__(
            f"context feed {id!r} has no value: its refresh failed ({error}); fix its source "
            "or disable it"
        )


def _number(id: str, name: str, value: Any, *, positive: bool) -> float | None:
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        need = "a positive number" if positive else "a number >= 0"
        raise FeedError(id, f"{name} must be {need} of seconds, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class FeedSpec:
    """One context feed: its id, source, refresh policy and prompt budget.

    ``source`` is ``internal`` (``name`` is ``clock``, ``env``, ``random`` or ``static``)
    or the action type of a registered entry (``tool``, ``relic``, ``workflow``, ``llm``)
    named ``name`` and called with ``params``, or ``mcp``: the resource ``params["uri"]``
    of the MCP server ``name`` (``source: {type: mcp, server: NAME, uri: URI}``, read
    through ``cortex_jupyter.mcp``'s servers). Internal parameters: ``clock`` takes
    ``utc`` (bool) and ``format`` (strftime); ``env`` takes ``name`` and ``default``;
    ``random`` takes ``min`` and ``max`` (a whole number between) or ``choices``;
    ``static`` takes ``text``.
    """

    id: str
    source: str = "internal"
    name: str = "static"
    params: Mapping[str, Any] = field(default_factory=dict)
    type: str = "on_demand"
    interval: float | None = None
    cache_ttl: float | None = None
    max_tokens: int | None = None
    enabled: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise FeedError(str(self.id), "the id must be a non-empty string")
        if self.type not in FEED_TYPES:
            raise FeedError(self.id, f"type must be on_demand or periodic, not {self.type!r}")
        if self.source not in FEED_SOURCES:
            raise FeedError(
                self.id, f"source must be one of {', '.join(FEED_SOURCES)}, not {self.source!r}"
            )
        if not isinstance(self.params, Mapping):
            raise FeedError(self.id, f"params must be a mapping, not {self.params!r}")
        interval = _number(self.id, "interval", self.interval, positive=True)
        if self.type == "periodic" and interval is None:
            raise FeedError(self.id, "a periodic feed needs an interval (seconds between runs)")
        _number(self.id, "cache_ttl", self.cache_ttl, positive=False)
        tokens = self.max_tokens
        whole = isinstance(tokens, int) and not isinstance(tokens, bool)
        if tokens is not None and (not whole or tokens < 1):
            raise FeedError(self.id, f"max_tokens must be a whole number >= 1, not {tokens!r}")
        if not isinstance(self.enabled, bool):
            raise FeedError(self.id, f"enabled must be true or false, not {self.enabled!r}")
        if self.source == "internal":
            self._check_internal()
        if self.source == "mcp":
            self._check_mcp()

    def _check_mcp(self) -> None:
        shape = "source: {type: mcp, server: NAME, uri: URI}"
        if not isinstance(self.name, str) or not self.name:
            raise FeedError(self.id, f"an mcp feed needs a server name: {shape}")
        uri = self.params.get("uri")
        if not isinstance(uri, str) or not uri:
            raise FeedError(self.id, f"an mcp feed needs a uri: {shape}")

    def _check_internal(self) -> None:
        if self.name not in INTERNAL_SOURCES:
            raise FeedError(
                self.id,
                f"internal source {self.name!r} does not exist; internal sources: "
                + ", ".join(INTERNAL_SOURCES),
            )
        if self.name == "env":
            var = self.params.get("name")
            if not isinstance(var, str) or not var:
                raise FeedError(self.id, "an env feed needs params.name (the variable's name)")
            if _SECRET_NAME.search(var):
                raise FeedError(
                    self.id,
                    f"environment variable {var!r} looks like a credential; feeds go into the "
                    "prompt and the transcript, so it is refused",
                )

    @property
    def static(self) -> bool:
        return self.source == "internal" and self.name == "static"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeedSpec:
        """A spec from a manifest entry.

        ``source`` may be ``internal`` with a ``name``; a mapping ``{type, name, params}``;
        an internal source's name alone (``clock``); or ``type:name`` (``tool:weather``).
        """
        if not isinstance(data, Mapping):
            raise FeedError("?", f"a feed must be a mapping of fields, not {data!r}")
        id = str(data.get("id", "")) if data.get("id") is not None else ""
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            raise FeedError(
                id or "?",
                f"unknown field(s) {', '.join(map(str, unknown))}; the fields are "
                + ", ".join(sorted(_FIELDS)),
            )
        fields = dict(data)
        source = fields.pop("source", "internal")
        if isinstance(source, Mapping) and source.get("type") == "mcp":
            fields["source"] = "mcp"
            fields.setdefault("name", source.get("server", source.get("name", "")))
            fields.setdefault("params", {"uri": source.get("uri")})
        elif isinstance(source, Mapping):
            fields["source"] = source.get("type", "internal")
            fields.setdefault("name", source.get("name", "static"))
            fields.setdefault("params", source.get("params", {}))
        elif isinstance(source, str) and source in INTERNAL_SOURCES:
            fields["source"] = "internal"
            fields.setdefault("name", source)
        elif isinstance(source, str) and ":" in source:
            fields["source"], _, name = source.partition(":")
            fields.setdefault("name", name)
        else:
            fields["source"] = source
        if fields.get("params") is None:
            fields["params"] = {}
        return cls(**fields)


@dataclass
class _State:
    value: Any = None
    has_value: bool = False
    refreshed: float | None = None
    error: str | None = None


class FeedSet(MutableMapping[str, Any]):
    """Context feeds and their current values; the scheduler's ``feeds`` mapping.

    ``registry``, ``namespace`` and ``model`` are what registered sources are called
    with outside a run; a run passes its own through ``active(...)``.
    """

    def __init__(
        self,
        specs: Iterable[FeedSpec] = (),
        *,
        registry: Registry | None = None,
        namespace: Mapping[str, Any] | None = None,
        model: StreamingModel | None = None,
    ) -> None:
        self.specs: dict[str, FeedSpec] = {}
        self._state: dict[str, _State] = {}
        self._context: tuple[Registry | None, Mapping[str, Any] | None, StreamingModel | None] = (
            registry,
            namespace,
            model,
        )
        self._tg: TaskGroup | None = None
        self._scopes: dict[str, anyio.CancelScope] = {}
        for spec in specs:
            self.add(spec)

    # ---- declaring ----------------------------------------------------------------

    @classmethod
    def from_manifest(cls, data: Any, **options: Any) -> FeedSet:
        """Feeds from a parsed manifest: a list of feeds, or a mapping with a ``feeds`` list."""
        if isinstance(data, Mapping):
            extra = sorted(set(data) - {"feeds"})
            if extra:
                raise FeedError("?", f"a manifest has one key, feeds; found {', '.join(extra)}")
            data = data.get("feeds") or []
        if not isinstance(data, list):
            raise FeedError("?", "a manifest is a list of feeds (or feeds: [...])")
        return cls((FeedSpec.from_dict(entry) for entry in data), **options)

    @classmethod
    def from_yaml(cls, source: str | os.PathLike[str], **options: Any) -> FeedSet:
        """Feeds from a YAML manifest: a file path, or the YAML text itself."""
        import yaml  # only manifests need it

        text = source
        if isinstance(source, os.PathLike) or ("\n" not in source and Path(source).is_file()):
            text = Path(source).read_text(encoding="utf-8")
        elif source.strip().endswith((".yaml", ".yml")) and "\n" not in source.strip():
            raise FeedError("?", f"no manifest file {source!r} (pass a path or the YAML text)")
        try:
            data = yaml.safe_load(str(text))
        except yaml.YAMLError as exc:
            raise FeedError("?", f"the manifest is not valid YAML ({exc})") from None
        return cls.from_manifest(data if data is not None else [], **options)

    def add(self, spec: FeedSpec) -> FeedSpec:
        """Add a feed, or replace the one with the same id."""
        self._stop_periodic(spec.id)
        self.specs[spec.id] = spec
        state = _State()
        if spec.static:
            state = _State(spec.params.get("text", ""), True, time.monotonic())
        self._state[spec.id] = state
        if self._tg is not None and spec.type == "periodic" and spec.enabled:
            self._tg.start_soon(self._every, spec.id)
        return spec

    def remove(self, id: str) -> bool:
        """Remove a feed; whether it existed."""
        self._stop_periodic(id)
        self._state.pop(id, None)
        return self.specs.pop(id, None) is not None

    def enable(self, id: str, enabled: bool = True) -> None:
        """Turn a feed on or off (a disabled feed is neither shown nor readable)."""
        spec = self._spec(id)
        self.add(replace(spec, enabled=enabled))

    def _spec(self, id: str) -> FeedSpec:
        if id not in self.specs:
            raise UnknownFeed(id, self.specs)
        return self.specs[id]

    # ---- values -------------------------------------------------------------------

    def value(self, id: str) -> Any:
        """The feed's current value (``None`` before its first refresh)."""
        self._spec(id)
        return self._state[id].value

    def error(self, id: str) -> str | None:
        """Why the feed's last refresh failed, or ``None``."""
        self._spec(id)
        return self._state[id].error

    def text(self, id: str) -> str:
        """The feed's value as the prompt shows it, cut to its ``max_tokens``."""
        spec = self._spec(id)
        state = self._state[id]
        if not state.has_value:
            return f"[unavailable: {state.error}]" if state.error else "[not refreshed yet]"
        text = redact(render_value(state.value))  # before the cut: no part of a secret
        if spec.max_tokens is not None and len(text) > spec.max_tokens * CHARS_PER_TOKEN:
            cut = spec.max_tokens * CHARS_PER_TOKEN
            text = (
                f"{head(text, cut)}\n[truncated to about {spec.max_tokens} tokens: "
                f"{len(text) - cut:,} more characters]"
            )
        return text

    def to_prompt(self) -> str:
        """One ``<context_feed id="...">`` block per enabled feed."""
        return "\n".join(f'<context_feed id="{id}">{self.text(id)}</context_feed>' for id in self)

    def __getitem__(self, id: str) -> Any:
        spec = self.specs.get(id)
        if spec is None or not spec.enabled:
            raise KeyError(id)
        state = self._state[id]
        if not state.has_value:
            if state.error:
                raise FeedUnavailable(id, state.error)
            raise KeyError(id)
        return state.value

    def __setitem__(self, id: str, value: Any) -> None:
        if id in self.specs:
            self._state[id] = _State(value, True, time.monotonic())
        else:
            self.add(FeedSpec(id, params={"text": value}))

    def __delitem__(self, id: str) -> None:
        if not self.remove(id):
            raise KeyError(id)

    def pop(self, id: str, *default: Any) -> Any:
        if id not in self.specs:
            if default:
                return default[0]
            raise KeyError(id)
        value = self._state[id].value
        self.remove(id)
        return value

    def __contains__(self, id: object) -> bool:
        spec = self.specs.get(id) if isinstance(id, str) else None
        return spec is not None and spec.enabled

    def __iter__(self) -> Iterator[str]:
        return iter([id for id, spec in self.specs.items() if spec.enabled])

    def __len__(self) -> int:
        return sum(1 for spec in self.specs.values() if spec.enabled)

    def __repr__(self) -> str:
        shown = ", ".join(f"{s.id} ({s.type}, {s.source}:{s.name})" for s in self.specs.values())
        return f"<FeedSet {shown or 'empty'}>"

    # ---- refreshing ---------------------------------------------------------------

    async def refresh(self, id: str) -> Any:
        """Fetch the feed's value now and keep it; raises when the source fails.

        A failure leaves the last value in place (and is shown in the prompt when
        there is none).
        """
        spec = self._spec(id)
        try:
            value = await self._fetch(spec)
        except Exception as exc:
            if id in self._state:
                self._state[id].error = str(exc) or type(exc).__name__
            raise
        if self.specs.get(id) is spec:  # not removed or replaced meanwhile
            self._state[id] = _State(value, True, time.monotonic())
        return value

    async def _refresh_quietly(self, id: str) -> None:
        try:
            await self.refresh(id)
        except Exception:  # kept in the feed's state; a feed never breaks a run
            return

    def _due(self, spec: FeedSpec, now: float) -> bool:
        state = self._state[spec.id]
        if not spec.enabled or spec.static:
            return False
        if state.refreshed is None:
            return True
        if spec.type == "periodic":
            return False  # the background task keeps it fresh
        return spec.cache_ttl is None or now - state.refreshed >= spec.cache_ttl

    async def refresh_due(self) -> None:
        """Refresh what a new prompt needs: on_demand feeds older than their ``cache_ttl``
        (every time when it is not set) and feeds never refreshed yet. Failures are kept
        in each feed's state, never raised."""
        now = time.monotonic()
        due = [spec.id for spec in self.specs.values() if self._due(spec, now)]
        if not due:
            return
        async with anyio.create_task_group() as tg:
            for id in due:
                tg.start_soon(self._refresh_quietly, id)

    @asynccontextmanager
    async def active(
        self,
        *,
        registry: Registry | None = None,
        namespace: Mapping[str, Any] | None = None,
        model: StreamingModel | None = None,
    ) -> AsyncIterator[FeedSet]:
        """While a run is active: sources use the run's registry, namespace and model,
        and periodic feeds refresh in the background every ``interval`` seconds."""
        previous = self._context
        self._context = (
            registry if registry is not None else previous[0],
            namespace if namespace is not None else previous[1],
            model if model is not None else previous[2],
        )
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                for spec in list(self.specs.values()):
                    if spec.type == "periodic" and spec.enabled:
                        tg.start_soon(self._every, spec.id)
                try:
                    yield self
                finally:
                    self._tg = None
                    tg.cancel_scope.cancel()
        finally:
            self._context = previous

    async def _every(self, id: str) -> None:
        with anyio.CancelScope() as scope:
            self._scopes[id] = scope
            try:
                while True:
                    spec = self.specs.get(id)
                    if spec is None or spec.type != "periodic" or not spec.enabled:
                        return
                    assert spec.interval is not None
                    refreshed = self._state[id].refreshed
                    age = math.inf if refreshed is None else time.monotonic() - refreshed
                    if age >= spec.interval:
                        await self._refresh_quietly(id)
                        age = 0.0
                    await anyio.sleep(spec.interval - age)
            finally:
                if self._scopes.get(id) is scope:
                    del self._scopes[id]

    def _stop_periodic(self, id: str) -> None:
        scope = self._scopes.pop(id, None)
        if scope is not None:
            scope.cancel()

    # ---- sources ------------------------------------------------------------------

    async def _fetch(self, spec: FeedSpec) -> Any:
        if spec.source == "internal":
            return _internal(spec)
        if spec.source == "mcp":
            return await _mcp_resource(spec)
        registry, namespace, model = self._context
        run = Run()
        action = Action(
            id=spec.id, name=spec.name, type=spec.source, mode="sync", parameters=dict(spec.params)
        )
        others = {id: self[id] for id in self if id != spec.id and self._state[id].has_value}
        what = RunSpec.of(registry=registry, namespace=namespace, model=model, feeds=others)
        async with Scheduler(what, run=run) as scheduler:
            scheduler.submit(ActionReady(action))
        node = run.actions[spec.id]
        if node.status != "done":
            raise FeedSourceFailed(spec, node.error or node.status)
        return node.output


class FeedSourceFailed(CortexRuntimeError):
    """Raised when the registered entry a feed reads from fails."""

    def __init__(self, spec: FeedSpec, error: str) -> None:
        self.id = spec.id
        self.error = error
        super().__init__(f"{spec.source} {spec.name!r} failed: {error}")


async def _mcp_resource(spec: FeedSpec) -> str:
    """The text of an MCP resource, read by the MCP integration once it is loaded (it
    passes its reader in: ``Registry.read_resource``); a server that does not answer
    fails the refresh instead of holding up the turn."""
    read = Registry.read_resource
    if read is None:
        raise FeedSourceFailed(
            spec, f"no MCP server named {spec.name!r} was added (cortex_jupyter.mcp.add)"
        )
    uri = str(spec.params["uri"])
    with anyio.move_on_after(MCP_READ_TIMEOUT):
        return await read(spec.name, uri)
    raise FeedSourceFailed(spec, f"could not read {uri!r}: no answer within {MCP_READ_TIMEOUT:g} s")


def _internal(spec: FeedSpec) -> Any:
    params = spec.params
    if spec.name == "clock":
        now = datetime.now(timezone.utc) if params.get("utc") else datetime.now().astimezone()
        fmt = params.get("format")
        return now.strftime(str(fmt)) if fmt else now.isoformat(timespec="seconds")
    if spec.name == "env":
        return os.environ.get(str(params["name"]), params.get("default", ""))
    if spec.name == "random":
        if "choices" in params:
            return random.choice(list(params["choices"]))
        if "min" in params or "max" in params:
            return random.randint(int(params.get("min", 0)), int(params.get("max", 100)))
        return random.random()
    return params.get("text", "")
