"""Typed answers: a run's answer read as JSON and validated into a Python object.

``Agent(output_type=T)`` (``%%cortex --output T``) asks the model for an answer of type
``T``: a pydantic model, a dataclass, a TypedDict, ``list[...]``, ``dict[str, ...]``,
``Literal[...]``, a union or a plain ``int``/``float``/``str``/``bool``. ``OutputType``
is made once from ``T``: pydantic's ``TypeAdapter`` for it, the JSON schema the model is
shown, a readable name and one example value made from the schema.

Where the answer is: the text of the final response (interim replies are never the
answer), which is the JSON value, either bare (the whole text) or in one fenced code
block (```` ```json ````; a fence never closed runs to the text's end, as a small
model's reply may stop there). Prose around a fence is tolerated (small models write
"Here it is:"); prose around bare JSON is not, and neither are two fences (which one
would it be?). When ``T``'s schema is a string (``str``, a ``Literal`` of strings...), a text
that is not JSON is that string itself. With native tools the answer may come wrapped
as ``{"response": value}`` (``response_format`` needs an object at its root).

``"$name"`` inside the answer: a JSON string that is exactly ``"$name"`` or
``"$name.path"`` is replaced by the object itself before validation (an int stays an
int, a DataFrame stays that DataFrame), resolved by ``variables.resolve`` over the same
scopes as action parameters (so the same scope and secret rules hold). A name that
resolves to nothing is an error for that field. Only whole strings are references:
``"18 $unit"`` stays text.

``OutputType.check`` never raises on model text: it returns a ``Checked`` with the
object, or with errors as short ``path: message`` lines (path like ``items[2].price``;
the answer itself is ``(answer)``), secrets redacted, which the loop sends back to the
model on a retry and the cell's ``cortex:`` line names when the answer never fits.

Pure: no I/O; only pydantic beside the protocol and the core.
"""

from __future__ import annotations

import ast
import json
import math
import numbers
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from cortex_jupyter.protocol import MAX_JSON_DEPTH
from cortex_jupyter.runtime.core.errors import BadOutputType, CortexRuntimeError
from cortex_jupyter.runtime.core.trust.secrets import redact, redact_value, safe_repr, shorten, tail
from cortex_jupyter.runtime.core.values.variables import REFERENCE, resolve

__all__ = ["PYTHON_OBJECT", "WRAP_KEY", "Checked", "OutputType", "read_json", "type_from_text"]

