"""Picking a cut reply up where it stopped (``Agent.continue_run``).

A reply cut off at the token limit, or by a dropped stream, ends in the middle of
something: usually an open ``<response>``. Asked to go on, a model writes the rest
(``and ends here.</response>``); read by a fresh parser that rest is loose text with a
stray closing tag, and the first half is lost. So the continued run's first reply is
read by a parser that has first been given the cut text: it is inside the same open
block, and the answer is the first half plus the rest.

Models do not all go on the same way, so the first characters of the continuation
decide how the two are joined (``Resume.join``):

- plain text (or anything but an opening tag): it goes on where the cut left off;
- the opening tag of the block that was cut (``<response>`` again): the model re-opened
  it to go on, and the repeated tag is dropped; unless the new block starts with the
  same words as the cut one, which is the model writing it again from the start: then
  the cut block is left out and the new one replaces it;
- the opening tag of another block (``<action ...>`` after a cut response): the cut
  block is closed where it stopped and the new one follows.

Only the cut reply's text (thought, response, loose text) reaches the continued run;
its actions already ran (or were refused) in the run that was cut, and the continuation
note gives the model their results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Resume"]

# The blocks a cut can leave open, by family: a re-opened block may use an alias.
_FAMILIES = {
    "response": "response",
    "respond": "response",
    "thought": "thought",
    "think": "thought",
    "thinking": "thought",
    "action": "action",
    "tool_call": "action",
    "execute": "action",
}
_OPENING = re.compile(r"<\s*(" + "|".join(_FAMILIES) + r")\b[^<>]*>", re.IGNORECASE)
_HEAD = re.compile(r"\s*<\s*([A-Za-z_][\w-]*)")
# How much of the cut block's start a rewrite must repeat to count as one.
_SAME_START = 24
# Past this many characters the continuation is joined even without a whole tag.
_DECIDE_AFTER = 200


@dataclass(frozen=True)
class _Open:
    name: str
    start: int  # where its opening tag starts in the cut text
    end: int  # where its body starts


def _open_block(text: str) -> _Open | None:
    """The block the cut text ends inside (its last block opening with no closing tag
    after it), or ``None`` when the cut fell between blocks."""
    for match in reversed(list(_OPENING.finditer(text))):
        name = match.group(1).lower()
        if re.search(rf"</\s*{name}\s*>", text[match.end() :], re.IGNORECASE):
            return None
        return _Open(name, match.start(), match.end())
    return None


class Resume:
    """The cut text of a reply, and how a continuation joins it (see the module docstring).

    ``ready`` is the part of the cut text that stands however the model goes on (it can
    be read at once); the rest waits for ``join``, given the first characters of the
    continuation.
    """

    def __init__(self, cut: str) -> None:
        self.cut = cut
        self._open = _open_block(cut)
        self.ready = cut if self._open is None else cut[: self._open.start]

    def decided(self, head: str, *, end: bool = False) -> bool:
        """Whether ``head`` (the continuation so far) says how to join; at the end of the
        stream it always does."""
        if self._open is None or end or len(head) > _DECIDE_AFTER:
            return True
        stripped = head.lstrip()
        if not stripped:
            return False
        if not stripped.startswith("<"):
            return True
        closing = stripped.find(">")
        if closing < 0:
            return False
        match = _HEAD.match(stripped)
        if match is None or _FAMILIES.get(match.group(1).lower()) != _FAMILIES[self._open.name]:
            return True
        # The cut block re-opened: enough of it to tell going on from starting again
        # (it already differs from the cut block's start, or repeats all of it).
        start, inner = self._before()[:_SAME_START], stripped[closing + 1 :].lstrip()
        return not start.startswith(inner) or len(inner) >= len(start)

    def join(self, head: str) -> tuple[str, str]:
        """``(rest of the cut text, continuation)`` to read after ``ready``."""
        open_ = self._open
        if open_ is None:
            return "", head
        block = self.cut[open_.start :]
        match = _HEAD.match(head)
        family = _FAMILIES.get(match.group(1).lower()) if match is not None else None
        if match is None or family is None:
            return block, head
        if family != _FAMILIES[open_.name]:  # another block: the cut one ends where it stopped
            return f"{block}</{open_.name}>", head
        closing = head.find(">", match.end())
        if closing < 0:
            return block, head
        inner = head[closing + 1 :]
        before = self._before()
        if before and inner.lstrip().startswith(before[:_SAME_START]):
            return "", head  # written again from the start: the new block replaces it
        return block, inner  # re-opened to go on: the repeated tag is dropped

    def _before(self) -> str:
        """The cut block's text so far."""
        assert self._open is not None
        return self.cut[self._open.end :].strip()
