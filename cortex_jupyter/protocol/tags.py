"""Recognising protocol tags at a ``<`` without ever guessing from half a tag.

``scan_tag`` answers one of three things about the text at a ``<``: it is a complete
tag we know (``Tag``), it might still become one when more text arrives (``NEED``),
or it can never be one (``None``) and is plain text. Only ``NEED`` makes the parser
hold text back, so a reader sees every character as early as it can be known to be
text, and the answer never depends on where the stream was split.

Both questions are answered by one compiled regular expression each (per set of
tag names), so re-checking a tag that arrives four characters at a time stays cheap.

Written as real models write them: a closing tag may hold whitespace (``</action >``,
``</ action>``), and two tags take bare words. ``<response final>`` means
``final="true"``; on ``<action ...>`` a bare word is its mode or type (``<action
id="a" sync>``). Any other tag with a bare word is prose (``<thought process>``), and
so is an ``<action ...>`` whose only words are unknown bare ones (``<action items
for today>``): a bare word alone must name a mode or a type to make it a tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .events import ACTION_MODES, ACTION_TYPES

#: Longest opening or closing tag we accept, attributes included. A longer "tag" is
#: text: holding more than this back would stall the stream on prose like "<action
#: items for today...".
MAX_TAG: Final = 512

_NAME_SRC = r"[A-Za-z_][\w:.-]*"
_VALUE_SRC = r"""(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+)"""
_ATTR_SRC = rf"{_NAME_SRC}\s*=\s*{_VALUE_SRC}"
_WORD_SRC = rf"{_NAME_SRC}(?:\s*=\s*{_VALUE_SRC})?"  # an attribute or a bare word
_ATTR_PARTIAL_SRC = r"""[A-Za-z_][\w:.-]*\s*(?:=\s*(?:"[^"]*|'[^']*|[^\s"'=<>`]*))?"""
_ATTR = re.compile(r"""([A-Za-z_][\w:.-]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?""")
#: What may follow a tag name, per tag: bare words of any kind on an action, only
#: ``final`` on a response, attributes alone on every other tag.
_TAILS: Final = {
    "action": _WORD_SRC,
    "response": rf"(?:{_ATTR_SRC}|final(?![\w:.-]))",
}
#: A bare word that makes ``<action ...>`` a tag even with no attribute.
ACTION_WORDS: Final = ACTION_MODES | ACTION_TYPES


@dataclass(frozen=True, slots=True)
class Tag:
    """A complete tag: lower-cased ``name`` (``/name`` for a closing tag)."""

    name: str
    attrs: dict[str, str]
    end: int  # index just past the closing ``>``
    self_closing: bool = False
    flags: tuple[str, ...] = ()  # bare words (no ``=``), lower-cased, in order
    text: str = ""  # the tag as written


class Need:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED"


#: The text at the ``<`` could still become a known tag: wait for more input.
NEED: Final = Need()


def _name_src(name: str) -> str:
    """A tag name as a pattern; a closing tag may hold whitespace after its slash."""
    if name.startswith("/"):
        return r"/\s*" + re.escape(name[1:])
    return re.escape(name)


def _names_src(names: frozenset[str] | set[str]) -> str:
    return "|".join(_name_src(k) for k in sorted(names, key=len, reverse=True))


class _TagSet:
    """The compiled expressions for one set of tag names."""

    __slots__ = ("attrs_partial", "full", "heads", "prefixes")

    def __init__(self, known: frozenset[str]) -> None:
        names = _names_src(known)
        # Bare words are allowed here for every tag; scan_tag refuses them where they
        # mean nothing. The partial pattern is exact per tag, so prose such as
        # "<thought process and ..." is known to be text at its second word.
        self.full = re.compile(rf"<({names})(?=[\s/>])((?:\s+{_WORD_SRC})*)\s*(/?)>", re.IGNORECASE)
        # A name still arriving is a prefix of a known name ("" and "/" included).
        self.prefixes = frozenset(k[:n] for k in known for n in range(len(k) + 1)) | {"/"}
        # The same with their "<", as written in lower case: a tag name arriving a
        # character at a time is one set lookup (a subset of what is_partial accepts).
        self.heads = frozenset("<" + p for p in self.prefixes)
        branches = [
            rf"(?:{_name_src(name)})(?:\s+{tail})*"
            for name, tail in _TAILS.items()
            if name in known
        ]
        others = known - _TAILS.keys()
        if others:
            branches.append(rf"(?:{_names_src(others)})(?:\s+{_ATTR_SRC})*")
        self.attrs_partial = re.compile(
            rf"<(?:{'|'.join(branches)})(?:\s+{_ATTR_PARTIAL_SRC})?\s*/?\Z",
            re.IGNORECASE,
        )

    def is_partial(self, s: str, i: int) -> bool:
        """Whether ``s[i:]`` (no complete tag) may still grow into one."""
        if len(s) - i >= MAX_TAG:
            return False
        rest = s[i + 1 :].lower()
        if rest in self.prefixes:
            return True
        if rest[:1] == "/" and rest[1:2].isspace():  # "</ thou": whitespace after the slash
            return (
                "/" + rest[1:].lstrip() in self.prefixes
                or self.attrs_partial.match(s, i) is not None
            )
        return self.attrs_partial.match(s, i) is not None


#: Characters that continue a tag name, an attribute name or an unquoted value.
_NAME_CHARS = re.compile(r"[\w:.-]+\Z")


def still_partial(buf: str, chunk: str, data: str) -> bool:
    """Whether ``data`` (``buf``, a possible opening tag already found partial, plus
    ``chunk``, which holds no ``<`` or ``>``) is still one, without the partial-tag
    pattern (a regex over the whole tag on every character of it). Two cases are
    certain: inside a double-quoted value (no single quote anywhere, an odd number of
    double quotes; the chunk adds none), and name characters past the tag name
    continuing a name or a value (not after a quote, a slash or whitespace).
    Anything else is left to the pattern (``False``)."""
    if len(data) >= MAX_TAG or buf[1:2] == "/":
        return False
    if '"' not in chunk and "'" not in data and data.count('"') & 1:
        return True
    last = buf[-1]
    return (
        last not in "\"'/"
        and not last.isspace()  # what a new word may be depends on the tag
        # past the tag name (rarer whitespace is left to the pattern, as above)
        and (" " in buf or "\n" in buf or "\t" in buf)
        and _NAME_CHARS.match(chunk) is not None
    )


_compiled: dict[frozenset[str], _TagSet] = {}


def tag_set(known: frozenset[str]) -> _TagSet:
    found = _compiled.get(known)
    if found is None:
        found = _compiled[known] = _TagSet(known)
    return found


def scan_tag(s: str, i: int, known: frozenset[str]) -> Tag | Need | None:
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
            if name[0] == "/" and name[1].isspace():
                name = "/" + name[1:].lstrip()
            attrs: dict[str, str] = {}
            flags: tuple[str, ...] = ()
            if raw_attrs:
                words: list[str] = []
                for am in _ATTR.finditer(raw_attrs):
                    key = am.group(1).lower()
                    value = am.group(2)
                    if value is None:
                        value = am.group(3) if am.group(3) is not None else am.group(4)
                    if value is None:
                        words.append(key)
                    else:
                        attrs[key] = value
                if words:
                    if not _bare_words_fit(name, attrs, words):
                        return None
                    flags = tuple(words)
            return Tag(name, attrs, end, bool(m.group(3)), flags, s[i:end])
    return NEED if tags.is_partial(s, i) else None


def _bare_words_fit(name: str, attrs: dict[str, str], flags: list[str]) -> bool:
    """Whether a tag with these bare words is a tag at all (see the module docstring)."""
    if name == "response":
        return all(flag == "final" for flag in flags)
    if name == "action":
        return bool(attrs) or any(flag in ACTION_WORDS for flag in flags)
    return False


class Closer:
    """Finds one closing tag (``</name>``, whitespace allowed inside) at a ``<``.

    Used where a body is scanned by hand (an action's JSON, a call list) rather than
    by ``scan_tag``; same answers: the end index, ``NEED`` or ``None``.
    """

    __slots__ = ("full", "literal", "partial")

    def __init__(self, name: str) -> None:
        self.literal = f"</{name}>"
        self.full = re.compile(rf"</\s*{re.escape(name)}\s*>", re.IGNORECASE)
        # Every prefix of the closing tag, each character (and whitespace run) optional
        # from there on: "<", "</", "</ act", "</action  ".
        tail = r"\s*"
        for char in reversed(name):
            tail = rf"{re.escape(char)}(?:{tail})?"
        self.partial = re.compile(rf"<(?:/(?:\s*(?:{tail})?)?)?\Z", re.IGNORECASE)

    def at(self, s: str, k: int) -> int | Need | None:
        # The plain tag (or a plain prefix at the end of the chunk) first: it is by far
        # the commonest, and cheaper to check than the patterns.
        literal = self.literal
        end = k + len(literal)
        found = s[k:end].lower()
        if found == literal:
            return end
        if end > len(s) and literal.startswith(found):
            return NEED
        m = self.full.match(s, k)
        if m is not None:
            return m.end() if m.end() - k <= MAX_TAG else None
        if len(s) - k < MAX_TAG and self.partial.match(s, k) is not None:
            return NEED
        return None

    def find(self, s: str) -> tuple[int, int] | None:
        """(start, end) of the first closing tag anywhere in ``s``."""
        for m in self.full.finditer(s):
            if m.end() - m.start() <= MAX_TAG:
                return m.start(), m.end()
        return None


_closers: dict[str, Closer] = {}


def closer(name: str) -> Closer:
    found = _closers.get(name)
    if found is None:
        found = _closers[name] = Closer(name)
    return found


# The tail of a ``<response final="...">`` whose ``<response`` was lost (models drop
# it): only at the start of loose text, and only with a true/false value, so prose
# is never read as one. The partial pattern is every prefix of the full one.
_ORPHAN_FINAL = re.compile(
    r"""final\s*=\s*(?:"(true|false)"|'(true|false)'|(true|false))\s*>""", re.IGNORECASE
)
_ORPHAN_PARTIAL = re.compile(
    r"""(?:f|fi|fin|fina|final\s*(?:=\s*["']?(?:t|tr|tru|f|fa|fal|fals|(?:true|false)["']?\s*)?)?)\Z""",
    re.IGNORECASE,
)


def orphan_final(s: str, i: int) -> tuple[bool, int] | Need | None:
    """At ``s[i]``: (final, end) of a ``final="..."> `` left without its ``<response``."""
    m = _ORPHAN_FINAL.match(s, i)
    if m is not None:
        if m.end() - i > MAX_TAG:
            return None
        value = m.group(1) or m.group(2) or m.group(3)
        return value.lower() == "true", m.end()
    if len(s) - i < MAX_TAG and _ORPHAN_PARTIAL.match(s, i) is not None:
        return NEED
    return None