#: The key a non-object answer is wrapped in for ``response_format`` (its root must be
#: an object): ``{"response": [1, 2]}``.
WRAP_KEY = "response"
#: The ``pattern`` of a string that stands for a Python-only object (a DataFrame field):
#: only a ``"$name"`` of one fits it (the grammar admits the reference alone there).
PYTHON_OBJECT = "^\\$"
#: Most error lines kept of one check (the first names the first bad field).
MAX_ERRORS = 8
_LINE_LIMIT = 240
_PATH_LIMIT = 100
_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON)?[ \t]*\r?\n(.*?)```", re.DOTALL)
#: A fence the model opened and never closed (its reply ended, or a response block did):
#: the rest of the text is its content, as the view shows it while it streams.
_OPEN_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON)?[ \t]*\r?\n(.*)", re.DOTALL)
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]+")
_NOT_READ = object()


@dataclass(frozen=True)
class Checked:
    """What ``OutputType.check`` found: ``ok`` and the validated ``value``, or ``errors``
    (short ``path: message`` lines, secrets redacted, the first bad field first)."""

    ok: bool
    value: Any = None
    errors: tuple[str, ...] = ()

    @property
    def first(self) -> str:
        """The first error line ("" when it fit)."""
        return self.errors[0] if self.errors else ""


@dataclass(frozen=True, eq=False)
class OutputType:
    """An answer type ``T``, ready to be shown to a model and to check its answers.

    Make one with ``OutputType.of(T)``; ``BadOutputType`` when pydantic can make no
    validator or JSON schema for ``T``.
    """

    type: Any
    name: str
    adapter: TypeAdapter[Any]
    schema: dict[str, Any]
    example: Any

    @classmethod
    def of(cls, type_: Any, name: str | None = None) -> OutputType:
        """The ``OutputType`` of ``type_`` (``name``: how to call it, e.g. as the user
        wrote it on the cell line; by default made from the type)."""
        shown = name or type_name(type_)
        if type_ is None or isinstance(type_, str | int | float | bool | bytes):
            raise BadOutputType(shown, "it is a value, not a type (use e.g. int, list[str])")
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(type_)
            schema = adapter.json_schema(schema_generator=_PythonObjects)
        except Exception as exc:  # pydantic's own errors, or a type's hook that raised
            raise BadOutputType(shown, _first_line(exc)) from None
        # The schema is shown to the model (prompt, response_format, grammar) and kept in
        # events: a default or a description may hold a secret (``key: str = API_KEY``).
        schema = redact_value(schema)
        return cls(type_, shown, adapter, schema, example_of(schema))

    # ---- what the model is shown --------------------------------------------------

    @property
    def is_text(self) -> bool:
        """Whether the answer is a string (a text that is not JSON is then the string)."""
        return _is_text(self.schema)

    @property
    def wrapped(self) -> bool:
        """Whether ``response_format`` wraps the schema in ``{"response": ...}`` (its
        root is not an object)."""
        return self.schema.get("type") != "object"

    def response_format(self) -> dict[str, Any]:
        """The OpenAI ``response_format`` field for this type: a ``json_schema`` format,
        ``strict`` off (OpenAI's strict mode requires every field required and no
        extra keywords: it would change what ``T`` means; the answer is validated and
        retried here anyway). A non-object root is wrapped (``WRAP_KEY``)."""
        schema = dict(self.schema)
        if self.wrapped:
            defs = schema.pop("$defs", None)
            schema = {
                "type": "object",
                "properties": {WRAP_KEY: schema},
                "required": [WRAP_KEY],
                "additionalProperties": False,
            }
            if defs is not None:
                schema["$defs"] = defs
        name = _SCHEMA_NAME.sub("_", self.name).strip("_")[:64] or "answer"
        fmt = {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": False},
        }
        return dict(redact_value(fmt))  # sent as it is: a secret registered since ``of`` too

    # ---- checking an answer -------------------------------------------------------

    def check(
        self, text: str, scopes: Sequence[Mapping[str, Any]] = (), *, wrapped: bool = False
    ) -> Checked:
        """Read the answer ``text`` (bare JSON or one fence), fill ``"$name"`` strings
        from ``scopes`` and validate; never raises on what a model wrote. ``wrapped``:
        the answer may be ``{"response": value}`` (native ``response_format``)."""
        value, problem = read_json(text, text_ok=self.is_text)
        if problem is not None:
            return Checked(False, errors=(_line("(answer)", problem),))
        if wrapped and self.wrapped and isinstance(value, dict) and set(value) == {WRAP_KEY}:
            value = value[WRAP_KEY]
        missing: list[str] = []
        value = _fill(value, scopes, (), missing, 0)
        try:
            result = self.adapter.validate_python(value)
        except ValidationError as exc:
            errors = missing + [
                e for e in error_lines(exc) if e.split(":")[0] not in _paths(missing)
            ]
            return Checked(False, errors=tuple(errors[:MAX_ERRORS]))
        except Exception as exc:  # a validator of the user's type that raised
            return Checked(
                False, errors=(*missing, _line("(answer)", _first_line(exc)))[:MAX_ERRORS]
            )
        if missing:
            return Checked(False, errors=tuple(missing[:MAX_ERRORS]))
        return Checked(True, value=result)

    def json_form(self, value: Any) -> Any:
        """The validated ``value`` as JSON data (for events and transcripts), secrets
        redacted; a number of another library (numpy's ``int64``, from ``"$n"``) is that
        number; what cannot be JSON (a DataFrame) is its short repr."""
        try:
            data = self.adapter.dump_python(value, mode="json", fallback=_plain, warnings=False)
            text = json.dumps(data, allow_nan=False)
        except Exception:
            return safe_repr(value, limit=160)
        if len(text) > 1 << 20:
            return safe_repr(value, limit=160)
        return redact_value(data)


def _plain(value: Any) -> Any:
    """What pydantic cannot write as JSON: a number (``numbers.Integral``/``Real``, which
    numpy's scalars are) as the int or float it is, anything else as its short repr."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else safe_repr(value, limit=160)
    return safe_repr(value, limit=160)


class _PythonObjects(GenerateJsonSchema):
    """pydantic's JSON schema, where a field of a Python-only type (a DataFrame, with
    ``arbitrary_types_allowed``) becomes a string the model can fill only as ``"$name"``
    of such a value: the object itself then reaches the field."""

    def handle_invalid_for_json_schema(
        self, schema: CoreSchema | core_schema.CoreSchema, error_info: str
    ) -> JsonSchemaValue:
        cls = schema.get("cls") if isinstance(schema, dict) else None
        if not isinstance(cls, type):
            return super().handle_invalid_for_json_schema(schema, error_info)
        return {
            "type": "string",
            "pattern": PYTHON_OBJECT,
            "description": f'a Python {cls.__name__}: only as "$name" of one',
            "examples": ["$name"],
        }


def read_json(text: str, *, text_ok: bool = False) -> tuple[Any, str | None]:
    """(value, None) for the JSON value ``text`` holds (bare, or in its one fence), or
    (None, what is wrong). ``text_ok``: a text that is not JSON is the string itself."""
    stripped = text.strip()
    if not stripped:
        return None, "the answer is empty: write the JSON value"
    value = _loads(stripped)
    if value is not _NOT_READ:
        return value, None
    fences = _FENCE.findall(stripped)
    if not fences and stripped.count("```") == 1:
        fences = _OPEN_FENCE.findall(stripped)
    if len(fences) == 1:
        inner = _loads(fences[0].strip())
        if inner is not _NOT_READ:
            return inner, None
        if not text_ok:
            return None, f"the ```json block is not JSON ({_why_not_json(fences[0].strip())})"
    if len(fences) > 1 and not text_ok:
        return None, f"the answer has {len(fences)} code blocks; write one JSON value"
    if text_ok:
        return stripped, None
    return None, f"the answer is not JSON ({_why_not_json(stripped)})"


