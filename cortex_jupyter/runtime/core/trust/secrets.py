"""Secrets never travel: the text cortex shows, saves or sends has them replaced.

A secret is the API key a model client uses (it registers it with ``add``) or the value
of an environment variable whose name looks like a credential (``*KEY*``, ``*TOKEN*``,
``*SECRET*``, ``*PASSWORD*``..., a ``Bearer`` token bare too, a URL's password in any
variable: ``credentials``), read afresh each time so a key set with ``%env`` later is
covered too. Every place where text leaves cortex passes it through ``redact``: the
messages sent to the model, the conversation (``%cortex history``), transcripts, the
live view and its saved static copy, printed lines. Values the user's own notebook holds
(an ``output_key`` variable, ``_cortex.actions[id].output``) stay exact: they are the
user's data, not something cortex shows.

Only a secret's own values are replaced (no guessing from patterns here: "sk-learn" is
not a key), but in every **form** a value takes when text is escaped on its way out: as
JSON writes it (``ensure_ascii`` on and off), as Python's ``repr`` and ``ascii`` write
it (either quote style), percent-encoded (``quote``, ``quote_plus``), HTML-escaped, and
each of those escaped once more (JSON inside JSON, a repr of JSON...); in either Unicode
normal form; its UTF-8 bytes as a ``bytes`` repr, hex and base64 write them; and, for a
value of several lines (a PEM key), each line of 8 characters or more on its own (what
writes text line by line never shows it whole). ``forms`` lists them, longest first; one
compiled pattern (a tree of their shared beginnings) matches them all. Values shorter than 8
characters are not secrets worth the damage of replacing them everywhere ("none",
"ollama" are placeholders, not keys).

**One pipeline where text is bounded: render, redact, cut, hide the edges.** Strings
inside a value are redacted before it is rendered (``render_value``, ``Repr``, and a
pandas frame through ``shown``: pandas cuts long cells itself), the rendered text is
redacted again (an object's own ``repr`` may quote a key), and only then cut; the part
of a secret, in any of its forms, that a cut leaves at its edge (``MIN_FRAGMENT``
characters or more) is hidden too. ``head``, ``tail``, ``clip`` and ``shorten`` do it
for a text (reading only a window of a huge one: the window's own edge counts as a
cut), ``Repr`` for ``reprlib``'s short reprs (which cut in the middle). Every place
that shortens what it shows, saves or sends goes through one of them.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import html
import json
import os
import re
import sys
import threading
import unicodedata
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from cortex_jupyter.protocol import MAX_JSON_DEPTH
from cortex_jupyter.runtime.core.trust.bounded import BoundedRepr, failed
from cortex_jupyter.runtime.core.trust.credentials import (
    CREDENTIAL_NAME,
    MIN_SECRET,
    in_environment,
)

__all__ = [
    "CREDENTIAL_NAME",
    "MIN_FRAGMENT",
    "NOT_XML",
    "REDACTED",
    "RESULT_REPR_LIMIT",
    "Repr",
    "Secrets",
    "clip",
    "forms",
    "head",
    "hide_edges",
    "redact",
    "redact_value",
    "render_value",
    "safe_repr",
    "secrets",
    "shorten",
    "shown",
    "tail",
    "truncate",
]

REDACTED = "[redacted]"
#: The shortest part of a secret a cut may leave at its edge that is still hidden.
MIN_FRAGMENT = 4
# What others write where they cut a text (pandas, numpy, reprlib, cortex itself).
_ELLIPSIS = re.compile(r"(\.{3,}|…)")  # a run of dots is one mark
#: What an XML (SVG) document may not hold: XML 1.0 allows tab, LF, CR and everything from
#: U+0020 except surrogates, U+FFFE/U+FFFF. The views replace it with U+FFFD
#: (``theme.clean``), so a secret holding it reads so there: one of its forms.
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
# Where ``Repr`` cut (reprlib's fill value while it works): never in a repr of a string.
_CUT = "\x00\ufdd0cut\ufdd0\x00"


class Secrets:
    """The secrets of this process (see the module docstring); thread-safe."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._added: set[str] = set()
        self._lock = threading.Lock()
        self._cache: _Compiled = _Compiled((), (), None, frozenset(), frozenset(), None)
        self._environment: tuple[dict[Any, Any], tuple[str, ...], int] = ({}, (), -1)
        self._digits: tuple[tuple[str, ...] | None, bool] = (None, False)

    def add(self, value: str | None) -> None:
        """Treat ``value`` as a secret from now on (a model client's API key)."""
        if value and len(value) >= MIN_SECRET:
            with self._lock:
                self._added.add(value)

    def values(self) -> tuple[str, ...]:
        """Every secret now, longest first (so a key containing another goes whole)."""
        environ = self._environ if self._environ is not None else os.environ
        # Reading the environment costs ~100 µs (each name and value decoded); the view
        # redacts every piece it sends, so its raw form is compared first (~1 µs).
        raw = dict(getattr(environ, "_data", environ))
        with self._lock:
            seen, found, added = self._environment
            if raw != seen or added != len(self._added):
                found = tuple(sorted(self._read(environ) | self._added, key=_longest_first))
                self._environment = (raw, found, len(self._added))
        return found

    @staticmethod
    def _read(environ: Mapping[str, str]) -> set[str]:
        return in_environment(environ)

    def _compiled(self) -> _Compiled:
        """Every form of every secret (longest first), one pattern matching them, and
        the first and last ``MIN_FRAGMENT`` characters of each of their proper parts."""
        values = self.values()
        cached = self._cache
        if values != cached.values:
            every = {
                form for value in values for part in _parts(value) for form in escaped_forms(part)
            }
            found = tuple(sorted(every, key=_longest_first))
            pattern = _pattern_of(found) if found else None
            ends = frozenset(f[i - MIN_FRAGMENT : i] for f in found for i in _cuts(f))
            starts = frozenset(f[i : i + MIN_FRAGMENT] for f in found for i in _cuts(f, 1))
            cached = self._cache = _Compiled(values, found, pattern, ends, starts, _spaced(values))
        return cached

    def _pattern(self) -> re.Pattern[str] | None:
        return self._compiled().pattern

    def known(self) -> _Compiled:
        """Every form now, the patterns finding them and their edges (kept until the
        secrets change): what redacting a stream a batch at a time needs (``captured``)."""
        return self._compiled()

    def forms(self) -> tuple[str, ...]:
        """Every form of every secret now (``escaped_forms``), longest first."""
        return self._compiled().forms

    def redact(self, text: str) -> str:
        """``text`` with every secret (in every form) replaced by ``[redacted]``, and the
        part of one that something else cut where it wrote ``...`` or ``…`` (pandas,
        numpy and ``reprlib`` cut long texts so, a tool may quote such a repr)."""
        if not text:
            return text
        known = self._compiled()
        if known.pattern is None:
            return text
        text = known.pattern.sub(REDACTED, text)
        if known.spaced is not None:
            text = known.spaced.sub(REDACTED, text)
        if "..." in text or "…" in text:
            text = self._hide_at_marks(text, known)
        return text

    def _hide_at_marks(self, text: str, known: _Compiled) -> str:
        """``text`` with the part of a secret next to a ``...`` or ``…`` hidden."""
        if not any(
            text[max(mark.start() - MIN_FRAGMENT, 0) : mark.start()] in known.ends
            or text[mark.end() : mark.end() + MIN_FRAGMENT] in known.starts
            for mark in _ELLIPSIS.finditer(text)
        ):
            return text  # (almost always: a set lookup on each side of each mark)
        pieces = _ELLIPSIS.split(text)  # text, mark, text, mark, ..., text
        last = len(pieces) - 1
        return "".join(
            piece if i % 2 else self.hide_edges(piece, start=i > 0, end=i < last)
            for i, piece in enumerate(pieces)
        )

    def redact_value(self, value: Any) -> Any:
        """A JSON-like value with every string in it redacted as ``redact`` redacts a
        text (the part of a secret another library cut at ``...`` too), in new
        containers; other values as they are."""
        known = self._compiled()
        if known.pattern is None:
            return value
        return _walk(value, self.redact, numbers=self._numeric(known.forms))

    def _numeric(self, forms: tuple[str, ...]) -> bool:
        """Whether a number's text may hold a secret: some form is all digits, signs,
        points and exponents (almost never: then numbers are not even looked at)."""
        seen, numeric = self._digits
        if seen is not forms:
            numeric = any(_NUMBER_TEXT.fullmatch(form) for form in forms)
            self._digits = (forms, numeric)
        return numeric

    # ---- cutting ----------------------------------------------------------------------

    def _window(self, text: str, limit: int, *, end: bool = False) -> tuple[str, bool]:
        """The first (``end``: last) ``limit`` characters of ``text`` and as many as the
        longest form of a secret more, redacted, and whether that left some of ``text``
        out (the window's own edge is then a cut). Never reads a huge text whole."""
        forms = self.forms()
        room = max(limit, 0) + (len(forms[0]) if forms else 0) + 1
        if len(text) <= room:
            return self.redact(text), False
        if end:
            return self.redact(str.__getitem__(text, slice(len(text) - room, None))), True
        return self.redact(str.__getitem__(text, slice(0, room))), True

    def clip(self, text: str, limit: int) -> tuple[str, bool]:
        """``text`` redacted and cut to ``limit`` characters (no marker added), no part
        of a secret at the cut; and whether it was cut."""
        window, partial = self._window(text, limit)
        if len(window) <= limit and not partial:
            return window, False
        return self._cut_end(window, limit), True

    def head(self, text: str, limit: int) -> str:
        """The first ``limit`` characters (at most) of ``text`` redacted, without the
        part of a secret the cut leaves at the end (no marker added)."""
        return self.clip(text, limit)[0]

    def _cut_end(self, text: str, limit: int) -> str:
        """``text`` (redacted) cut after ``limit`` characters: its end is a cut."""
        kept = text[: max(limit, 0)]
        marker = _prefix_at_end(kept, REDACTED)  # a cut through ``[redacted]`` itself
        if marker and limit >= len(REDACTED):
            return kept[: len(kept) - marker]  # the whole marker or none of it
        cut = max((_prefix_at_end(kept, v) for v in self.forms()), default=0)
        if not cut:
            return kept
        if limit < len(REDACTED):
            return kept[: len(kept) - cut]
        # Where the fragment was, ``[redacted]``: the text before it gives up the room.
        kept = kept[: min(len(kept) - cut, limit - len(REDACTED))]
        return self.hide_edges(kept, start=False) + REDACTED

    def tail(self, text: str, limit: int) -> str:
        """The last ``limit`` characters (at most) of ``text`` redacted, without the
        part of a secret the cut leaves at the start (no marker added)."""
        window, partial = self._window(text, limit, end=True)
        if len(window) <= limit and not partial:
            return window
        kept = window[len(window) - min(max(limit, 0), len(window)) :]
        cut = max((_suffix_at_start(kept, v) for v in self.forms()), default=0)
        if not cut:
            return kept
        if limit < len(REDACTED):
            return kept[cut:]
        kept = kept[max(cut, len(kept) - (limit - len(REDACTED))) :]
        return REDACTED + self.hide_edges(kept, end=False)

    def shorten(self, text: str, limit: int, marker: str = "…") -> str:
        """``text`` redacted and, when longer than ``limit``, cut to ``limit``
        characters ending with ``marker``, no part of a secret at the cut."""
        window, partial = self._window(text, limit)
        if len(window) <= limit and not partial:
            return window
        if limit < len(marker):
            return self._cut_end(window, limit)
        return self._cut_end(window, limit - len(marker)) + marker

    def hide_edges(self, text: str, *, start: bool = True, end: bool = True) -> str:
        """``text`` (a piece cut out of a longer text) with the part of a secret (in any
        of its forms) that a cut left at its ``end`` (a secret's first characters) or
        ``start`` (its last characters) replaced by ``[redacted]``, when
        ``MIN_FRAGMENT`` or more are left."""
        known = self._compiled()
        if not known.forms or len(text) < MIN_FRAGMENT:
            return text
        # Only a text that ends (starts) as a proper prefix (suffix) of a form can: a
        # set lookup spares the search almost always (the view checks every piece).
        if end and text[-MIN_FRAGMENT:] in known.ends:
            cut = max((_prefix_at_end(text, v) for v in known.forms), default=0)
            if cut:
                text = text[: len(text) - cut] + REDACTED
        if start and text[:MIN_FRAGMENT] in known.starts:
            cut = max((_suffix_at_start(text, v) for v in known.forms), default=0)
            if cut:
                text = REDACTED + text[cut:]
        return text

    def shown(self, value: Any) -> Any:
        """``value`` as it may be rendered: a pandas ``DataFrame``, ``Series`` or
        ``Index`` as a copy whose text cells and labels are redacted (pandas cuts a long
        cell itself, before any redaction of its text could see the whole secret);
        anything else as it is."""
        pandas = sys.modules.get("pandas")
        if pandas is None or self._pattern() is None:
            return value
        try:
            # One at a time: pandas fills a frame's caches as it reads it, and two
            # threads reading one frame (two actions returned it) can trip on that.
            with _PANDAS_LOCK:
                return _redacted_pandas(value, pandas, self._cell)
        except Exception as exc:  # never the frame itself: pandas would cut its cells
            return _Unshown(value, exc)

    def _cell(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list | tuple | Mapping):
            return self.redact_value(value)
        return value


