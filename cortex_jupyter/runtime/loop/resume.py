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

What is open at the cut is what the dialect's parser says it is (``Parser.open_block``),
never a scan of the text: a response that quotes ``<thought>`` is still a response.
The sigil dialect's markers (``§RESPOND:``) open and re-open blocks as tags do; its
sections need no closing text.

Only the cut reply's text (thought, response, loose text) reaches the continued run;
its actions already ran (or were refused) in the run that was cut, and the continuation
note gives the model their results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from cortex_jupyter.protocol import Parser

__all__ = ["Resume"]

# The blocks a cut can leave open, by family (``Parser.open_block``'s names): a
# re-opened block may use an alias.
_FAMILIES = {
    "response": "response",
    "respond": "response",
    "thought": "thought",
    "think": "thought",
    "thinking": "thought",
    "action": "action",
    "tool_call": "action",
    "execute": "action",
    "calls": "action",
}
# An opener at the start of a text: a tag's name (to its ``>``) or a sigil marker.
_TAG = re.compile(r"\s*<\s*([A-Za-z_][\w-]*)")
_MARKER = re.compile(r"\s*§([A-Za-z]*)(:?)")
# The pieces the cut text is read in: each opener starts one (a tag holds no "<").
_PIECES = re.compile(r"[<§][^<§]*|[^<§]+")
#: ``_lead``'s answer while the text may still become an opener.
_MORE: Final = "more"
# How much of the cut block's start a rewrite must repeat to count as one.
_SAME_START = 24
# Past this many characters the continuation is joined even without a whole tag.
_DECIDE_AFTER = 200


@dataclass(frozen=True)
class _Open:
    name: str  # lower-cased, as the model named it (``respond``, ``think``...)
    start: int  # where its opener starts in the cut text
    end: int  # where its body starts
    close: str  # what ends it before another block (nothing for a sigil section)


def _lead(text: str) -> tuple[str, int] | str | None:
    """What ``text`` starts with: an opener (its lower-cased name and where it ends),
    ``_MORE`` while it may still become one, or ``None`` (text, or not an opener)."""
    stripped = text.lstrip()
    if not stripped:
        return _MORE
    tag = _TAG.match(text)
    if tag is not None:
        closing = text.find(">", tag.end())
        return _MORE if closing < 0 else (tag.group(1).lower(), closing + 1)
    marker = _MARKER.match(text)
    if marker is not None:
        if marker.end() == len(text) and not marker.group(2):
            return _MORE  # a longer name or its colon may follow
        return marker.group(1).lower(), marker.end()
    return _MORE if stripped == "<" else None


def _open_block(text: str, dialect: str) -> _Open | None:
    """The block the cut text ends inside, as the dialect's parser reads it, with where
    its opener is; ``None`` when the cut fell between blocks."""
    parser = Parser(dialect)
    opened: dict[str, _Open] = {}
    before: str | None = None
    for piece in _PIECES.finditer(text):
        parser.feed(piece.group())
        kind = parser.open_block
        if kind is None:
            opened.clear()
        elif kind != before:  # the block opened in this piece, if its opener starts it
            lead = _lead(piece.group())
            if isinstance(lead, tuple) and _FAMILIES.get(lead[0]) == kind:
                at = piece.start()
                close = "" if piece.group()[0] == "§" else f"</{lead[0]}>"
                opened[kind] = _Open(lead[0], at, at + lead[1], close)
        before = kind
    return opened.get(before) if before is not None else None


class Resume:
    """The cut text of a reply, and how a continuation joins it (see the module docstring).

    ``ready`` is the part of the cut text that stands however the model goes on (it can
    be read at once); the rest waits for ``join``, given the first characters of the
    continuation. ``dialect`` is the reply's protocol dialect: its parser says what the
    cut left open.
    """

    def __init__(self, cut: str, dialect: str = "cortex") -> None:
        self.cut = cut
        self._open = _open_block(cut, dialect)
        self.ready = cut if self._open is None else cut[: self._open.start]

    @property
    def open(self) -> str | None:
        """The kind of block the cut left open (``response``, ``thought``, ``action``),
        or None when it fell between blocks."""
        return None if self._open is None else _FAMILIES[self._open.name]

    def decided(self, head: str, *, end: bool = False) -> bool:
        """Whether ``head`` (the continuation so far) says how to join; at the end of the
        stream it always does."""
        if self._open is None or end or len(head) > _DECIDE_AFTER:
            return True
        lead = _lead(head)
        if lead == _MORE:
            return False
        if not isinstance(lead, tuple) or not self._same_family(lead[0]):
            return True
        # The cut block re-opened: enough of it to tell going on from starting again
        # (it already differs from the cut block's start, or repeats all of it).
        start, inner = self._before()[:_SAME_START], head[lead[1] :].lstrip()
        return not start.startswith(inner) or len(inner) >= len(start)

    def join(self, head: str) -> tuple[str, str]:
        """``(rest of the cut text, continuation)`` to read after ``ready``."""
        open_ = self._open
        if open_ is None:
            return "", head
        block = self.cut[open_.start :]
        lead = _lead(head)
        if not isinstance(lead, tuple) or lead[0] not in _FAMILIES:
            return block, self._after_space(head)
        if not self._same_family(lead[0]):  # another block: the cut one ends where it stopped
            return block + open_.close, head
        inner = head[lead[1] :]
        before = self._before()
        if before and inner.lstrip().startswith(before[:_SAME_START]):
            return "", head  # written again from the start: the new block replaces it
        return block, self._after_space(inner)  # re-opened to go on: the opener dropped

    def _after_space(self, continuation: str) -> str:
        """``continuation`` as it follows the cut text. The model was shown that text
        without its trailing space (``cut_note``) and writes a space of its own to go on:
        after a cut that ended in one (kept: a resumed run's record holds it), that
        second space is dropped."""
        if self.cut[-1:].isspace():
            return continuation.lstrip(" \t")
        return continuation

    def _same_family(self, name: str) -> bool:
        assert self._open is not None
        return _FAMILIES.get(name) == _FAMILIES[self._open.name]

    def _before(self) -> str:
        """The cut block's text so far."""
        assert self._open is not None
        return self.cut[self._open.end :].strip()
