"""Property (a) of issue 33: no ``$name.path`` from what a notebook exposes reaches a hidden
value, a module or a namespace, however it walks.

A notebook namespace (``__name__ == "__main__"``, its classes made there) holds a zoo of
what notebooks hold (widgets, generators, coroutines, pandas and numpy objects, a
matplotlib figure when matplotlib is installed, an exception with its traceback, notebook
objects holding a module, ``globals()``, a function or a hidden value, the odd objects of
``tests/odd_objects.py``) beside hidden names. Hypothesis walks paths from the exposed
names, up to six steps, each name drawn from ``dir()`` of the value reached so far (public
names only), or a key or an index of it, and resolves every prefix through the one
resolver every ``$name`` goes through (parameters, answers, typed answers).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cortex_jupyter.runtime import resolve
from cortex_jupyter.runtime.core.errors import CortexRuntimeError
from cortex_jupyter.runtime.core.trust.scope import Scope
from tests.odd_objects import notebook_only_objects, odd_objects

DIARY = "my diary: the vault code is 4417"
KEY = b"kernel-signing-key-0123456789"
PART = re.compile(r"[A-Za-z0-9_]+")

#: The notebook's cell: what it defines runs in a ``__main__`` namespace, as a cell does.
CELL = f"""
import os, sys, asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import NamedTuple
import ipywidgets, numpy as np, pandas as pd
from pydantic import BaseModel

private_notes = {DIARY!r}
private_rows = [{{"note": private_notes}}]
session_key = {KEY!r}

slider = ipywidgets.IntSlider(value=3)
slider.comm.kernel = SimpleNamespace(
    shell=SimpleNamespace(user_ns=globals()), session=SimpleNamespace(key=session_key)
)
box = ipywidgets.VBox([slider, ipywidgets.Text("hi")])

def counter():
    yield private_notes
gen = counter()
next(gen)

async def fetch():
    await asyncio.sleep(0)
    return private_notes
coro = fetch()

async def stream():
    yield private_notes
agen = stream()

def fail():
    notes = private_notes
    raise ValueError("boom")
try:
    fail()
except ValueError as exc:
    err = exc

df = pd.DataFrame({{"price": [1.5, 2.5], "city": ["Oslo", "Rome"]}})
series = df["price"]
arr = np.arange(6).reshape(2, 3)

class Settings(BaseModel):
    field: str = "blue"

@dataclass
class Point:
    x: int
    y: int

class Pair(NamedTuple):
    left: int
    right: int

class Holder:
    module = os
    def __init__(self):
        self.names = globals()
        self.function = counter
        self.rows = private_rows
        self.items = [1, {{"k": "v"}}]
    @property
    def total(self):
        return 5

