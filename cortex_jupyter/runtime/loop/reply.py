"""Pieces of reading one reply that the loop (``runtime.loop.turns``) uses: what a turn's
reply did (``TurnState``) and what that decides (``decide``: the run ends, goes on, or
stops), the recorder of its chunks, native tool calls as actions, and when two calls are
the same. Their own module so the loop reads as the turns it runs."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cortex_jupyter.protocol.actions import build_action, parse_body
from cortex_jupyter.protocol.events import ActionReady, ProtocolError
from cortex_jupyter.runtime.core.events import AnyEvent, Chunk
from cortex_jupyter.runtime.core.model.chunks import (
    ModelChunk,
    ReasoningChunk,
    StreamingModel,
    TextChunk,
    ToolCallPayload,
    ToolCallReady,
    Usage,
)
from cortex_jupyter.runtime.loop.pickup import ReplyCut
from cortex_jupyter.runtime.loop.resume import Resume
from cortex_jupyter.runtime.scheduler.calls import error_text

__all__ = [
    "COALESCE_SECONDS",
    "NOT_RAN",
    "NO_ANSWER",
    "WORDS",
    "ChunkRecorder",
    "TurnState",
    "canonical",
    "decide",
    "native_action",
    "script_end",
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


# ---- one turn ---------------------------------------------------------------------------


@dataclass
class TurnState:
    """What one turn's reply did, as the loop reads it (``runtime.loop.turns``)."""

    number: int
    before: set[str]
    errors_before: int
    text: list[str] = field(default_factory=list)
    tool_calls: list[ToolCallPayload] = field(default_factory=list)
    boundary: str | None = None
    response_final: bool | None = None
    has_actions: bool = False
    responded: bool = False  # the reply wrote response text
    refused: bool = False  # the model refused (delta.refusal): that is its answer
    loose: bool = False  # the reply wrote text outside any block
    thought: bool = False  # the reply wrote thought text (or reasoning)
    reasoning: bool = False
    finish: str | None = None
    error: Exception | None = None
    #: The cut reply this turn's reply continues (``runtime.loop.resume``), until the first
    #: characters of the continuation say how the two join; what is held meanwhile.
    resume: Resume | None = None
    held: list[str] = field(default_factory=list)
    repeats: int = 0  # actions not run: exact repeats of calls that ran (``Loop._repeat_of``)
    constrained: bool = False  # the request carried a grammar (``Loop._constraint``)
    usage: Usage | None = None  # the tokens the server reported for the reply
    chunks: int = 0  # how many chunks of a reply arrived


#: Why a run ended with no answer (by whether the reply held a thought): the run is
#: ``completed`` (the model chose to stop), and its cell says so in a ``cortex:`` line.
NO_ANSWER = {
    True: "the model wrote only a thought and no answer (the thought is on _cortex.thought)",
    False: "the model's reply was empty: no thought, no actions, no answer",
}

#: What a reason tells the user to do, in the words they use: ``Run.words`` picks the set
#: (a notebook cell's run speaks of the magic's commands and options).
WORDS: Mapping[str, Mapping[str, str]] = {
    "api": {
        "continue": "Agent.continue_run(...)",
        "max_turns": "max_turns=...",
        "max_tokens": "max_tokens=...",
        "budget": "Agent(budget=MORE).continue_run(run)",
    },
    "magic": {
        "continue": "%cortex continue",
        "max_turns": "--max-turns N",
        "max_tokens": "--max-tokens N",
        "budget": "%cortex continue --budget MORE",
    },
}


def decide(
    turn: TurnState, max_tokens: int | None, words: Mapping[str, str] = WORDS["api"]
) -> tuple[str, str]:
    """(outcome, reason) of a turn: ``final``, ``results``, ``truncated``,
    ``interrupted`` or ``failed``; ``words`` name what to do next (``WORDS``)."""
    if turn.error is not None:
        # A model error that asking again cannot fix (a refused key, an unknown model)
        # fails the run; anything else (a dropped stream) leaves it to be continued.
        if getattr(turn.error, "continuable", True):
            return "interrupted", f"the model's stream failed: {error_text(turn.error)}"
        return "failed", f"the model failed: {error_text(turn.error)}"
    if turn.finish == "length":
        limit = f" of {max_tokens:,} tokens" if max_tokens else ""
        return "truncated", (
            f"the model's reply was cut off at its token limit{limit} (finish_reason "
            f'"length"); {words["continue"]} asks it to go on from there, and '
            f"{words['max_tokens']} allows longer replies"
        )
    if turn.refused:
        return "final", "the model refused"
    if turn.finish == "content_filter":
        return "final", "the server's content filter stopped the reply; what came before is kept"
    if turn.boundary == "end":
        return "final", "the model marked the task complete"
    if turn.boundary == "execute":
        return "results", "the model ended its turn to run its calls"
    if turn.tool_calls:
        return "results", "native tool calls"
    if turn.response_final is not None:
        if turn.response_final:
            return "final", "a final response"
        return "results", 'a response with final="false"'
    if turn.has_actions:
        return "results", "a turn of actions with no response"
    if not turn.loose:
        return "final", NO_ANSWER[turn.thought]
    return "final", "no actions and no response: the text is the answer"


def script_end(
    model: Any, turn: TurnState, outcome: str, reason: str, *, reread: bool
) -> tuple[str, str]:
    """``decide``'s (outcome, reason), for a script or a replay with no turns left: it ends
    the run where a model would be asked again, after a turn of actions (not a question
    for a turn that does not exist), and after its last reply read again from a resumed
    run's record without its end (a script cannot read on: the recorded reply stands;
    asking would fail the same way on every resume)."""
    if getattr(model, "remaining_turns", None) == 0:
        if outcome == "results":
            return "final", "the script has no more turns"
        if reread and outcome == "interrupted" and isinstance(turn.error, ReplyCut):
            return "final", "the script has no more turns: its recorded reply"
    return outcome, reason
