"""The property that guards what a run keeps (issue 33, check (b)): a secret, wherever a
run meets it, is in no table of the store (``iterdump``), in none of its files (the
database, the ``-wal`` and the ``-shm``), and not in the saved transcript, in any form.

Two secrets a test draws: ``token`` (``SERVICE_TOKEN``), which the model writes as an
action's id, and ``password`` (``DB_PASSWORD``), which a tool reads from the environment
and prints in lines, writes to stderr, logs, returns into a typed answer (``"$pw"``) and
quotes in the error it raises. Neither is written by the model in its text, so what is
tested is the store's and the transcript's own redaction, not the model text's. A form
is the secret as text escapes it on its way to a file: raw, JSON (``ensure_ascii`` on
and off), ``repr``/``ascii`` (either quote style), and each of those once more as JSON.

A secret printed in two writes (the tool cut it) is the capture's joining (issue 33,
item 2's first half, worked on apart): its test is marked so until that lands.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cortex_jupyter import store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.scheduler.capture import current
from tests.helpers import dump

#: Every character an escaping changes (quotes, backslashes, percent, HTML specials,
#: line breaks), printable ASCII and letters and symbols of any script.
_CHARS = st.one_of(
    st.sampled_from("\"'\\%&<>+/=?# \n\t"),
    st.characters(min_codepoint=0x21, max_codepoint=0x7E),
    st.characters(categories=("Ll", "Lu", "Lo", "Nd", "So", "Sm")),
)
#: What an action's ``id="..."`` attribute may hold as the model writes it.
_ID_CHARS = st.one_of(
    st.sampled_from("'\\%&+/=?#:_-."),
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters='"<>'),
    st.characters(categories=("Ll", "Lu", "Lo", "Nd", "So", "Sm")),
)


def _distinct(text: str) -> bool:
    """A secret worth the name: not mostly one character, not mostly blank."""
    return len(set(text)) >= 4 and len(text.strip()) >= 8 and text == text.strip()


PASSWORD = st.text(_CHARS, min_size=8, max_size=60).filter(_distinct)
TOKEN = st.text(_ID_CHARS, min_size=8, max_size=40).filter(_distinct)


def forms(secret: str) -> set[str]:
    """``secret`` as text escapes it on its way to a file."""
    once = {
        secret,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        repr(secret + "'\"")[1:-4],  # the single-quote style, ``\'`` escaped
        ascii(secret)[1:-1],
    }
    return once | {json.dumps(form)[1:-1] for form in once}


def tools() -> Registry:
    registry = Registry()

    @registry.tool
    def report() -> str:
        """Print the password as a careless tool does: lines, stderr, a log record."""
        password = os.environ["DB_PASSWORD"]
        for i in range(3):
            print(f"line {i}: connecting with {password}")
        print("stderr:", password, file=sys.stderr)
        logging.getLogger("cortex.tests.tool").warning("logged in with %s", password)
        return "reported"

    @registry.tool
    def password() -> str:
        """The password itself: bound as ``$pw``, it fills the typed answer."""
        return os.environ["DB_PASSWORD"]

    @registry.tool
    def connect() -> str:
        """Fail, quoting the password in the error."""
        raise RuntimeError(f"cannot log in with {os.environ['DB_PASSWORD']!r}")

    @registry.tool
    def split() -> str:
        """Print the password in two writes, cut in its middle."""
        password = os.environ["DB_PASSWORD"]
        cut = len(password) // 2
        sys.stdout.write("key: " + password[:cut])
        sent = current()
        for _ in range(2000):  # until the run has sent the first half on its own
            if sent is None or not sent.dirty:
                break
            time.sleep(0.005)
        sys.stdout.write(password[cut:] + " done\n")
        return "split"

    return registry


def script(token: str, *, split: bool = False) -> str:
    """The model's reply: an action named after ``token``, the tools, a typed answer."""
    calls = [
        f'<action id="{token}">{{"name": "report"}}</action>',
        '<action id="pw">{"name": "password", "output_key": "pw"}</action>',
        '<action id="c">{"name": "connect", "on_error": "skip"}</action>',
    ]
    if split:
        calls = ['<action id="s">{"name": "split"}</action>']
    answer = '<response>{"password": "$pw", "host": "db.example"}</response>'
    return "\n".join(calls) + "\n--- next turn ---\n" + answer


