"""A model that streams a saved run again: each turn's chunks, with their original timing.

A run's transcript records the model's reply as it arrived (``chunk`` events, with the
time each was seen). ``ReplayModel`` answers each ``stream()`` call with the next turn
of one or more saved runs, pausing between chunks as long as the model did (divided by
``speed``), so a real run can be watched again and its actions re-tested without the
model. A turn whose stream broke off ends the same way, with ``StreamDropped``.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from typing import cast

import anyio
import anyio.lowlevel

from cortex_jupyter.runtime.core.model.chunks import ModelChunk, TextChunk
from cortex_jupyter.runtime.core.trust.secrets import shorten
from cortex_jupyter.runtime.loop.transcript import RunSource, TurnRecord, load_runs, turns_of

from .errors import ReplayExhausted, StreamDropped
from .script import FixedTurns

__all__ = ["ReplayExhausted", "ReplayModel"]

#: Most characters of a recorded model's name a replay takes as its own.
_NAME_LIMIT = 200
#: Most seconds of a recorded pause between two chunks a replay waits (at speed 1).
_LONGEST_PAUSE = 60.0


class ReplayModel(FixedTurns):
    """Streams the model turns of saved runs again, one turn per ``stream()`` call.

    ``source`` is a ``Run``, a transcript's path or JSONL text, or a list of them (their
    turns follow each other, e.g. every run of one conversation). ``speed`` divides the
    recorded pauses (``2`` is twice as fast, ``math.inf`` sends everything at once).
    ``name`` defaults to the recorded model's. ``reset()`` starts from the first turn.
    A replay asks no model: it costs nothing (its usage is the recorded one's).
    """

    free_note = "a replay of a transcript: no model was asked, nothing was paid"

    def __init__(
        self,
        source: RunSource | Sequence[RunSource],
        *,
        speed: float = 1.0,
        name: str | None = None,
    ) -> None:
        if isinstance(speed, bool) or not isinstance(speed, int | float) or not speed > 0:
            raise ValueError(f"speed must be a number above 0 (math.inf: no pauses); got {speed!r}")
        items = list(source) if isinstance(source, list | tuple) else [cast(RunSource, source)]
        runs = load_runs(items)
        self.turns: tuple[TurnRecord, ...] = tuple(t for run in runs for t in turns_of(run))
        if not self.turns:
            raise ValueError(
                "the transcripts hold no model turns to replay (only agent runs, made with "
                "run_agent, record the model's reply)"
            )
        self.speed = float(speed)
        # A recorded name is the transcript's, which anyone may have edited: it names
        # the view's header, every span and the stored run, so a short one.
        self.name = name or shorten(self.turns[0].model or "", _NAME_LIMIT) or "replay"
        self.turns_used = 0

    def __repr__(self) -> str:
        return f"ReplayModel(turns={len(self.turns)}, speed={self.speed:g})"

    async def _replay(self, number: int) -> AsyncIterator[ModelChunk]:
        """The recorded turn, paced as it was recorded."""
        if number > len(self.turns):
            raise ReplayExhausted(number, len(self.turns))
        turn = self.turns[number - 1]
        last = turn.started
        characters = 0
        for at, chunk in turn.chunks:
            await self._pause(at - last)
            last = at
            if isinstance(chunk, TextChunk):
                characters += len(chunk.text)
            yield chunk
        if turn.error is not None:
            raise StreamDropped(self.name, "a replayed transcript", len(turn.chunks), characters)

    async def _pause(self, seconds: float) -> None:
        # A transcript's times may be edited (a chunk an age after the one before): a
        # silence longer than a model's is replayed as the longest a model's is.
        wait = 0.0 if math.isinf(self.speed) else min(max(0.0, seconds), _LONGEST_PAUSE)
        wait /= self.speed
        if wait > 0:
            await anyio.sleep(wait)
        else:
            await anyio.lowlevel.checkpoint()
