"""A ``$name.path`` reaches the data inside what the user exposed, never the interpreter or
the kernel (issue 33, item 1), through ``%%cortex`` against an OpenAI-compatible server on
127.0.0.1, as a prompt-injected model would try it.

With only a widget ``slider`` and a generator ``gen`` exposed, a model wrote
``$slider.comm.kernel.shell.user_ns.private_notes`` and
``$gen.gi_frame.f_globals.private_notes`` and read a hidden notebook value. Each path is
played in an action parameter, in the answer and in a typed answer: the step it breaks at
is named in one line, and the hidden value is nowhere (the tool, the cell's output, the
answer, ``_cortex``, the requests the model is sent).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import Agent, default_registry
from tests.helpers import recording_tool
from tests.models.fake_openai_server import FakeOpenAIServer, Stream, finish, texts

DIARY = "my diary: the vault code is 4417"
SIGNING_KEY = "signing-key-f00dfeedc0ffee"

#: The notebook: a widget whose comm knows its kernel (a stand-in for ipykernel's, with
#: the real shell and a session key, as ``comm.kernel`` is in a live kernel), a generator
#: made in the notebook, a hidden note, and data a model is meant to reach.
NOTEBOOK = f"""
import os
from dataclasses import dataclass
from types import SimpleNamespace
import ipywidgets, numpy as np, pandas as pd
from pydantic import BaseModel

private_notes = {DIARY!r}
slider = ipywidgets.IntSlider(value=7, description="speed")
slider.comm.kernel = SimpleNamespace(
    shell=get_ipython(), session=SimpleNamespace(key={SIGNING_KEY!r}.encode())
)
def counter():
    yield 1
gen = counter()

class Settings(BaseModel):
    field: str = "blue"

class Order:
    def __init__(self, prices):
        self.prices = prices
    @property
    def total(self):
        return sum(self.prices)

@dataclass
class Point:
    x: int
    y: int

class Holder:
    module = os
    def __init__(self):
        self.names = globals()

class Report:
    def __init__(self, title, rows):
        self.title, self.rows = title, rows
    def __repr__(self):
        return f"Report({{self.title}})"

