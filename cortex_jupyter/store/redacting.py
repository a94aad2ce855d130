"""The store's one write seam: every text bound into SQLite is redacted here.

Every connection to a store is a ``RedactingConnection`` (``writer.connect`` makes them
so), whose ``execute`` and ``executemany`` (and its cursors') pass each text parameter
through ``secrets.redact`` before SQLite sees it: ids, names, keys, search fields,
options, errors, outputs, prompts, and any column a later version adds. The code that
writes a row may redact too (a JSON body is redacted value by value before it is
encoded, so its structure stays); this seam is what no column can miss.

Lookups pass the same seam, so a row is found by the text it was written under: an
action whose id is a secret is kept as ``[redacted]`` in ``nodes.id``,
``outputs.action`` and ``search.field`` alike, as its events and its dependents'
``depends_on`` name it, and the stored run opens with the actions joined up.

A JSON body stays JSON: a secret in the digits of a number (a PIN a tool returned as
an ``int``) makes the number ``"[redacted]"``, not a bare ``[redacted]`` the reader
could not decode.

SQLite holds UTF-8, which has no lone surrogates (``"\\ud800"`` in a model's JSON, a file
name ``os.listdir`` decoded with ``surrogateescape``): each is written as its JSON escape
(``\\ud800``, six characters), so a JSON body reads back as the very string it held, and
any other text shows where it was. Bound raw, one made the whole write fail: a model
could keep its own action out of the store.

Bytes (``outputs.data``, a pickle) are not text: ``store.outputs.keep`` refuses to pickle
an output whose bytes hold any form of a secret. SQL text itself is never built from
values here (parameters carry them).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

from cortex_jupyter.runtime.core.trust.secrets import REDACTED, redact

__all__ = ["RedactingConnection", "RedactingCursor", "redacted"]


def redacted(parameters: Any) -> Any:
    """``parameters`` (a sequence, or a mapping of named ones) with each text redacted."""
    if isinstance(parameters, Mapping):
        return {name: _one(value) for name, value in parameters.items()}
    return tuple(_one(value) for value in parameters)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _one(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if not value.isascii():
        value = _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", value)
    safe = redact(value)
    if safe == value or not value.startswith(("{", "[")):
        return safe
    return _still_json(value, safe)


def _still_json(value: str, safe: str) -> str:
    """A JSON body redacted so that it is JSON still: a secret found in the digits of a
    number (``9[redacted]``) makes that number ``"[redacted]"`` (the reader decodes
    every body it wrote). Text that was never JSON is redacted as text."""
    try:
        json.loads(safe)
        return safe  # (almost always: the secret was inside a string)
    except ValueError:
        pass
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        return safe
    return redact(json.dumps(_numbers(data), ensure_ascii=False))


def _numbers(value: Any) -> Any:
    """``value`` with every number whose text holds a secret replaced by ``[redacted]``."""
    if isinstance(value, dict):
        return {key: _numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers(item) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = json.dumps(value)
        return REDACTED if redact(text) != text else value
    return value


class RedactingCursor(sqlite3.Cursor):
    """A cursor whose statements' text parameters are redacted."""

    def execute(self, sql: str, parameters: Any = (), /) -> RedactingCursor:
        super().execute(sql, redacted(parameters))
        return self

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> RedactingCursor:
        super().executemany(sql, (redacted(p) for p in seq_of_parameters))
        return self


class RedactingConnection(sqlite3.Connection):
    """A connection to a store: its statements' text parameters are redacted."""

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(factory or RedactingCursor)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return super().execute(sql, redacted(parameters))

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        return super().executemany(sql, (redacted(p) for p in parameters))
