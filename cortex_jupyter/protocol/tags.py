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

_compiled: dict[frozenset[str], tuple[re.Pattern[str], re.Pattern[str]]] = {}


def _patterns(known: frozenset[str]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The (complete tag, tag still arriving) expressions for these tag names."""
    found = _compiled.get(known)
    if found is not None:
        return found
    names = "|".join(re.escape(k) for k in sorted(known, key=len, reverse=True))
    prefixes = {k[:n] for k in known for n in range(1, len(k) + 1)}
    partial_names = "|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True))
    full = re.compile(rf"<({names})(?=[\s/>])((?:\s+{_ATTR_SRC})*)\s*(/?)>", re.IGNORECASE)
    partial = re.compile(
        rf"<(?:/?\Z|(?:{partial_names})\Z|(?:{names})(?:\s+{_ATTR_SRC})*"
        rf"(?:\s+{_ATTR_PARTIAL_SRC})?\s*/?\Z)",
        re.IGNORECASE,
    )
    _compiled[known] = (full, partial)
    return full, partial


def scan_tag(s: str, i: int, known: frozenset[str]) -> Tag | _Need | None:
    """Classify the text at ``s[i] == "<"`` against the tag names in ``known``."""
    full, partial = _patterns(known)
    m = full.match(s, i)
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
    if len(s) - i < MAX_TAG and partial.match(s, i) is not None:
        return NEED
    return None


def partial_pattern(known: frozenset[str]) -> re.Pattern[str]:
    """The expression that matches a tag of ``known`` still arriving (see ``scan_tag``)."""
    return _patterns(known)[1]