private_rows = [{{"note": {DIARY!r}}}]
report = Report("q3", private_rows)
df = pd.DataFrame({{"price": [1.5, 2.5, 3.0]}})
arr = np.arange(6).reshape(2, 3)
model, order, point, holder = Settings(), Order([2, 3]), Point(1, 2), Holder()
"""
EXPOSED = "slider gen df arr model order point holder report"

#: The attack paths, and the step each is refused at, as the one line names it.
ATTACKS = [
    ("$slider.comm.kernel.shell.user_ns.private_notes", "$slider.comm is not reachable"),
    ("$gen.gi_frame.f_globals.private_notes", "$gen.gi_frame is not reachable"),
    ("$slider.comm.kernel.shell.user_ns.os", "$slider.comm is not reachable"),
    ("$slider.comm.kernel.session.key", "$slider.comm is not reachable"),
    ("$holder.names.private_notes", "$holder.names is not reachable: it is a namespace"),
    ("$holder.module.environ", "$holder.module is not reachable: it is a module"),
    ("$report.rows.0.note", "$report.rows is not reachable: it is the value of $private_rows"),
]


@pytest.fixture
def seen() -> Iterator[list[Any]]:
    """A tool, ``peek``, that records what it was given."""
    with recording_tool("peek", "peeked: {}") as received:
        yield received


@pytest.fixture
def notebook(ip: InteractiveShell) -> InteractiveShell:
    assert ip.run_cell(NOTEBOOK).success
    ip.run_line_magic("cortex", f"expose {EXPOSED}")
    return ip


def reply(server: FakeOpenAIServer, *turns: str) -> None:
    server.script(*(Stream([*texts(text, 11), finish()]) for text in turns))


def ask(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    *turns: str,
    options: str = "--model m --text",
    prompt: str = "Look around.",
) -> Any:
    """The server scripted to answer with ``turns``, a ``%%cortex`` cell run: its run."""
    reply(server, *turns)
    ip.run_cell_magic("cortex", options, prompt)
    return ip.user_ns["_cortex"]


def action(value: str, id: str = "a") -> str:
    body = json.dumps({"name": "peek", "parameters": {"value": value}})
    return f'<action id="{id}">{body}</action>'


def nowhere(
    run: Any,
    server: FakeOpenAIServer,
    capsys: pytest.CaptureFixture[str],
    secrets: tuple[str, ...] = (DIARY, SIGNING_KEY),
) -> None:
    """None of ``secrets`` is in anything a user or the model sees."""
    out = capsys.readouterr()  # read once: every secret is looked for in the same output
    sent = json.dumps([r.json for r in server.requests])
    for secret in secrets:
        assert secret not in out.out + out.err
        assert secret not in run.to_jsonl() and secret not in run.answer
        assert secret not in repr(run.output)
        assert secret not in sent


@dataclass
class Cell:
    """The notebook with the attack's objects, its server and the cell's output."""

    ip: InteractiveShell
    server: FakeOpenAIServer
    capsys: pytest.CaptureFixture[str]

    def ask(self, *turns: str, **options: str) -> Any:
        return ask(self.ip, self.server, *turns, **options)

    def nowhere(self, run: Any) -> None:
        nowhere(run, self.server, self.capsys)


@pytest.fixture
def cell(
    notebook: InteractiveShell, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> Cell:
    return Cell(notebook, server, capsys)


@pytest.fixture(params=ATTACKS, ids=[path for path, _ in ATTACKS])
def attack(request: pytest.FixtureRequest) -> tuple[str, str]:
    """An attack path, and the step it is refused at."""
    return request.param  # type: ignore[no-any-return]


def test_an_attack_path_in_an_action_parameter_fails_in_one_line_naming_the_step(
    cell: Cell, seen: list[Any], attack: tuple[str, str]
) -> None:
    path, refused = attack
    run = cell.ask(action(path), "<response>done</response>")
    node = run.actions["a"]
    assert node.status == "failed" and seen == []  # the tool never ran
    error = node.error or ""
    assert refused in error and "\n" not in error.strip()
    cell.nowhere(run)


def test_an_attack_path_in_the_answer_stays_as_written(cell: Cell, attack: tuple[str, str]) -> None:
    path, refused = attack
    run = cell.ask(f"<response>Here: {path}</response>")
    # what resolves is filled; from the refused step on, the path stays as written
    step = refused.split(" is not reachable")[0]
    assert path[len(step) - len(step.split(".")[-1]) - 1 :] in run.answer
    cell.nowhere(run)


def test_an_attack_path_in_a_typed_answer_is_a_field_error_naming_the_step(
    cell: Cell, attack: tuple[str, str]
) -> None:
    path, refused = attack
    turns = json.dumps({"notes": path}), json.dumps({"notes": "none"})
    options = "--model m --text --output dict[str,str]"
    run = cell.ask(*turns, options=options, prompt="Notes?")
    assert run.output == {"notes": "none"}
    retry = cell.server.requests[1].json["messages"][-1]["content"]
    assert f"- notes: {refused}" in retry
    cell.nowhere(run)


@pytest.mark.usefixtures("seen")
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("$df.shape", "(3, 1)"),
        ("$df.shape.0", "3"),
        ("$df.columns", "Index(['price']"),
        ("$df.price.sum", "it is a function or method"),
        ("$arr.dtype", "int64"),
        ("$arr.shape.1", "3"),
        ("$model.field", "blue"),
        ("$order.total", "5"),
        ("$order.prices.1", "3"),
        ("$point.y", "2"),
        ("$slider.value", "7"),
        ("$slider.description", "speed"),
        ("$report.title", "q3"),
    ],
)
def test_the_data_inside_what_was_exposed_stays_reachable(
    notebook: InteractiveShell,
    server: FakeOpenAIServer,
    path: str,
    expected: str,
) -> None:
    node = ask(notebook, server, action(f"{path} here"), "<response>ok</response>").actions["a"]
    assert expected in (node.output if node.status == "done" else node.error or "")


def test_a_field_a_cell_showed_stays_reachable(
    notebook: InteractiveShell, server: FakeOpenAIServer, seen: list[Any]
) -> None:
    """IPython keeps what a cell showed under ``_`` and ``_N``, names a model never sees:
    the object is still the exposed object's data, not a hidden name's value."""
    assert notebook.run_cell("order.prices", store_history=True).success
    assert notebook.user_ns["_"] is notebook.user_ns["order"].prices
    reply(server, action("$order.prices"), "<response>ok</response>")
    notebook.run_cell_magic("cortex", "--model m --text", "Look around.")
    assert seen == [[2, 3]] and seen[0] is notebook.user_ns["order"].prices


def test_a_whole_reference_hands_the_tool_the_object_itself(
    notebook: InteractiveShell, server: FakeOpenAIServer, seen: list[Any]
) -> None:
    both = action("$df.columns") + action("$slider.layout", id="b")
    reply(server, both, "<response>ok</response>")
    notebook.run_cell_magic("cortex", "--model m --text", "Look around.")
    # the two actions run at once, so either may reach the tool first
    wanted = [notebook.user_ns["df"].columns, notebook.user_ns["slider"].layout]
    assert len(seen) == 2
    assert all(any(got is want for got in seen) for want in wanted)


def test_a_script_cell_follows_the_same_rule(notebook: InteractiveShell, seen: list[Any]) -> None:
    """The user's own ``--script`` text sees every name it writes, but a path still
    stops where the interpreter begins."""
    body = action("$gen.gi_frame.f_globals.private_notes") + "\n<response>x</response>"
    notebook.run_cell_magic("cortex", "--script --delay 0 --text", body)
    node = notebook.user_ns["_cortex"].actions["a"]
    assert node.status == "failed" and seen == []
    assert "$gen.gi_frame is not reachable: nothing inside a generator is reachable" in (
        node.error or ""
    )


def test_a_nested_agent_and_a_relic_follow_the_same_rule(
    notebook: InteractiveShell, seen: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A nested agent resolves its own actions, and a relic its parameters, through the
    same resolver: the attack stops at the same step there, and nothing leaks."""

    @default_registry.tool(name="keep", type="relic")
    def keep(value: Any) -> str:
        """Keep a value."""
        seen.append(value)
        return "kept"

    Agent("helper", instructions="Help.", tools=["peek"])
    attack = "$gen.gi_frame.f_globals.private_notes"
    script = (
        '<action type="agent" id="h">{"name": "helper", "parameters": {"task": "look"}}</action>'
        f'<action type="relic" id="r">{{"name": "keep", "parameters": {{"value": "{attack}"}}}}'
        "</action>\n--- next turn ---\n<response>done</response>"
        f"\n--- reply to h ---\n{action(attack, id='x')}"
        f"\n--- next turn ---\n<response>Found {attack}</response>"
    )
    try:
        notebook.run_cell_magic("cortex", "--script --delay 0 --text", script)
    finally:
        default_registry.remove("agent", "helper")
        default_registry.remove("relic", "keep")
    run = notebook.user_ns["_cortex"]
    nested = run.actions["h"].subrun
    assert nested is not None and nested.actions["x"].status == "failed"
    assert "$gen.gi_frame is not reachable" in (nested.actions["x"].error or "")
    assert run.actions["r"].status == "failed" and seen == []
    assert "$gen.gi_frame is not reachable" in (run.actions["r"].error or "")
    out = capsys.readouterr()
    assert DIARY not in out.out + out.err + run.to_jsonl() + str(run.actions["h"].output)


