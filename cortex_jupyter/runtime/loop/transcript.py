"""Reading agent runs back: their conversation, their turns, and where they stopped.

A run's JSONL transcript (``Run.to_jsonl``) keeps every event: the messages the loop
added to the conversation (``message``), each turn's start and end (``turn``,
``turn_end``), the model's reply as it arrived (``chunk``, consecutive text coalesced),
the actions and their results. From it this module rebuilds the conversation for the
next turn, the model's turns with their timing (what ``models.ReplayModel`` streams
again), and the note that continues an interrupted run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from cortex_jupyter.protocol.events import ProtocolError
from cortex_jupyter.runtime.core.events import (
    ActionStatus,
    ChatEntry,
    Chunk,
    Interrupt,
    Turn,
    TurnEnd,
)
from cortex_jupyter.runtime.core.model.chunks import ChatMessage, ModelChunk
from cortex_jupyter.runtime.core.record.graph import ActionNode
from cortex_jupyter.runtime.core.record.run import Run
from cortex_jupyter.runtime.core.trust.secrets import redact
from cortex_jupyter.runtime.core.trust.secrets import tail as secret_tail
from cortex_jupyter.runtime.loop.prompt import format_results

__all__ = [
    "TurnRecord",
    "continue_note",
    "cut_note",
    "cut_reply",
    "load_run",
    "load_runs",
    "run_messages",
    "turns_of",
]

RunSource = Run | str | os.PathLike[str]
_TAIL = 200


def load_run(source: RunSource) -> Run:
    """A run record from a ``Run``, a transcript file's path, or the JSONL text itself."""
    if isinstance(source, Run):
        return source
    if isinstance(source, os.PathLike) or not source.lstrip().startswith("{"):
        return Run.load(source)
    return Run.from_jsonl(source)


def entry_message(entry: ChatEntry) -> ChatMessage:
    """The chat message a ``message`` event recorded."""
    message = cast(ChatMessage, {"role": entry.role, "content": entry.content})
    if entry.tool_calls:
        message["tool_calls"] = [dict(call) for call in entry.tool_calls]  # type: ignore[misc]
    if entry.tool_call_id is not None:
        message["tool_call_id"] = entry.tool_call_id
    return message


def run_messages(run: Run) -> list[ChatMessage]:
    """The conversation messages the run added, in order (system prompts left out)."""
    return [
        entry_message(event)
        for event in run.events
        if isinstance(event, ChatEntry) and event.role != "system"
    ]


@dataclass
class TurnRecord:
    """One model turn of a run, as its transcript tells it.

    ``chunks`` are the model's reply with the time each arrived; ``actions`` the ids of
    the top-level actions the turn started; ``errors`` its protocol errors that concern
    no action; ``error`` the failure that broke its stream off, if one did.
    """

    number: int
    started: float
    model: str | None = None
    chunks: list[tuple[float, ModelChunk]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    errors: list[ProtocolError] = field(default_factory=list)
    assistant: str = ""
    tool_calls: list[str] = field(default_factory=list)
    outcome: str | None = None
    error: str | None = None


def turns_of(run: Run) -> list[TurnRecord]:
    """The run's model turns, in order (empty for a run that was not an agent run)."""
    turns: list[TurnRecord] = []
    for event, at in zip(run.events, run.event_times, strict=True):
        if isinstance(event, Turn):
            turns.append(TurnRecord(event.number, at, event.model))
            continue
        if not turns:
            continue
        turn = turns[-1]
        if isinstance(event, Chunk):
            turn.chunks.append((at, event.to_chunk()))
        elif isinstance(event, ActionStatus):
            if event.status == "pending" and event.parent is None and event.id not in turn.actions:
                turn.actions.append(event.id)
        elif isinstance(event, ProtocolError) and event.id is None:
            turn.errors.append(event)
        elif isinstance(event, ChatEntry) and event.role == "assistant":
            turn.assistant = event.content
            turn.tool_calls = [call["id"] for call in event.tool_calls or ()]
        elif isinstance(event, Interrupt) and event.reason == "stream failed":
            turn.error = event.error
        elif isinstance(event, TurnEnd):
            turn.outcome = event.outcome
    return turns


def continue_note(run: Run, *, dialect: str = "cortex", limit: int = 4000) -> str:
    """The user message that continues ``run``: where it stopped, and what already ran.

    For an interrupted (or cancelled, or failed) run: the last characters the model wrote
    and the results of that turn's actions, so it neither repeats text nor actions. For a
    run stopped by the turn limit: the results are already in the conversation, so a
    short request to go on.
    """
    turns = turns_of(run)
    if run.status == "turn_limit":
        return (
            f"The run stopped at its limit of {run.turns} turns before you gave a final "
            "response; the results of your last actions are above. Continue the task."
        )
    if not turns or run.status == "completed":
        return "Continue."
    last = turns[-1]
    how = "was cut off at your token limit" if run.status == "truncated" else "was interrupted"
    native = set(last.tool_calls)
    nodes = [
        run.actions[id]
        for id in last.actions
        if id in run.actions and id not in native and run.actions[id].parent is None
    ]
    return cut_note(last.assistant, how, nodes, last.errors, dialect, limit)


def cut_note(
    text: str,
    how: str,
    nodes: Sequence[ActionNode],
    errors: Sequence[ProtocolError],
    dialect: str,
    limit: int,
) -> str:
    """The user message that goes on from a reply that ``how`` ("was interrupted"...):
    its last characters ``text`` and the results of its actions ``nodes``, so the model
    neither repeats text nor actions (``continue_note``, and a resumed run's cut reply)."""
    text = text.strip()
    if text:
        text = redact(text)  # before the cut: no part of a secret stays at its edge
        tail = text if len(text) <= _TAIL else "…" + secret_tail(text, _TAIL)
        head = (
            f"Your previous reply {how} after:\n\n{tail}\n\nContinue from there, "
            "without repeating what you already wrote."
        )
    else:
        head = "Your previous reply was interrupted before you wrote anything. Answer again."
    if not nodes and not errors:
        return head
    block = format_results(list(nodes), list(errors), dialect=dialect, limit=limit)
    return f"{head} These actions of that reply already ran; do not run them again:\n\n{block}"


def cut_reply(run: Run) -> str:
    """The text of the reply ``run`` stopped in the middle of ("" when its last reply
    was whole): a reply cut at the token limit, broken off by a dropped stream, or
    stopped before the model finished writing it. A continued run reads on from it
    (``runtime.loop.resume``)."""
    turns = turns_of(run)
    if not turns or run.status not in ("truncated", "interrupted", "cancelled"):
        return ""
    last = turns[-1]
    finished = any(chunk.kind == "finish" for _, chunk in last.chunks)
    if run.status == "cancelled" and finished:
        return ""  # the reply was whole: the run was stopped while its actions ran
    return last.assistant


def load_runs(sources: Iterable[RunSource]) -> list[Run]:
    return [load_run(source) for source in sources]
