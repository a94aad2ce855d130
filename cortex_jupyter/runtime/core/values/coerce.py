"""Fitting a ``$name`` value to the type its parameter declares, when nothing is lost.

A model passes notebook objects by reference (``{"text": "$product"}``), so a parameter
gets whatever type the notebook holds, not the type the tool declares (an MCP tool's
``inputSchema``, a Python tool's annotations): an MCP server refuses ``42`` for a
``string``, a Python ``str`` parameter would get an int. So a top-level parameter that is
exactly ``"$name"`` is fitted to what the parameter declares, by one small rule.

Numbers are numbers whoever made them: numpy's and pandas' scalars (``np.int64``,
``np.float32``, ``df.loc[0, "n"]``), ``Decimal`` and ``Fraction`` convert as Python's
``int`` and ``float`` do.

- to a **string**: a number (never a bool) becomes its text: ``42`` -> ``"42"``,
  ``np.float32(0.1)`` -> ``"0.1"``, ``Decimal("2.50")`` -> ``"2.50"``;
- to an **integer**: a number with no fractional part (``2.0``, ``np.int64(2)``,
  ``Decimal("2")``, ``Fraction(4, 2)``) or a string that is exactly an integer's text
  (``"42"``; not ``"042"``, ``" 42"``, ``"+42"`` or ``"4.0"``); never NaN or infinity;
- to a **number**: a number a float holds exactly (``np.float32(2.5)``, ``Fraction(1, 2)``;
  a ``Decimal`` whose text a float writes back, ``Decimal("0.1")``), or a string that is
  exactly a number's text as Python writes it (``"2.5"``, ``"42"``; not ``"2.50"``);
- to a **boolean**: numpy's bool becomes a bool;
- to an **array** (a JSON ``array``, a Python ``list``): a tuple or a numpy array becomes a
  list (an array's numbers as Python's).

A bool is never a number or text, although Python counts ``True`` as an int: ``True`` given
for an ``int`` parameter is a mistake to report, not a 1 to pass on. Nothing else is
converted (no bool from ``"true"`` or ``1``, no text from a list): a value of another type
fails its node with ``ParameterTypeError``, one line naming the parameter, what it wants,
what it got and why it was not converted (a NaN shows as one; an integer longer than
Python converts to or from text, 4,300 digits by default, says so). A conversion is
reported (``fit`` returns the notes) so the node can say what it was called with. A
literal the model wrote is left to the tool's own checks: only values a ``$name`` brought
in are fitted.

Kinds are JSON type names (from a schema) or Python classes (from annotations). Pure.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
import sys
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from cortex_jupyter.runtime.core.errors import ParameterTypeError
from cortex_jupyter.runtime.core.values.schema import Kinds
from cortex_jupyter.runtime.core.values.variables import REFERENCE

__all__ = ["Wants", "fit", "is_bool"]

#: What one parameter accepts: JSON type names and/or Python classes; None: anything.
Wants = Callable[[str], Kinds | None]

_INTEGER_TEXT = re.compile(r"-?(0|[1-9][0-9]*)")
_NO = object()
_BOOL = "which is never converted to a number or text"

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
    "boolean": "boolean",
    "array": "array",
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
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
        for kind in sorted(kinds, key=lambda kind: _rank(value, kind)):
            converted = _convert(value, _TARGETS.get(kind))
            if converted is not _NO:
                fitted[key] = converted
                notes.append(
                    f"{reference} ({_type_name(value)}) was passed to {key!r} as {_name(kind)}"
                )
                break
        else:
            raise _refused(tool, key, reference, kinds, value)
    return fitted, notes


def _rank(value: Any, kind: str | type) -> int:
    """Which conversion to try first: a number stays a number where the parameter takes
    one (``np.int64(5)`` for ``str | int`` is ``5``, as a Python 5 would be), else the
    order the parameter declares."""
    number = isinstance(value, numbers.Real | Decimal) and not is_bool(value)
    return 0 if number and _TARGETS.get(kind) in ("integer", "number") else 1


def _whole_reference(source: Any) -> str | None:
    """``source`` when it is exactly one ``$name[.path]`` reference, else None."""
    if not isinstance(source, str):
        return None
    match = REFERENCE.fullmatch(source)
    return source if match is not None and match.group(1) else None


def _fits(value: Any, kind: str | type) -> bool:
    if isinstance(kind, str):
        return _JSON_FITS[kind](value)
    if is_bool(value) and _is_numeric(kind):
        return False  # True is an int to Python, but never a number a tool asked for
    if kind is float and isinstance(value, int):
        return True  # an int is a float as Python's typing sees it
    try:
        return isinstance(value, kind)
    except TypeError:  # a class that refuses isinstance (a TypedDict, a Protocol): trust it
        return True


def _is_numeric(kind: type) -> bool:
    try:
        return isinstance(kind, type) and kind is not bool and issubclass(kind, numbers.Number)
    except TypeError:  # a class that refuses issubclass
        return False


def is_bool(value: Any) -> bool:
    """A bool, Python's or numpy's (``np.bool_``, not an ``int`` subclass)."""
    return type(value) is bool or _is_numpy(value, "bool", "bool_")


def _is_numpy(value: Any, *names: str) -> bool:
    """Whether ``value`` is of numpy's class of one of these names (numpy not imported)."""
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ in names


# ---- conversions: the value as the target type, or _NO -------------------------------------


