"""Test doubles: a ``StreamingModel`` that plays given chunks, and an ``add`` tool to register."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio

from cortex_jupyter.runtime.core.model.chunks import ModelChunk, ToolDefinition
from cortex_jupyter.runtime.core.model.client import Message


class Scripted:
    """A fake StreamingModel: each turn is a list of chunks, numbers (pauses in seconds)
    and exceptions (raised there)."""

    name = "fake"

    def __init__(self, *turns: list[Any]) -> None:
        self.turns = list(turns)
        self.calls: list[list[Message]] = []
        self.tools: list[Sequence[ToolDefinition] | None] = []

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        **options: Any,
    ) -> AsyncIterator[ModelChunk]:
        """The next turn; ``options`` (temperature, max_tokens, request) are not read."""
        self.calls.append(list(messages))
        self.tools.append(tools)
        return self._play(self.turns.pop(0))

    async def _play(self, items: list[Any]) -> AsyncIterator[ModelChunk]:
        for item in items:
            if isinstance(item, int | float):
                await anyio.sleep(item)
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item


def add(a: int, b: int = 0) -> int:
    """Add two numbers."""
    return a + b