class _Compiled(NamedTuple):
    values: tuple[str, ...]
    forms: tuple[str, ...]
    pattern: re.Pattern[str] | None
    ends: frozenset[str]  # the last MIN_FRAGMENT characters of each proper prefix
    starts: frozenset[str]  # the first MIN_FRAGMENT characters of each proper suffix
    spaced: re.Pattern[str] | None  # the secrets holding whitespace, any whitespace there


_BETWEEN_WORDS = r"(?:\s|\\+[ntr])+"


def _spaced(values: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern matching each secret that holds whitespace (a passphrase) with any
    run of whitespace where it has one, written or escaped (``\\n`` in a repr or JSON):
    a text wrapped onto lines (``textwrap``, a terminal report) has a line break and an
    indent where the secret had a space.
    ``None`` when no secret holds whitespace (almost always: nothing to search)."""
    spaced = [
        _BETWEEN_WORDS.join(map(re.escape, words))
        for value in values
        for base in {value, unicodedata.normalize("NFC", value)}
        if len(words := base.split()) > 1
    ]
    return re.compile("|".join(spaced)) if spaced else None


def _parts(value: str) -> set[str]:
    """``value`` and, when it holds line breaks (a PEM key kept in the environment),
    each of its lines of ``MIN_SECRET`` characters or more: what writes text line by
    line (the text view puts each line of a tool's output under its node's mark, a log
    prefixes each line) never shows the whole value as one text."""
    lines = {line.strip() for line in value.splitlines()}
    return {value} | {line for line in lines if len(line) >= MIN_SECRET}


def _pattern_of(forms: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern matching every form, the longest where several start at one place.

    Written as a tree of the forms' shared beginnings (``ab(?:c|d)``), not as a list of
    alternatives: ``re`` tries alternatives one by one at each position of a text, and
    with base64 and hex forms almost every character starts one (hundreds of forms with
    twenty credentials set). In the tree only the branch of the next character is
    followed, so a position costs a few steps whatever the number of forms."""
    tree: dict[str, Any] = {}
    for form in forms:
        node = tree
        for char in form:
            node = node.setdefault(char, {})
        node[""] = {}  # a form ends here
    try:
        return re.compile(_branches(tree))
    except (RecursionError, re.error):  # (a tree too deep for ``re``: forms one by one)
        return re.compile("|".join(map(re.escape, forms)))


def _branches(node: dict[str, Any]) -> str:
    """The pattern of a tree node: its branches (a run of single characters as one
    literal), optional where a form ends at the node (greedy: the longest form wins)."""
    branches = []
    for char in sorted(key for key in node if key):
        literal, child = char, node[char]
        while len(child) == 1 and "" not in child:
            ((next_char, child),) = child.items()
            literal += next_char
        branches.append(re.escape(literal) + _branches(child))
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if "" in node else body


def _cuts(form: str, start: int = 0) -> range:
    """Where a proper prefix of ``form`` ends (``start`` 0), or a proper suffix starts
    (``start`` 1), for parts of ``MIN_FRAGMENT`` characters or more."""
    if start:
        return range(1, len(form) - MIN_FRAGMENT + 1)
    return range(MIN_FRAGMENT, len(form))


def escaped_forms(value: str) -> set[str]:
    """``value`` as it reads once escaped by JSON, Python's ``repr``/``ascii`` (either
    quote style), percent-encoding or HTML, and each of those escaped once more; in
    either Unicode normal form (NFC, NFD); and its UTF-8 bytes as ``bytes`` repr, hex
    and base64 write them (``encoded_forms``)."""
    bases = {value, unicodedata.normalize("NFC", value), unicodedata.normalize("NFD", value)}
    bases |= {NOT_XML.sub("\ufffd", base) for base in bases}  # as ``theme.clean`` shows it
    first = {form for base in bases for form in _escaped(base)} | bases
    first |= {form for base in bases for form in encoded_forms(base)}
    return {form for first_form in first for form in _escaped(first_form)} | first


def _escaped(value: str) -> set[str]:
    """``value`` as each of ``_ESCAPES`` writes it (one that cannot, as ``quote`` cannot
    write a lone surrogate, writes no form of it)."""
    found = set()
    for escape in _ESCAPES:
        with contextlib.suppress(ValueError):  # (UnicodeEncodeError)
            found.add(escape(value))
    return found


def encoded_forms(value: str) -> set[str]:
    """``value``'s UTF-8 bytes as a ``bytes`` repr writes them (either quote style), as
    hex (either case), and as base64 (standard and URL-safe) wherever they start in the
    encoded bytes: at each of the three alignments, the characters that depend on the
    secret's bytes alone (a basic-auth header encodes ``user:KEY``)."""
    try:  # a value read from the environment: its bytes as they were (``os.environb``)
        data = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        data = value.encode("utf-8", "surrogatepass")
    found = {builtins.repr(data)[2:-1], builtins.repr(data + b"'\"")[2:-4]}
    found |= {data.hex(), data.hex().upper()}
    for pad in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(bytes(pad) + data).decode("ascii")
            first = 4 if pad else 0  # its first group holds bytes that are not the secret
            last = len(text) - (4 if (pad + len(data)) % 3 else 0)  # nor its last
            found.add(text[first:last])
    return {form for form in found if len(form) >= MIN_SECRET}


_ESCAPES: tuple[Callable[[str], str], ...] = (
    lambda s: json.dumps(s)[1:-1],
    lambda s: json.dumps(s, ensure_ascii=False)[1:-1],
    lambda s: builtins.repr(s)[1:-1],
    lambda s: builtins.repr(s + "'\"")[1:-4],  # the single-quote style, ``\'`` escaped
    lambda s: builtins.ascii(s)[1:-1],
    lambda s: urllib.parse.quote(s, safe=""),
    lambda s: urllib.parse.quote(s),
    urllib.parse.quote_plus,
    lambda s: html.escape(s, quote=True),
    lambda s: html.escape(s, quote=False),
)


_PANDAS_LOCK = threading.Lock()


class _Unshown:
    """What stands for a pandas value that could not be redacted: its shape, no cell."""

    def __init__(self, value: Any, exc: BaseException) -> None:
        self._text = f"<{type(value).__name__}: {failed(value, 'redaction', exc)}>"

    def __repr__(self) -> str:
        return self._text

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return html.escape(self._text)


#: Rows of a long frame redacted for display: pandas shows at most ``display.max_rows``
#: (60 by default) from its two ends; the middle of a huge frame is never shown.
_FRAME_ROWS = 1000


def _redacted_pandas(value: Any, pd: Any, cell: Callable[[Any], Any]) -> Any:
    if isinstance(value, pd.DataFrame):
        rows = _shown_rows(len(value), pd)
        out = value.copy()
        for j in range(value.shape[1]):
            column = value.iloc[:, j]
            if _textual(column.dtype, pd):
                out.isetitem(j, _redacted_series(column, rows, cell))
        out.index = _redacted_index(value.index, rows, pd, cell)
        out.columns = _redacted_index(value.columns, None, pd, cell)
        return out
    if isinstance(value, pd.Series):
        rows = _shown_rows(len(value), pd)
        out = _redacted_series(value, rows, cell) if _textual(value.dtype, pd) else value.copy()
        out.index = _redacted_index(value.index, rows, pd, cell)
        out.name = cell(value.name)
        return out
    if isinstance(value, pd.Index):
        return _redacted_index(value, _shown_rows(len(value), pd), pd, cell)
    return value


def _shown_rows(rows: int, pd: Any) -> list[int] | None:
    """The positions of the rows to redact (``None``: all of them)."""
    most = pd.get_option("display.max_rows")
    if not most or rows <= max(2 * _FRAME_ROWS, most):
        return None
    return [*range(_FRAME_ROWS), *range(rows - _FRAME_ROWS, rows)]


def _textual(dtype: Any, pd: Any) -> bool:
    """Whether values of ``dtype`` may be text: anything but numbers, booleans and times
    (a categorical's categories, a sparse or extension column may hold strings)."""
    types = pd.api.types
    return not (
        types.is_numeric_dtype(dtype)
        or types.is_bool_dtype(dtype)
        or types.is_datetime64_any_dtype(dtype)
        or types.is_timedelta64_dtype(dtype)
    )


def _redacted_series(column: Any, rows: list[int] | None, cell: Callable[[Any], Any]) -> Any:
    values = column.to_numpy(dtype=object, copy=True)
    for i in range(len(values)) if rows is None else rows:
        values[i] = cell(values[i])
    return type(column)(values, index=column.index, name=column.name, dtype=_kept(column.dtype))


def _redacted_index(index: Any, rows: list[int] | None, pd: Any, cell: Callable[[Any], Any]) -> Any:
    if isinstance(index, pd.MultiIndex):
        tuples = list(index)
        for i in range(len(tuples)) if rows is None else rows:
            tuples[i] = tuple(cell(part) for part in tuples[i])
        return pd.MultiIndex.from_tuples(tuples, names=[cell(n) for n in index.names])
    if not _textual(index.dtype, pd):
        return index
    values = index.to_numpy(dtype=object, copy=True)
    for i in range(len(values)) if rows is None else rows:
        values[i] = cell(values[i])
    return pd.Index(values, name=cell(index.name), dtype=_kept(index.dtype))


def _kept(dtype: Any) -> Any:
    """The dtype redacted text cells keep: a string dtype stays (so the frame reads as
    it would: ``dtype: str``), anything else is ``object`` (a categorical's categories
    are the old texts)."""
    return dtype if getattr(dtype, "name", "") in ("str", "string") else object


def _prefix_at_end(text: str, secret: str) -> int:
    """The length of the longest proper prefix of ``secret`` (``MIN_FRAGMENT`` or more
    characters) that ``text`` ends with, or 0. (Only where the prefix's first characters
    occur is compared: the live view checks every piece it sends.)"""
    seed = secret[:MIN_FRAGMENT]
    at = text.find(seed, max(0, len(text) - len(secret) + 1))
    while at != -1:
        if secret.startswith(text[at:]):
            return len(text) - at
        at = text.find(seed, at + 1)
    return 0


def _suffix_at_start(text: str, secret: str) -> int:
    """The length of the longest proper suffix of ``secret`` (``MIN_FRAGMENT`` or more
    characters) that ``text`` starts with, or 0."""
    seed = secret[-MIN_FRAGMENT:]
    at = text.rfind(seed, 0, min(len(text), len(secret) - 1))
    while at != -1:
        if secret.endswith(text[: at + MIN_FRAGMENT]):
            return at + MIN_FRAGMENT
        at = text.rfind(seed, 0, at + MIN_FRAGMENT - 1)
    return 0


class Repr(BoundedRepr):
    """A bounded short repr (``BoundedRepr``: never the full repr of a large value),
    secrets redacted before any cut and the part of a secret a cut leaves hidden.

    A string is redacted before it is cut (only its head is read: as far as the limit
    plus the longest secret, so no secret straddles what is read); anything else is cut
    from its redacted ``repr``. Every cut is then checked on both sides
    (``Secrets.hide_edges``).
    """

    def __init__(
        self, owner: Secrets | None = None, *, limit: int = 160, items: int = 8, level: int = 3
    ) -> None:
        super().__init__(limit=limit, items=items, level=level)
        self._owner = owner
        self.fillvalue = _CUT

    @property
    def secrets(self) -> Secrets:
        return self._owner if self._owner is not None else secrets

    def repr(self, x: Any) -> str:
        pieces = super().repr(x).split(_CUT)
        if len(pieces) == 1:
            return self.secrets.redact(pieces[0])
        hide = self.secrets.hide_edges
        last = len(pieces) - 1
        return "...".join(
            hide(self.secrets.redact(piece), start=i > 0, end=i < last)
            for i, piece in enumerate(pieces)
        )

    def repr1(self, x: Any, level: int) -> str:
        if isinstance(x, str):
            return self._text(x)
        return super().repr1(x, level)

    def _text(self, x: str) -> str:
        text, cut = self.secrets.clip(x, self.maxstring)
        if not cut:
            return builtins.repr(text)
        return builtins.repr(self.secrets.head(text, max(self.maxstring - 3, 0))) + _CUT

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            text = builtins.repr(self.secrets.shown(x))
        except Exception as exc:
            return failed(x, "repr", exc)
        return _middle(self.secrets.redact(text), self.maxother)

    def repr_int(self, x: int, level: int) -> str:
        try:
            text = builtins.repr(x)
        except ValueError:  # more digits than Python converts
            return f"<int of {x.bit_length():,} bits>"
        return _middle(self.secrets.redact(text), self.maxlong)


def _middle(text: str, limit: int) -> str:
    """``text`` cut in the middle to ``limit`` characters, as reprlib cuts (with ``_CUT``)."""
    if len(text) <= limit:
        return text
    i = max(0, (limit - 3) // 2)
    j = max(0, limit - 3 - i)
    return text[:i] + _CUT + text[len(text) - j :]


def _longest_first(value: str) -> tuple[int, str]:
    return (-len(value), value)


#: Containers nested deeper than this are not walked (Python's stack would overflow):
#: they are replaced whole, so nothing in them can leak. Twice the deepest JSON a model
#: may write, for the records such a value travels in.
DEEPEST = 2 * MAX_JSON_DEPTH
TOO_DEEP = f"[nested over {DEEPEST} levels deep: not kept]"


def _walk(
    value: Any, redact: Callable[[str], str], depth: int = 0, *, numbers: bool = False
) -> Any:
    if isinstance(value, str):
        return redact(value)
    if numbers and isinstance(value, int | float) and not isinstance(value, bool):
        return _number(value, redact)
    if not isinstance(value, Mapping | list | tuple):
        return value
    if depth >= DEEPEST:
        return TOO_DEEP
    depth += 1
    n = numbers
    if isinstance(value, Mapping):
        return {
            _walk(k, redact, depth, numbers=n): _walk(v, redact, depth, numbers=n)
            for k, v in value.items()
        }
    if type(value) is list:
        return [_walk(item, redact, depth, numbers=n) for item in value]
    if type(value) is tuple:
        return tuple(_walk(item, redact, depth, numbers=n) for item in value)
    return value


#: What a number's text is made of (``repr`` of an ``int`` or a ``float``).
_NUMBER_TEXT = re.compile(r"[0-9.eE+\-]+")


def _number(value: float, redact: Callable[[str], str]) -> Any:
    """A number as it is, or ``[redacted]`` when its digits hold a secret (a PIN set as
    ``DB_PASSWORD`` that a tool returned as an ``int``): JSON writes a number bare,
    where a redacted text could not stand."""
    try:
        text = builtins.repr(value)
    except ValueError:  # more digits than Python converts
        return value
    if len(text) < MIN_SECRET:
        return value
    return REDACTED if redact(text) != text else value


#: This process's secrets (the environment is the process's, and so are model keys).
secrets = Secrets()


def redact(text: str) -> str:
    """``secrets.redact(text)``."""
    return secrets.redact(text)


def redact_value(value: Any) -> Any:
    """``secrets.redact_value(value)``."""
    return secrets.redact_value(value)


def head(text: str, limit: int) -> str:
    """``secrets.head(text, limit)``."""
    return secrets.head(text, limit)


def tail(text: str, limit: int) -> str:
    """``secrets.tail(text, limit)``."""
    return secrets.tail(text, limit)


def clip(text: str, limit: int) -> tuple[str, bool]:
    """``secrets.clip(text, limit)``."""
    return secrets.clip(text, limit)


def forms() -> tuple[str, ...]:
    """``secrets.forms()``."""
    return secrets.forms()


def shown(value: Any) -> Any:
    """``secrets.shown(value)``."""
    return secrets.shown(value)


def hide_edges(text: str, *, start: bool = True, end: bool = True) -> str:
    """``secrets.hide_edges(text, start=start, end=end)``."""
    return secrets.hide_edges(text, start=start, end=end)


def shorten(text: str, limit: int, marker: str = "…") -> str:
    """``secrets.shorten(text, limit, marker)``."""
    return secrets.shorten(text, limit, marker)


#: Characters of a result's repr the model reads when the result is not JSON.
RESULT_REPR_LIMIT = 20_000


def render_value(value: Any) -> str:
    """A value as the model reads it, secrets redacted: text as it is, JSON when it is
    JSON, else its repr (bounded: a huge ``bytes`` shows its start and its size). The
    strings inside are redacted before the value is rendered (an escaped secret is
    another text), and the rendered text after."""
    if isinstance(value, str):
        return redact(value)
    try:
        return redact(json.dumps(redact_value(value), ensure_ascii=False, allow_nan=False))
    except Exception:  # not JSON, or an object whose items(), __iter__... raise
        return safe_repr(value, limit=RESULT_REPR_LIMIT, items=100)


def safe_repr(value: Any, *, limit: int = 300, items: int = 12) -> str:
    """A bounded repr (never the whole of a large value), secrets redacted before its
    cuts, that never raises (a broken ``__repr__`` never breaks a prompt)."""
    try:
        return Repr(limit=limit, items=items).repr(value)
    except Exception as exc:
        return failed(value, "repr", exc)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a note saying how much was left out;
    secrets redacted first, none of one left at the cut."""
    text = redact(text)
    if len(text) <= limit:
        return text
    return f"{secrets.clip(text, limit)[0]}\n[truncated: {len(text) - limit:,} more characters]"
