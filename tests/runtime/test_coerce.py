"""``$name`` values fitted to the type their parameter declares (runtime/core/values/coerce.py): the
rule on its own, and through the scheduler with Python tools (MCP tools: test_mcp.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import default_registry
from cortex_jupyter.runtime import Registry, run_stream
from cortex_jupyter.runtime.core.errors import ParameterTypeError
from cortex_jupyter.runtime.core.values.coerce import fit
from cortex_jupyter.runtime.core.values.schema import Kinds, hint_kinds, schema_kinds
from tests.runtime.fixture_types import Act


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


LOSS = "which cannot become one without loss"
BOOL = "which is never converted to a number or text"


@pytest.mark.parametrize(
    ("value", "kinds", "wants", "got", "why"),
    [
        (2.5, ("integer",), "an integer", "a float", LOSS),
        ("042", ("integer",), "an integer", "a str", LOSS),
        (" 42", (int,), "an int", "a str", LOSS),
        ("4.0", ("integer",), "an integer", "a str", LOSS),
        ("2.50", ("number",), "a number", "a str", LOSS),
        ("1e3", ("number",), "a number", "a str", LOSS),
        ("nan", ("number",), "a number", "a str", LOSS),
        (True, ("string",), "a string", "a bool", BOOL),
        (True, ("integer",), "an integer", "a bool", BOOL),
        (True, ("number",), "a number", "a bool", BOOL),
        (np.bool_(True), ("integer",), "an integer", "a numpy.bool", BOOL),
        ("true", ("boolean",), "a boolean", "a str", LOSS),
        (1, ("boolean",), "a boolean", "an int", LOSS),
        ([1], ("string",), "a string", "a list", LOSS),
        ({"a": 1}, (str,), "a str", "a dict", LOSS),
        (None, ("string", "integer"), "a string or an integer", "None", LOSS),
        (float("nan"), ("integer", "null"), "an integer or null", "a float (nan)", LOSS),
        (
            "9" * 4301,
            ("integer",),
            "an integer",
            "a str of 4,301 digits",
            "more than Python converts (4,300)",
        ),
    ],
)
def test_a_value_that_would_lose_something_fails_naming_parameter_wanted_and_got(
    value: Any, kinds: Kinds, wants: str, got: str, why: str
) -> None:
    with pytest.raises(ParameterTypeError) as raised:
        fit_one(value, kinds)
    assert str(raised.value) == (
        f"parameter 'p' of 'tool' wants {wants}, but $v is {got}, {why}; the action was not run"
    )


@pytest.mark.parametrize(
    ("value", "kinds", "expected"),
    [
        (np.int64(5), ("string",), "5"),
        (np.float64(2.5), ("string",), "2.5"),
        (np.int64(5), ("integer",), 5),
        (np.float64(3.0), ("integer",), 3),
        (np.int64(5), ("number",), 5),
        (np.float32(2.5), ("number",), 2.5),
        (Decimal("0.1"), ("number",), 0.1),
        (np.bool_(False), ("boolean",), False),
        (np.bool_(True), ("integer", "boolean"), True),
        # a number stays a number when the parameter takes one, whatever the order declared
        (np.int64(5), (str, int), 5),
        (3.0, ("string", "integer"), 3),
        (np.float64(2.5), (str, int), "2.5"),
    ],
)
def test_numpy_and_decimal_values_convert_to_json_types_like_pythons(
    value: Any, kinds: Kinds, expected: Any
) -> None:
    fitted, notes = fit_one(value, kinds)
    assert fitted == expected and type(fitted) is type(expected)
    assert len(notes) == 1


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
    assert schema_kinds({"anyOf": [{"type": "string"}, {"type": "null"}]}) == ("string", "null")
    assert schema_kinds({"anyOf": [{"type": "string"}, {}]}) is None


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
        "parameter 'times' of 'repeat' wants an int, but $many is a str, which cannot become "
        "one without loss; the action was not run"
    )
    assert run.actions["b"].output == "int:42"  # a literal keeps today's checks


# ---- through a real shell: values as a notebook holds them -----------------------------
#
# A `$name` brings in whatever the notebook holds, and in a notebook numbers mostly come from
# numpy and pandas (`df.loc[0, "n"]` is an np.int64, `df["x"].mean()` an np.float64), or are
# Decimals and Fractions. Each case is a `%%cortex --script` cell whose action passes `$v` to
# a tool that declares the type, and checks what the tool got, or the node's one line.

_BIG = 10**5000  # more digits than Python converts to or from text (4,300 by default)


def _id(value: Any) -> str:
    if isinstance(value, int) and value.bit_length() > 10_000:
        return "int of 5,000 digits"
    text = repr(value)
    return text if len(text) <= 30 else f"{text[:27]}..."


@pytest.fixture
def probes() -> Iterator[None]:
    """Tools that say what they were called with: ``type:repr``."""

    def probe(kind: type) -> Callable[[Any], str]:
        def tool(value: Any) -> str:
            return f"{type(value).__name__}:{value!r}"

        tool.__annotations__ = {"value": kind, "return": str}
        tool.__doc__ = f"Report a {kind.__name__}."
        return tool

    for kind in (str, int, float, bool, list):
        default_registry.tool(name=f"probe_{kind.__name__}")(probe(kind))
    yield
    for kind in (str, int, float, bool, list):
        default_registry.remove("tool", f"probe_{kind.__name__}")


def call_probe(ip: InteractiveShell, kind: str, value: Any) -> Any:
    """The node of one ``probe_KIND`` action given ``$v``, in a script cell."""
    ip.user_ns["v"] = value
    body = {"name": f"probe_{kind}", "parameters": {"value": "$v"}}
    ip.run_cell_magic("cortex", "--script --delay 0", f'<action id="p">{json.dumps(body)}</action>')
    return ip.user_ns["_cortex"].actions["p"]


@pytest.mark.parametrize(
    ("kind", "value", "received", "named"),
    [
        ("str", np.int64(5), "str:'5'", "numpy.int64"),
        ("str", np.float64(2.5), "str:'2.5'", "numpy.float64"),
        ("str", np.float32(0.1), "str:'0.1'", "numpy.float32"),
        ("str", pd.DataFrame({"n": [7]}).loc[0, "n"], "str:'7'", "numpy.int64"),
        ("str", Decimal("2.50"), "str:'2.50'", "decimal.Decimal"),
        ("str", Fraction(1, 3), "str:'1/3'", "fractions.Fraction"),
        ("int", np.int64(5), "int:5", "numpy.int64"),
        ("int", np.float64(3.0), "int:3", "numpy.float64"),
        ("int", np.str_("42"), "int:42", "numpy.str_"),
        ("int", Decimal("3"), "int:3", "decimal.Decimal"),
        ("int", Fraction(6, 2), "int:3", "fractions.Fraction"),
        ("int", 1e30, f"int:{int(1e30)}", "float"),
        ("int", Fraction(10**30, 1), f"int:{10**30}", "fractions.Fraction"),
        ("float", np.float32(2.5), "float:2.5", "numpy.float32"),
        ("float", np.float32("nan"), "float:nan", "numpy.float32"),
        ("float", np.int64(5), "int:5", "numpy.int64"),
        ("float", Decimal("0.1"), "float:0.1", "decimal.Decimal"),
        ("float", Fraction(1, 2), "float:0.5", "fractions.Fraction"),
        ("bool", np.bool_(True), "bool:True", "numpy.bool"),
        ("list", np.array([1, 2]), "list:[1, 2]", "numpy.ndarray"),
        # a frame's column ($df.price) is a Series: its values, missing ones as None
        ("list", pd.Series([1.5, 2.0]), "list:[1.5, 2.0]", "pandas.Series"),
        ("list", pd.Series([1, None], dtype="Int64"), "list:[1, None]", "pandas.Series"),
        ("list", pd.Index(["a", "b"]), "list:['a', 'b']", "pandas.Index"),
        # a 0-d array (a numpy reduction kept as an array) is the number it holds
        ("int", np.array(5), "int:5", "numpy.ndarray"),
        ("float", np.array(2.5), "float:2.5", "numpy.ndarray"),
        ("str", np.array(7), "str:'7'", "numpy.ndarray"),
    ],
    ids=_id,
)
def test_numbers_from_numpy_pandas_and_the_standard_library_convert_like_pythons(
    ip: InteractiveShell, probes: None, kind: str, value: Any, received: str, named: str
) -> None:
    node = call_probe(ip, kind, value)
    assert (node.status, node.output) == ("done", received)
    assert node.note == f"$v ({named}) was passed to 'value' as {kind}"


@pytest.mark.parametrize(
    ("kind", "value"),
    [("str", np.str_("x")), ("int", 7), ("float", np.float64(2.5)), ("float", 3), ("bool", True)],
    ids=_id,
)
def test_a_value_that_already_fits_is_passed_as_it_is(
    ip: InteractiveShell, probes: None, kind: str, value: Any
) -> None:
    node = call_probe(ip, kind, value)
    assert (node.status, node.output, node.note) == (
        "done",
        f"{type(value).__name__}:{value!r}",
        None,
    )


@pytest.mark.parametrize(
    ("kind", "value", "why"),
    [
        ("int", True, f"a bool, {BOOL}"),
        ("int", np.bool_(False), f"a numpy.bool, {BOOL}"),
        ("float", True, f"a bool, {BOOL}"),
        ("str", np.bool_(True), f"a numpy.bool, {BOOL}"),
        ("bool", 1, "an int, which cannot become one without loss"),
        ("bool", np.int64(0), "a numpy.int64, which cannot become one without loss"),
        ("int", np.float64("nan"), "a numpy.float64 (nan), which cannot become one without loss"),
        ("int", float("-inf"), "a float (-inf), which cannot become one without loss"),
        ("int", Decimal("NaN"), "a decimal.Decimal (NaN), which cannot become one without loss"),
        ("int", np.float64(2.5), "a numpy.float64, which cannot become one without loss"),
        ("int", Decimal("3.5"), "a decimal.Decimal, which cannot become one without loss"),
        ("float", Fraction(1, 3), "a fractions.Fraction, which cannot become one without loss"),
        (
            "float",
            Decimal("0.1000000000000000000001"),
            "a decimal.Decimal, which cannot become one without loss",
        ),
        (
            "float",
            Fraction(10**400, 1),
            "a fractions.Fraction, which cannot become one without loss",
        ),
        ("int", "5" * 5000, "a str of 5,000 digits, more than Python converts (4,300)"),
        ("float", "5" * 5000, "a str of 5,000 digits, more than Python converts (4,300)"),
        ("str", _BIG, "an int of more than 4,300 digits, more than Python converts (4,300)"),
        ("str", None, "None, which cannot become one without loss"),
    ],
    ids=_id,
)
def test_a_value_that_cannot_convert_fails_its_node_with_one_line_saying_why(
    ip: InteractiveShell, probes: None, kind: str, value: Any, why: str
) -> None:
    node = call_probe(ip, kind, value)
    article = "an" if kind == "int" else "a"
    assert (node.status, node.started) == ("failed", None)
    assert node.error == (
        f"parameter 'value' of 'probe_{kind}' wants {article} {kind}, but $v is {why}; "
        "the action was not run"
    )
