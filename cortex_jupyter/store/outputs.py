"""How an action's output is kept, and given back: JSON, a pickle, or a marked repr.

An output is kept as JSON only when JSON gives it back as it was: equal, and of the same
types all the way down (``faithful``). A tuple or namedtuple (JSON reads a list), a dict
with keys that are not strings (JSON reads ``{1: 'one'}`` as ``{'1': 'one'}``), an Enum,
a str or float subclass, a set, a Decimal, a datetime, bytes... are not. Anything else
is pickled with cloudpickle (so a resumed run gets the object itself back), unless it
cannot be (a lock, a generator): then its short repr is kept, marked ``repr``. A pickle
is loaded only from the user's own store: loading a pickle runs code, so a store from
someone else is a program from them.

Secrets never reach the disk: an output that holds one, in any form the redaction knows
(JSON-escaped, in a DataFrame's cells, in a pickled object's attributes), is kept as its
redacted JSON or redacted short repr, marked ``redacted``: it is not the value any more,
and resume runs that action again rather than restore it. A pickle is checked by looking
for every form of every secret in its bytes (as UTF-8, and as numpy's UTF-32 and UTF-16
strings write them, and a secret of digits as the binary numbers a pickle and numpy
write: an ``int`` in 4 or 8 bytes or as few as it needs, a ``float`` in 8, either byte
order) before it is written; when in doubt, the redacted repr is kept.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from typing import Any

import cloudpickle  # type: ignore[import-untyped]  # 3.1 ships no py.typed or stubs

from cortex_jupyter.runtime.core.record.run import OutputRepr, summarize, to_json_value
from cortex_jupyter.runtime.core.trust.secrets import redact, redact_value, secrets

__all__ = ["MAX_PICKLE", "Kept", "faithful", "keep", "restore"]

#: Pickles larger than this are not kept (the short repr is): a store is not a data lake.
MAX_PICKLE = 64 << 20
#: Characters of an output's text that search indexes.
SEARCH_TEXT = 20_000


@dataclass(frozen=True)
class Kept:
    """An output as stored: ``kind`` (json, pickle, repr, redacted), ``value`` (JSON text
    or the short repr), ``data`` (pickle bytes) and ``text`` (what search indexes)."""

    kind: str
    value: str | None
    data: bytes | None
    text: str


def keep(output: Any) -> Kept:
    """``output`` as it may be written to the store (see the module docstring)."""
    shown, is_repr = to_json_value(output)
    if not is_repr and faithful(output, shown):
        text = json.dumps(shown, ensure_ascii=False)
        safe = redact(text)
        if safe != text or _holds_secret(text.encode("utf-8", "surrogatepass")):
            value = json.dumps(redact_value(shown), ensure_ascii=False)
            return Kept("redacted", redact(value), None, redact(value)[:SEARCH_TEXT])
        return Kept("json", text, None, text[:SEARCH_TEXT])
    brief = summarize(output)  # redacted before it is cut
    try:
        data = cloudpickle.dumps(output)
    except Exception:  # not picklable (a lock, a generator, a socket...)
        return Kept("repr", brief, None, brief)
    if len(data) > MAX_PICKLE:
        return Kept("repr", brief, None, brief)
    if _holds_secret(data):
        return Kept("redacted", brief, None, brief)
    return Kept("pickle", brief, data, brief)


def faithful(value: Any, back: Any) -> bool:
    """Whether ``back`` (``value`` read back from its JSON) is ``value``: equal, with the
    same type at every place (a ``bool`` is not an ``int``, a tuple not a list, an
    Enum not its value), and every mapping's keys strings. Walked without recursion."""
    pending = [(value, back)]
    while pending:
        given, got = pending.pop()
        if type(given) is not type(got):
            return False
        if type(given) is dict:
            if list(given) != list(got) or not all(type(key) is str for key in given):
                return False
            pending.extend((given[key], got[key]) for key in given)
        elif type(given) is list:
            if len(given) != len(got):
                return False
            pending.extend(zip(given, got, strict=True))
        elif given != got:
            return False
    return True


def restore(kind: str, value: str | None, data: bytes | None) -> Any:
    """The output a stored row stands for: the object for ``json`` and ``pickle``, the
    kept text (an ``OutputRepr``) for ``repr`` and ``redacted``."""
    if kind == "json" and value is not None:
        return json.loads(value)
    if kind == "pickle" and data is not None:
        try:
            return cloudpickle.loads(data)
        except Exception:  # its class is gone or changed: what the view showed of it
            return OutputRepr(value or "")
    return OutputRepr(value or "")


def _holds_secret(data: bytes) -> bool:
    """Whether ``data`` holds any form of any secret, as UTF-8, UTF-16 or UTF-32 text,
    or a secret of digits as a binary number (``_binary``)."""
    forms = secrets.forms()
    for form in forms:
        for codec in ("utf-8", "utf-32-le", "utf-16-le"):
            try:
                if form.encode(codec) in data:
                    return True
            except UnicodeEncodeError:
                continue
    return any(number in data for number in _binary(forms))


_NUMBER = re.compile(r"[+-]?[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?")
_made: dict[tuple[str, ...], frozenset[bytes]] = {}


def _binary(forms: tuple[str, ...]) -> frozenset[bytes]:
    """The bytes a pickle or a numpy array holds for a secret that is a number's text (a
    PIN): a pickle writes an ``int`` in 4 bytes or as few as it needs, little-endian, and
    a ``float`` in 8 big-endian; numpy in 8 (or 4) bytes in the machine's order. Nothing
    when no secret is a number (almost always)."""
    made = _made.get(forms)
    if made is None:
        found: set[bytes] = set()
        for form in forms:
            if _NUMBER.fullmatch(form):
                found |= _encodings(float(form), form)
        made = frozenset(found)
        _made.clear()
        _made[forms] = made
    return made


def _encodings(number: float, form: str) -> set[bytes]:
    found: set[bytes] = set()
    if math.isfinite(number):
        found |= {struct.pack("<d", number), struct.pack(">d", number)}
    if form.lstrip("+-").isdigit():
        whole = int(form)
        size = (whole.bit_length() + 8) // 8  # (a sign bit included)
        for width in {size, 4, 8}:
            if width >= size:
                found |= {whole.to_bytes(width, "little", signed=True)}
                found |= {whole.to_bytes(width, "big", signed=True)}
    return found
