"""``Scope``: the part of a notebook namespace a model may reach, and why."""

from __future__ import annotations

import os

import pytest

from cortex_jupyter.runtime import NotVisible, UnknownVariable, resolve
from cortex_jupyter.runtime.core.trust.scope import Binding, Rule, Scope, add_rule

NAMESPACE = {
    "df": [1, 2],
    "df_sales": 10,
    "notes": "private",
    "os": os,
    "In": ["", "x = 1"],
    "_i1": "x = 1",
    "_": 42,
    "weather": {"temp": 18},
}


def bound(*names: str, run: str = "r1") -> dict[str, Binding]:
    """Bindings of ``names`` to the objects they hold in NAMESPACE, as a run made them."""
    return {name: Binding(run, NAMESPACE[name]) for name in names}


def expose(*patterns: str) -> list[Rule]:
    return [Rule(p, expose=True) for p in patterns]


def hide(*patterns: str) -> list[Rule]:
    return [Rule(p, expose=False) for p in patterns]


def test_only_prompt_bound_and_exposed_names_are_visible_and_each_says_why() -> None:
    scope = Scope(NAMESPACE, prompt={"df", "missing"}, bound=bound("weather"), rules=expose("df_*"))
    assert scope.reasons() == {
        "df": "written as $name in the prompt",
        "df_sales": "exposed with %cortex expose df_*",
        "weather": "bound by cortex run r1",
    }
    assert "notes" not in scope and dict(scope) == {
        "df": [1, 2],
        "df_sales": 10,
        "weather": {"temp": 18},
    }
    with pytest.raises(KeyError):
        scope["notes"]


@pytest.mark.parametrize("name", ["os", "In", "_i1", "_"])
def test_ipython_names_and_modules_are_never_visible_not_even_named_or_exposed(name: str) -> None:
    scope = Scope(NAMESPACE, prompt={name}, rules=expose("*"), bound=bound(name))
    assert name not in scope
    assert "never visible to a model" in (scope.hidden(name) or "")


def test_hidden_names_win_over_bound_and_exposed_but_not_over_the_prompt() -> None:
    assert "weather" not in Scope(NAMESPACE, bound=bound("weather"), rules=hide("weather"))
    assert "df" not in Scope(NAMESPACE, rules=[*expose("df"), *hide("df")])
    assert "df" in Scope(NAMESPACE, prompt={"df"}, rules=hide("df"))


def test_a_hide_pattern_covers_bound_and_exposed_names_and_the_latest_rule_decides() -> None:
    namespace = {"data_a": 1, "data_b": 2, "data_c": 3, "other": 4}
    runs = {name: Binding("r1", value) for name, value in namespace.items()}
    assert set(Scope(namespace, bound=runs, rules=hide("data_*"))) == {"other"}
    assert set(Scope(namespace, rules=[*expose("data_*"), *hide("data_b")])) == {
        "data_a",
        "data_c",
    }
    assert set(Scope(namespace, rules=[*hide("data_*"), *expose("data_a")])) == {"data_a"}
    # a rule again for the same pattern replaces the earlier one
    rules = add_rule(add_rule(hide("data_*"), Rule("data_*", expose=True)), Rule("x", False))
    assert [str(r) for r in rules] == ["expose data_*", "hide x"]
    hidden = Scope(namespace, bound=runs, rules=hide("data_*"))
    assert "hidden with %cortex hide data_*" in (hidden.hidden("data_a") or "")
    assert hidden.withheld() == {
        "data_a": "hidden with %cortex hide data_*",
        "data_b": "hidden with %cortex hide data_*",
        "data_c": "hidden with %cortex hide data_*",
    }


def test_a_name_is_the_runs_only_while_it_holds_the_object_the_run_bound() -> None:
    namespace: dict[str, object] = {"lookup": [1, 2]}
    runs = {"lookup": Binding("r7", namespace["lookup"])}
    assert Scope(namespace, bound=runs).why("lookup") == "bound by cortex run r7"
    namespace["lookup"] = [1, 2]  # equal, but the user's own object now
    scope = Scope(namespace, bound=runs)
    assert "lookup" not in scope and scope.owner("lookup") is None
    assert "is yours again: cortex run r7 bound it" in (scope.hidden("lookup") or "")
    assert scope.withheld() == {"lookup": "yours: you assigned it after cortex run r7 bound it"}
    # released, the binding no longer holds anything, not even a None the user assigns
    namespace["lookup"] = None
    assert "lookup" not in Scope(namespace, bound={"lookup": runs["lookup"].released()})
    assert "lookup" in Scope(namespace, bound=runs, rules=expose("lookup"))


def test_resolving_a_hidden_name_says_how_to_expose_it_and_suggests_only_visible_names() -> None:
    scope = Scope(NAMESPACE, prompt={"df"})
    with pytest.raises(NotVisible, match=r"%cortex expose notes"):
        resolve("$notes", [{}, scope])
    with pytest.raises(UnknownVariable) as raised:
        resolve("$note", [{}, scope])
    assert "notes" not in raised.value.suggestions  # a hidden name is never suggested
    assert resolve("$df.1", [{}, scope]) == 2


def test_a_script_scope_reads_as_the_authors_own() -> None:
    assert Scope(NAMESPACE, prompt={"df"}, script=True).why("df") == "written in the --script cell"
