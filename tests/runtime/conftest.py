"""Fixtures for the runtime tests: a registry of test tools, a fake model, stream helpers."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import anyio
import pytest

from cortex_jupyter.protocol import Parser
from cortex_jupyter.protocol.events import Action, ActionReady, Event
from cortex_jupyter.runtime import Registry, RetryPolicy, Run, run_stream
from cortex_jupyter.runtime.core.model.chunks import Finish, ModelChunk, TextChunk
from cortex_jupyter.runtime.core.model.client import Message

FAST_RETRY = RetryPolicy(base=0.01, factor=2.0, max_delay=0.05)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeModel:
    """A model double: answers with ``reply(messages)`` streamed in ``chunk``-sized pieces."""

    def __init__(
        self, reply: str | Callable[[Sequence[Message]], str], chunk: int = 7, delay: float = 0.0
    ) -> None:
        self.reply = reply
        self.chunk = chunk
        self.delay = delay
        self.calls: list[list[Message]] = []

    name = "fake"

    async def stream(
        self, messages: Sequence[Message], **options: Any
    ) -> AsyncIterator[ModelChunk]:
        """A ``StreamingModel``: the reply as text chunks, then ``Finish("stop")``."""
        self.calls.append(list(messages))
        text = self.reply(messages) if callable(self.reply) else self.reply
        for start in range(0, len(text), self.chunk):
            await anyio.sleep(self.delay)
            yield TextChunk(text[start : start + self.chunk])
        yield Finish("stop")


@pytest.fixture
def fake_model() -> type[FakeModel]:
    return FakeModel


def make_registry() -> tuple[Registry, dict[str, list[Any]]]:
    registry = Registry(builtins=False)
    calls: dict[str, list[Any]] = {}

    @registry.tool
    async def sleep(seconds: float = 0.0, value: Any = None) -> Any:
        """Sleep, then return value."""
        calls.setdefault("sleep", []).append((time.monotonic(), seconds, value))
        await anyio.sleep(seconds)
        return value

    @registry.tool
    def add(a: int, b: int = 0) -> int:
        """Add two numbers (runs in a worker thread)."""
        return a + b

    @registry.tool
    async def echo(value: Any) -> Any:
        """Return what it was given (identity preserved)."""
        calls.setdefault("echo", []).append(value)
        return value

    @registry.tool
    async def boom(message: str = "boom") -> None:
        """Always fails."""
        raise ValueError(message)

    flaky_state = {"n": 0}

    @registry.tool
    async def flaky(fail_times: int, value: Any = "ok") -> Any:
        """Fails the first fail_times calls."""
        flaky_state["n"] += 1
        if flaky_state["n"] <= fail_times:
            raise ConnectionError(f"attempt {flaky_state['n']} failed")
        return value

    @registry.tool
    def blocking(seconds: float) -> str:
        """Blocks its thread (a sync tool that cannot be interrupted)."""
        time.sleep(seconds)
        return "woke"

    return registry, calls


@pytest.fixture
def registry_factory() -> Callable[[], Registry]:
    """Makes fresh test registries (for property tests, where a fixture value is shared)."""
    return lambda: make_registry()[0]


@pytest.fixture
def tools() -> tuple[Registry, dict[str, list[Any]]]:
    return make_registry()


@pytest.fixture
def registry(tools: tuple[Registry, dict[str, list[Any]]]) -> Registry:
    return tools[0]


def action(id: str, name: str, **fields: Any) -> ActionReady:
    """An ``action`` event as the parser would emit it."""
    if "depends_on" in fields:
        fields["depends_on"] = tuple(fields["depends_on"])
    fields.setdefault("parameters", {})
    return ActionReady(Action(id=id, name=name, **fields))


@pytest.fixture
def act() -> Callable[..., ActionReady]:
    return action


async def paced(events: Iterable[Event], gap: float = 0.0) -> AsyncIterator[Event]:
    """Events as an async stream, ``gap`` seconds apart (0: just yield to the loop)."""
    for event in events:
        await anyio.sleep(gap)
        yield event


@pytest.fixture
def stream() -> Callable[..., AsyncIterator[Event]]:
    return paced


async def text_chunks(text: str, size: int = 16, gap: float = 0.0) -> AsyncIterator[str]:
    """Protocol text as a model would stream it: ``size`` characters every ``gap`` s."""
    for start in range(0, len(text), size):
        await anyio.sleep(gap)
        yield text[start : start + size]


@pytest.fixture
def chunks() -> Callable[..., AsyncIterator[str]]:
    return text_chunks


def parse_all(text: str) -> list[Event]:
    parser = Parser(dialect="cortex")
    return parser.feed(text) + parser.close()


@pytest.fixture
def run_events(registry: Registry) -> Callable[..., Any]:
    """``await run_events(events, gap=0, **options)`` -> Run, with the test registry."""

    async def go(events: Iterable[Event], gap: float = 0.0, **options: Any) -> Run:
        options.setdefault("registry", registry)
        options.setdefault("retry", FAST_RETRY)
        return await run_stream(paced(events, gap), **options)

    return go
