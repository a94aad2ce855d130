"""The run store from the notebook's side: every cell kept, found by its words, opened again."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from IPython.core.interactiveshell import InteractiveShell

import cortex_jupyter
from cortex_jupyter import store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry
from cortex_jupyter.runtime.core.record.run import OutputRepr
from cortex_jupyter.store import schema

SCRIPT = """<thought>counting the walrus herd</thought>
<action id="a1">{"name": "herd", "parameters": {"n": 3}, "output_key": "herd"}</action>
<action id="a2">{"name": "grid", "parameters": {"n": 4}, "output_key": "grid"}</action>
<action id="a3">{"name": "lock", "parameters": {}, "output_key": "lk"}</action>
--- next turn ---
<response final="true">There are $herd.count narwhals in total.</response>"""


def tools() -> Registry:
    registry = Registry()

    @registry.tool
    def herd(n: int) -> dict[str, Any]:
        """Count a herd."""
        return {"count": n, "note": "pelican feathers"}

    @registry.tool
    def grid(n: int) -> Any:
        """A numpy grid."""
        return np.arange(n * n).reshape(n, n)

    @registry.tool
    def lock() -> Any:
        """Something no pickle takes."""
        return threading.Lock()

    return registry


def run_stored(path: Path, prompt: str = "how many walruses?") -> Any:
    agent = Agent(model=ScriptModel(SCRIPT, chunk_size=9), registry=tools())
    return agent.run_sync(prompt, store=store.open_store(path))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


def test_a_run_given_a_store_is_opened_again_with_its_outputs(db: Path) -> None:
    run = run_stored(db)
    back = cortex_jupyter.open_run(run.id, store=db)
    assert back.id == run.id and back.status == "completed"
    assert back.answer == run.answer == "There are 3 narwhals in total."
    assert back.actions["a1"].output == {"count": 3, "note": "pelican feathers"}
    assert isinstance(back.actions["a2"].output, np.ndarray)
    assert back.actions["a2"].output.tolist() == run.actions["a2"].output.tolist()
    lock_output = back.actions["a3"].output
    assert isinstance(lock_output, OutputRepr) and "lock" in lock_output.lower()
    assert back.variables["herd"] == {"count": 3, "note": "pelican feathers"}
    assert back.usage == run.usage and back.cost == run.cost == 0  # a script costs nothing
    assert [n.status for n in back.actions.values()] == ["done", "done", "done"]
    assert back.prompt == "how many walruses?" and back.turns == 2
    timeline = str(back.timeline())
    assert "turn" in timeline and "action_status" in timeline and "end" in timeline
    kinds = dict(
        sqlite3.connect(db).execute("SELECT action, kind FROM outputs WHERE run = ?", (run.id,))
    )
    assert kinds == {"a1": "json", "a2": "pickle", "a3": "repr"}


def test_an_id_prefix_opens_the_one_run_and_an_unknown_id_says_so(db: Path) -> None:
    run = run_stored(db)
    assert cortex_jupyter.open_run(run.id[:5], store=db).id == run.id
    with pytest.raises(store.UnknownRun, match="no stored run has the id 'nope'"):
        cortex_jupyter.open_run("nope", store=db)


@pytest.mark.parametrize("words", ["walruses", "narwhals", "pelican feathers", "grid", "HERD"])
def test_runs_are_found_by_prompt_answer_action_and_output_words(db: Path, words: str) -> None:
    first = run_stored(db)
    other = Agent(model=ScriptModel("<response>nothing here</response>"), registry=Registry())
    other.run_sync("an unrelated question", store=store.open_store(db))
    found = cortex_jupyter.runs(words, store=db)
    assert [row.id for row in found] == [first.id]
    assert found[0].status == "completed" and found[0].model == "script"


def test_runs_are_listed_newest_first_with_a_limit(db: Path) -> None:
    ids = [run_stored(db, f"question {i}").id for i in range(3)]
    rows = cortex_jupyter.runs(store=db)
    assert [row.id for row in rows] == ids[::-1]
    assert [row.id for row in cortex_jupyter.runs(limit=2, store=db)] == ids[:0:-1]
    assert rows[0].started >= rows[1].started and rows[0].started.tzinfo is not None
    assert rows[0].actions == 3 and rows[0].turns == 2 and rows[0].cost == 0  # a script: no model


@given(st.text(max_size=40))
def test_any_search_text_is_words_never_fts_syntax(text: str) -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE search USING fts5 (run UNINDEXED, field UNINDEXED, text)")
    db.execute("INSERT INTO search VALUES ('r', 'prompt', ?)", (text,))
    query = store.fts_query(text)
    if query:
        db.execute("SELECT run FROM search WHERE search MATCH ?", (query,)).fetchall()


@pytest.mark.parametrize("text", ['"', "AND (", "NEAR(a b)", "col:word", "*", "a OR", "'"])
def test_fts_operators_in_the_text_are_searched_as_words(db: Path, text: str) -> None:
    run_stored(db)
    assert cortex_jupyter.runs(text, store=db) == []


@pytest.mark.parametrize("text", ["\x00", "\x00 \x00", "  \t", ""])
def test_a_search_text_of_no_words_lists_every_run(db: Path, text: str) -> None:
    run_stored(db)
    assert cortex_jupyter.runs(text, store=db) == cortex_jupyter.runs(store=db) != []


# ---- the magic -------------------------------------------------------------------------

CELL = """<action id="a1">{"name": "cortex.cache.set",
  "parameters": {"key": "k", "value": 3}}</action>
