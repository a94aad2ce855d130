"""Where a stopped run stands, read from its record, so it can go on as itself.

``Agent.resume`` goes on with a run that did not finish (its kernel died, Stop, a
dropped stream, a turn limit) in the same record: the same id, its events kept, the new
ones after them. The record says where it stood (``plan``):

- the conversation it had before its last turn (the ``message`` events), which is not
  sent again but continued;
- the actions of its earlier turns, which the scheduler restores (an action that ended
  on its own: its output bound again under its ``output_key``) or runs again (one the
  stop caught, or whose output was not kept whole; ``record.kept`` is the rule);
- its last turn's reply as it streamed (the ``chunk`` events): the model is not asked for
  it again. The loop reads it again through the parser as if it were arriving
  (``Loop.pick_up``), so its actions are restored or run again in the order and with the
  dependencies they had, and the turn ends as it would have: results sent for another
  turn, or the answer. A reply the record holds no end of was cut (the kernel died while
  the model wrote, or the stream dropped): the model is told where it stopped and reads
  on from there, as ``Agent.continue_run`` does;
- the events of that turn's end already recorded (``known``), so none is recorded twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cortex_jupyter.protocol.events import ProtocolError
from cortex_jupyter.runtime.core.events import (
    ActionStatus,
    AnyEvent,
    ChatEntry,
    Chunk,
    Turn,
    TurnEnd,
)
from cortex_jupyter.runtime.core.model.chunks import ChatMessage, ModelChunk
from cortex_jupyter.runtime.core.record.graph import ActionNode
from cortex_jupyter.runtime.core.record.run import Run
from cortex_jupyter.runtime.loop.transcript import entry_message

__all__ = ["FINISHED", "PickUp", "ReplyCut", "event_key", "plan"]

#: The statuses of a run that has nothing left to do: resuming it says so instead.
FINISHED = frozenset(("completed",))


class ReplyCut(Exception):
    """Raised (as a turn's error, never thrown) when the reply of a resumed run's last
    turn has no end in the record: the run stopped while the model wrote it."""

    continuable = True

    def __init__(self) -> None:
        super().__init__("the run stopped before the reply ended")


@dataclass
class PickUp:
    """Where a stopped run stands (see the module docstring). ``turn`` is its last
    turn's number (0: it stopped before asking the model)."""

    turn: int = 0
    chunks: list[ModelChunk] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    earlier: list[ActionNode] = field(default_factory=list)
    before: set[str] = field(default_factory=set)
    errors_before: int = 0
    known: list[tuple[Any, ...]] = field(default_factory=list)
    #: It stopped at its turn limit: it gets as many turns again.
    limit: bool = False


def event_key(event: AnyEvent) -> tuple[Any, ...]:
    """What tells a recorded event of a turn's end from another (``PickUp.known``)."""
    if isinstance(event, ChatEntry):
        return ("message", event.role, event.content, event.tool_call_id)
    if isinstance(event, TurnEnd):
        return ("turn_end", event.number)
    return (event.kind, id(event))  # nothing else is looked for


def plan(run: Run) -> PickUp:
    """Where ``run`` stands, from its events (see the module docstring)."""
    events = run.events
    last = max((i for i, e in enumerate(events) if isinstance(e, Turn)), default=len(events))
    head, tail = events[:last], events[last:]
    out = PickUp()
    out.messages = [
        entry_message(e) for e in head if isinstance(e, ChatEntry) and e.role != "system"
    ]
    out.before = {e.id for e in head if isinstance(e, ActionStatus)}
    out.errors_before = sum(isinstance(e, ProtocolError) for e in head)
    out.earlier = [
        node
        for id, node in run.actions.items()
        if id in out.before and node.parent is None and node.action is not None
    ]
    if tail:
        turn = tail[0]
        assert isinstance(turn, Turn)
        out.turn = turn.number
        out.chunks = [e.to_chunk() for e in tail if isinstance(e, Chunk)]
        out.known = [event_key(e) for e in tail if isinstance(e, ChatEntry | TurnEnd)]
        out.limit = any(isinstance(e, TurnEnd) and e.outcome == "limit" for e in tail)
    return out
