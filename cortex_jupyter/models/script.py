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

A script may depend on the prompt, so a whole dataset of cases runs offline: give a
function of the prompt (returning the script's text or a list of turns) or a mapping
from prompt to script. ``fresh(prompt)`` is a new model at turn 1 holding that prompt's
script (an experiment makes one per try, so tries running at once never share a turn
counter). Used directly, such a model picks its script at its first request, from the
last user message (the run's prompt), and picks again when a later request finds that
script used up (the next run's prompt) or after ``reset()``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeAlias

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

from .errors import NoReplyScripted, NoScriptForPrompt, ScriptExhausted

__all__ = ["TURN_SEPARATOR", "ScriptModel", "ScriptSource", "split_replies", "split_turns"]

#: A script: its whole text, or one text per turn.
Script: TypeAlias = str | Sequence[str]
#: A script that depends on the prompt: a function of it, or a mapping from prompt to script.
ScriptSource: TypeAlias = Callable[[str], Script] | Mapping[str, Script]

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

    ``text`` is the whole script (turns separated by ``--- next turn ---`` lines), a
    list with one text per turn, or a script that depends on the prompt: a function of
    the prompt or a mapping from prompt to script (see the module's docs; ``fresh``).
    ``reset()`` starts again from the first turn.
    """

    def __init__(
        self,
        text: Script | ScriptSource,
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
        self.chunk_size = chunk_size
        self.delay = float(delay)
        self.name = name
        self.turns_used = 0
        #: The function or mapping a prompt's script comes from (None: one fixed script).
        self.source: ScriptSource | None = None
        #: The prompt whose script this model holds (None: none picked yet, or a fixed one).
        self.prompt: str | None = None
        self.replies: dict[str, str] = {}
        self.turns: tuple[str, ...] = ()
        if isinstance(text, Mapping):
            bad = next((key for key in text if not isinstance(key, str)), None)
            if bad is not None:
                raise TypeError(
                    f"a mapping of scripts is keyed by prompt text; got the key {bad!r:.60}"
                )
            self.source = text
        elif callable(text):
            self.source = text
        else:
            self._load(text)

    def _load(self, text: Script) -> None:
        """Hold ``text`` (a whole script, or one text per turn) as the turns to stream."""
        self.replies = {}
        if isinstance(text, str):
            text, self.replies = split_replies(text)
            turns = split_turns(text)
        else:
            if not isinstance(text, Sequence):
                raise TypeError(
                    "a script is its text, a list with one text per turn, a function of the "
                    f"prompt or a mapping from prompt to script; got {type(text).__name__}"
                )
            turns = list(text)
            if not turns:
                raise ValueError("a script needs at least one turn; got an empty list")
            if not all(isinstance(turn, str) for turn in turns):
                raise TypeError("a script's turns must be strings")
        self.turns = tuple(turns)

    def __repr__(self) -> str:
        options = f"chunk_size={self.chunk_size}, delay={self.delay:g}"
        if isinstance(self.source, Mapping):
            return f"ScriptModel(prompts={len(self.source)}, {options})"
        if self.source is not None:
            return f"ScriptModel(function={getattr(self.source, '__name__', 'script')}, {options})"
        return f"ScriptModel(turns={len(self.turns)}, {options})"

    def script_for(self, prompt: str) -> Script:
        """The script ``prompt`` is answered with: the function's result, the mapping's
        entry (``NoScriptForPrompt`` names a prompt it lacks), or the one fixed script."""
        if self.source is None:
            return list(self.turns)
        if isinstance(self.source, Mapping):
            if prompt not in self.source:
                raise NoScriptForPrompt(prompt, len(self.source))
            return self.source[prompt]
        script = self.source(prompt)
        if not isinstance(script, str | Sequence):
            raise TypeError(
                f"the script function {getattr(self.source, '__name__', '')!r} returned "
                f"{type(script).__name__} for the prompt {prompt!r:.60}; it must return the "
                "script's text or a list of turns"
            )
        return script

    def fresh(self, prompt: str) -> ScriptModel:
        """A new model at turn 1 holding the script for ``prompt`` (for a fixed script, a
        copy of it), with this one's options; this model's own turn counter is untouched.
        An experiment makes one per try, so tries running at once never share a turn."""
        model = ScriptModel(
            self.script_for(prompt), chunk_size=self.chunk_size, delay=self.delay, name=self.name
        )
        if self.source is None:
            model.replies = dict(self.replies)
        model.prompt = prompt
        return model

    def reset(self) -> None:
        """Start again from the first turn (a script of the prompt is picked again)."""
        super().reset()
        if self.source is not None:
            self.prompt, self.turns, self.replies = None, (), {}

    def stream(self, messages: Sequence[Message], **options: Any) -> AsyncIterator[ModelChunk]:
        """The next turn. A script of the prompt is picked first when none is held yet, or
        when the one held is used up and the last user message is a prompt it knows (a
        new run); a failure to pick is raised when the reply is first read."""
        if self.source is not None:
            try:
                self._pick(messages)
            except Exception as error:  # raised where a model's errors are: when read
                self.turns_used += 1
                return _failing(error)
        return super().stream(messages, **options)

    def _pick(self, messages: Sequence[Message]) -> None:
        said = [m.get("content") for m in messages if m.get("role") == "user"]
        prompts = [text for text in said if isinstance(text, str)]
        if self.prompt is None:
            if isinstance(self.source, Mapping):  # the latest message that is one of its prompts
                prompt = next((p for p in reversed(prompts) if p in self.source), None)
            else:
                prompt = prompts[-1] if prompts else None
            if prompt is None and isinstance(self.source, Mapping):
                raise NoScriptForPrompt(prompts[-1] if prompts else "", len(self.source))
            if prompt is None:
                raise ValueError(
                    "a script of the prompt needs the prompt: the request has no user message"
                )
            self._load(self.script_for(prompt))
            self.prompt = prompt
        elif self.turns_used >= len(self.turns) and prompts:
            prompt = prompts[-1]
            if isinstance(self.source, Mapping) and prompt not in self.source:
                return  # not a prompt: the script is used up (ScriptExhausted says so)
            self._load(self.script_for(prompt))
            self.prompt, self.turns_used = prompt, 0

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


async def _failing(error: Exception) -> AsyncIterator[ModelChunk]:
    """A reply that raises ``error`` at its first step."""
    nothing: tuple[ModelChunk, ...] = ()
    for chunk in nothing:
        yield chunk
    raise error
