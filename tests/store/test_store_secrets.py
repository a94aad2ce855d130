"""Secrets never reach the store's files: its bytes (the WAL and shared memory too) are
searched for every form of every secret a run met, in its prompt, parameters, answer
and outputs of every shape."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import cortex_jupyter
from cortex_jupyter import store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry
from cortex_jupyter.runtime.core.record.run import OutputRepr
from cortex_jupyter.runtime.core.trust.secrets import secrets
from tests.helpers import dump

KEY = 'sk-live-"quoted\\back-0123456789abcdef'  # JSON and repr escape it
TOKEN = "tok_9f8e7d6c5b4a39281706"
PASSWORD = "pässwörd-ünïcode-123456"  # JSON's ensure_ascii escapes it
ALL = (KEY, TOKEN, PASSWORD)


class Holder:
    """An object that keeps a secret in an attribute (a client, a connection...)."""

    def __init__(self, secret: str) -> None:
        self.password = secret
        self.host = "db.example"


def tools() -> Registry:
    registry = Registry()

    @registry.tool
    def as_json(text: str) -> dict[str, Any]:
        return {"creds": text, "nested": [TOKEN, {"k": KEY}]}

    @registry.tool
    def frame() -> Any:
        return pd.DataFrame({"user": ["ann", "bob"], "token": [TOKEN, "x" * 80 + KEY]})

    @registry.tool
    def holder() -> Any:
        return Holder(PASSWORD)

    @registry.tool
    def strings() -> Any:
        return np.array([TOKEN, "plain"])

    @registry.tool
    def clean() -> Any:
        return Holder("nothing secret here")

    return registry


def script() -> str:
    param = json.dumps({"name": "as_json", "parameters": {"text": KEY}, "output_key": "j"})
    calls = [
        f'<action id="j">{param}</action>',
        '<action id="f">{"name": "frame", "parameters": {}}</action>',
        '<action id="h">{"name": "holder", "parameters": {}}</action>',
        '<action id="s">{"name": "strings", "parameters": {}}</action>',
        '<action id="c">{"name": "clean", "parameters": {}}</action>',
    ]
    answer = f"<response>the token is {TOKEN} and the password {PASSWORD}</response>"
    return "\n".join(calls) + "\n--- next turn ---\n" + answer


def forms(secret: str) -> set[bytes]:
    texts = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    texts.add(repr(secret)[1:-1])
    out = {text.encode(codec) for text in texts for codec in ("utf-8", "utf-16-le", "utf-32-le")}
    return out | {form.encode() for form in secrets.forms() if secret in form or form in secret}


def leaks(path: Path) -> list[str]:
    found = []
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        if not file.exists():
            continue
        data = file.read_bytes()
        found += [f"{file.name}: {form!r}" for s in ALL for form in forms(s) if form in data]
    return found


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_KEY", KEY)
    monkeypatch.setenv("SERVICE_TOKEN", TOKEN)
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)


def test_no_secret_reaches_the_store_files(tmp_path: Path, secret_env: None) -> None:
    path = tmp_path / "runs.db"
    kept = store.open_store(path)
    agent = Agent(model=ScriptModel(script(), chunk_size=11), registry=tools())
    run = agent.run_sync(f"use the key {KEY} and {TOKEN}", store=kept)
    assert run.status == "completed" and TOKEN in run.answer  # the notebook's own: exact
    assert isinstance(run.actions["f"].output, pd.DataFrame)
    kept.flush()
    assert (tmp_path / "runs.db-wal").stat().st_size > 0  # what was written is in the WAL
    assert leaks(path) == []
    kinds = dict(sqlite3.connect(path).execute("SELECT action, kind FROM outputs"))
    assert kinds == {"j": "redacted", "f": "redacted", "h": "redacted", "s": "redacted",
                     "c": "pickle"}  # fmt: skip
    back = cortex_jupyter.open_run(run.id, store=path)
    assert isinstance(back.actions["h"].output, OutputRepr)
    assert back.actions["c"].output.password == "nothing secret here"  # a real pickle
    assert "[redacted]" in back.answer and "[redacted]" in back.prompt
    kept.close()  # a checkpoint moves the WAL into the database: still nothing
    assert leaks(path) == []


def test_a_cell_with_a_secret_in_its_prompt_leaves_none_in_the_store(
    ip: Any, tmp_path: Path, secret_env: None
) -> None:
    path = tmp_path / "cells.db"
    ip.run_line_magic("config", f"CortexMagics.store = {str(path)!r}")
    body = f"<response>the key is {KEY}; the token {TOKEN}</response>"
    ip.run_cell_magic("cortex", "--script --delay 0 --text", body)
    store.open_store(path).flush()
    assert cortex_jupyter.runs("token", store=path)[0].status == "completed"
    assert leaks(path) == []


def test_an_action_id_that_is_a_secret_is_in_no_column_and_the_run_still_opens(
    tmp_path: Path, secret_env: None
) -> None:
    """The model named an action after a secret, another depends on it: ``nodes.id``,
    ``outputs.action`` and ``search.field`` keep it as the events do, ``[redacted]``,
    and the stored run joins the action to its output and its dependent."""
    registry = Registry()

    @registry.tool
    def echo(text: str) -> str:
        return "got " + text

    first = json.dumps({"name": "echo", "parameters": {"text": "one"}, "output_key": "one"})
    second = json.dumps({"name": "echo", "parameters": {"text": "two"}, "depends_on": [TOKEN]})
    body = f'<action id="{TOKEN}">{first}</action>\n<action id="b">{second}</action>'
    path = tmp_path / "runs.db"
    kept = store.open_store(path)
    agent = Agent(model=ScriptModel(body + "\n--- next turn ---\n<response>ok</response>"),
                  registry=registry)  # fmt: skip
    run = agent.run_sync("go", store=kept)
    assert run.status == "completed" and TOKEN in run.actions  # the notebook's own: exact
    kept.flush()
    assert TOKEN not in dump(path) and leaks(path) == []
    back = cortex_jupyter.open_run(run.id, store=path)
    assert set(back.actions) == {"[redacted]", "b"}
    assert back.actions["[redacted]"].output == "got one"  # its output row found it
    assert back.actions["b"].depends_on == ("[redacted]",)
    assert back.variables["one"] == "got one"
    kept.close()
    assert leaks(path) == []


def test_every_text_a_store_connection_binds_is_redacted(tmp_path: Path, secret_env: None) -> None:
    """The seam, not a column's code: a row written through any connection to a store
    (a column a later version adds, named parameters, a cursor) holds no secret."""
    path = tmp_path / "runs.db"
    db = store.connect(path)
    db.execute("INSERT INTO search (run, field, text) VALUES (?, ?, ?)", (KEY, TOKEN, PASSWORD))
    db.execute("INSERT INTO search (run, field, text) VALUES (:r, :f, :t)",
               {"r": "r", "f": "f", "t": f"the key {KEY}"})  # fmt: skip
    db.cursor().executemany("INSERT INTO search (run, field, text) VALUES (?, ?, ?)",
                            [("r", "g", TOKEN)])  # fmt: skip
    db.close()
    assert leaks(path) == [] and "[redacted]" in dump(path)


def test_a_secret_of_digits_a_tool_returns_as_a_number_is_kept_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PIN set as a password, returned as an ``int`` (alone and inside a larger
    number) into a typed answer: JSON writes numbers bare, so each becomes the text
    ``"[redacted]"`` and every stored body still reads back."""
    pin = "73915284"
    monkeypatch.setenv("DB_PASSWORD", pin)
    registry = Registry()

    @registry.tool
    def account() -> dict[str, Any]:
        return {"pin": int(pin), "number": int("9" + pin + "1"), "ratio": float(pin) / 10}

    body = '<action id="a">{"name": "account", "output_key": "acct"}</action>'
    answer = '<response>{"account": "$acct"}</response>'
    path, saved = tmp_path / "runs.db", tmp_path / "run.jsonl"
    kept = store.open_store(path)
    agent = Agent(model=ScriptModel(f"{body}\n--- next turn ---\n{answer}"), registry=registry,
                  output_type=dict[str, Any])  # fmt: skip
    run = agent.run_sync("go", store=kept)
    assert run.status == "completed" and run.output["account"]["pin"] == int(pin)
    run.save(saved)
    kept.flush()
    for text in (dump(path), saved.read_text(encoding="utf-8")):
        assert pin not in text
    assert pin.encode() not in b"".join(
        Path(f"{path}{s}").read_bytes() for s in ("", "-wal") if Path(f"{path}{s}").exists()
    )
    back = cortex_jupyter.open_run(run.id, store=path)
    assert back.status == "completed" and set(back.actions) == {"a"}
    assert type(run).load(saved).status == "completed"  # the transcript reads back too


