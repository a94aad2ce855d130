"""Extra request fields: what a run adds to every request it sends its model.

An endpoint understands more than the chat protocol's core: ``temperature``, ``seed``,
``top_k``, llama.cpp's ``grammar``, vLLM's structured-output fields. A run passes such
fields through unchanged, to every request it makes: each turn of its loop, its ``llm``
actions, and its nested agents (whose own ``request`` goes over their caller's).

Where they come from, later over earlier (one rule, stated in ``%%cortex?`` too)::

    CortexMagics.request  <  Agent(request=...)  <  %%cortex --request JSON
                          <  explicit options (--temperature, --max-tokens, Agent(temperature=...))

Fields the run itself must decide (``stream``, ``messages``, ``model``, ``n``,
``tools``...) are refused with a sentence saying why. A text whose field name, at any
depth, looks like a credential (``api_key``, ``token``, ``Authorization``, ``password``,
``cookie``...) or whose value looks like a key (``sk-...``, ``Bearer ...``) is a secret
from then on: redacted in everything cortex shows, saves or sends
(``runtime.core.trust.secrets``), ``extra_headers: {"Authorization": "Bearer ..."}`` included.

``request_fields`` is the one place a request's extra fields are built; other features
that add fields of their own (a grammar for constrained decoding) merge theirs over it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

from cortex_jupyter.runtime.core.trust.secrets import CREDENTIAL_NAME, safe_repr, secrets

__all__ = ["PROTOCOL_FIELDS", "check_request", "merge_requests", "request_fields"]

#: Fields the run sets itself; a request that sets them would break the stream.
PROTOCOL_FIELDS: Mapping[str, str] = {
    "stream": "the run always streams",
    "stream_options": "the run asks for usage itself",
    "messages": "the run sends the conversation",
    "model": "choose the model with --model or Agent(model=...)",
    "n": "the run reads one reply per request",
    "tools": "offer tools with --native-tools",
    "functions": "offer tools with --native-tools",
}
# A value that is a key whatever its field is called: sk-..., Bearer ...
_KEY_VALUE = re.compile(r"^(?:(?:sk|rk|pk|sess)-\S{6,}|(?:[Bb]earer|[Bb]asic|[Tt]oken)\s+\S{6,})$")
# A field (at any depth) whose texts are credentials: an environment name's words, and
# what headers call them.
_SECRET_FIELD = re.compile(r"AUTH|COOKIE|SESSION|SIGNATURE", re.IGNORECASE)
#: Request values nested deeper than this are not searched for credentials.
_DEEPEST = 32


class _HasRequest(Protocol):
    @property
    def request(self) -> Mapping[str, Any] | None: ...


def check_request(value: Any, where: str = "request") -> dict[str, Any]:
    """``value`` as a request's extra fields, or a ``ValueError`` whose message names
    ``where`` and what is wrong. Credential-looking values become secrets."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{where} must be a JSON object of request fields such as "
            f'{{"temperature": 0, "seed": 1}}, not {type(value).__name__} {_short(value)}'
        )
    fields: dict[str, Any] = {}
    for name, field in value.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: a field name must be a non-empty string, not {name!r}")
        if name in PROTOCOL_FIELDS:
            raise ValueError(f"{where}: the field {name!r} cannot be set ({PROTOCOL_FIELDS[name]})")
        try:  # NaN and infinity are no JSON: a server refuses a body holding them
            json.dumps(field, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            raise ValueError(
                f"{where}: the field {name!r} must be a JSON value, not "
                f"{type(field).__name__}{_nan_note(field)}"
            ) from None
        fields[name] = field
    _remember_secrets(fields)
    return fields


def merge_requests(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """The layers' fields merged, each over the ones before it (top level only)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            merged.update(layer)
    return merged


def request_fields(agent: _HasRequest, caller: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The extra fields of every request ``agent`` sends: its caller's (a nested agent
    runs under the fields of the run that called it), its own ``request`` over them."""
    return merge_requests(caller, agent.request)


def _remember_secrets(value: Any, named: bool = False, depth: int = 0) -> None:
    """Register the credentials in a request's fields, at any depth: every text under a
    field named like one (``named``), and every text that looks like a key."""
    if isinstance(value, str):
        if named or _KEY_VALUE.match(value.strip()):
            secrets.add(value)
            secrets.add(value.split()[-1] if value.split() else value)  # "Bearer KEY"'s key
        return
    if depth > _DEEPEST:
        return
    if isinstance(value, Mapping):
        for name, item in value.items():
            credential = isinstance(name, str) and bool(
                CREDENTIAL_NAME.search(name) or _SECRET_FIELD.search(name)
            )
            _remember_secrets(item, named or credential, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _remember_secrets(item, named, depth + 1)


def _nan_note(field: Any) -> str:
    """ " holding NaN or infinity" when that is why ``field`` is no JSON."""
    try:
        json.dumps(field)
    except (TypeError, ValueError, RecursionError):
        return ""
    return " holding NaN or infinity"


def _short(value: Any) -> str:
    return safe_repr(value, limit=60)  # bounded, redacted before its cut
