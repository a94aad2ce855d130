"""A JSON list of calls, read as it streams (sigil's ``§CALLS:``, cogency's ``<execute>``).

Each call in ``[{"name": ..., "args": {...}}, ...]`` becomes an action the moment
its closing ``}`` arrives, not when the list ends, so the first call can run while
the model is still writing the second. Brackets and terminators inside JSON strings
are data. A lone object instead of a list is accepted as one call.

The scanner knows nothing of its parser beyond ``CallHooks``: what to do when a
call opens, closes, grows too large or is cut off. A possible half terminator at the
end of a chunk is handed back by ``take_held`` for the parser to put in front of the
next chunk.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from .actions import SOURCE_HEAD, clipped, quote, with_source
from .events import Event, ProtocolError, TextDelta
from .jsonscan import JsonString
from .tags import NEED, Need

_SEPARATORS = re.compile(r"\s*,(?:\s*,)*\s*")

#: Answers whether the text at an index is the section's terminator (True), is not
#: (False), or may be once more text arrives (NEED).
Terminator = Callable[[str, int], "bool | Need"]


class CallHooks(NamedTuple):
    """What a parser does for the calls its scanner finds."""

    #: (out, in_thought) -> (id, the error that already refuses it)
    start: Callable[[list[Event], bool], tuple[str, ProtocolError | None]]
    #: (text, id, in_thought, out, source): the call is complete
    finish: Callable[[str, str, bool, list[Event], str], None]
    #: (id, out, source): the call passed the size limit
    too_large: Callable[[str, list[Event], str], None]
    #: (id, text, source) -> the error for a call the stream cut off
    truncated: Callable[[str, str, str], ProtocolError]
    max_chars: int


class CallScanner:
    """Consumes the text of one calls section; emits actions as each call closes."""

    def __init__(
        self, hooks: CallHooks, term_char: str, is_term: Terminator, in_thought: bool
    ) -> None:
        self._hooks = hooks
        self._held = ""  # a possible half terminator at the end of the last chunk
        self._is_term = is_term
        self._in_thought = in_thought
        self._specials = re.compile('["\\[\\]{}' + re.escape(term_char) + "]")
        self._depth = 0
        self._string = JsonString()
        self._array = False  # a "[" opened the list
        self._elem: list[str] | None = None  # text of the call being read
        self._elem_len = 0
        self._elem_base = 0
        self._elem_id = ""
        self._elem_skip: ProtocolError | None = None
        self._elem_big = False
        self._elem_head = ""  # the start of a call too large to keep
        self._loose: list[str] = []  # text outside the list
        self._stray: list[str] = []  # things in the list that are not objects

    def scan(self, data: str, pos: int, out: list[Event]) -> int | None:
        """Read ``data[pos:]``; the terminator's index, or None when all was consumed.

        When the data ends with a possible half terminator, ``take_held`` returns it.
        """
        n = len(data)
        i = seg = pos
        specials = self._specials
        string = self._string
        while True:
            k = string.find(data, i, specials)
            if k < 0:
                break
            c = data[k]
            i = k + 1
            if c in "[{":
                seg = self._open(c, data, seg, k, out)
            elif c in "]}":
                seg = self._close(c, data, seg, k, out)
            else:
                term = self._is_term(data, k)
                if term is NEED:
                    self._store(data[seg:k], out)
                    self._held = data[k:]
                    return None
                if term:
                    self._store(data[seg:k], out)
                    return k
        self._store(data[seg:n], out)
        return None

    def take_held(self) -> str:
        """The possible half terminator the last ``scan`` stopped at (once)."""
        held, self._held = self._held, ""
        return held

    def _open(self, c: str, data: str, seg: int, k: int, out: list[Event]) -> int:
        depth = self._depth
        if self._elem is not None:
            self._depth = depth + 1
            return seg
        if c == "[" and depth == 0 and not self._array:
            self._store(data[seg:k], out)
            self._depth = 1
            self._array = True
            return k + 1
        if c == "{" and depth == (1 if self._array else 0):
            self._store(data[seg:k], out)
            self._depth = depth + 1
            self._elem = []
            self._elem_len = 0
            self._elem_big = False
            self._elem_base = depth
            self._elem_head = ""
            self._elem_id, self._elem_skip = self._hooks.start(out, self._in_thought)
            return k
        self._store(data[seg:k], out)
        self._depth = depth + 1
        return k

    def _close(self, c: str, data: str, seg: int, k: int, out: list[Event]) -> int:
        if self._depth == 0:
            return seg  # a stray bracket in loose text
        if self._elem is not None:
            self._depth -= 1
            if self._depth == self._elem_base:
                self._store(data[seg : k + 1], out)
                self._finish_elem(out)
                return k + 1
            return seg
        if self._depth == 1 and self._array and c == "]":
            self._store(data[seg:k], out)  # the end of the list
            self._depth = 0
            return k + 1
        # The end of something in the list that is not a call. Every change of depth
        # outside a call splits the text, so each character is judged at its own depth.
        self._store(data[seg : k + 1], out)
        self._depth -= 1
        return k + 1

    def _store(self, text: str, out: list[Event]) -> None:
        if not text:
            return
        if self._elem is not None:
            if self._elem_big:
                return
            self._elem_len += len(text)
            limit = self._hooks.max_chars
            if self._elem_len > limit:
                self._elem_big = True
                self._elem_head = ("".join(self._elem) + text)[: min(SOURCE_HEAD, limit)]
                self._elem = []
                if self._elem_skip is None:
                    self._hooks.too_large(self._elem_id, out, clipped(self._elem_head, limit))
                return
            self._elem.append(text)
        elif self._depth == 0:
            self._loose.append(text)
        else:
            self._stray.append(text)

    def _source(self, text: str) -> str:
        if self._elem_big:
            return clipped(self._elem_head, self._hooks.max_chars)
        return text

    def _finish_elem(self, out: list[Event]) -> None:
        text = "".join(self._elem or ())
        self._elem = None
        if self._elem_skip is not None:
            out.append(with_source(self._elem_skip, self._source(text)))
        elif not self._elem_big:
            self._hooks.finish(text, self._elem_id, self._in_thought, out, text)

    def add_tail(self, text: str, out: list[Event]) -> None:
        """Text held back as a possible terminator that turned out not to be one."""
        self._store(text, out)

    def finish(self, out: list[Event]) -> None:
        """The section ended: report an unfinished call, stray items and loose text."""
        if self._elem is not None:
            text = "".join(self._elem)
            self._elem = None
            if self._elem_skip is not None:
                out.append(with_source(self._elem_skip, self._source(text)))
            elif not self._elem_big:
                out.append(self._hooks.truncated(self._elem_id, text, text))
        stray = _SEPARATORS.sub(", ", "".join(self._stray)).strip(", \t\r\n")
        if stray:
            out.append(
                ProtocolError(
                    "body_not_object",
                    "each call in the list must be a JSON object such as "
                    '{"name": "search", "args": {...}}; this was not, and was not run: '
                    f"{quote(stray)}",
                    source=stray,
                )
            )
        loose = "".join(self._loose).strip()
        if loose:
            out.append(TextDelta(loose))
