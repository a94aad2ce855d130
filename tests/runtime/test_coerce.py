"""``$name`` values fitted to the type their parameter declares (runtime/core/coerce.py): the
rule on its own, and through the scheduler with Python tools (MCP tools: test_mcp.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cortex_jupyter.protocol.events import ActionReady
from cortex_jupyter.runtime import Registry, run_stream
from cortex_jupyter.runtime.core.coerce import fit
from cortex_jupyter.runtime.core.errors import ParameterTypeError
from cortex_jupyter.runtime.core.schema import Kinds, hint_kinds, schema_kinds

Act = Callable[..., ActionReady]


def fit_one(value: Any, kinds: Kinds) -> tuple[Any, list[str]]:
    fitted, notes = fit("tool", {"p": "$v"}, {"p": value}, lambda name: kinds)
    return fitted["p"], notes


@pytest.mark.parametrize(
    ("value", "kinds", "expected"),
    [
        (42, ("string",), "42"),
        (2.5, (str,), "2.5"),
        (2.0, ("integer",), 2),
        (2.0, (int,), 2),
        ("42", ("integer",), 42),
        ("-7", (int,), -7),
        ("2.5", ("number",), 2.5),
        ("42", ("number",), 42),
        ("2.5", (float,), 2.5),
        ((1, 2), ("array",), [1, 2]),
        ((1, 2), (list,), [1, 2]),
        (42, ("string", "null"), "42"),
    ],
)
def test_a_value_is_converted_when_nothing_is_lost_and_the_note_says_so(
    value: Any, kinds: Kinds, expected: Any
) -> None:
    fitted, notes = fit_one(value, kinds)
    assert fitted == expected and type(fitted) is type(expected)
    assert notes == [f"$v ({type(value).__name__}) was passed to 'p' as {_name(kinds[0])}"]


def _name(kind: str | type) -> str:
    return kind if isinstance(kind, str) else kind.__name__


@pytest.mark.parametrize(
    ("value", "kinds", "wants", "got"),
    [
        (2.5, ("integer",), "integer", "float"),
        ("042", ("integer",), "integer", "str"),
        (" 42", (int,), "int", "str"),
        ("4.0", ("integer",), "integer", "str"),
        ("2.50", ("number",), "number", "str"),
        ("1e3", ("number",), "number", "str"),
        ("nan", ("number",), "number", "str"),
        (True, ("string",), "string", "bool"),
        (True, ("integer",), "integer", "bool"),
        ("true", ("boolean",), "boolean", "str"),
        ([1], ("string",), "string", "list"),
        ({"a": 1}, (str,), "str", "dict"),
        (None, ("string", "integer"), "string or integer", "None"),
    ],
)
def test_a_value_that_would_lose_something_fails_naming_parameter_wanted_and_got(
    value: Any, kinds: Kinds, wants: str, got: str
) -> None:
    with pytest.raises(ParameterTypeError) as raised:
        fit_one(value, kinds)
    assert str(raised.value) == (
        f"parameter 'p' of 'tool' wants {wants}, but $v is a {got} that cannot become one "
        "without loss; the action was not run"
    )


@pytest.mark.parametrize(
    ("value", "kinds"),
    [("x", ("string",)), (3, ("number",)), (3, (float,)), (None, (str, type(None))), (1, ())],
)
def test_a_value_of_the_declared_type_is_passed_as_it_is(value: Any, kinds: Kinds) -> None:
    assert fit_one(value, kinds) == (value, [])


def test_only_whole_references_are_fitted_not_literals_or_text_around_a_reference() -> None:
    raw = {"a": 42, "b": "n=$n", "c": "$n"}
    resolved = {"a": 42, "b": "n=42", "c": 42}
    fitted, notes = fit("tool", raw, resolved, lambda name: ("string",))
    assert fitted == {"a": 42, "b": "n=42", "c": "42"} and len(notes) == 1


def test_kinds_come_from_annotations_and_schemas() -> None:
    assert hint_kinds(str | None) == (str, type(None))
    assert hint_kinds(list[int]) == (list,)
    assert hint_kinds(Any) is None
    assert schema_kinds({"type": ["string", "null"]}) == ("string", "null")
    assert schema_kinds({"anyOf": [{"type": "string"}]}) is None


# ---- through the scheduler, with Python tools ---------------------------------------------


def typed_registry() -> Registry:
    registry = Registry(builtins=False)

    @registry.tool
    def label(text: str) -> str:
        """Label a text."""
        return f"{type(text).__name__}:{text}"

    @registry.tool
    def repeat(word: str, times: int = 1) -> str:
        """Repeat a word."""
        return word * times

    return registry


@pytest.mark.anyio
async def test_a_python_str_parameter_gets_the_text_of_an_int_and_the_node_says_so(
    act: Act,
) -> None:
    run = await run_stream(
        [
            act("a", "label", parameters={"text": "$product"}),
            act("b", "repeat", parameters={"word": "ab", "times": "$count"}),
        ],
        registry=typed_registry(),
        namespace={"product": 42, "count": 3.0},
    )
    assert run.actions["a"].output == "str:42"
    assert run.actions["a"].note == "$product (int) was passed to 'text' as str"
    assert run.actions["a"].resolved == {"text": "42"}
    assert run.actions["b"].output == "ababab"
    assert run.actions["b"].note == "$count (float) was passed to 'times' as int"


@pytest.mark.anyio
async def test_a_value_that_cannot_be_converted_fails_only_its_node(act: Act) -> None:
    run = await run_stream(
        [
            act("a", "repeat", parameters={"word": "ab", "times": "$many"}),
            act("b", "label", parameters={"text": 42}),  # the model's own literal
        ],
        registry=typed_registry(),
        namespace={"many": "lots"},
    )
    a = run.actions["a"]
    assert (a.status, a.started) == ("failed", None)
    assert a.error == (
        "parameter 'times' of 'repeat' wants int, but $many is a str that cannot become one "
        "without loss; the action was not run"
    )
    assert run.actions["b"].output == "int:42"  # a literal keeps today's checks