def _strict_json(text: str) -> Any:
    """``json.loads`` of JSON as its standard has it: Python's ``NaN``/``Infinity``
    extension refused, and so is a number too large for a float (``1e999`` would be
    ``inf``); a ``float`` field would take either and show ``nan`` as if it were data."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (write a number, or null)")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {shorten(text, 40)} is too large")
    return number


def _loads(text: str) -> Any:
    try:
        return _strict_json(text)
    except (ValueError, RecursionError):  # not JSON, a huge int, nested too deep
        return _NOT_READ


def _why_not_json(text: str) -> str:
    try:
        _strict_json(text)
    except json.JSONDecodeError as exc:
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except RecursionError:
        return "nested too deep"
    except ValueError as exc:
        return _first_line(exc)
    return "unreadable"


def _fill(
    value: Any,
    scopes: Sequence[Mapping[str, Any]],
    path: tuple[str | int, ...],
    missing: list[str],
    depth: int,
) -> Any:
    """``value`` with each string that is exactly ``"$name[.path]"`` replaced by the
    object (``variables.resolve``, the parameters' resolver); a name that resolves to
    nothing is kept as written and its error added to ``missing``."""
    if isinstance(value, str):
        whole = REFERENCE.fullmatch(value)
        if whole is None or not whole.group(1):
            return value
        try:
            return resolve(value, scopes)
        except CortexRuntimeError as exc:
            missing.append(_line(path_text(path), str(exc)))
            return value
    if depth >= MAX_JSON_DEPTH:
        return value
    if isinstance(value, dict):
        return {k: _fill(v, scopes, (*path, k), missing, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, scopes, (*path, i), missing, depth + 1) for i, v in enumerate(value)]
    return value


def error_lines(error: ValidationError) -> list[str]:
    """pydantic's errors as ``path: message (got ...)`` lines, in its order."""
    lines = []
    for item in error.errors(include_url=False, include_context=False):
        message = str(item.get("msg", "invalid"))
        got = item.get("input", _NOT_READ)
        if item.get("type") != "missing" and got is not _NOT_READ and _scalar(got):
            message = f"{message} (got {safe_repr(got, limit=60)})"
        lines.append(_line(path_text(item.get("loc", ())), message))
    return lines


def path_text(loc: Sequence[Any]) -> str:
    """A location as a person reads it: ``items[2].price``; ``(answer)`` for the root."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(answer)"


def _paths(lines: list[str]) -> set[str]:
    return {line.split(":")[0] for line in lines}


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _line(path: str, message: str) -> str:
    """One error line, secrets redacted before it is cut. A long path (a recursive
    model nested deep) keeps its end, where the bad field is, so the message shows."""
    path = " ".join(path.split())
    if len(path) > _PATH_LIMIT:
        path = "…" + tail(path, _PATH_LIMIT - 1)
    return shorten(" ".join(f"{path}: {message}".split()), _LINE_LIMIT)


def _first_line(exc: BaseException) -> str:
    text = redact(str(exc)).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return shorten(first, 300)


# ---- the example ------------------------------------------------------------------


def example_of(schema: Mapping[str, Any]) -> Any:
    """One value of the shape ``schema`` describes (placeholders: ``"text"``, ``0``):
    what the system prompt shows the model as an example answer."""
    defs = schema.get("$defs", {})
    return _example(schema, defs if isinstance(defs, Mapping) else {}, 0)


def _example(schema: Any, defs: Mapping[str, Any], depth: int) -> Any:
    if not isinstance(schema, Mapping) or depth > 12:
        return None
    if "examples" in schema and isinstance(schema["examples"], list) and schema["examples"]:
        return schema["examples"][0]
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _example(defs.get(ref.rsplit("/", 1)[-1], {}), defs, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            useful = [
                b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")
            ]
            return _example((useful or branches)[0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object":
        props = schema.get("properties")
        if isinstance(props, Mapping) and props:
            return {str(k): _example(v, defs, depth + 1) for k, v in props.items()}
        extra = schema.get("additionalProperties")
        return {"key": _example(extra, defs, depth + 1)} if isinstance(extra, Mapping) else {}
    if kind == "array":
        items = schema.get("prefixItems") or [schema.get("items", {})]
        return [_example(item, defs, depth + 1) for item in items]
    return _SCALARS.get(str(kind), _string_example(schema))


_SCALARS: dict[str, Any] = {"integer": 0, "number": 0.0, "boolean": True, "null": None}
_FORMATS = {"date-time": "2025-01-31T12:00:00Z", "date": "2025-01-31", "time": "12:00:00"}


def _string_example(schema: Mapping[str, Any]) -> str:
    return _FORMATS.get(str(schema.get("format")), "text")


def _is_text(schema: Mapping[str, Any]) -> bool:
    if schema.get("type") == "string":
        return True
    enum = schema.get("enum")
    return isinstance(enum, list) and bool(enum) and all(isinstance(v, str) for v in enum)


# ---- the type as a person writes it ----------------------------------------------------


def type_name(type_: Any) -> str:
    """A readable name: ``Weather``, ``list[Weather]``, ``Literal['a', 'b']``,
    ``int | None`` (classes by their own name, not their module's path)."""
    if type_ is type(None) or type_ is None:
        return "None"
    if type_ is Ellipsis:
        return "..."
    origin, args = typing.get_origin(type_), typing.get_args(type_)
    if origin is None or not args:
        if isinstance(type_, type):
            return type_.__name__
        return re.sub(r"\b(?:typing|typing_extensions|__main__)\.", "", repr(type_))
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(type_name(arg) for arg in args)
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    base = getattr(origin, "__name__", None) or type_name(origin)
    return f"{base}[{', '.join(type_name(arg) for arg in args)}]"


def type_from_text(text: str, namespace: Mapping[str, Any]) -> Any:
    """The type a person wrote on a cell line (``Weather``, ``list[int]``,
    ``Literal["a", "b"]``, ``int | None``), evaluated in ``namespace`` with the names of
    ``typing`` beneath it. It is the user's own text, like a cell's code; an expression
    only (no statements), and any failure is a ``BadOutputType`` naming the text."""
    source = text.strip()
    try:
        ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise BadOutputType(source, f"it is not a Python expression ({exc.msg})") from None
    names: dict[str, Any] = {n: getattr(typing, n) for n in typing.__all__}
    names.update(namespace)
    try:
        return eval(source, {"__builtins__": __builtins__}, names)
    except Exception as exc:
        raise BadOutputType(source, _first_line(exc)) from None
