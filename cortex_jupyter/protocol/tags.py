"""Recognising protocol tags at a ``<`` without ever guessing from half a tag.

``scan_tag`` answers one of three things about the text at a ``<``: it is a complete
tag we know (``Tag``), it might still become one when more text arrives (``NEED``),
or it can never be one (``None``) and is plain text. Only ``NEED`` makes the parser
hold text back, so a reader sees every character as early as it can be known to be
text, and the answer never depends on where the stream was split.

Both questions are answered by one compiled regular expression each (per set of
tag names), so re-checking a tag that arrives four characters at a time stays cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

#: Longest opening or closing tag we accept, attributes included. A longer "tag" is
#: text: holding more than this back would stall the stream on prose like "<action
#: items for today...".
MAX_TAG: Final = 512

_ATTR_SRC = r"""[A-Za-z_][\w:.-]*\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+)"""
_ATTR_PARTIAL_SRC = r"""[A-Za-z_][\w:.-]*\s*(?:=\s*(?:"[^"]*|'[^']*|[^\s"'=<>`]*))?"""
_ATTR = re.compile(r"""([A-Za-z_][\w:.-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""")


@dataclass(frozen=True, slots=True)
class Tag:
    """A complete tag: lower-cased ``name`` (``/name`` for a closing tag)."""

    name: str
    attrs: dict[str, str]
    end: int  # index just past the closing ``>``
    self_closing: bool = False


class _Need:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED"


#: The text at the ``<`` could still become a known tag: wait for more input.
NEED: Final = _Need()


class _TagSet:
    """The compiled expressions for one set of tag names."""

    __slots__ = ("attrs_partial", "full", "prefixes")

    def __init__(self, known: frozenset[str]) -> None:
        names = "|".join(re.escape(k) for k in sorted(known, key=len, reverse=True))
        self.full = re.compile(rf"<({names})(?=[\s/>])((?:\s+{_ATTR_SRC})*)\s*(/?)>", re.IGNORECASE)
        # A name still arriving is a prefix of a known name ("" and "/" included).
        self.prefixes = frozenset(k[:n] for k in known for n in range(len(k) + 1)) | {"/"}
        self.attrs_partial = re.compile(
            rf"<(?:{names})(?:\s+{_ATTR_SRC})*(?:\s+{_ATTR_PARTIAL_SRC})?\s*/?\Z",
            re.IGNORECASE,
        )

    def is_partial(self, s: str, i: int) -> bool:
        """Whether ``s[i:]`` (no complete tag) may still grow into one."""
        if len(s) - i >= MAX_TAG:
            return False
        return s[i + 1 :].lower() in self.prefixes or self.attrs_partial.match(s, i) is not None


_compiled: dict[frozenset[str], _TagSet] = {}


def tag_set(known: frozenset[str]) -> _TagSet:
    found = _compiled.get(known)
    if found is None:
        found = _compiled[known] = _TagSet(known)
    return found


def scan_tag(s: str, i: int, known: frozenset[str]) -> Tag | _Need | None:
    """Classify the text at ``s[i] == "<"`` against the tag names in ``known``."""
    tags = tag_set(known)
    if s.find(">", i) >= 0:
        m = tags.full.match(s, i)
        if m is not None:
            end = m.end()
            name = m.group(1).lower()
            raw_attrs = m.group(2)
            if end - i > MAX_TAG or (raw_attrs and name[0] == "/"):
                return None
            attrs: dict[str, str] = {}
            if raw_attrs:
                for am in _ATTR.finditer(raw_attrs):
                    value = am.group(2)
                    if value is None:
                        value = am.group(3) if am.group(3) is not None else am.group(4)
                    attrs[am.group(1).lower()] = value
            return Tag(name, attrs, end, bool(m.group(3)))
    return NEED if tags.is_partial(s, i) else None
