"""JSON schemas for registered functions, from their signature, type hints and docstring.

The model is shown these schemas, so they describe what a tool takes in the terms a
model knows (JSON types). Only the common hints are translated; anything else becomes
``{}`` (any value), which is honest rather than wrong.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    None: {"type": "null"},
    dict: {"type": "object"},
    list: {"type": "array"},
    tuple: {"type": "array"},
    set: {"type": "array"},
    frozenset: {"type": "array"},
}


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of one type hint."""
    if hint is inspect.Parameter.empty or hint is Any:
        return {}
    if hint in _SIMPLE:
        return dict(_SIMPLE[hint])
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return type_schema(args[0])
    if origin is typing.Literal:
        return _literal_schema(args)
    if origin is typing.Union or origin is types.UnionType:
        return _union_schema(args)
    if origin in (list, set, frozenset, Sequence) or (origin is tuple and _is_homogeneous(args)):
        return {"type": "array", "items": type_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        return {"type": "array", "prefixItems": [type_schema(a) for a in args]}
    if origin in (dict, Mapping):
        out: dict[str, Any] = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            out["additionalProperties"] = type_schema(args[1])
        return out
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_schema(hint)
    return {}


def _is_homogeneous(args: tuple[Any, ...]) -> bool:
    return len(args) == 2 and args[1] is Ellipsis


def _literal_schema(args: tuple[Any, ...]) -> dict[str, Any]:
    kinds = {type(a) for a in args}
    out: dict[str, Any] = {"enum": list(args)}
    if len(kinds) == 1 and next(iter(kinds)) in _SIMPLE:
        out["type"] = _SIMPLE[next(iter(kinds))]["type"]
    return out


def _union_schema(args: tuple[Any, ...]) -> dict[str, Any]:
    parts = [type_schema(a) for a in args]
    if any(not p for p in parts):
        return {}
    if all(set(p) == {"type"} for p in parts):
        return {"type": [p["type"] for p in parts]}
    return {"anyOf": parts}


def _dataclass_schema(cls: type[Any]) -> dict[str, Any]:
    hints = resolved_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        props[f.name] = type_schema(hints.get(f.name, inspect.Parameter.empty))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


def resolved_hints(obj: Any) -> dict[str, Any]:
    """``obj``'s type hints, resolved; none when a forward reference does not resolve."""
    try:
        return typing.get_type_hints(obj)
    except Exception:  # unresolvable forward references: fall back to "any value"
        return {}


def function_schema(
    func: Callable[..., Any], skip: Sequence[str] = ()
) -> tuple[str, dict[str, Any]]:
    """(description, parameters schema) of ``func``; ``skip`` names injected parameters."""
    signature = inspect.signature(func)
    hints = resolved_hints(func)
    description, param_docs = parse_docstring(inspect.getdoc(func) or "")
    props: dict[str, Any] = {}
    required: list[str] = []
    extra = False
    for param in signature.parameters.values():
        if param.name in skip or param.kind is param.VAR_POSITIONAL:
            continue
        if param.kind is param.VAR_KEYWORD:
            extra = True
            continue
        prop = type_schema(hints.get(param.name, param.annotation))
        if param.name in param_docs:
            prop["description"] = param_docs[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif _is_json(param.default):
            prop["default"] = param.default
        props[param.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = extra
    return description, schema


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list | tuple):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


_GOOGLE_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$")
_NUMPY_SECTION = re.compile(r"^(Parameters|Params)\s*$")
_ANY_SECTION = re.compile(
    r"^(Returns?|Yields?|Raises|Examples?|Notes?|See Also|Attributes|Warnings?)\s*:?\s*$"
)
_GOOGLE_ITEM = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ITEM = re.compile(r"^(\w+)\s*(:.*)?$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and parameter descriptions from a Google or NumPy section."""
    lines = doc.expandtabs().splitlines()
    paragraph: list[str] = []
    for line in lines:
        if not line.strip():
            if paragraph:
                break
            continue
        if _GOOGLE_SECTION.match(line.strip()) or _ANY_SECTION.match(line.strip()):
            break
        paragraph.append(line.strip())
    description = " ".join(paragraph)
    params: dict[str, str] = {}
    for index, line in enumerate(lines):
        stripped = line.strip()
        if _GOOGLE_SECTION.match(stripped):
            params.update(_google_items(lines[index + 1 :], _indent(line)))
        elif (
            _NUMPY_SECTION.match(stripped)
            and index + 1 < len(lines)
            and set(lines[index + 1].strip()) == {"-"}
        ):
            params.update(_numpy_items(lines[index + 2 :], _indent(line)))
    return description, params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google_items(lines: list[str], section_indent: int) -> dict[str, str]:
    items: dict[str, list[str]] = {}
    current: str | None = None
    item_indent: int | None = None
    for line in lines:
        if not line.strip():
            continue
        indent = _indent(line)
        if indent <= section_indent:
            break
        if item_indent is None:
            item_indent = indent
        match = _GOOGLE_ITEM.match(line.strip())
        if indent == item_indent and match:
            current = match.group(1).lstrip("*")
            items[current] = [match.group(3).strip()]
        elif current is not None:
            items[current].append(line.strip())
    return {k: " ".join(p for p in v if p) for k, v in items.items()}


def _numpy_items(lines: list[str], section_indent: int) -> dict[str, str]:
    items: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        if not line.strip():
            continue
        indent = _indent(line)
        stripped = line.strip()
        if indent <= section_indent and (_ANY_SECTION.match(stripped) or set(stripped) == {"-"}):
            break
        match = _NUMPY_ITEM.match(stripped)
        if indent <= section_indent and match:
            current = match.group(1)
            items[current] = []
        elif current is not None and indent > section_indent:
            items[current].append(stripped)
        else:
            break
    return {k: " ".join(v) for k, v in items.items()}


# ---- what a parameter accepts, for fitting ``$name`` values (runtime.core.values.coerce) ---------

#: What a parameter accepts: JSON type names (from a schema) or Python classes (from
#: annotations); a value fits when it fits one of them.
Kinds = tuple[str | type, ...]

#: JSON schema types cortex can check a value against.
JSON_TYPES = frozenset(("string", "integer", "number", "boolean", "array", "object", "null"))


# How deep `anyOf`, `oneOf`, `allOf` and `$ref` are followed: real schemas nest one or two.
_MAX_SCHEMA_DEPTH = 8
# JSON value -> its JSON type, for `enum` and `const` without a `type`.
_JSON_TYPE_OF: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
    (type(None), "null"),
)


def schema_kinds(prop: Any, root: Any = None) -> tuple[str, ...] | None:
    """The JSON types a property schema declares, or None when it may be any value (or
    declares what cortex cannot check).

    Read the way schema generators write types: ``"type"`` (one or a list),
    ``anyOf``/``oneOf`` (pydantic's ``int | None`` is ``{"anyOf": [{"type": "integer"},
    {"type": "null"}]}``), ``allOf``, ``enum``/``const`` values, and a ``$ref`` to
    ``#/$defs/...`` or ``#/definitions/...`` in ``root`` (the whole input schema)."""
    kinds = _declared(prop, _Refs(root), 0)
    return tuple(dict.fromkeys(kinds)) if kinds else None


class _Refs:
    """The whole input schema's ``$ref`` targets, each read once per ``schema_kinds``: a
    ``$ref`` inside its own target (a cycle) is any value, and many ``$ref`` to the same
    definition (a server's generated schema, or a hostile one) cost one reading."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self._read: dict[str, list[str] | None] = {}

    def kinds(self, ref: str, depth: int) -> list[str] | None:
        if ref not in self._read:
            self._read[ref] = None  # while it is read: a cycle back to it is any value
            self._read[ref] = _declared(resolve_ref(ref, self.root), self, depth + 1)
        return self._read[ref]


def _declared(prop: Any, root: _Refs, depth: int) -> list[str] | None:
    if not isinstance(prop, Mapping) or depth > _MAX_SCHEMA_DEPTH:
        return None
    if "type" in prop:
        declared = prop["type"]
        kinds = [declared] if isinstance(declared, str) else declared
        ok = isinstance(kinds, list) and kinds and all(k in JSON_TYPES for k in kinds)
        return list(kinds) if ok else None
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return _either(prop[key], root, depth)
    if "allOf" in prop:
        return _all(prop["allOf"], root, depth)
    if "enum" in prop or "const" in prop:
        values = prop["enum"] if "enum" in prop else [prop["const"]]
        return _types_of(values)
    if isinstance(prop.get("$ref"), str):
        return root.kinds(prop["$ref"], depth)
    return None


def _either(branches: Any, root: _Refs, depth: int) -> list[str] | None:
    """A value may be of any branch's types; a branch that takes anything takes all."""
    if not isinstance(branches, list) or not branches:
        return None
    kinds: list[str] = []
    for branch in branches:
        found = _declared(branch, root, depth + 1)
        if found is None:
            return None
        kinds += found
    return kinds


def _all(branches: Any, root: _Refs, depth: int) -> list[str] | None:
    """A value must be of every branch's types: those the constraining branches share."""
    if not isinstance(branches, list):
        return None
    found = [k for k in (_declared(b, root, depth + 1) for b in branches) if k is not None]
    if not found:
        return None
    shared = [kind for kind in found[0] if all(kind in other for other in found[1:])]
    return shared or None


def _types_of(values: Any) -> list[str] | None:
    if not isinstance(values, list) or not values:
        return None
    kinds = []
    for value in values:
        kind = next((name for cls, name in _JSON_TYPE_OF if isinstance(value, cls)), None)
        if kind is None:
            return None
        kinds.append(kind)
    return kinds


def resolve_ref(ref: str, root: Any) -> Any:
    """The schema a local ``$ref`` (``#/$defs/Name``, ``#/definitions/Name``) points to."""
    if not ref.startswith("#/") or not isinstance(root, Mapping):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def hint_kinds(hint: Any) -> tuple[type, ...] | None:
    """The classes a type hint accepts (``Optional[str]`` -> ``(str, NoneType)``,
    ``list[int]`` -> ``(list,)``), or None when it cannot be told by class (``Any``, a
    ``Literal``, a type variable, a string that did not resolve)."""
    if hint is None or hint is type(None):
        return (type(None),)
    if hint is Any or hint is inspect.Parameter.empty:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return hint_kinds(args[0])
    if origin is typing.Union or origin is types.UnionType:
        parts = [hint_kinds(arg) for arg in args]
        if any(part is None for part in parts):
            return None
        return tuple(kind for part in parts if part is not None for kind in part)
    if isinstance(origin, type):
        return (origin,)
    if isinstance(hint, type) and origin is None:
        return (hint,)
    return None
