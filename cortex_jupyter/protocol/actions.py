"""Turning the text of one action body into an ``Action`` or a ``ProtocolError``.

Every dialect ends up here, so an action means the same thing however it was
written, and every rejection carries a stable code and a message that quotes what
the model wrote.
"""

from __future__ import annotations

import json
from typing import Any

from .events import (
    ACTION_MODES,
    ACTION_TYPES,
    ON_ERROR_VALUES,
    Action,
    ProtocolError,
)

_QUOTE_LIMIT = 120


def quote(text: str, limit: int = _QUOTE_LIMIT) -> str:
    """``text`` shortened and in backticks, with line breaks shown as ``\\n``."""
    if len(text) > limit:
        head = limit * 2 // 3
        text = f"{text[:head]} … {text[-(limit - head - 3) :]}"
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    return f"`{text}`"


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


def parse_body(text: str, action_id: str) -> dict[str, Any] | ProtocolError:
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
    try:
        value = json.loads(body, strict=False)
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
            f'{who}: the body must be a JSON object with a "name", but it is a JSON '
            f"{_json_kind(value)}: {quote(body)}. It was not run.",
            action_id,
        )
    return value


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
    )
