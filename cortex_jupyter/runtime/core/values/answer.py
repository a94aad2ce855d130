r"""The answer a person reads: ``$name`` filled in, math kept as math (one rule, one place).

The run record's ``.answer``, a nested agent's output, the terminal's answer, the live
view and the static copy all fill ``$name`` by this module's rule; the display only
renders what it decides (``display/markdown.py`` turns each span into HTML).

The rule for dollars (the README states it):

- ``$name`` / ``$name.key`` (``REFERENCE``, the runtime's own pattern) whose name has a
  value is filled **first**: in ``Totals: $a and **$b**`` both are values, never one
  formula, although pandoc's rule alone would read ``$a and **$`` as math. A ``$`` that
  would close a formula but itself starts a ``$name`` with a value does not close it;
  nor does one that starts any other ``$word`` when the formula's opening ``$`` starts
  a ``$name`` with a value and a space lies between them (``A=$a B=$nope`` fills ``a``
  and keeps ``$nope``; ``the $n$th`` is math).
- Math, kept as written, never filled:
  ``$...$`` when the opening ``$`` has a non-space character right after it and the next
  ``$`` (not ``\$``) a non-space character right before it and no digit right after it
  (pandoc's rule: ``$x$``, ``the $n$th``, ``$x^2$`` are math, even when the notebook has
  ``x``; ``$5 and $10``, ``$5-$10``, ``US$ 3`` are not); ``$$...$$`` when a closing
  ``$$`` follows in the same paragraph, not followed by a letter, digit or ``_``;
  ``\(...\)`` and ``\[...\]``. A formula never holds a blank line, a backtick (code
  wins) or ``](`` (a link wins), and one that starts with a digit never holds a space
  followed by a letter (that is prices: ``$10 versus US$ 8``; ``$2x + 1$`` is math).
- A ``$$`` that opens no display math is a literal ``$`` (the protocol's escape:
  ``$$HOME``, ``costs $$5``); ``\$`` is a literal ``$``.
- A ``$name`` with no value stays as written. Code spans and blocks are never math and
  never filled; a link's address is kept as written.

A value shows as its ``str`` (the ``repr`` of containers), secrets redacted, whole up
to ``VALUE_LIMIT`` characters; past that it is cut with a marker saying how much was
left out and where the whole value is (``value_text``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cortex_jupyter.runtime.core.trust.bounded import whole_repr
from cortex_jupyter.runtime.core.trust.secrets import Repr, clip, shown
from cortex_jupyter.runtime.core.values.variables import REFERENCE, resolve

#: Characters of a value filled in whole; a longer one is cut with a marker.
VALUE_LIMIT = 20_000
_BYTES = Repr(limit=200)  # the start of a ``bytes`` value, then its size


def value_text(value: Any, where: str = "", limit: int = VALUE_LIMIT) -> str:
    """The text a ``$name`` shows: ``str`` of strings, scalars and objects (a
    DataFrame's table), the ``repr`` of containers (made only as far as ``limit``:
    never the whole text of a million-item list); secrets redacted before any cut.
    Past ``limit`` characters the text is cut with a marker naming how much was left
    out and ``where`` the whole value is."""
    total: int | None = None
    try:
        if isinstance(value, list | tuple | dict | set | frozenset):
            text, _ = whole_repr(value, limit, clip, _other)
        elif isinstance(value, bytes | bytearray):  # never the repr of 200 MB
            text = _BYTES.repr(bytes(value[:200])) + f" ({len(value):,} bytes)" * (len(value) > 200)
        else:
            text = str(shown(value))  # a frame's cells redacted before pandas cuts them
            total = len(text)
    except Exception as exc:  # a broken __str__ must not break the answer
        text = f"<{type(value).__name__} (str failed: {type(exc).__name__})>"
        total = len(text)
    # Rendered, redacted, then cut: no part of a secret at the cut.
    kept, cut = clip(text, limit)
    if not cut:
        return kept
    home = f"; the whole value is {where}" if where else ""
    if total is None:  # a container: its whole text was never made
        return f"{kept}… [cut at {limit:,} characters{home}]"
    return f"{kept}… [{total - limit:,} more characters{home}]"


def _other(value: Any, room: int) -> str:
    """A value inside a container that is not a builtin one: its bounded repr."""
    if type(value) in (float, bool, type(None)) or (type(value) is int and abs(value) < 1 << 64):
        return repr(value)
    return Repr(limit=max(room, 1), items=100).repr(value)


def fill(text: str, values: Mapping[str, Any]) -> str:
    """``text`` with every ``$name`` that ``values`` has filled in (the module's rule)."""
    return fill_references(text, values)[0]


# --------------------------------------------------------------------------- dollars

# What ends the search for a closing delimiter: the delimiter, or what a formula never
# holds: a backtick (a code span wins over math around it) or `](` (nor does a link:
# in `[see $x](u?q=$x)` the second `$` belongs to the URL). Escapes are skipped.
_DOLLAR_OR_ESCAPE = re.compile(r"\\[\s\S]|\$|`|\]\(")
_DOUBLE_OR_ESCAPE = re.compile(r"\\[\s\S]|\$\$|`|\]\(")
_ESCAPE = re.compile(r"\\[\s\S]|`|\]\(")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SPACE_LETTER = re.compile(r"\s[^\W\d_]")
_SPACE = re.compile(r"\s")
_SPECIAL = re.compile(r"[$\\]|`+|\]\([^)\s]*")
_RUN = re.compile(r"`+")
_BRACKETS = {"(": "\\)", "[": "\\]"}


@dataclass(frozen=True, slots=True)
class Span:
    """What a ``$`` or ``\\`` at some position starts, and where that ends."""

    kind: Literal["math", "literal", "reference"]
    end: int
    opener: str = ""  # math: its delimiters and the formula between them
    closer: str = ""
    formula: str = ""
    name: str = ""  # reference: ``$name`` and its ``.path``
    path: str = ""


def scan(
    src: str, pos: int, end: int, values: Mapping[str, Any], used: dict[str, str | None]
) -> Span | None:
    """The math, literal ``$`` or reference starting at ``src[pos]`` (a ``$`` or a
    backslash) within ``src[:end]``; ``None`` when it starts none of them (a lone ``$``,
    an ordinary backslash escape)."""
    if src[pos] == "\\":
        return _bracket_math(src, pos, end)
    if pos + 1 < end and src[pos + 1] == "$":
        close = _display_close(src, pos + 2, end)
        if close is None:
            return Span("literal", pos + 2)  # the protocol's `$$`: a literal `$`
        return Span("math", close + 2, "$$", "$$", src[pos + 2 : close])
    close = _inline_close(src, pos + 1, end)
    if close is not None and not _names_first(src, pos, close, end, values, used):
        return Span("math", close + 1, "$", "$", src[pos + 1 : close])
    match = REFERENCE.match(src, pos, end)
    if match is not None and match.group(1):
        return Span("reference", match.end(), name=match.group(1), path=match.group(2))
    return None


def _inline_close(src: str, start: int, end: int) -> int | None:
    """Where the ``$`` closing inline math opened just before ``start`` is: pandoc's
    rule (no space inside either delimiter, no digit after the closing one), and a
    formula that starts with a digit has no space followed by a letter (prices)."""
    if start >= end or src[start].isspace():
        return None
    for match in _DOLLAR_OR_ESCAPE.finditer(src, start, end):
        if match.group() != "$":
            if match.group()[0] == "\\":
                continue  # an escaped character, `\$` included
            return None
        at = match.start()
        after = src[at + 1] if at + 1 < end else ""
        if src[at - 1].isspace() or "0" <= after <= "9" or _BLANK_LINE.search(src, start, at):
            return None
        if _price(src, start, at):
            return None
        return at
    return None


def _price(src: str, start: int, end: int) -> bool:
    """Whether a formula ``src[start:end]`` is rather prose about prices: it starts with
    a digit and has a space followed by a letter (``$10 versus US$``, ``$$5; a $$``)."""
    return "0" <= src[start] <= "9" and _SPACE_LETTER.search(src, start, end) is not None


def _display_close(src: str, start: int, end: int) -> int | None:
    """Where the ``$$`` closing display math opened just before ``start`` is."""
    for match in _DOUBLE_OR_ESCAPE.finditer(src, start, end):
        if match.group() != "$$":
            if match.group()[0] == "\\":
                continue
            return None
        at = match.start()
        after = src[at + 2] if at + 2 < end else ""
        formula = src[start:at]
        if not formula.strip() or after.isalnum() or after == "_" or _BLANK_LINE.search(formula):
            return None
        if _price(src, start, at):
            return None
        return at
    return None


def _bracket_math(src: str, pos: int, end: int) -> Span | None:
    r"""``\(...\)`` or ``\[...\]`` starting at ``pos``. The search stops at the next
    opener, so a text full of unclosed ``\(`` costs linear time, not quadratic."""
    closer = _BRACKETS.get(src[pos + 1]) if pos + 1 < end else None
    if closer is None:
        return None
    for match in _ESCAPE.finditer(src, pos + 2, end):
        pair = match.group()
        if pair == closer:
            formula = src[pos + 2 : match.start()]
            if not formula.strip() or _BLANK_LINE.search(formula):
                return None
            return Span("math", match.end(), src[pos : pos + 2], closer, formula)
        if pair in ("\\(", "\\[", "`", "]("):
            return None
    return None


def fill_references(text: str, values: Mapping[str, Any]) -> tuple[str, dict[str, str | None]]:
    """``text`` (plain text, not HTML) with each ``$name[.path]`` that ``values`` can
    resolve replaced, by the same rule as the HTML: math, code (backtick spans and
    fences) and link addresses stay as written, a ``$$`` that opens no display math is
    ``$``, ``\\$`` and other escapes are kept.

    Returns the new text and what each reference showed (``None``: left as written),
    which is how a cache knows when a value change makes its HTML stale. The longest
    resolvable part of a dotted path is used, so ``see $report.`` or
    ``$report.Then`` still show ``report``.
    """
    used: dict[str, str | None] = {}
    out: list[str] = []
    done = pos = 0
    end = len(text)
    # Where the last run of each length starts: an opener whose length has no run after
    # it is closed by nothing, known without a search to the end (which, for every
    # opener, would cost quadratic time: markdown-it keeps the same table).
    last = {len(run.group()): run.start() for run in _RUN.finditer(text)}
    while (found := _SPECIAL.search(text, pos)) is not None:
        at = found.start()
        if text[at] == "`":  # code (a span, or a fenced block): skipped whole
            count = len(found.group())
            closed = last.get(count, -1) >= found.end()
            close = _backticks(count).search(text, found.end()) if closed else None
            pos = found.end() if close is None else close.end()
            continue
        if text[at] == "]":  # a link's address: kept as written
            pos = found.end()
            continue
        span = scan(text, at, end, values, used)
        if span is None:
            pos = at + (2 if text[at] == "\\" else 1)  # an escape pair is kept as it is
            continue
        if span.kind == "literal":
            out += [text[done:at], "$"]
            done = span.end
        elif span.kind == "reference":
            out += [text[done:at], show(span.name, span.path, values, used)]
            done = span.end
        pos = span.end
    out.append(text[done:])
    return "".join(out), used


@functools.lru_cache(maxsize=16)
def _backticks(count: int) -> re.Pattern[str]:
    """A run of exactly ``count`` backticks: what closes a code span opened by one."""
    return re.compile(rf"(?<!`)`{{{count}}}(?!`)")


def show(name: str, path: str, values: Mapping[str, Any], used: dict[str, str | None]) -> str:
    """What ``$name.path`` shows: the value of its longest resolvable part, then the
    rest of the path as written; the reference as written when nothing resolves."""
    shown = _resolved(name, path, values, used)
    return f"${name}{path}" if shown is None else shown


def _resolved(
    name: str, path: str, values: Mapping[str, Any], used: dict[str, str | None]
) -> str | None:
    parts = path.split(".")[1:]
    for keep in range(len(parts), -1, -1):
        ref = ".".join([name, *parts[:keep]])
        # Each reference is looked up once per text (one value, one redaction).
        shown = used[ref] if ref in used else lookup(ref, values)
        used[ref] = shown
        if shown is not None:
            return shown + "".join("." + p for p in parts[keep:])
    return None


def _names_first(
    src: str, pos: int, close: int, end: int, values: Mapping[str, Any], used: dict[str, str | None]
) -> bool:
    """Whether the ``$...$`` from ``pos`` to ``close`` is names, not math (the module's
    rule): its closing ``$`` starts a ``$name`` with a value, or its opening ``$`` does
    and the closing one starts another ``$word`` with a space between them (``A=$a
    B=$b``: two names, whether ``b`` has a value or not; ``the $n$th`` stays math)."""
    if _starts_value(src, close, end, values, used):
        return True
    word = REFERENCE.match(src, close, end)
    return (
        word is not None
        and bool(word.group(1))
        and _SPACE.search(src, pos + 1, close) is not None
        and _starts_value(src, pos, end, values, used)
    )


def _starts_value(
    src: str, at: int, end: int, values: Mapping[str, Any], used: dict[str, str | None]
) -> bool:
    """Whether ``src[at:]`` starts a ``$name`` that ``values`` has."""
    match = REFERENCE.match(src, at, end)
    if match is None or not match.group(1):
        return False
    return _resolved(match.group(1), match.group(2), values, used) is not None


def lookup(ref: str, values: Mapping[str, Any]) -> str | None:
    """The text ``$ref`` (``name`` or ``name.path``) shows, or ``None`` when ``values``
    cannot resolve it (a cache compares these to know when its text is stale)."""
    if ref.split(".", 1)[0] not in values:
        return None
    try:
        return value_text(resolve("$" + ref, [values]), where=ref)
    except Exception:  # BadReference, or a property that raised: show the name as written
        return None


def rich_value(name: str, path: str, values: Mapping[str, Any]) -> Any:
    """The object ``$name.path`` stands for when it resolves whole and has a rich
    form (``_repr_html_``, ``_repr_png_``... or a figure's ``savefig``), else ``None``:
    the view shows such a value as it would show it in a notebook."""
    if name not in values:
        return None
    try:
        value = resolve(f"${name}{path}", [values])
    except Exception:
        return None
    try:  # a __getattr__ or __class__ that raises: the value is shown as text
        if isinstance(value, type | str | int | float | bool):
            return None
        rich = any(hasattr(value, method) for method in _RICH)
    except Exception:
        return None
    return value if rich else None


_RICH = ("_repr_html_", "_repr_png_", "_repr_jpeg_", "_repr_svg_", "savefig")
