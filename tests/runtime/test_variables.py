"""``$name`` references: finding them, resolving them, and the names that may be bound."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from cortex_jupyter.runtime import (
    BadReference,
    InvalidVariableName,
    UnknownVariable,
    check_variable_name,
    find_references,
    resolve,
)


class Frame:
    """Stands in for a DataFrame: an object that is not JSON and must not be copied."""

    shape = (3, 2)


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("$a", {"a"}),
        ("x $a and $b.c.d", {"a", "b"}),
        ("$$a costs $$5", set()),
        ({"k": ["$x", {"deep": ("$y",)}], "$key": 1}, {"x", "y"}),
        ("no refs, $5 and $ alone", set()),
        (42, set()),
    ],
)
def test_find_references(value: Any, names: set[str]) -> None:
    assert find_references(value) == names


def test_whole_string_reference_passes_the_object_itself() -> None:
    frame = Frame()
    out = resolve({"df": "$df", "nested": [{"again": "$df"}]}, [{}, {"df": frame}])
    assert out["df"] is frame
    assert out["nested"][0]["again"] is frame


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("total: $n items", "total: 3 items"),
        ("$n$n", "33"),
        ("price $$5 and $$n", "price $5 and $n"),
        ("$$", "$"),
        ("$user.name wrote", "ada wrote"),
        ("$obj.shape.0 rows", "3 rows"),
        ("$items.1", "b"),
        ("a $5 stays", "a $5 stays"),
        ("end with $n.", "end with 3."),
    ],
)
def test_references_inside_strings(template: str, expected: Any) -> None:
    scope = {"n": 3, "user": {"name": "ada"}, "obj": Frame(), "items": ["a", "b"]}
    assert resolve(template, [scope]) == expected


def test_dotted_whole_reference_keeps_type() -> None:
    scope = {"cfg": {"limits": {"max": 10}}, "obj": SimpleNamespace(items=[1, 2])}
    assert resolve("$cfg.limits.max", [scope]) == 10
    assert resolve("$obj.items", [scope]) is scope["obj"].items


def test_scopes_are_searched_in_order() -> None:
    outputs, feeds, namespace = {"x": "run"}, {"x": "feed", "y": "feed"}, {"x": "nb", "z": "nb"}
    scopes = [outputs, feeds, namespace]
    assert resolve(["$x", "$y", "$z"], scopes) == ["run", "feed", "nb"]


def test_values_without_references_are_untouched() -> None:
    params = {"a": [1, 2], "b": {"c": None}}
    assert resolve(params, [{}]) == params
    marker = object()
    assert resolve(marker, [{}]) is marker


def test_unknown_name_suggests_close_names() -> None:
    with pytest.raises(
        UnknownVariable, match=r"unknown variable \$sales_dta.*did you mean \$sales_data"
    ):
        resolve({"x": ["$sales_dta"]}, [{"sales_data": 1}, {}, {"_private": 2}])


def test_unknown_name_without_close_names() -> None:
    with pytest.raises(UnknownVariable, match=r"\$zzz.*no similar name exists"):
        resolve("$zzz", [{"alpha": 1}])


def test_bad_reference_names_the_part() -> None:
    with pytest.raises(BadReference, match=r"\$user.email: a dict has no key or attribute 'email'"):
        resolve("$user.email", [{"user": {"name": "ada"}}])


def test_private_attributes_are_not_reachable() -> None:
    with pytest.raises(BadReference, match="__class__"):
        resolve("$x.__class__", [{"x": 1}])


@pytest.mark.parametrize("name", ["result", "df2", "Sales", "x_y"])
def test_valid_variable_names(name: str) -> None:
    check_variable_name(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("In", "IPython's own name"),
        ("Out", "IPython's own name"),
        ("get_ipython", "IPython's own name"),
        ("exit", "IPython's own name"),
        ("quit", "IPython's own name"),
        ("_x", "starting with '_'"),
        ("_", "starting with '_'"),
        ("2x", "not a Python identifier"),
        ("a-b", "not a Python identifier"),
        ("", "not a Python identifier"),
        ("class", "keyword"),
    ],
)
def test_refused_variable_names(name: str, reason: str) -> None:
    with pytest.raises(InvalidVariableName, match=reason):
        check_variable_name(name)
