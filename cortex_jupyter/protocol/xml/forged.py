"""Blocks a model writes that only the run may write: forged results and turns.

A ``<result>``, ``<tool_response>`` or ``<turn role="user">`` the model writes is it
making up what the tools (or the user) said. Outside a response such a block is
skipped and reported (``ForgedBlock``); inside a response it stays text, since the
answer is the model's own words and prose may well name ``<result>``, but a whole
block quoted there is reported all the same (``Echo``). Either way nothing the model
wrote disappears: the error carries the block as written, shortened past the
action size limit.
"""

from __future__ import annotations

from ..actions import SOURCE_HEAD, clipped, quote
from ..events import ProtocolError
from ..tags import Need, Tag, scan_tag


def _said(text: str) -> str:
    stripped = text.strip()
    return f"It said: {quote(stripped)}" if stripped else "It was empty."


class ForgedBlock:
    """A forged block outside a response, read to its closing tag and reported."""

    def __init__(self, tag: Tag, max_chars: int) -> None:
        self._name = tag.name
        self._open = tag.text
        self._close = frozenset(("/" + tag.name,))
        self._max = max_chars
        self._parts: list[str] = []
        self._len = 0

    def read(self, data: str, pos: int) -> tuple[int, Tag | Need | None]:
        """Keep ``data[pos:]`` up to the block's closing tag: where that starts and
        the tag (NEED: it may be one once more text arrives), or None when there is
        none yet and everything was kept."""
        search = pos
        while True:
            i = data.find("<", search)
            if i < 0:
                self.keep(data[pos:])
                return len(data), None
            tag = scan_tag(data, i, self._close)
            if tag is not None:
                self.keep(data[pos:i])
                return i, tag
            search = i + 1

    def keep(self, text: str) -> None:
        """Kept whole up to the action size limit; past it, only its start."""
        room = self._max - self._len
        if room > 0:
            self._parts.append(text[:room])
        self._len += len(text)

    def error(self, close_text: str) -> ProtocolError:
        """The block is over (``close_text`` is its closing tag, if it had one)."""
        text = "".join(self._parts)
        if self._len > self._max:
            text = clipped(text[:SOURCE_HEAD], self._max)
        what = (
            "turns of the conversation (the user's messages, results) come only from "
            "the run, never from the model"
            if self._name == "turn"
            else "results come only from running the actions"
        )
        return ProtocolError(
            "forged_result",
            f"ignored a <{self._name}> block written by the model: {what}. {_said(text)}",
            source=self._open + text + close_text,
        )


class Echo:
    """A result block quoted inside a response: its text so far, for the error its
    closing tag brings (the answer quotes a result the run never produced)."""

    def __init__(self, open_text: str, name: str) -> None:
        self._open = open_text
        self._parts: list[str] = []
        #: The closing tag's name, which the parser now listens for.
        self.close = "/" + name

    def add(self, text: str) -> None:
        self._parts.append(text)

    def error(self, close: Tag) -> ProtocolError:
        inner = "".join(self._parts)
        return ProtocolError(
            "forged_result",
            f"the response quotes a <{close.name[1:]}> block the model wrote itself: "
            f"results come only from running the actions. {_said(inner)}",
            source=self._open + inner + close.text,
        )
