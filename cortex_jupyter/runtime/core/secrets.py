"""Secrets never travel: the text cortex shows, saves or sends has them replaced.

A secret is the API key a model client uses (it registers it with ``add``) or the value
of an environment variable whose name looks like a credential (``*KEY*``, ``*TOKEN*``,
``*SECRET*``, ``*PASSWORD*``...), read afresh each time so a key set with ``%env`` later
is covered too. Every place where text leaves cortex passes it through ``redact``: the
messages sent to the model, the conversation (``%cortex history``), transcripts, the
live view and its saved static copy, printed lines. Values the user's own notebook holds
(an ``output_key`` variable, ``_cortex.actions[id].output``) stay exact: they are the
user's data, not something cortex shows.

Only exact values are replaced (no guessing from patterns here: "sk-learn" is not a
key). Values shorter than 8 characters are not secrets worth the damage of replacing
them everywhere ("none", "ollama" are placeholders, not keys).

**Redact before cutting.** Text shortened to a limit is redacted first, then cut, and
the part of a secret the cut leaves at its edge (the first characters of a key cut at
the end, the last ones of a key cut at the start, ``MIN_FRAGMENT`` or more) is hidden
too: ``head``, ``tail`` and ``shorten`` do it for a text, ``Repr`` for ``reprlib``'s
short reprs (which cut in the middle). Every place that shortens what it shows, saves
or sends goes through one of them.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from cortex_jupyter.protocol import MAX_JSON_DEPTH
from cortex_jupyter.runtime.core.bounded import BoundedRepr, failed

__all__ = [
    "CREDENTIAL_NAME",
    "MIN_FRAGMENT",
    "REDACTED",
    "RESULT_REPR_LIMIT",
    "Repr",
    "Secrets",
    "head",
    "hide_edges",
    "redact",
    "redact_value",
    "render_value",
    "safe_repr",
    "secrets",
    "shorten",
    "tail",
    "truncate",
]

REDACTED = "[redacted]"
#: Environment variable names whose values are treated as secrets.
CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
MIN_SECRET = 8
#: The shortest part of a secret a cut may leave at its edge that is still hidden.
MIN_FRAGMENT = 4
# Where ``Repr`` cut (reprlib's fill value while it works): never in a repr of a string.
_CUT = "\x00\ufdd0cut\ufdd0\x00"


class Secrets:
    """The secrets of this process (see the module docstring); thread-safe."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._added: set[str] = set()
        self._lock = threading.Lock()
        self._cache: tuple[tuple[str, ...], re.Pattern[str] | None] = ((), None)
        self._environment: tuple[dict[Any, Any], tuple[str, ...], int] = ({}, (), -1)

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
        return {
            value
            for name, value in list(environ.items())
            if len(value) >= MIN_SECRET and CREDENTIAL_NAME.search(name)
        }

    def _pattern(self) -> re.Pattern[str] | None:
        values = self.values()
        cached_values, pattern = self._cache
        if values != cached_values:
            pattern = re.compile("|".join(map(re.escape, values))) if values else None
            self._cache = (values, pattern)
        return pattern

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[redacted]``."""
        if not text:
            return text
        pattern = self._pattern()
        return text if pattern is None else pattern.sub(REDACTED, text)

    def redact_value(self, value: Any) -> Any:
        """A JSON-like value with every string in it redacted (new containers; other
        values as they are)."""
        pattern = self._pattern()
        if pattern is None:
            return value
        return _walk(value, pattern)

    # ---- cutting ----------------------------------------------------------------------

    def head(self, text: str, limit: int) -> str:
        """The first ``limit`` characters (at most) of ``text`` redacted, without the
        part of a secret the cut leaves at the end (no marker added)."""
        text = self.redact(text)
        if len(text) <= limit:
            return text
        kept = text[: max(limit, 0)]
        marker = _prefix_at_end(kept, REDACTED)  # a cut through ``[redacted]`` itself
        if marker and limit >= len(REDACTED):
            return kept[: len(kept) - marker]  # the whole marker or none of it
        cut = max((_prefix_at_end(kept, v) for v in self.values()), default=0)
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
        text = self.redact(text)
        if len(text) <= limit:
            return text
        kept = text[len(text) - max(limit, 0) :]
        cut = max((_suffix_at_start(kept, v) for v in self.values()), default=0)
        if not cut:
            return kept
        if limit < len(REDACTED):
            return kept[cut:]
        kept = kept[max(cut, len(kept) - (limit - len(REDACTED))) :]
        return REDACTED + self.hide_edges(kept, end=False)

    def shorten(self, text: str, limit: int, marker: str = "…") -> str:
        """``text`` redacted and, when longer than ``limit``, cut to ``limit``
        characters ending with ``marker``, no part of a secret at the cut."""
        text = self.redact(text)
        if len(text) <= limit:
            return text
        if limit < len(marker):
            return self.head(text, limit)
        return self.head(text, limit - len(marker)) + marker

    def hide_edges(self, text: str, *, start: bool = True, end: bool = True) -> str:
        """``text`` (a piece cut out of a longer text) with the part of a secret that a
        cut left at its ``end`` (a secret's first characters) or ``start`` (its last
        characters) replaced by ``[redacted]``, when ``MIN_FRAGMENT`` or more are left."""
        values = self.values()
        if not values or len(text) < MIN_FRAGMENT:
            return text
        if end:
            cut = max((_prefix_at_end(text, v) for v in values), default=0)
            if cut:
                text = text[: len(text) - cut] + REDACTED
        if start:
            cut = max((_suffix_at_start(text, v) for v in values), default=0)
            if cut:
                text = REDACTED + text[cut:]
        return text


def _prefix_at_end(text: str, secret: str) -> int:
    """The length of the longest proper prefix of ``secret`` (``MIN_FRAGMENT`` or more
    characters) that ``text`` ends with, or 0."""
    for size in range(min(len(secret) - 1, len(text)), MIN_FRAGMENT - 1, -1):
        if text.endswith(secret[:size]):
            return size
    return 0


def _suffix_at_start(text: str, secret: str) -> int:
    """The length of the longest proper suffix of ``secret`` (``MIN_FRAGMENT`` or more
    characters) that ``text`` starts with, or 0."""
    for size in range(min(len(secret) - 1, len(text)), MIN_FRAGMENT - 1, -1):
        if text.startswith(secret[len(secret) - size :]):
            return size
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
        pad = max(map(len, self.secrets.values()), default=0)
        read = str.__getitem__(x, slice(0, self.maxstring + pad + 1))
        text = self.secrets.redact(read)
        if len(read) == len(x) and len(text) <= self.maxstring:
            return builtins.repr(text)
        return builtins.repr(self.secrets.head(text, max(self.maxstring - 3, 0))) + _CUT

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            text = builtins.repr(x)
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


def _walk(value: Any, pattern: re.Pattern[str], depth: int = 0) -> Any:
    if isinstance(value, str):
        return pattern.sub(REDACTED, value)
    if not isinstance(value, Mapping | list | tuple):
        return value
    if depth >= DEEPEST:
        return TOO_DEEP
    depth += 1
    if isinstance(value, Mapping):
        return {_walk(k, pattern, depth): _walk(v, pattern, depth) for k, v in value.items()}
    if type(value) is list:
        return [_walk(item, pattern, depth) for item in value]
    if type(value) is tuple:
        return tuple(_walk(item, pattern, depth) for item in value)
    return value


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


def hide_edges(text: str, *, start: bool = True, end: bool = True) -> str:
    """``secrets.hide_edges(text, start=start, end=end)``."""
    return secrets.hide_edges(text, start=start, end=end)


def shorten(text: str, limit: int, marker: str = "…") -> str:
    """``secrets.shorten(text, limit, marker)``."""
    return secrets.shorten(text, limit, marker)


#: Characters of a result's repr the model reads when the result is not JSON.
RESULT_REPR_LIMIT = 20_000


def render_value(value: Any) -> str:
    """A value as the model reads it: text as it is, JSON when it is JSON, else its repr
    (bounded: a huge ``bytes`` shows its start and its size)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
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
    return f"{head(text, limit)}\n[truncated: {len(text) - limit:,} more characters]"