WEAK = f"""
import os, weakref

class Vault:
    def __init__(self):
        self.code = {DIARY!r}
    def __str__(self):
        return "Vault: " + self.code

def helper():
    return 1

private_vault = Vault()

class Tree:
    def __init__(self):
        self.parent = weakref.proxy(private_vault)
        self.system = weakref.proxy(os)
        self.call = weakref.proxy(helper)
        self.kind = weakref.proxy(Vault)
        self.ref = weakref.ref(private_vault)

tree = Tree()
"""


@pytest.mark.parametrize(
    "path",
    ["$tree.parent", "$tree.system", "$tree.call", "$tree.kind", "$tree.ref"],
)
def test_a_weak_reference_held_by_an_exposed_object_is_not_reachable(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    seen: list[Any],
    capsys: pytest.CaptureFixture[str],
    path: str,
) -> None:
    """A notebook object holding a ``weakref.proxy`` to a hidden object, a module, a
    function or a class (a tree's parent link): the proxy is not of any of those types,
    and is not the hidden object itself, so ``$tree.parent`` handed the tool the hidden
    vault (its ``str`` the diary), ``$tree.system`` a module. A weak reference stands for
    an object the path never checked: it is not reachable."""
    assert ip.run_cell(WEAK).success
    ip.run_line_magic("cortex", "expose tree")
    run = ask(ip, server, action(path) + action(f"see {path}", id="b"), "<response>done</response>")
    assert seen == []
    for id in ("a", "b"):
        node = run.actions[id]
        assert node.status == "failed"
        assert f"{path} is not reachable: it is a weak reference" in (node.error or "")
    nowhere(run, server, capsys, (DIARY,))


