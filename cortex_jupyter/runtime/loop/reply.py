"""Pieces of reading one reply that the loop (``runtime.loop.turns``) uses: the
recorder of its chunks, native tool calls as actions, and when two calls are the same.
Their own module so the loop reads as the turns it runs."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from cortex_jupyter.protocol.actions import build_action, parse_body
from cortex_jupyter.protocol.events import ActionReady, ProtocolError
from cortex_jupyter.runtime.core.chunks import (
    ModelChunk,
    ReasoningChunk,
    StreamingModel,
    TextChunk,
    ToolCallReady,
)
from cortex_jupyter.runtime.core.events import AnyEvent, Chunk

__all__ = [
    "COALESCE_SECONDS",
    "NOT_RAN",
    "ChunkRecorder",
    "canonical",
    "native_action",
    "takes_constraint",
]

#: Consecutive text chunks closer together than this are kept as one ``chunk`` event.
COALESCE_SECONDS = 0.05


class ChunkRecorder:
    """Records the model's chunks as ``chunk`` events, coalescing consecutive text."""

    def __init__(self, emit: Callable[[AnyEvent], None]) -> None:
        self._emit = emit
        self._kind = ""
        self._parts: list[str] = []
        self._first = 0.0
        self._last = 0.0

    def add(self, chunk: ModelChunk) -> None:
        now = time.monotonic()
        if isinstance(chunk, TextChunk | ReasoningChunk):
            if self._parts and (chunk.kind != self._kind or now - self._first >= COALESCE_SECONDS):
                self.flush()
            if not self._parts:
                self._kind, self._first = chunk.kind, now
            self._parts.append(chunk.text)
            self._last = now
            return
        self.flush()
        self._emit(Chunk.of(chunk, now))

    def flush(self) -> None:
        if self._parts:
            self._emit(Chunk(self._kind, self._last, text="".join(self._parts)))
            self._parts = []


def native_action(call: ToolCallReady, name: str) -> ActionReady | ProtocolError:
    """A native tool call as a tool action (id = the call's id) of the registry entry
    ``name`` (the call's native name mapped back), or why it cannot run."""
    params = parse_body(call.arguments if call.arguments.strip() else "{}", call.id)
    if isinstance(params, ProtocolError):
        return params
    action = build_action(
        {"name": name, "parameters": params},
        action_id=call.id,
        type="tool",
        mode="async",
        in_thought=False,
    )
    if isinstance(action, ProtocolError):
        return action
    return ActionReady(action, f"{call.name}({call.arguments})")


def canonical(value: Any) -> str:
    """One text for equal parameters, whatever their order, and a number however it is
    written (``1`` and ``1.0``)."""
    return json.dumps(_same_numbers(value), sort_keys=True, default=repr)


def _same_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _same_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_same_numbers(v) for v in value]
    return value


#: The ends of an earlier call that do not make a new one a repeat: it never ran, or its
#: try failed (a flaky service may answer the second time).
NOT_RAN = ("skipped", "failed", "cancelled")


def takes_constraint(model: StreamingModel) -> bool:
    try:
        return "constraint" in inspect.signature(model.stream).parameters
    except (TypeError, ValueError):
        return False
