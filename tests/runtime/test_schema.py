"""Schemas for the model, from type hints and docstrings."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional, Union

import pytest

from cortex_jupyter.runtime.core.values.schema import (
    function_schema,
    parse_docstring,
    schema_kinds,
    type_schema,
)


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Point:
    x: float
    y: float = 0.0
    tags: list[str] = field(default_factory=list)


@pytest.mark.parametrize(
    ("hint", "schema"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (Any, {}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (list, {"type": "array"}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
        ),
        (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
        (dict[str, Any], {"type": "object"}),
        (Optional[int], {"type": ["integer", "null"]}),  # noqa: UP045
        (int | None, {"type": ["integer", "null"]}),
        (
            Union[int, list[str]],  # noqa: UP007
            {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]},
        ),
        (Literal["a", "b"], {"enum": ["a", "b"], "type": "string"}),
        (Literal[1, "a"], {"enum": [1, "a"]}),
        (Annotated[int, "meta"], {"type": "integer"}),
        (Colour, {"enum": ["red", "blue"]}),
        (
            Point,
            {
                "type": "object",
                "properties": {
                    "x": {"type": "number"},
                    "y": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["x"],
            },
        ),
        (complex, {}),
    ],
)
def test_type_schema(hint: Any, schema: dict[str, Any]) -> None:
    assert type_schema(hint) == schema


def google(city: str, days: int = 3, *, units: Literal["metric", "imperial"] = "metric") -> str:
    """Forecast the weather for a city.

    Uses the free service; results are cached.

    Args:
        city: Name of the city,
            as the user wrote it.
        days (int): How many days ahead.
        units: Unit system.

    Returns:
        A short forecast.
    """
    return city


def numpy_style(query: str, limit: int | None = None, **filters: Any) -> list[str]:
    """Search the catalogue.

    Parameters
    ----------
    query : str
        Words to look for.
    limit : int, optional
        At most this many results.

    Returns
    -------
    list of str
    """
    return []


def test_function_schema_google_docstring() -> None:
    description, schema = function_schema(google)
    assert description == "Forecast the weather for a city."
    assert schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "Name of the city, as the user wrote it."},
            "days": {"type": "integer", "description": "How many days ahead.", "default": 3},
            "units": {
                "enum": ["metric", "imperial"],
                "type": "string",
                "description": "Unit system.",
                "default": "metric",
            },
        },
        "required": ["city"],
        "additionalProperties": False,
    }


def test_function_schema_numpy_docstring_and_var_keyword() -> None:
    description, schema = function_schema(numpy_style)
    assert description == "Search the catalogue."
    assert schema["properties"]["query"] == {"type": "string", "description": "Words to look for."}
    assert schema["properties"]["limit"]["description"] == "At most this many results."
    assert schema["properties"]["limit"]["type"] == ["integer", "null"]
    assert schema["additionalProperties"] is True
    assert schema["required"] == ["query"]


def test_function_schema_skips_injected_and_handles_no_hints() -> None:
    sentinel = object()

    def f(feeds, a, b=sentinel):  # type: ignore[no-untyped-def]
        pass

    description, schema = function_schema(f, skip=("feeds",))
    assert description == ""
    assert schema == {
        "type": "object",
        "properties": {"a": {}, "b": {}},
        "required": ["a"],
        "additionalProperties": False,
    }


def test_unresolvable_hints_fall_back_to_any() -> None:
    def f(a: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    assert function_schema(f)[1]["properties"] == {"a": {}}


def test_docstring_description_is_the_first_paragraph_joined() -> None:
    assert parse_docstring("Line one\ncontinues here.\n\nMore.") == (
        "Line one continues here.",
        {},
    )
    assert parse_docstring("") == ("", {})


# ---- the JSON types a property declares, for fitting $name values (coerce.py) ----------------

DEFS = {"$defs": {"Level": {"enum": [1, 2], "type": "integer"}, "Loop": {"$ref": "#/$defs/Loop"}}}


class _NotJson:
    """A value no JSON holds; its repr is the same in every process (a test id)."""

    def __repr__(self) -> str:
        return "<not JSON>"


NOT_JSON = _NotJson()


@pytest.mark.parametrize(
    ("prop", "kinds"),
    [
        ({"type": "string"}, ("string",)),
        ({"type": ["integer", "null"]}, ("integer", "null")),
        # pydantic's int | None, and a union with no null
        ({"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}, ("integer", "null")),
        ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, ("number", "integer")),
        ({"anyOf": [{"type": ["string", "null"]}, {"type": "string"}]}, ("string", "null")),
        ({"$ref": "#/$defs/Level"}, ("integer",)),
        ({"anyOf": [{"$ref": "#/$defs/Level"}, {"type": "null"}]}, ("integer", "null")),
        ({"allOf": [{"$ref": "#/$defs/Level"}], "description": "how loud"}, ("integer",)),
        ({"enum": ["a", "b"]}, ("string",)),
        ({"const": 3}, ("integer",)),
        # any value: nothing to fit to
        ({}, None),
        ({"anyOf": [{"type": "integer"}, {}]}, None),
        ({"anyOf": []}, None),
        ({"type": "decimal"}, None),
        ({"$ref": "#/$defs/Missing"}, None),
        ({"$ref": "https://example.com/schema.json"}, None),
        ({"$ref": "#/$defs/Loop"}, None),
        ({"enum": [NOT_JSON]}, None),
        ("string", None),
    ],
    ids=repr,
)
def test_schema_kinds_reads_type_anyof_oneof_allof_enum_and_local_refs(
    prop: Any, kinds: tuple[str, ...] | None
) -> None:
    assert schema_kinds(prop, DEFS) == kinds