@pytest.mark.parametrize(
    "made",
    [
        pytest.param(lambda pin: (int(pin), "acct"), id="tuple"),
        pytest.param(lambda pin: {int(pin): "pin"}, id="int-key"),
        pytest.param(lambda pin: np.array([int(pin), 5]), id="int64-array"),
        pytest.param(lambda pin: (float(pin),), id="float"),
    ],
)
def test_a_secret_of_digits_inside_a_pickled_output_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: Any
) -> None:
    """A PIN returned as a number inside an output JSON would not give back whole (a
    tuple, an ``int`` key, an array): the pickle writes the number in binary, where no
    text form of the PIN is, so it was kept and ``open_run`` gave the PIN back."""
    pin = "73915284"
    monkeypatch.setenv("DB_PASSWORD", pin)
    registry = Registry()

    @registry.tool
    def account() -> Any:
        return made(pin)

    body = '<action id="a">{"name": "account"}</action>\n--- next turn ---\n<response>ok</response>'
    path = tmp_path / "runs.db"
    kept = store.open_store(path)
    run = Agent(model=ScriptModel(body), registry=registry).run_sync("go", store=kept)
    assert run.status == "completed"
    kept.flush()
    back = cortex_jupyter.open_run(run.id, store=path).actions["a"].output
    assert isinstance(back, OutputRepr) and pin not in str(back)
    kinds = dict(sqlite3.connect(path).execute("SELECT action, kind FROM outputs"))
    assert kinds == {"a": "redacted"}
