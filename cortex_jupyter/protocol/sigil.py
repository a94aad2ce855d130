"""The sigil dialect: ``§THINK:``, ``§CALLS:``, ``§EXECUTE:``, ``§RESPOND:``, ``§END:``.

A marker starts a section that runs to the next marker. ``§CALLS:`` holds a JSON
list of ``{"name": ..., "args": {...}}``; each call becomes a tool action (generated
id, async) as soon as its object closes. ``§EXECUTE:`` ends the turn (the runtime
runs the calls and feeds results back); ``§END:`` says the task is complete, so the
response before it is final. Markers are matched case-insensitively; the colon may
be left off when something other than a letter follows.
"""

from __future__ import annotations

import re
from typing import Any, Final

from .base import RESPONSE, THOUGHT, TOP, Parser
from .calls import CallScanner
from .events import Event, ResponseEnd, ThoughtEnd
from .tags import NEED, Need

_MARKER = re.compile(r"§(think|calls|execute|respond|end)(:?)", re.IGNORECASE)
_NAMES: Final = ("think", "calls", "execute", "respond", "end")
_SIGIL = re.compile("§")
_WHOLE_MARKER = re.compile(r"§(think|calls|execute|respond|end):?\Z", re.IGNORECASE)


def marker_at(s: str, k: int) -> tuple[str, int] | Need | None:
    """At ``s[k] == "§"``: (marker name, end index), NEED (could be one) or None."""
    m = _MARKER.match(s, k)
    if m is None:
        rest = s[k + 1 :].lower()
        if len(rest) < 8 and any(name.startswith(rest) for name in _NAMES):
            return NEED
        return None
    end = m.end()
    if not m.group(2):
        if end == len(s):
            return NEED  # a colon, or a letter that makes it a word, may follow
        nxt = s[end]
        if nxt.isalnum() or nxt == "_":
            return None
    return m.group(1).lower(), end


def _is_marker(s: str, k: int) -> bool | Need:
    found = marker_at(s, k)
    return found if found is NEED else found is not None


class SigilParser(Parser):
    """Parser for the sigil dialect."""

    def __init__(self, dialect: str = "sigil", **limits: Any) -> None:
        super().__init__(dialect, **limits)
        self.dialect = "sigil"
        self._section: str | None = None
        self._calls: CallScanner | None = None

    @property
    def open_block(self) -> str | None:
        return "action" if self._calls is not None else super().open_block

    def feed(self, chunk: str) -> list[Event]:
        if self._buf or self._closed or chunk.__class__ is not str:
            chunk = self._with_held(chunk)  # (most chunks need none of it)
        out: list[Event] = []
        if self._calls is None and "§" not in chunk:  # most chunks: text alone
            if chunk:
                self._emit(chunk, out)
            return out
        pos = 0
        n = len(chunk)
        while pos < n:
            if self._calls is None:
                pos = self._read_text(chunk, pos, out)
                continue
            k = self._calls.scan(chunk, pos, out)
            if k is None:
                self._buf = self._calls.take_held()
                break
            found = marker_at(chunk, k)
            assert isinstance(found, tuple)
            pos = self._on_marker(*found, out)
        return out

    def close(self) -> list[Event]:
        if self._closed:
            return []
        out: list[Event] = []
        held, self._buf = self._buf, ""
        if _WHOLE_MARKER.match(held):
            self._on_marker(held[1:].rstrip(":").lower(), len(held), out)
        elif self._calls is not None:
            self._calls.add_tail(held, out)
        elif held:
            self._emit(held, out)
        self._close_section(out, None)
        self._closed = True
        return out

    def _read_text(self, data: str, pos: int, out: list[Event]) -> int:
        _, found = self._text_until(data, pos, out, _SIGIL, marker_at)
        if found is None or found is NEED:
            return len(data)
        assert isinstance(found, tuple)
        return self._on_marker(*found, out)

    def _on_marker(self, name: str, end: int, out: list[Event]) -> int:
        self._close_section(out, name)
        self._section = name
        if name == "think":
            self._enter(THOUGHT)
        elif name == "respond":
            self._response_final = False  # known only at the next marker
            self._enter(RESPONSE)
        else:
            self._enter(TOP)
            if name == "calls":
                self._calls = CallScanner(self._call_hooks(), "§", _is_marker, False)
            elif name == "execute":
                self.boundary = "execute"
            elif not self._final_seen:  # end, with no response just before it
                out.append(ResponseEnd(True))
                self._final_seen = True
                self.boundary = "end"
        return end

    def _close_section(self, out: list[Event], next_marker: str | None) -> None:
        section, self._section = self._section, None
        if section == "think":
            out.append(ThoughtEnd())
        elif section == "respond":
            # Final when §END: follows, or when the stream simply ends after it.
            final = next_marker in ("end", None)
            out.append(ResponseEnd(final))
            if final:
                self._final_seen = True
                if next_marker == "end":
                    self.boundary = "end"
        elif section == "calls" and self._calls is not None:
            self._calls.finish(out)
            self._calls = None
