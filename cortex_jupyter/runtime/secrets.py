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
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from cortex_jupyter.protocol import MAX_JSON_DEPTH

__all__ = ["CREDENTIAL_NAME", "REDACTED", "Secrets", "redact", "redact_value", "secrets"]

REDACTED = "[redacted]"
#: Environment variable names whose values are treated as secrets.
CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
MIN_SECRET = 8


class Secrets:
    """The secrets of this process (see the module docstring); thread-safe."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._added: set[str] = set()
        self._lock = threading.Lock()
        self._cache: tuple[tuple[str, ...], re.Pattern[str] | None] = ((), None)

    def add(self, value: str | None) -> None:
        """Treat ``value`` as a secret from now on (a model client's API key)."""
        if value and len(value) >= MIN_SECRET:
            with self._lock:
                self._added.add(value)

    def values(self) -> tuple[str, ...]:
        """Every secret now, longest first (so a key containing another goes whole)."""
        environ = self._environ if self._environ is not None else os.environ
        found = {
            value
            for name, value in list(environ.items())
            if len(value) >= MIN_SECRET and CREDENTIAL_NAME.search(name)
        }
        with self._lock:
            found |= self._added
        return tuple(sorted(found, key=lambda v: (-len(v), v)))

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