model, point, pair, holder = Settings(), Point(1, 2), Pair(3, 4), Holder()
nested = {{"level": [{{"deep": (holder, gen, err)}}]}}
"""

EXPOSED = frozenset(
    [
        *("slider", "box", "gen", "coro", "agen", "err", "df", "series", "arr", "model"),
        *("point", "pair", "holder", "nested"),
    ]
)
HIDDEN = ("private_notes", "private_rows", "session_key")


def _zoo() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    exec(compile(CELL, "<cell>", "exec"), namespace)
    for name, value in {**odd_objects(), **notebook_only_objects()}.items():
        namespace[f"odd_{name}"] = value
    if importlib.util.find_spec("matplotlib") is not None:  # not a dependency: only if there
        from matplotlib.figure import Figure

        figure = Figure()
        figure.add_subplot().plot([1, 2, 3])
        namespace["figure"] = figure
    return namespace


@pytest.fixture(scope="module")
def notebook() -> Iterator[dict[str, Any]]:
    namespace = _zoo()
    yield namespace
    namespace["coro"].close()  # never awaited: closed, so no "never awaited" warning
    namespace["gen"].close()
    namespace["agen"].aclose().close()


def exposed(namespace: Mapping[str, Any]) -> list[str]:
    return [n for n in namespace if n in EXPOSED or n.startswith("odd_") or n == "figure"]


def steps_from(value: Any) -> list[str]:
    """What a path may try next from ``value``: its public ``dir()`` names, a few keys and
    indexes (never running more of the value's code than ``dir`` and ``len`` do)."""
    names: list[str] = []
    with contextlib.suppress(Exception):
        names += [n for n in dir(value) if not n.startswith("_")]
    try:
        if isinstance(value, Mapping):
            names += [str(k) for k in list(value)[:5]]
        elif isinstance(value, Sequence) and not isinstance(value, str):
            names += [str(i) for i in range(min(len(value), 3))]
    except Exception:
        pass
    return sorted({n for n in names if PART.fullmatch(n)})


def text(value: Any) -> str:
    try:
        return repr(value)[:100_000]
    except Exception:
        return ""


def check(value: Any, namespace: dict[str, Any], ref: str) -> None:
    """What a path reached is none of what it may never reach."""
    assert not isinstance(value, types.ModuleType), ref
    assert value is not namespace and value is not os.environ and value is not sys.modules, ref
    assert not (isinstance(value, dict) and ("__builtins__" in value or "__name__" in value)), ref
    assert not isinstance(value, types.MappingProxyType), ref
    code = (types.FrameType, types.CodeType, types.TracebackType, types.FunctionType, type)
    assert not isinstance(value, code), ref
    for name in HIDDEN:
        assert value is not namespace[name], ref
    assert DIARY not in text(value) and KEY.decode() not in text(value), ref


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_path_reaches_a_hidden_value_a_module_or_a_namespace(
    notebook: dict[str, Any], data: st.DataObject
) -> None:
    scope = Scope(notebook, prompt=exposed(notebook))
    name = data.draw(st.sampled_from(exposed(notebook)), label="name")
    value, ref = notebook[name], f"${name}"
    for _ in range(6):
        options = steps_from(value)
        if not options:
            return
        ref = f"{ref}.{data.draw(st.sampled_from(options), label='step')}"
        try:
            value = resolve(ref, [scope])
        except CortexRuntimeError as exc:
            assert "\n" not in str(exc).strip()  # a refusal is one line
            assert DIARY not in str(exc)
            return
        check(value, notebook, ref)


@pytest.mark.parametrize(
    "ref",
    [
        "$slider.comm.kernel.shell.user_ns.private_notes",
        "$slider.comm.kernel.session.key",
        "$gen.gi_frame.f_globals.private_notes",
        "$coro.cr_frame.f_globals.private_notes",
        "$agen.ag_frame.f_globals",
        "$err.__traceback__.tb_frame.f_locals.notes",
        "$holder.names.private_notes",
        "$holder.module.environ",
        "$holder.function.__globals__",
        "$holder.rows.0.note",
        "$nested.level.0.deep.0.names",
        "$nested.level.0.deep.1.gi_frame",
        "$box.children.0.comm",
    ],
)
def test_the_known_ways_out_are_refused(notebook: dict[str, Any], ref: str) -> None:
    scope = Scope(notebook, prompt=exposed(notebook))
    with pytest.raises(CortexRuntimeError, match="is not reachable"):
        resolve(ref, [scope])


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("$df.shape", (2, 2)),
        ("$df.columns.1", "city"),
        ("$series.name", "price"),
        ("$arr.dtype.name", "int64"),
        ("$arr.shape.1", 3),
        ("$model.field", "blue"),
        ("$point.y", 2),
        ("$pair.right", 4),
        ("$pair.0", 3),
        ("$holder.total", 5),
        ("$holder.items.1.k", "v"),
        ("$slider.value", 3),
        ("$box.children.1.value", "hi"),
        ("$err.args.0", "boom"),
        ("$nested.level.0.deep.0.total", 5),
    ],
)
def test_the_data_inside_stays_reachable(notebook: dict[str, Any], ref: str, expected: Any) -> None:
    scope = Scope(notebook, prompt=exposed(notebook))
    assert resolve(ref, [scope]) == expected
