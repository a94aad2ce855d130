"""Fitting a ``$name`` value to the type its parameter declares, when nothing is lost.

A model passes notebook objects by reference (``{"text": "$product"}``), so a parameter
gets whatever type the notebook holds, not the type the tool declares (an MCP tool's
``inputSchema``, a Python tool's annotations): an MCP server refuses ``42`` for a
``string``, a Python ``str`` parameter would get an int. So a top-level parameter that is
exactly ``"$name"`` is fitted to what the parameter declares, by one small rule:

- to a **string**: an int or a float (never a bool) becomes its text: ``42`` -> ``"42"``;
- to an **integer**: a float without a fractional part (``2.0`` -> ``2``), another
  integral number (numpy's ``int64``) or a string that is exactly an integer's text
  (``"42"``; not ``"042"``, ``" 42"``, ``"+42"`` or ``"4.0"``);
- to a **number**: a string that is exactly a number's text as Python writes it
  (``"2.5"``, ``"42"``; not ``"2.50"`` or ``"1e3"``), another real number (numpy's);
- to an **array** (a JSON ``array``, a Python ``list``): a tuple becomes a list.

Nothing else is converted (no bool from ``"true"``, no text from a list): a value of
another type fails its node with ``ParameterTypeError``, one line naming the parameter,
the type it wants and the type it got. A conversion is reported (``fit`` returns the
notes) so the node can say what it was called with. A literal the model wrote is left to
the tool's own checks: only values a ``$name`` brought in are fitted.

Kinds are JSON type names (from a schema) or Python classes (from annotations). Pure.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from cortex_jupyter.runtime.core.errors import ParameterTypeError
from cortex_jupyter.runtime.core.schema import Kinds
from cortex_jupyter.runtime.core.variables import REFERENCE

__all__ = ["Wants", "fit"]

#: What one parameter accepts: JSON type names and/or Python classes; None: anything.
Wants = Callable[[str], Kinds | None]

_INTEGER_TEXT = re.compile(r"-?(0|[1-9][0-9]*)")
_NO = object()

# JSON type name -> the check a value must pass (a bool is never an integer or number).
_JSON_FITS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, Mapping),
    "null": lambda v: v is None,
}
# The Python classes that convert like a JSON type.
_TARGETS: dict[str | type, str] = {
    "string": "string",
    "integer": "integer",
    "number": "number",
    "array": "array",
    str: "string",
    int: "integer",
    float: "number",
    list: "array",
}


def fit(
    tool: str, raw: Mapping[str, Any], resolved: dict[str, Any], wants: Wants
) -> tuple[dict[str, Any], list[str]]:
    """``resolved`` with every parameter that was exactly ``"$name"`` in ``raw`` fitted
    to ``wants(parameter)``, and a note for each conversion. Raises ``ParameterTypeError``
    for a value that does not fit and cannot be converted without loss."""
    fitted = dict(resolved)
    notes = []
    for key, source in raw.items():
        reference = _whole_reference(source)
        kinds = wants(key) if reference is not None and key in resolved else None
        if reference is None or not kinds:
            continue
        value = resolved[key]
        if any(_fits(value, kind) for kind in kinds):
            continue
        for kind in kinds:
            converted = _convert(value, _TARGETS.get(kind))
            if converted is not _NO:
                fitted[key] = converted
                notes.append(
                    f"{reference} ({_type_name(value)}) was passed to {key!r} as {_name(kind)}"
                )
                break
        else:
            wanted = " or ".join(_name(kind) for kind in kinds)
            raise ParameterTypeError(tool, key, reference, wanted, _type_name(value))
    return fitted, notes


def _whole_reference(source: Any) -> str | None:
    """``source`` when it is exactly one ``$name[.path]`` reference, else None."""
    if not isinstance(source, str):
        return None
    match = REFERENCE.fullmatch(source)
    return source if match is not None and match.group(1) else None


def _fits(value: Any, kind: str | type) -> bool:
    if isinstance(kind, str):
        return _JSON_FITS[kind](value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return True  # an int is a float as Python's typing sees it
    try:
        return isinstance(value, kind)
    except TypeError:  # a class that refuses isinstance (a TypedDict, a Protocol): trust it
        return True


def _convert(value: Any, target: str | None) -> Any:
    """``value`` as ``target`` when nothing is lost, else ``_NO``."""
    if isinstance(value, bool) or target is None:
        return _NO
    if target == "string":
        return str(value) if type(value) in (int, float) else _NO
    if target == "integer":
        return _to_integer(value)
    if target == "number":
        return _to_number(value)
    if target == "array" and isinstance(value, tuple):
        return list(value)
    return _NO


def _to_integer(value: Any) -> Any:
    if isinstance(value, str):
        return int(value) if _INTEGER_TEXT.fullmatch(value) else _NO
    if isinstance(value, numbers.Integral):
        return operator.index(value)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(float(value))
    return _NO


def _to_number(value: Any) -> Any:
    if isinstance(value, str):
        if _INTEGER_TEXT.fullmatch(value):
            return int(value)
        try:
            number = float(value)
        except ValueError:
            return _NO
        return number if math.isfinite(number) and repr(number) == value else _NO
    if isinstance(value, numbers.Integral):
        return operator.index(value)
    if isinstance(value, numbers.Real) and float(value) == value:
        return float(value)
    return _NO


def _name(kind: str | type) -> str:
    return kind if isinstance(kind, str) else kind.__name__


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__
