"""Text deltas joined before they are written, so no secret is kept in pieces.

A model's text arrives in deltas (thought, response, loose text, the raw chunks), and a
secret the model writes may be split across two of them: redacted one by one, neither
piece is a secret, and the store would hold it whole once read back. So the writer
joins consecutive deltas of one block (the parser's contract: joined deltas are the same
events) and redacts the joined text. A block still streaming when a commit comes is
written as far as it got, as a cut: the part of a secret at the cut is hidden on both
sides (``Secrets.hide_edges``), as every cut is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any, cast

from cortex_jupyter.protocol.events import ResponseDelta, TextDelta, ThoughtDelta
from cortex_jupyter.runtime.core.events import AnyEvent, Chunk, Nested
from cortex_jupyter.runtime.core.trust.secrets import hide_edges, redact

__all__ = ["Joiner", "joined_where_secret"]

_TEXT_CHUNKS = ("text", "reasoning", "refusal")


def _key(event: AnyEvent) -> tuple[Any, ...] | None:
    """What a delta must share with the one before to be joined to it; None: no delta."""
    if isinstance(event, Nested):
        inner = _key(event.event)
        return None if inner is None else (event.parent, *inner)
    if isinstance(event, ThoughtDelta | TextDelta):
        return (event.kind,)
    if isinstance(event, ResponseDelta):
        return (event.kind, event.final)
    if isinstance(event, Chunk) and event.type in _TEXT_CHUNKS and event.text is not None:
        return (event.kind, event.type)
    return None


def _text(event: AnyEvent) -> str:
    if isinstance(event, Nested):
        return _text(event.event)
    return str(getattr(event, "text", "") or "")


def _with_text(event: AnyEvent, text: str) -> AnyEvent:
    if isinstance(event, Nested):
        return Nested(event.parent, _with_text(event.event, text))
    changed: AnyEvent = dataclasses.replace(cast(Any, event), text=text)
    return changed


class Joiner:
    """One run's deltas on their way to the store (see the module docstring)."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._first: tuple[AnyEvent, float] | None = None
        self._parts: list[str] = []
        self._after_cut = False  # the block's earlier part was written at a cut

    def add(self, event: AnyEvent, t: float) -> list[tuple[AnyEvent, float]]:
        """The events to write now that ``event`` (seen at ``t``) came."""
        key = _key(event)
        out: list[tuple[AnyEvent, float]] = []
        if key != self._key:
            out = self.flush()
            self._key, self._after_cut = key, False
        if key is None:
            out.append((event, t))
            return out
        if not self._parts:
            self._first = (event, t)
        self._parts.append(_text(event))
        return out

    def copy(self) -> Joiner:
        """A copy that later deltas leave as it is."""
        twin = Joiner()
        twin._key, twin._first, twin._after_cut = self._key, self._first, self._after_cut
        twin._parts = list(self._parts)
        return twin

    def flush(self, *, cut: bool = False) -> list[tuple[AnyEvent, float]]:
        """The joined delta waiting, if any; ``cut``: the block may go on after it."""
        if not self._parts or self._first is None:
            return []
        text = redact("".join(self._parts))
        text = hide_edges(text, start=self._after_cut, end=cut)
        event, t = self._first
        self._parts, self._first = [], None
        self._after_cut = cut
        if not cut:
            self._key = None
        return [(_with_text(event, text), t)]


def joined_where_secret(
    timed: Iterable[tuple[AnyEvent, float]],
) -> Iterator[tuple[AnyEvent, float]]:
    """``timed`` events with each block of deltas that holds a secret joined into one
    redacted delta (a secret split across two stream chunks is redacted whole); a
    block with no secret stays as it streamed, delta by delta (a transcript replays
    at its pace). What the transcript writes (``Run.to_jsonl``)."""
    block: list[tuple[AnyEvent, float]] = []
    key: tuple[Any, ...] | None = None
    for event, t in timed:
        now = _key(event)
        if block and now != key:
            yield from _block(block)
            block = []
        key = now
        if now is None:
            yield event, t
        else:
            block.append((event, t))
    yield from _block(block)


def _block(block: list[tuple[AnyEvent, float]]) -> Iterator[tuple[AnyEvent, float]]:
    if len(block) < 2:
        yield from block
        return
    text = "".join(_text(event) for event, _ in block)
    kept = redact(text)
    if kept == text:
        yield from block
        return
    event, t = block[0]
    yield _with_text(event, kept), t