def leaks(secret: str, path: Path, transcript: Path) -> list[str]:
    """Where a form of ``secret`` is: a table, a file of the store, the transcript."""
    shown = [("iterdump", dump(path)), ("transcript", transcript.read_text(encoding="utf-8"))]
    found = [name for name, text in shown for form in forms(secret) if form in text]
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        data = file.read_bytes() if file.exists() else b""
        found += [file.name for form in forms(secret) if form.encode() in data]
    return sorted(set(found))


@pytest.fixture(scope="module")
def where(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One store for every example of a test (each example's secrets are its own)."""
    folder = tmp_path_factory.mktemp("store-secrets")
    yield folder
    store.open_store(folder / "runs.db").close()


class Baseline:
    """What the store and a transcript hold after the same runs with no secret set (its
    JSON, its names...): a drawn secret that is a piece of it is no secret. (Short in a
    report: hypothesis shows a test's arguments.)"""

    def __init__(self, text: str) -> None:
        self.text = text

    def holds(self, *secrets: str) -> bool:
        return any(form in self.text for secret in secrets for form in forms(secret))

    def __repr__(self) -> str:
        return f"<Baseline of {len(self.text):,} characters>"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    folder = tmp_path_factory.mktemp("store-baseline")
    with pytest.MonkeyPatch.context() as patch:
        for split in (False, True):
            run_once(folder, patch, "tok-baseline", "pw-baseline", split=split, secret=False)
    path = folder / "runs.db"
    store.open_store(path).close()
    return Baseline(dump(path) + (folder / "run.jsonl").read_text(encoding="utf-8"))


def run_once(
    where: Path,
    monkeypatch: pytest.MonkeyPatch,
    token: str,
    password: str,
    *,
    split: bool,
    secret: bool = True,
) -> tuple[Run, Path]:
    path, saved = where / "runs.db", where / "run.jsonl"
    kept = store.open_store(path)
    with monkeypatch.context() as patch:
        patch.setenv("SERVICE_TOKEN" if secret else "SERVICE_ID", token)
        patch.setenv("DB_PASSWORD", password)  # (too short to be a secret in the baseline)
        agent = Agent(
            model=ScriptModel(script(token, split=split), chunk_size=13),
            registry=tools(),
            output_type=dict[str, Any],
        )
        run = agent.run_sync("check the database", store=kept)
        run.save(saved)
        assert kept.flush()
    return run, path


_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(token=TOKEN, password=PASSWORD)
def test_no_secret_a_run_meets_is_kept_in_any_form(
    where: Path, baseline: Baseline, monkeypatch: pytest.MonkeyPatch, token: str, password: str
) -> None:
    assume(token not in password and password not in token)
    assume(not baseline.holds(token, password))
    run, path = run_once(where, monkeypatch, token, password, split=False)
    # the run did meet them: the notebook's own values stay exact
    assert run.status == "completed", run.reason
    assert token in run.actions and run.actions["pw"].output == password
    assert run.output == {"password": password, "host": "db.example"}
    assert run.actions["c"].status in ("failed", "skipped")
    assert leaks(token, path, where / "run.jsonl") == []
    assert leaks(password, path, where / "run.jsonl") == []
    # and the store did keep each place, redacted
    kept = dump(path)
    for said in ("connecting with [redacted]", "stderr: [redacted]", "logged in with [redacted]",
                 "cannot log in with "):  # fmt: skip
        assert said in kept, said


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(password=PASSWORD)
def test_a_secret_a_tool_prints_in_two_writes_is_kept_in_no_form(
    where: Path, baseline: Baseline, monkeypatch: pytest.MonkeyPatch, password: str
) -> None:
    cut = len(password) // 2
    halves = {password[:cut], password[cut:]}
    assume(not baseline.holds(password, *halves))
    _, path = run_once(where, monkeypatch, "tok-not-secret", password, split=True)
    assert leaks(password, path, where / "run.jsonl") == []
    # nor either half of it, in any form (each alone is no form of the whole)
    kept = dump(path) + (where / "run.jsonl").read_text(encoding="utf-8")
    assert [half for half in halves for form in forms(half) if form in kept] == []
