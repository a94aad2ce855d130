"""``Scope``: the part of a notebook namespace a model may reach, and why."""

from __future__ import annotations

import os

import pytest

from cortex_jupyter.runtime import NotVisible, UnknownVariable, resolve
from cortex_jupyter.runtime.scope import Scope

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


def test_only_prompt_bound_and_exposed_names_are_visible_and_each_says_why() -> None:
    scope = Scope(NAMESPACE, prompt={"df", "missing"}, bound={"weather"}, exposed=["df_*"])
    assert scope.reasons() == {
        "df": "written as $name in the prompt",
        "df_sales": "exposed with %cortex expose",
        "weather": "bound by a cortex run",
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
    scope = Scope(NAMESPACE, prompt={name}, exposed=["*"], bound={name})
    assert name not in scope
    assert "never visible to a model" in (scope.hidden(name) or "")


def test_hidden_names_win_over_bound_and_exposed_but_not_over_the_prompt() -> None:
    assert "weather" not in Scope(NAMESPACE, bound={"weather"}, hidden={"weather"})
    assert "df" not in Scope(NAMESPACE, exposed=["df"], hidden={"df"})
    assert "df" in Scope(NAMESPACE, prompt={"df"}, hidden={"df"})


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
