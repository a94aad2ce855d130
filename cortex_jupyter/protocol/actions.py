"""Turning the text of one action body into an ``Action`` or a ``ProtocolError``.

Every dialect ends up here, so an action means the same thing however it was
written, and every rejection carries a stable code and a message that quotes what
the model wrote.

**The name attribute** (``<action name="exec" id="v1">{"command": "ls"}</action>``,
the form real models write): the body holds the parameters, so the action is
``{"name": "exec", "parameters": {"command": "ls"}}`` and an empty body means no
parameters. Every key of such a body is a parameter, ``name``, ``output_key``,
``timeout`` and the other control words included: tools take parameters with those
names (``exec(command, timeout)``, ``greet(name)``), and a model writing the
attribute form means its body as the call's arguments. Only a body that has a
``"parameters"`` key, or whose ``"name"`` repeats the attribute, is read as the full
form (``{"parameters": {...}, "output_key": ...}``), control fields and all; a
different ``"name"`` next to ``"parameters"`` is ``invalid_field`` (which tool?).

**Bare words** on ``<action>``: a mode word is the mode, a type word the type, any
other word is read as a mode (so ``<action id="a" blocking>`` is ``unknown_mode``).
Two different modes (or types), from attributes and bare words together, are
``invalid_field``: the model contradicted itself, and guessing could run a ``sync``
action as ``async``.

**Calls** (sigil, cogency, hermes) carry their arguments in ``args``, ``arguments``
or ``parameters`` (the first present); as a JSON string holding an object too, as
some servers send them.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from typing import Any

from .events import (
    ACTION_MODES,
    ACTION_TYPES,
    ON_ERROR_VALUES,
    Action,
    ProtocolError,
)

_QUOTE_LIMIT = 120
#: Deepest nesting of arrays and objects in an action's JSON. Real calls are a few
#: levels deep; a body nested a thousand deep would overflow Python's stack while
#: decoding it, and again in every later step that walks parameters.
MAX_JSON_DEPTH = 100
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# json.loads with an option builds a new decoder (and its scanner) on every call,
# which cost more than decoding a typical body; one shared decoder does the same work.
_DECODER = json.JSONDecoder(strict=False)
_EMPTY_PAIR = re.compile(r"\[\]|\{\}")
#: How much of a refused block too large to keep is kept in ``ProtocolError.source``.
SOURCE_HEAD = 200
_ARGUMENT_KEYS = ("args", "arguments", "parameters")


def quote(text: str, limit: int = _QUOTE_LIMIT) -> str:
    """``text`` shortened and in backticks, with line breaks shown as ``\\n``."""
    if len(text) > limit:
        head = limit * 2 // 3
        text = f"{text[:head]} … {text[-(limit - head - 3) :]}"
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    return f"`{text}`"


def with_source(error: ProtocolError, source: str) -> ProtocolError:
    """The same error, carrying the text the model wrote."""
    return replace(error, source=source)


def clipped(head: str, limit: int) -> str:
    """The start of a block over ``limit`` characters, marked as cut."""
    return f"{head} … [cut: over {limit:,} characters, the rest was not kept]"


def show_json(value: Any) -> str:
    """A JSON value as the model wrote it, shortened, for a message."""
    return quote(json.dumps(value, ensure_ascii=False))


def strip_fence(body: str) -> str:
    """The JSON inside an optional markdown code fence (```json ... ```)."""
    text = body.strip()
    if text.startswith("```"):
        newline = text.find("\n")
        text = "" if newline < 0 else text[newline + 1 :]
        text = text.rstrip()
        if text.endswith("```"):
            text = text[:-3]
        text = text.strip()
    return text


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` nests arrays and objects more than ``limit`` deep.

    Checked on the text, before decoding: a body of a thousand ``[`` must not reach
    ``json.loads``. Brackets inside strings are data. Cheap for ordinary bodies (there
    cannot be more levels than brackets); otherwise one pass per level, in C.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    for _ in range(limit):
        inner = _EMPTY_PAIR.sub("", brackets)  # one level: the innermost pairs
        if inner == brackets:  # empty, or unbalanced: json.loads says what is wrong
            return False
        brackets = inner
    return bool(brackets)


def _too_deep_error(who: str, body: str, action_id: str | None) -> ProtocolError:
    return ProtocolError(
        "too_large",
        f"{who}: the JSON is nested too deep (over {MAX_JSON_DEPTH} levels of arrays and "
        f"objects): {quote(body)}. It was not run.",
        action_id,
    )


def loads(text: str) -> Any:
    """``json.loads(text, strict=False)``: control characters are allowed in strings.
    Raises ``json.JSONDecodeError`` for what is not JSON, and for an integer of more
    digits than Python reads (``sys.get_int_max_str_digits``, 4,300 by default: model
    text may hold one, and ``int()`` raises a plain ``ValueError`` for it)."""
    try:
        if text.startswith("\ufeff"):
            return json.loads(text, strict=False)  # for its message about the BOM
        return _DECODER.decode(text)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        if "digits" not in str(exc):
            raise
        limit = sys.get_int_max_str_digits()
        raise json.JSONDecodeError(f"a number has more than {limit} digits", text, 0) from None


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def parse_body(
    text: str, action_id: str, expected: str = 'a JSON object with a "name"'
) -> dict[str, Any] | ProtocolError:
    """Decode an action body into a JSON object, or explain why it is not one."""
    who = f"action {action_id!r}"
    body = strip_fence(text)
    if not body:
        return ProtocolError(
            "invalid_json",
            f"{who} has an empty body; expected a JSON object such as "
            '{"name": "search", "parameters": {"q": "..."}}. It was not run.',
            action_id,
        )
    if too_deep(body):
        return _too_deep_error(who, body, action_id)
    try:
        value = loads(body)
    except RecursionError:  # the stack was already deep where this was called
        return _too_deep_error(who, body, action_id)
    except json.JSONDecodeError as exc:
        return ProtocolError(
            "invalid_json",
            f"{who}: the body is not valid JSON ({exc.msg} at line {exc.lineno} "
            f"column {exc.colno}): {quote(body)}. It was not run.",
            action_id,
        )
    if not isinstance(value, dict):
        return ProtocolError(
            "body_not_object",
            f"{who}: the body must be {expected}, but it is a JSON "
            f"{_json_kind(value)}: {quote(body)}. It was not run.",
            action_id,
        )
    return value


def action_kind(attrs: dict[str, str], flags: tuple[str, ...]) -> tuple[str, str, str | None]:
    """(type, mode, contradiction) of an ``<action>`` tag's attributes and bare words."""
    if not flags:
        kind = attrs.get("type", "").strip().lower() or "tool"
        return kind, attrs.get("mode", "").strip().lower() or "async", None
    types = [attrs["type"]] if "type" in attrs else []
    modes = [attrs["mode"]] if "mode" in attrs else []
    for flag in flags:
        (types if flag in ACTION_TYPES else modes).append(flag)
    types = list(dict.fromkeys(t.strip().lower() for t in types if t.strip()))
    modes = list(dict.fromkeys(m.strip().lower() for m in modes if m.strip()))
    problem = None
    for what, found in (("types", types), ("modes", modes)):
        if len(found) > 1:
            problem = f"its tag gives two {what} ({', '.join(found)}); say one"
    return (types[0] if types else "tool"), (modes[0] if modes else "async"), problem


