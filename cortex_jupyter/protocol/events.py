"""The values the protocol layer produces: parsed actions and parser events.

Events are frozen dataclasses with a class-level ``kind`` string, so consumers can
dispatch on ``event.kind`` without importing the classes. They are the parser's
whole output contract (see ARCHITECTURE.md, "Contracts"): the runtime, the display
and the tests rely on these names and fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Union, get_args

ActionType = Literal["tool", "agent", "relic", "workflow", "llm", "internal"]
ActionMode = Literal["sync", "async", "fire_and_forget"]
OnError = Literal["fail", "skip", "retry"]
ErrorCode = Literal[
    "invalid_json",
    "body_not_object",
    "missing_name",
    "duplicate_id",
    "unknown_type",
    "unknown_mode",
    "invalid_field",
    "truncated_action",
    "action_after_final",
    "forged_result",
    "too_large",
]

# The runtime values are read off the types, so a new code or type is written once.
ACTION_TYPES: frozenset[str] = frozenset(get_args(ActionType))
ACTION_MODES: frozenset[str] = frozenset(get_args(ActionMode))
ON_ERROR_VALUES: frozenset[str] = frozenset(get_args(OnError))
ERROR_CODES: tuple[str, ...] = get_args(ErrorCode)

#: The vocabulary the package re-exports (``cortex_jupyter.protocol``).
__all__ = [
    "ACTION_MODES",
    "ACTION_TYPES",
    "ERROR_CODES",
    "Action",
    "ActionReady",
    "ActionStart",
    "ContextFeedEvent",
    "Event",
    "ProtocolError",
    "ResponseDelta",
    "ResponseEnd",
    "TextDelta",
    "ThoughtDelta",
    "ThoughtEnd",
    "action_to_dict",
    "event_to_dict",
]


@dataclass(frozen=True, slots=True)
class Action:
    """One action the model asked for, validated and ready to schedule."""

    id: str
    name: str
    type: str = "tool"
    mode: str = "async"
    parameters: dict[str, Any] = field(default_factory=dict)
    output_key: str | None = None
    depends_on: tuple[str, ...] = ()
    timeout: float | None = None
    retry: int = 0
    on_error: str = "fail"
    in_thought: bool = False
    #: The id the model wrote, when it had to be renamed: an earlier turn of the run
    #: already used it (``r1`` runs as ``r1~2``). The runtime notes it on the node.
    original_id: str | None = None


@dataclass(frozen=True, slots=True)
class ThoughtDelta:
    """Text of a thought, as it arrives."""

    text: str
    kind: ClassVar[str] = "thought"


@dataclass(frozen=True, slots=True)
class ResponseDelta:
    """Text of a response for the user, as it arrives.

    ``final`` is the response's declared finality where the model states it up
    front (cortex's ``final="true"``). Where finality is only learnt from what comes
    after the block (a cortex ``<response>`` without ``final``, sigil, cogency,
    hermes) the deltas carry ``False`` and the ``ResponseEnd`` event decides.
    """

    text: str
    final: bool = True
    kind: ClassVar[str] = "response"


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Text written outside any block; shown to the user, never dropped."""

    text: str
    kind: ClassVar[str] = "text"


@dataclass(frozen=True, slots=True)
class ThoughtEnd:
    """A thought block closed (or the stream ended inside one)."""

    kind: ClassVar[str] = "thought_end"


@dataclass(frozen=True, slots=True)
class ResponseEnd:
    """A response block closed. ``final`` says whether the run's answer is complete.

    When finality depends on what follows the block, this event comes when that is
    known (the next action, another response, the end of the stream), not at the
    closing tag; the last one of a reply is the reply's verdict.
    """

    final: bool = True
    kind: ClassVar[str] = "response_end"


@dataclass(frozen=True, slots=True)
class ActionStart:
    """An action's opening tag arrived; its body is still streaming (for the UI)."""

    id: str
    type: str = "tool"
    mode: str = "async"
    in_thought: bool = False
    kind: ClassVar[str] = "action_start"


@dataclass(frozen=True, slots=True)
class ActionReady:
    """An action is complete and valid: the runtime may dispatch it now.

    ``source`` is the exact text the model wrote for it (the whole ``<action ...>...
    </action>``, the call object, a native call's arguments), for the inspector.
    """

    action: Action
    source: str = ""
    kind: ClassVar[str] = "action"


@dataclass(frozen=True, slots=True)
class ContextFeedEvent:
    """A ``<context_feed id="...">`` block the model wrote, whole."""

    id: str
    text: str
    kind: ClassVar[str] = "context_feed"


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """Something in the stream could not be used as written.

    ``code`` is one of ``ERROR_CODES``; ``message`` says what was wrong, quotes the
    offending text (shortened) and what happens next; ``id`` names the action it
    concerns, when there is one. An action reported here is never executed.
    ``source`` is the text the model wrote that was refused, tags included (the
    whole ``<action ...>...</action>``, the forged block, the call), so nothing the
    model wrote disappears; a block too large to keep is shortened with a marker.
    """

    code: str
    message: str
    id: str | None = None
    source: str = ""
    kind: ClassVar[str] = "error"


Event = Union[  # noqa: UP007 - a runtime alias; `X | Y` of classes needs 3.10+ anyway
    ThoughtDelta,
    ResponseDelta,
    TextDelta,
    ThoughtEnd,
    ResponseEnd,
    ActionStart,
    ActionReady,
    ContextFeedEvent,
    ProtocolError,
]

TEXT_KINDS: frozenset[str] = frozenset(("thought", "response", "text"))


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-ready dict of an event (used by golden files and transcripts).

    Action fields that hold their defaults are left out so a record stays readable,
    and so are an error's missing ``id`` and empty ``source``.
    """
    out: dict[str, Any] = {"kind": event.kind}
    if isinstance(event, ActionReady):
        out.update(action_to_dict(event.action))
        return out
    for name in event.__slots__:
        value = getattr(event, name)
        if (name == "id" and value is None) or (name == "source" and not value):
            continue
        out[name] = value
    return out


_ACTION_DEFAULTS: dict[str, Any] = {
    "output_key": None,
    "depends_on": (),
    "timeout": None,
    "retry": 0,
    "on_error": "fail",
    "in_thought": False,
    "original_id": None,
}


def action_to_dict(action: Action) -> dict[str, Any]:
    """A JSON-ready dict of an action, fields at their default left out."""
    out: dict[str, Any] = {
        "id": action.id,
        "type": action.type,
        "mode": action.mode,
        "name": action.name,
        "parameters": action.parameters,
    }
    for name, default in _ACTION_DEFAULTS.items():
        value = getattr(action, name)
        if value != default:
            out[name] = list(value) if isinstance(value, tuple) else value
    return out
