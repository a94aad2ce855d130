"""Outputs come back from the store as they were: the same values, of the same types.

JSON read a tuple back as a list, ``{1: 'one'}`` as ``{'1': 'one'}`` and a str Enum as
its string: ``open_run`` and resume gave the run those, and a resumed run answered with
the wrong value. A value is kept as JSON now only when JSON gives it back equal and of
the same types, all the way down; anything else is pickled.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import sqlite3
from collections import OrderedDict, namedtuple
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cortex_jupyter
from cortex_jupyter import store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry


class Colour(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Metres(float):
    pass


Point = namedtuple("Point", "x y")


def same(a: Any, b: Any) -> bool:
    """Equal, with the same type at every place (what the notebook sees)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(
            same(k, j) and same(a[k], b[j]) for k, j in zip(a, b, strict=True)
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:
        return b != b  # NaN is NaN
    if isinstance(a, set | frozenset):
        return a == b and {type(x) for x in a} == {type(x) for x in b}
    return bool(a == b)


def kept(value: Any, path: Path) -> tuple[Any, str]:
    """``value`` as an action's output, stored, then read back with ``open_run``."""
    registry = Registry()

    @registry.tool
    def give() -> Any:
        """Give the value."""
        return value

    script = '<action id="g">{"name": "give", "output_key": "got"}</action><response>ok</response>'
    kept_in = store.open_store(path)
    run = Agent(model=ScriptModel(script), registry=registry).run_sync("give", store=kept_in)
    back = cortex_jupyter.open_run(run.id, store=path)
    with sqlite3.connect(path) as db:
        (kind,) = db.execute(
            "SELECT kind FROM outputs WHERE run = ? AND action = 'g'", (run.id,)
        ).fetchone()
    assert same(back.variables["got"], back.actions["g"].output)
    return back.actions["g"].output, kind


ODD = [
    (1, "one"),
    Point(1, 2),
    {1: "one"},
    {"a": (1, 2)},
    Colour.RED,
    Level.HIGH,
    Metres(2.5),
    {1, 2},
    frozenset({"x"}),
    decimal.Decimal("1.10"),
    dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.timezone.utc),
    dt.date(2026, 1, 2),
    b"bytes",
    OrderedDict(a=1),
    [True, 1, 1.0],
    {"nan": float("nan")},
    {None: 1},
]


@pytest.mark.parametrize("value", ODD, ids=[type(v).__name__ + str(i) for i, v in enumerate(ODD)])
def test_an_output_json_would_change_comes_back_as_it_was(value: Any, tmp_path: Path) -> None:
    back, kind = kept(value, tmp_path / "runs.db")
    assert same(back, value), (back, value)
    if not same(value, [True, 1, 1.0]):
        assert kind == "pickle"


def test_plain_json_is_still_kept_as_json(tmp_path: Path) -> None:
    value = {"a": [1, 2.5, True, None, "x"], "b": {"c": []}}
    back, kind = kept(value, tmp_path / "runs.db")
    assert kind == "json" and same(back, value)


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.decimals(allow_nan=False, places=2)
    | st.sampled_from([Colour.RED, Level.HIGH, Metres(1.5), b"x", dt.date(2020, 1, 1)])
)
KEYS = st.text(max_size=4) | st.integers(-3, 3) | st.booleans() | st.none()


def _nested(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(children, max_size=3)
        | st.lists(children, max_size=3).map(tuple)
        | st.builds(Point, children, children)
        | st.dictionaries(KEYS, children, max_size=3)
        | st.frozensets(st.integers(0, 9) | st.text(max_size=3), max_size=3)
    )


VALUES = st.recursive(SCALARS, _nested, max_leaves=12)


@settings(max_examples=60)
@given(value=VALUES)
def test_any_nested_value_stored_then_opened_is_equal_and_of_the_same_types(
    value: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    back, _ = kept(value, tmp_path_factory.mktemp("outputs") / "runs.db")
    assert same(back, value), (back, value)


def test_a_lone_surrogate_a_model_writes_does_not_keep_its_action_out_of_the_store(
    tmp_path: Path,
) -> None:
    """A model writes ``"\\ud800"`` in an action's JSON (a file name ``os.listdir`` read
    with ``surrogateescape`` holds such too): UTF-8 has no lone surrogates, and the
    store failed that write, so the action stayed ``running`` in the store, its output
    and everything in the same write gone, though the run completed. It is kept, and
    reads back as it was, as does a prompt and an answer holding one."""
    registry = Registry()

    @registry.tool
    def echo(x: str) -> str:
        return "got " + x

    script = (
        '<action id="a">{"name": "echo", "parameters": {"x": "\\ud800"}}</action>\n'
        "--- next turn ---\n<response>done \\udcff</response>"
    )
    path = tmp_path / "runs.db"
    kept = store.open_store(path)
    run = Agent(model=ScriptModel(script), registry=registry).run_sync("go \udcff", store=kept)
    assert run.actions["a"].output == "got \ud800"
    kept.flush()
    assert kept.problem is None
    back = cortex_jupyter.open_run(run.id, store=path)
    assert back.actions["a"].status == "done"
    assert back.actions["a"].output == "got \ud800"
    assert back.prompt == "go \\udcff"  # (a text shows where it was)
