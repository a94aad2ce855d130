"""The seam between the runtime and model clients.

``llm`` and ``agent`` actions need one thing from a model: stream the answer to a list
of chat messages as text chunks. The clients in ``cortex_jupyter.models`` implement
it; tests use a fake.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, TypedDict


class Message(TypedDict):
    """One chat message (the OpenAI wire shape)."""

    role: str
    content: str


class ModelClient(Protocol):
    """Streams the model's answer to ``messages`` as text chunks."""

    def stream(self, messages: Sequence[Message], /) -> AsyncIterator[str]: ...


async def complete(model: ModelClient, messages: Sequence[Message]) -> str:
    """The model's whole answer to ``messages``."""
    parts = [chunk async for chunk in model.stream(messages)]
    return "".join(parts)