HOLDING = f"""
import os
import numpy as np, pandas as pd

private_notes = {DIARY!r}
err = ValueError(private_notes)

class Config:
    @property
    def settings(self):
        return {{k: v for k, v in globals().items() if not k.startswith("__")}}

class Box:
    def __init__(self, inner):
        self.inner = inner

class Parcel:
    def __init__(self):
        self.box = Box([{{"deep": private_notes}}])
        self.tools = Box(os)

config, parcel = Config(), Parcel()
frame = pd.DataFrame({{"tool": [os, os]}})
objects = np.array([1, os], dtype=object)
prices = pd.DataFrame({{"price": [1.5, 2.5]}})
"""


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("$err.args", "$err.args is not reachable: it holds the value of $private_notes"),
        ("$config.settings", "$config.settings is not reachable: it holds"),
        ("$frame.iloc.0", "$frame.iloc.0 is not reachable: it holds a module"),
        ("$frame.tool", "$frame.tool is not reachable: it holds a module"),
        ("$parcel.box", "$parcel.box is not reachable: it holds the value of $private_notes"),
        ("$parcel.tools", "$parcel.tools is not reachable: it holds a module"),
        ("$objects.T", "$objects.T is not reachable: it holds a module"),
    ],
)
def test_a_path_landing_on_a_container_holding_a_hidden_value_is_refused(
    ip: InteractiveShell,
    server: FakeOpenAIServer,
    seen: list[Any],
    capsys: pytest.CaptureFixture[str],
    path: str,
    refused: str,
) -> None:
    """The landing check looked only at the object a path lands on: a tuple, a dict, an
    object column or a notebook object *holding* a hidden name's value or a module passed
    (``$err.args`` handed the tool the diary; ``$frame.iloc.0`` a row holding ``os``).
    What a step lands on is looked inside too (a few levels, a few hundred items)."""
    assert ip.run_cell(HOLDING).success
    ip.run_line_magic("cortex", "expose err config parcel frame objects prices")
    run = ask(ip, server, action(path) + action(f"see {path}", id="b"), "<response>done</response>")
    assert seen == []
    for id in ("a", "b"):
        error = run.actions[id].error or ""
        assert run.actions[id].status == "failed" and refused in error
        assert "\n" not in error.strip()
    nowhere(run, server, capsys, (DIARY,))


def test_data_holding_only_data_stays_reachable(
    ip: InteractiveShell, server: FakeOpenAIServer, seen: list[Any]
) -> None:
    assert ip.run_cell(HOLDING).success
    ip.run_line_magic("cortex", "expose err prices")
    actions = action("$prices.price") + action("$prices.iloc.0", id="b")
    run = ask(ip, server, actions, "<response>done</response>")
    assert run.actions["a"].status == "done" and run.actions["b"].status == "done"
    assert list(seen[0]) == [1.5, 2.5]
