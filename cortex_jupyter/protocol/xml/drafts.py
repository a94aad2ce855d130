"""An action between its opening tag and its end: what the tag said, waiting for the body.

The parser reads an action's body as it streams, in its own fast state; what the
opening tag already decided (the id, type and mode, a name, a refusal such as a
duplicate id) is kept in a ``Draft`` until the body is complete. ``Draft.event``
then makes the two into the action, or into the error that refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..actions import action_fields, build_action, with_source
from ..events import ActionReady, ProtocolError
from ..ids import Ids
from ..tags import Closer, closer

ACTION_CLOSE: Final = closer("action")
TOOL_CALL_CLOSE: Final = closer("tool_call")


@dataclass(slots=True)
class Draft:
    """The action being read, as its opening tag described it."""

    id: str
    open_text: str  # the opening tag as written
    closer: Closer
    in_thought: bool = False
    type: str = "tool"
    mode: str = "async"
    call: bool = False  # a hermes <tool_call>: the body is {"name", "arguments"}
    name: str | None = None  # the tag's name attribute: the body is the parameters
    problem: str | None = None  # the tag contradicts itself
    skip: ProtocolError | None = None  # refused at the tag (duplicate id, after final)
    original_id: str | None = None

    def event(self, body: str, source: str, ids: Ids) -> ActionReady | ProtocolError:
        """The action the tag and ``body`` make (``source``: both as written)."""
        fields = action_fields(body, self.id, self.name)
        if isinstance(fields, ProtocolError):
            return with_source(fields, source)
        if self.problem is not None:
            return ProtocolError(
                "invalid_field",
                f"action {self.id!r}: {self.problem}. It was not run.",
                self.id,
                source,
            )
        result = build_action(
            fields,
            action_id=self.id,
            type=self.type,
            mode=self.mode,
            in_thought=self.in_thought,
            original_id=self.original_id,
        )
        if isinstance(result, ProtocolError):
            return with_source(result, source)
        return ActionReady(ids.follow_renames(result), source)