--- next turn ---
<response>the zeppelin landed</response>"""


def test_every_cell_is_stored_and_runs_lists_it(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("cortex", "--script --delay 0 --text", CELL)
    run = ip.user_ns["_cortex"]
    capsys.readouterr()
    ip.run_line_magic("cortex", "runs zeppelin --limit 5")
    out = capsys.readouterr().out
    heading, row = out.splitlines()[:2]
    assert heading.split() == list(store_headings())
    # A script asks no model, so it costs nothing (an unknown price would say "unknown").
    assert row.startswith(run.id) and "completed" in row and "$0" in row
    rows = cortex_jupyter.runs("zeppelin")
    assert rows[0].id == run.id and rows[0].answer == "the zeppelin landed"


def store_headings() -> tuple[str, ...]:
    from cortex_jupyter.commands import RUNS_HEADINGS

    return RUNS_HEADINGS


def test_open_shows_the_stored_run_and_makes_it_cortex(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("cortex", "--script --delay 0 --text", CELL)
    first = ip.user_ns["_cortex"]
    ip.run_cell_magic("cortex", "--script --delay 0 --text", "<response>other</response>")
    capsys.readouterr()
    ip.run_line_magic("cortex", f"open {first.id[:6]}")
    out = capsys.readouterr().out
    opened = ip.user_ns["_cortex"]
    assert opened.id == first.id and opened.answer == "the zeppelin landed"
    assert "the zeppelin landed" in out and "cortex.cache.set" in out


def test_open_an_unknown_id_is_one_line(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("cortex", "open 0000nothing")
    err = capsys.readouterr().err
    assert err.strip() == (
        "cortex: %cortex open 0000nothing: no stored run has the id '0000nothing' "
        "(%cortex runs lists them)"
    )


def test_a_store_turned_off_keeps_nothing(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_line_magic("config", f"CortexMagics.store = {str(tmp_path / 'a.db')!r}")
    ip.run_line_magic("config", "CortexMagics.store = None")
    ip.run_cell_magic("cortex", "--script --delay 0 --text", "<response>unkept</response>")
    assert not (tmp_path / "a.db").exists()
    assert ip.user_ns["_cortex"].status == "completed"
    ip.run_line_magic("cortex", "runs")
    assert "the run store is off" in capsys.readouterr().err


def test_the_environment_variable_names_the_store(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORTEX_STORE", str(tmp_path / "env.db"))
    ip.run_line_magic("unload_ext", "cortex_jupyter")
    ip.run_line_magic("load_ext", "cortex_jupyter")
    ip.run_cell_magic("cortex", "--script --delay 0 --text", "<response>kept here</response>")
    assert cortex_jupyter.runs("kept", store=tmp_path / "env.db")[0].answer == "kept here"


def test_the_default_store_is_in_the_user_data_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import platformdirs

    monkeypatch.delenv("CORTEX_STORE")
    assert store.default_path() == str(
        Path(platformdirs.user_data_dir("cortex_jupyter")) / "runs.db"
    )
    monkeypatch.setenv("CORTEX_STORE", "")
    assert store.default_path() is None


# ---- stores that cannot be used ---------------------------------------------------------


def bad_stores(tmp_path: Path) -> dict[str, Path]:
    a_file = tmp_path / "file.txt"
    a_file.write_text("not a folder")
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is no database" * 300)
    return {"under a file": a_file / "runs.db", "corrupt": corrupt, "a folder": tmp_path}


@pytest.mark.parametrize("kind", ["under a file", "corrupt", "a folder"])
def test_a_store_that_cannot_be_opened_is_one_line_and_the_cell_runs(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = bad_stores(tmp_path)[kind]
    before = path.read_bytes() if path.is_file() else None
    ip.run_line_magic("config", f"CortexMagics.store = {str(path)!r}")
    ip.run_cell_magic("cortex", "--script --delay 0 --text", "<response>still fine</response>")
    assert ip.user_ns["_cortex"].status == "completed"
    assert ip.user_ns["_cortex"].answer == "still fine"
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("cortex: %%cortex: the run store ")
    assert lines[0].endswith("this run is not stored.") and "Traceback" not in lines[0]
    if before is not None:
        assert path.read_bytes() == before


# ---- the schema --------------------------------------------------------------------------


def test_a_newer_store_is_refused_in_one_line_and_left_as_it_is(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "newer.db"
    with sqlite3.connect(path) as made:
        made.execute("CREATE TABLE runs (id TEXT, what TEXT)")
        made.execute("INSERT INTO runs VALUES ('r1', 'from the future')")
        made.execute(f"PRAGMA user_version = {schema.VERSION + 5}")
    made.close()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(store.StoreUnavailable, match="newer than this cortex_jupyter's"):
        store.open_store(path)
    ip.run_line_magic("config", f"CortexMagics.store = {str(path)!r}")
    ip.run_cell_magic("cortex", "--script --delay 0 --text", "<response>fine</response>")
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"schema version {schema.VERSION + 5}" in err
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_an_older_store_is_migrated_with_its_runs(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_stored(db)
    store.open_store(db).close()
    step = "ALTER TABLE runs ADD COLUMN tags TEXT NOT NULL DEFAULT 'none'"
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, step])
    monkeypatch.setattr(schema, "VERSION", len(schema.MIGRATIONS))
    store.open_store(db)  # the migration runs when the store is opened
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        assert check.execute("SELECT id, tags FROM runs").fetchall() == [(run.id, "none")]
    assert cortex_jupyter.open_run(run.id, store=db).answer == run.answer


def test_a_new_store_is_at_this_version_in_wal_mode(db: Path) -> None:
    store.open_store(db)
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_nested_agents_run_is_kept_inside_its_action(db: Path) -> None:
    registry = tools()
    Agent("helper", instructions="Help.", registry=registry)
    text = (
        '<action id="n1" type="agent">{"name": "helper", "parameters": {"task": "count"},'
        ' "output_key": "told"}</action>\n'
        "--- next turn ---\n<response>the helper said $told</response>\n"
        "--- reply to n1 ---\n"
        '<action id="h1">{"name": "herd", "parameters": {"n": 7}}</action>\n'
        "--- next turn ---\n<response>seven albatrosses</response>"
    )
    agent = Agent(model=ScriptModel(text), registry=registry)
    run = agent.run_sync("ask the helper", store=store.open_store(db))
    assert run.status == "completed", run.reason
    back = cortex_jupyter.open_run(run.id, store=db)
    assert back.actions["n1"].output == "seven albatrosses" == back.variables["told"]
    assert back.answer == "the helper said seven albatrosses"
    inner = [e.event for e in back.events if e.kind == "nested" and e.parent == "n1"]
    assert any(e.kind == "action_status" and e.id == "h1" for e in inner)
    assert [row.id for row in cortex_jupyter.runs("albatrosses", store=db)] == [run.id]


def test_an_action_row_is_as_its_event_left_it_not_as_the_node_is_later(db: Path) -> None:
    # The row was written from the live node when the writer got to it: a kernel killed
    # after the node turned done (output not yet kept) left a row saying "done" with no
    # output, while the events said "running".
    from cortex_jupyter.runtime import ActionStatus, Run
    from cortex_jupyter.runtime.core.record.graph import ActionNode

    run = Run()
    node = ActionNode(id="a1", name="slow", status="running")
    run.actions["a1"] = node
    kept = store.open_store(db)
    recording = kept.record(run, "go")
    event = ActionStatus("a1", "running", 1.0)
    run.record(event)
    recording.on_event(event)
    node.status, node.output = "done", 42  # later, with no event yet: the kernel dies
    kept.flush()
    back = cortex_jupyter.open_run(run.id, store=db)
    assert back.actions["a1"].status == "running"
    assert back.actions["a1"].output is None