def action_fields(text: str, action_id: str, name: str | None) -> dict[str, Any] | ProtocolError:
    """The fields of an ``<action>`` body; ``name`` is the tag's name attribute, if any.

    See the module docstring for how a name attribute reads the body.
    """
    if name is None:
        return parse_body(text, action_id)
    if not strip_fence(text):
        return {"name": name, "parameters": {}}
    body = parse_body(text, action_id, f"a JSON object of parameters for {name!r}")
    if isinstance(body, ProtocolError):
        return body
    named = body.get("name")
    if "parameters" not in body and named != name:
        return {"name": name, "parameters": body}
    if named is not None and named != name:
        return ProtocolError(
            "invalid_field",
            f"action {action_id!r} names two tools: name={quote(name)} in its tag and "
            f"{show_json(named)} in its body. It was not run.",
            action_id,
        )
    return {**body, "name": name}


def call_fields(
    fields: dict[str, Any], action_id: str
) -> tuple[dict[str, Any], str] | ProtocolError:
    """A call object's fields and the key that holds its arguments.

    Arguments sent as a JSON string holding an object are decoded (an empty string
    is no arguments).
    """
    key = next((k for k in _ARGUMENT_KEYS if k in fields), "args")
    value = fields.get(key)
    if not isinstance(value, str):
        return fields, key
    if not value.strip():
        return {**fields, key: {}}, key
    if too_deep(value):
        return _too_deep_error(f"action {action_id!r}: {key!r}", value, action_id)
    try:
        decoded = loads(value)
    except RecursionError:
        return _too_deep_error(f"action {action_id!r}: {key!r}", value, action_id)
    except json.JSONDecodeError:
        decoded = value
    if not isinstance(decoded, dict):
        return ProtocolError(
            "invalid_field",
            f'action {action_id!r}: "{key}" must be a JSON object (or a string holding '
            f"one), not {show_json(value)}. It was not run.",
            action_id,
        )
    return {**fields, key: decoded}, key


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _field_problem(fields: dict[str, Any], params_key: str) -> str | None:
    """What is wrong with the optional fields, or None when they are all well formed."""
    params = fields.get(params_key)
    if params is not None and not isinstance(params, dict):
        return f'"{params_key}" must be a JSON object, not {show_json(params)}'
    key = fields.get("output_key")
    if key is not None and (not isinstance(key, str) or not key.strip()):
        return f'"output_key" must be a non-empty string, not {show_json(key)}'
    deps = fields.get("depends_on")
    if deps is not None and (
        not isinstance(deps, list) or not all(isinstance(d, str) and d for d in deps)
    ):
        return f'"depends_on" must be a list of action ids (strings), not {show_json(deps)}'
    timeout = fields.get("timeout")
    if timeout is not None and (not _is_number(timeout) or timeout <= 0):
        return f'"timeout" must be a positive number of seconds, not {show_json(timeout)}'
    retry = fields.get("retry")
    if retry is not None and (not isinstance(retry, int) or isinstance(retry, bool) or retry < 0):
        return f'"retry" must be a whole number >= 0, not {show_json(retry)}'
    on_error = fields.get("on_error")
    if on_error is not None and on_error not in ON_ERROR_VALUES:
        return f'"on_error" must be "fail", "skip" or "retry", not {show_json(on_error)}'
    return None


