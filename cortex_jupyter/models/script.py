"""A model that replays a script: protocol text written by hand, streamed like a model's.

``%%cortex --script`` uses it to explore and test the protocol in a notebook with no
model at all, and tests use it to drive the runtime. The text is streamed as
``TextChunk`` values of ``chunk_size`` characters, ``delay`` seconds apart, so actions
start while the "model" is still writing, exactly as they would with a real one.

An agent asks its model once per turn (again after action results). A script answers
each ``stream()`` call with its next turn. Turns are separated by a line that reads
exactly::

    --- next turn ---

(spaces around it are ignored; the line break before and after it belongs to neither
turn), or given as a list of texts, one per turn. Asking for more turns than the script
has raises ``ScriptExhausted``, naming the turn that was asked for.

``llm`` and ``agent`` actions ask a model too. They never take the script's next turn:
after the main script, a section starting with a line::

    --- reply to ID ---

is what the model answers for the action with that id (it may itself hold
``--- next turn ---`` lines: a nested agent takes several turns). ``for_action(id)`` is
that section as a script of its own; without one, asking it raises ``NoReplyScripted``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import anyio.lowlevel

from cortex_jupyter.runtime.core.cost.prices import Price
from cortex_jupyter.runtime.core.model.chunks import (
    Finish,
    Message,
    ModelChunk,
    TextChunk,
    Usage,
)

from .errors import NoReplyScripted, ScriptExhausted

__all__ = ["TURN_SEPARATOR", "ScriptModel", "split_replies", "split_turns"]

TURN_SEPARATOR = "--- next turn ---"
_REPLY_TO = re.compile(r"^---\s+reply\s+to\s+(\S+?)\s+---$")


def split_replies(text: str) -> tuple[str, dict[str, str]]:
    """The main script, and each ``--- reply to ID ---`` section's text by action id."""
    main: list[str] = []
    sections: dict[str, list[str]] = {}
    current = main
    for line in text.splitlines(keepends=True):
        found = _REPLY_TO.match(line.strip())
        if found:
            current = sections.setdefault(found.group(1), [])
            continue
        current.append(line)
    main_text = _drop_line_break("".join(main)) if sections else "".join(main)
    return main_text, {key: _drop_line_break("".join(lines)) for key, lines in sections.items()}


def split_turns(text: str) -> list[str]:
    """The turns of a script: its text split at lines that read ``--- next turn ---``."""
    turns: list[str] = []
    current: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.strip() == TURN_SEPARATOR:
            turns.append(_drop_line_break("".join(current)))
            current = []
        else:
            current.append(line)
    turns.append("".join(current))
    return turns


def _drop_line_break(text: str) -> str:
    for ending in ("\r\n", "\n", "\r"):
        if text.endswith(ending):
            return text[: -len(ending)]
    return text


class FixedTurns:
    """What the script and replay models share: a fixed tuple of ``turns``, taken in
    order, one per ``stream()`` call (``turns_used`` counts them)."""

    turns: tuple[object, ...] = ()
    turns_used = 0
    #: Why its requests cost nothing (``price``): no model is asked.
    free = "no model"
    free_note = "a script (--script): no model was asked, nothing was paid"

    def price(self, usage: Usage | None) -> Price:
        """Its requests cost nothing: no model was asked (``runtime.core.cost.prices``)."""
        return Price(0.0, self.free_note, self.free)

    @property
    def remaining_turns(self) -> int:
        """Turns not streamed yet; at 0 the agent loop ends the run instead of asking again."""
        return max(0, len(self.turns) - self.turns_used)

    def reset(self) -> None:
        """Start again from the first turn."""
        self.turns_used = 0

    def answered(self, turns: int) -> None:
        """The first ``turns`` turns were answered before (a resumed run reads them from
        its record): the next ``stream()`` gives turn ``turns + 1``."""
        self.turns_used = turns

    def stream(self, messages: Sequence[Message], **options: Any) -> AsyncIterator[ModelChunk]:
        """The next turn (``messages`` and the request ``options`` of ``StreamingModel``
        are not read; see ``_replay``).

        The turn is taken when ``stream()`` is called, so replies come in call order; a
        missing turn is raised when the reply is first read.
        """
        self.turns_used += 1
        return self._replay(self.turns_used)

    def _replay(self, turn: int) -> AsyncIterator[ModelChunk]:
        """Turn number ``turn`` (from 1), chunk by chunk: an async generator."""
        raise NotImplementedError


