"""JSON read as it streams, outside its strings: where the next special character is.

Both readers of JSON as it streams (an action's body, a list of calls) look for a
closing tag, a terminator or a bracket only outside strings; inside one, only an
unescaped ``"`` matters. A chunk may end inside a string, or just after a backslash,
whose escaped character is then the first of the next chunk: ``JsonString`` carries
that over.
"""

from __future__ import annotations

import re

_SPECIAL = re.compile(r'["\\]')


class JsonString:
    """Whether the JSON read so far stopped inside a string (``inside``), and just
    after a backslash there (``escaped``); ``find`` reads on past strings."""

    __slots__ = ("escaped", "inside")

    def __init__(self) -> None:
        self.inside = False
        self.escaped = False

    def _skip(self, data: str, i: int) -> int:
        """Inside a string at ``data[i]``: the index just past its closing quote, or
        ``len(data)`` when the text ends first (still inside)."""
        n = len(data)
        if self.escaped and i < n:
            self.escaped = False
            i += 1
        while True:
            m = _SPECIAL.search(data, i)
            if m is None:
                return n
            k = m.start()
            if data[k] == '"':
                self.inside = False
                return k + 1
            if k + 1 >= n:
                self.escaped = True
                return n
            i = k + 2

    def find(self, data: str, i: int, specials: re.Pattern[str]) -> int:
        """The index of the next character ``specials`` matches outside strings,
        from ``data[i]``, or -1 when the text ends first. ``specials`` must match
        ``"`` too: that is where strings start."""
        n = len(data)
        while i < n:
            if self.inside:
                i = self._skip(data, i)
                continue
            m = specials.search(data, i)
            if m is None:
                return -1
            k = m.start()
            if data[k] != '"':
                return k
            self.inside = True
            i = k + 1
        return -1
