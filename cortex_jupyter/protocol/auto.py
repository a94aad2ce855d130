"""``dialect="auto"``: the dialect is picked by the first marker in the stream.

Until then the tag tables of cortex, cogency and hermes are merged (``<think>``
belongs to all three and means the same; ``<tool_call>`` picks hermes) and a ``§``
marker at top level hands the rest of the stream to the sigil parser. Text before
the first marker is loose text in every dialect, so nothing already emitted changes
meaning.
"""

from __future__ import annotations

import re
from typing import Any

from .base import TOP
from .events import Event
from .sigil import SigilParser, marker_at
from .tags import NEED, Need, Tag, scan_tag, tag_set
from .xml import FORGED_TAGS, XmlParser

_LT_OR_SIGIL = re.compile("[<§]")


class AutoParser(XmlParser):
    """Starts undecided; becomes cortex, cogency or (by delegation) sigil."""

    def __init__(self, dialect: str = "auto", **limits: Any) -> None:
        super().__init__("auto", **limits)
        self._limits = limits
        self._sigil: SigilParser | None = None
        self._watching = True  # still looking for a first § marker
        self._handlers = (self._read_text_watching, *self._handlers[1:])

    def feed(self, chunk: str) -> list[Event]:
        if self._sigil is not None:
            events = self._sigil.feed(chunk)
            self.boundary = self._sigil.boundary
            return events
        return super().feed(chunk)

    @property
    def open_block(self) -> str | None:
        return self._sigil.open_block if self._sigil is not None else super().open_block

    def close(self) -> list[Event]:
        if self._sigil is None:
            return super().close()
        self._closed = True
        events = self._sigil.close()
        self.boundary = self._sigil.boundary
        return events

    def _stop_watching(self) -> None:
        self._watching = False
        self._handlers = (XmlParser._read_text.__get__(self), *self._handlers[1:])

    def _on_tag(self, tag: Tag, out: list[Event]) -> int:
        if tag.name not in FORGED_TAGS:
            self._stop_watching()
        return super()._on_tag(tag, out)

    def _orphan_opener(self, data: str, pos: int, out: list[Event]) -> int:
        end = super()._orphan_opener(data, pos, out)
        if self.dialect != "auto" and self._watching:
            self._stop_watching()
        return end

    def _read_text_watching(self, data: str, pos: int, out: list[Event]) -> int:
        if self._sink != TOP:
            return XmlParser._read_text(self, data, pos, out)
        if self._fresh:
            end = self._orphan_opener(data, pos, out)
            if end >= 0:
                return end
        i, found = self._text_until(data, pos, out, _LT_OR_SIGIL, self._marker_or_tag)
        if found is None:
            return len(data)
        if found is NEED:
            self._pending = tag_set(self._known)
            return len(data)
        if isinstance(found, Tag):
            return self._on_tag(found, out)
        return self._hand_over(data, i, out)

    def _marker_or_tag(self, data: str, i: int) -> tuple[str, int] | Tag | Need | None:
        """At a ``<`` or a ``§``: a tag of the merged tables or a sigil marker."""
        return marker_at(data, i) if data[i] == "§" else scan_tag(data, i, self._known)

    def _hand_over(self, data: str, i: int, out: list[Event]) -> int:
        sigil = SigilParser("sigil", **self._limits)
        sigil.continue_from(self)
        self._sigil = sigil
        self.dialect = "sigil"
        out.extend(sigil.feed(data[i:]))
        self.boundary = sigil.boundary
        return len(data)