class ScriptModel(FixedTurns):
    """Streams a script's turns as the model's replies, one turn per ``stream()`` call.

    ``text`` is the whole script (turns separated by ``--- next turn ---`` lines) or a
    list with one text per turn. ``reset()`` starts again from the first turn.
    """

    def __init__(
        self,
        text: str | Sequence[str],
        *,
        chunk_size: int = 16,
        delay: float = 0.0,
        name: str = "script",
    ) -> None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
            raise TypeError(f"chunk_size must be a whole number of characters; got {chunk_size!r}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1 character; got {chunk_size}")
        if isinstance(delay, bool) or not isinstance(delay, int | float):
            raise TypeError(f"delay must be a number of seconds; got {delay!r}")
        if not math.isfinite(delay) or delay < 0:
            raise ValueError(f"delay must be 0 or more seconds; got {delay}")
        self.replies: dict[str, str] = {}
        if isinstance(text, str):
            text, self.replies = split_replies(text)
            turns = split_turns(text)
        else:
            turns = list(text)
            if not turns:
                raise ValueError("a script needs at least one turn; got an empty list")
            if not all(isinstance(turn, str) for turn in turns):
                raise TypeError("a script's turns must be strings")
        self.turns: tuple[str, ...] = tuple(turns)
        self.chunk_size = chunk_size
        self.delay = float(delay)
        self.name = name
        self.turns_used = 0

    def __repr__(self) -> str:
        return (
            f"ScriptModel(turns={len(self.turns)}, chunk_size={self.chunk_size}, "
            f"delay={self.delay:g})"
        )

    def for_action(self, action_id: str) -> ScriptModel:
        """The model an ``llm`` or ``agent`` action asks: its ``--- reply to ID ---``
        section (an id the runtime renamed, ``r1~2``, also finds ``r1``'s), which shares
        this script's sections for its own nested actions."""
        text = self.replies.get(action_id)
        if text is None and "~" in action_id:
            text = self.replies.get(action_id.split("~", 1)[0])
        if text is None:
            return _Unscripted(action_id, sorted(self.replies), self)
        sub = ScriptModel(
            split_turns(text), chunk_size=self.chunk_size, delay=self.delay, name=self.name
        )
        sub.replies = self.replies
        return sub

    async def _replay(self, turn: int) -> AsyncIterator[ModelChunk]:
        """``chunk_size`` characters at a time, ``delay`` seconds apart."""
        if turn > len(self.turns):
            raise ScriptExhausted(turn, len(self.turns))
        text = self.turns[turn - 1]
        due = time.monotonic()
        for start in range(0, len(text), self.chunk_size):
            if start:
                due += self.delay
                await self._pause(due)
            yield TextChunk(text[start : start + self.chunk_size])
        yield Finish("stop")

    @staticmethod
    async def _pause(due: float) -> None:
        """Wait until ``due``: pacing against deadlines keeps the rate ``1/delay`` even
        for delays shorter than the event loop's sleep granularity (about 1 ms)."""
        wait = due - time.monotonic()
        if wait > 0:
            await anyio.sleep(wait)
        else:
            # Still a point where a cancelled consumer stops, and other tasks run.
            await anyio.lowlevel.checkpoint()


class _Unscripted(ScriptModel):
    """What ``for_action`` gives for an action the script has no section for: asking it
    raises ``NoReplyScripted``, naming the section to add."""

    def __init__(self, action_id: str, sections: list[str], parent: ScriptModel) -> None:
        super().__init__([""], chunk_size=parent.chunk_size, delay=parent.delay, name=parent.name)
        self._action_id = action_id
        self._sections = sections

    async def _replay(self, turn: int) -> AsyncIterator[ModelChunk]:
        nothing: tuple[ModelChunk, ...] = ()
        for chunk in nothing:  # an async generator that fails at its first step
            yield chunk
        raise NoReplyScripted(self._action_id, self._sections)