def _convert(value: Any, target: str | None) -> Any:
    """``value`` as ``target`` when nothing is lost, else ``_NO``."""
    if target is None:
        return _NO
    if _is_numpy(value, "ndarray") and value.ndim == 0:
        value = value[()]  # a 0-d array (a reduction kept as an array): the scalar it holds
    if is_bool(value):
        return bool(value) if target == "boolean" else _NO
    if target == "string":
        return _to_string(value)
    if target == "integer":
        return _to_integer(value)
    if target == "number":
        return _to_number(value)
    if target == "array":
        return _to_list(value)
    return _NO


def _to_string(value: Any) -> Any:
    if isinstance(value, numbers.Integral):
        return _text_of(operator.index(value))
    if isinstance(value, numbers.Real | Decimal):
        return str(value)  # numpy writes its floats' shortest text: float32(0.1) is "0.1"
    return _NO


def _to_list(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if _is_numpy(value, "ndarray") and value.ndim >= 1:
        return value.tolist()  # nested lists of Python numbers, exactly
    if _is_pandas(value, "Series", "Index"):  # a frame's column: its values, NA as None
        return [None if _is_pandas(item, "NAType") else item for item in value.tolist()]
    return _NO


def _is_pandas(value: Any, *names: str) -> bool:
    """Whether ``value`` is of pandas' class of one of these names (pandas not imported)."""
    kind = type(value)
    return kind.__module__.split(".")[0] == "pandas" and kind.__name__ in names


def _to_integer(value: Any) -> Any:
    if isinstance(value, str):
        return _parse_integer(value) if _INTEGER_TEXT.fullmatch(value) else _NO
    if isinstance(value, numbers.Integral):
        return operator.index(value)
    if isinstance(value, numbers.Rational):  # Fraction: exact, however large
        return int(value.numerator) if value.denominator == 1 else _NO
    if isinstance(value, Decimal):
        whole = value.is_finite() and value == value.to_integral_value()
        return int(value) if whole and value.adjusted() < _digit_limit() else _NO
    if isinstance(value, numbers.Real):
        number = float(value)
        whole = math.isfinite(number) and number.is_integer() and number == value
        return int(number) if whole else _NO
    return _NO


def _to_number(value: Any) -> Any:
    if isinstance(value, str):
        return _parse_number(value)
    if isinstance(value, numbers.Integral):
        return operator.index(value)
    if isinstance(value, Decimal):
        return _decimal_to_float(value)
    if isinstance(value, numbers.Real):
        try:
            number = float(value)
        except OverflowError:  # a Fraction beyond any float
            return _NO
        # Exact, or NaN for NaN (a Python float NaN passes a float parameter too).
        return number if number == value or (number != number and value != value) else _NO
    return _NO


def _decimal_to_float(value: Decimal) -> Any:
    """The float that writes the same number the Decimal does (``0.1``, ``2.50``)."""
    if value.is_snan():
        return _NO
    if not value.is_finite():
        return float(value)
    number = float(value)
    return number if math.isfinite(number) and Decimal(repr(number)) == value else _NO


def _parse_number(text: str) -> Any:
    if _INTEGER_TEXT.fullmatch(text):
        return _parse_integer(text)
    try:
        number = float(text)
    except ValueError:
        return _NO
    return number if math.isfinite(number) and repr(number) == text else _NO


def _parse_integer(text: str) -> Any:
    try:
        return int(text)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        return _NO


def _text_of(number: int) -> Any:
    try:
        return str(number)
    except ValueError:  # more digits than Python converts
        return _NO


def _digit_limit() -> int:
    return sys.get_int_max_str_digits() or sys.maxsize


# ---- the refusal: what the value is, and why it was not converted ---------------------------


def _refused(tool: str, key: str, reference: str, kinds: Kinds, value: Any) -> ParameterTypeError:
    wanted = " or ".join(_a(_name(kind)) for kind in kinds)
    targets = {_TARGETS.get(kind) for kind in kinds}
    got, why = _described(value, targets)
    return ParameterTypeError(tool, key, reference, wanted, got, *([why] if why else []))


def _described(value: Any, targets: set[str | None]) -> tuple[str, str | None]:
    """(what ``value`` is, why it was not converted: None for "something would be lost")."""
    got = _a(_type_name(value))
    limit = f"more than Python converts ({_digit_limit():,})"
    if is_bool(value):
        return got, _BOOL
    numeric = bool(targets & {"integer", "number"})
    if numeric and isinstance(value, str) and _INTEGER_TEXT.fullmatch(value):
        digits = len(value.lstrip("-"))
        if digits > _digit_limit():
            return f"{got} of {digits:,} digits", limit
    textual = "string" in targets and isinstance(value, numbers.Integral)
    if textual and _text_of(operator.index(value)) is _NO:
        return f"{got} of more than {_digit_limit():,} digits", limit
    if _not_finite(value):
        return f"{got} ({value})", None
    return got, None


def _not_finite(value: Any) -> bool:
    """NaN or an infinity (a float, numpy's, a Decimal)."""
    if isinstance(value, Decimal):
        return not value.is_finite()
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Rational):
        return not math.isfinite(value)
    return False


def _name(kind: str | type) -> str:
    return kind if isinstance(kind, str) else kind.__name__


def _type_name(value: Any) -> str:
    """``int``, ``str``, ``numpy.float64``, ``decimal.Decimal``: a builtin's or the
    notebook's own class by its name, any other with its package."""
    if value is None:
        return "None"
    kind = type(value)
    package = kind.__module__.partition(".")[0]
    return kind.__name__ if package in ("builtins", "__main__") else f"{package}.{kind.__name__}"


def _a(name: str) -> str:
    """The name with its article, as a sentence reads it: ``an int``, ``a str``, ``None``."""
    if name in ("None", "null"):
        return name
    return f"an {name}" if name[:1].lower() in "aeio" else f"a {name}"