def build_action(
    fields: dict[str, Any],
    *,
    action_id: str,
    type: str,
    mode: str,
    in_thought: bool,
    params_key: str = "parameters",
    original_id: str | None = None,
) -> Action | ProtocolError:
    """Validate a decoded body and the tag's attributes into an ``Action``."""
    who = f"action {action_id!r}"
    name = fields.get("name")
    if not isinstance(name, str) or not name.strip():
        shown = show_json(fields)
        return ProtocolError(
            "missing_name",
            f'{who} has no "name" (a non-empty string naming the tool to run): '
            f"{shown}. It was not run.",
            action_id,
        )
    if type not in ACTION_TYPES:
        return ProtocolError(
            "unknown_type",
            f"{who} ({name}) has type={quote(type)}; the types are agent, internal, llm, "
            "relic, tool and workflow. It was not run.",
            action_id,
        )
    if mode not in ACTION_MODES:
        return ProtocolError(
            "unknown_mode",
            f"{who} ({name}) has mode={quote(mode)}; the modes are async, sync and "
            "fire_and_forget. It was not run.",
            action_id,
        )
    problem = _field_problem(fields, params_key)
    if problem is not None:
        return ProtocolError(
            "invalid_field", f"{who} ({name}): {problem}. It was not run.", action_id
        )
    timeout = fields.get("timeout")
    return Action(
        id=action_id,
        name=name.strip(),
        type=type,
        mode=mode,
        parameters=fields.get(params_key) or {},
        output_key=fields.get("output_key"),
        depends_on=tuple(fields.get("depends_on") or ()),
        timeout=float(timeout) if timeout is not None else None,
        retry=fields.get("retry") or 0,
        on_error=fields.get("on_error") or "fail",
        in_thought=in_thought,
        original_id=original_id,
    )
