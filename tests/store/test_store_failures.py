"""Every store command is one line on every failure, and the kernel goes on.

Through a real shell, as a user types them: the cell, ``%cortex runs``, ``%cortex open``,
``%cortex resume``, ``cortex_jupyter.runs()`` and ``cortex_jupyter.open_run()``, against a
store that is another program's SQLite database, a file that is no SQLite at all, a
folder that cannot be written, a full disk, and a store another process holds with
``BEGIN IMMEDIATE``. Each failure is one ``cortex:`` line that names the command typed
(no traceback wall); ``%cortex runs don't`` is read as written, and a ``--limit`` past
what SQLite holds is refused in one line.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent
from cortex_jupyter.store import writer

SCRIPT = "<response>fine</response>"


def said(ip: InteractiveShell, capsys: pytest.CaptureFixture[str], code: str) -> list[str]:
    """What running ``code`` as a cell printed (stdout and stderr), line by line."""
    capsys.readouterr()
    ip.run_cell(code)
    out = capsys.readouterr()
    return [line for line in (out.out + out.err).splitlines() if line.strip()]


def a_run(path: Path, prompt: str = "how many walruses?", status: str = "cancelled") -> str:
    """A run kept in the store at ``path``, marked ``status`` (resumable unless done)."""
    run = Agent(model=ScriptModel(SCRIPT)).run_sync(prompt, store=store.open_store(path))
    assert store.open_store(path).flush()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run.id))
    db.close()
    return run.id


def use(ip: InteractiveShell, path: Path) -> None:
    ip.run_line_magic("config", f"CortexMagics.store = {str(path)!r}")


def assert_one_line(lines: list[str], command: str) -> None:
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"cortex: {command}"), lines[0]
    assert "Traceback" not in lines[0]


def commands(run_id: str) -> list[tuple[str, str]]:
    """What a user types, and how the line that says it failed begins."""
    return [
        ("%cortex runs", "%cortex runs: the run store "),
        (f"%cortex open {run_id}", f"%cortex open {run_id}: the run store "),
        (f"%cortex resume {run_id}", f"%cortex resume {run_id}: the run store "),
        ("import cortex_jupyter; cortex_jupyter.runs()", "cortex_jupyter.runs(): the run store "),
        (
            f"import cortex_jupyter; cortex_jupyter.open_run({run_id!r})",
            "cortex_jupyter.open_run(): the run store ",
        ),
    ]


def another_programs(tmp_path: Path) -> Path:
    path = tmp_path / "theirs.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE invoices (id INTEGER, total REAL)")
        db.execute("INSERT INTO invoices VALUES (1, 9.5)")
    db.close()
    return path


def no_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "notes.db"
    path.write_bytes(b"a text file, not a database\n" * 200)
    return path


def unwritable(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        folder = tmp_path / "locked"
        folder.mkdir(mode=0o500)
        return folder / "runs.db"
    if Path("/sys/kernel").is_dir():  # root may write anywhere but in sysfs
        return Path("/sys/cortex-store-failures.db")
    pytest.skip("running as root, and there is no sysfs to be refused by")


BAD = {"another program's database": another_programs, "not SQLite": no_sqlite}


@pytest.mark.parametrize("kind", list(BAD))
def test_every_store_command_on_a_file_that_is_no_run_store_is_one_line(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    path = BAD[kind](tmp_path)
    before = path.read_bytes()
    use(ip, path)
    lines = said(ip, capsys, f"%%cortex --script --delay 0 --text\n{SCRIPT}")
    failed = [line for line in lines if line.startswith("cortex:")]
    assert failed == [line for line in lines if "run store" in line]
    assert_one_line(failed, "%%cortex: the run store ")
    assert failed[0].endswith("this run is not stored.")
    assert ip.user_ns["_cortex"].answer == "fine"
    why = "another program's SQLite database" if "program" in kind else "not an SQLite file"
    assert why in failed[0]
    for code, start in commands("4a68ae0bcc64"):
        lines = said(ip, capsys, code)
        assert_one_line(lines, start)
        assert why in lines[0]
    assert path.read_bytes() == before  # left as it is: no table of ours added
    assert said(ip, capsys, "print(1 + 1)") == ["2"]  # the kernel goes on


def test_every_store_command_in_a_folder_that_cannot_be_written_is_one_line(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = unwritable(tmp_path)
    use(ip, path)
    lines = said(ip, capsys, f"%%cortex --script --delay 0 --text\n{SCRIPT}")
    failed = [line for line in lines if line.startswith("cortex:")]
    assert_one_line(failed, "%%cortex: the run store ")
    assert "cannot be written" in failed[0] and "CortexMagics.store" in failed[0]
    for code, start in commands("4a68ae0bcc64"):
        assert_one_line(said(ip, capsys, code), start)
    assert said(ip, capsys, "print(1 + 1)") == ["2"]


def test_an_unbalanced_quote_is_read_as_written(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    found = a_run(path, "why don't walruses fly?")
    other = a_run(path, "how deep is the sea?")
    use(ip, path)
    lines = said(ip, capsys, "%cortex runs don't")
    assert any(line.startswith(found) for line in lines), lines
    assert not any(line.startswith(other) for line in lines)
    assert not any("Traceback" in line or "Error" in line for line in lines)


@pytest.mark.parametrize("limit", ["99999999999999999999", str(2**63), "0", "-1", "lots"])
def test_a_limit_past_what_sqlite_holds_is_refused_in_one_line(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str], limit: str
) -> None:
    path = tmp_path / "runs.db"
    a_run(path)
    use(ip, path)
    lines = said(ip, capsys, f"%cortex runs --limit {limit}")
    assert len(lines) == 1, lines
    assert lines[0].startswith("UsageError: %cortex runs: --limit takes a whole number")
    assert "SQLite" in lines[0]
    assert len(said(ip, capsys, f"%cortex runs --limit {2**63 - 1}")) == 2  # heading, run
    with pytest.raises(ValueError, match="the most SQLite holds"):
        store.runs(limit=2**63, store=path)


# ---- another process holds the store's write lock ------------------------------------

HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("HOLDING", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


@pytest.fixture
def impatient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write gives up on a held store after 0.2 s (not 10 s)."""
    monkeypatch.setattr(writer, "BUSY_MS", 200)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, str, subprocess.Popen[str]]]:
    """A store with a resumable run, and another process holding its write lock."""
    path = tmp_path / "runs.db"
    run_id = a_run(path)
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None and process.stdout.readline().strip() == "HOLDING"
    try:
        yield path, run_id, process
    finally:
        process.communicate("\n", timeout=30)


def test_resume_while_another_process_holds_the_lock_says_who_in_one_line(
    ip: InteractiveShell,
    holder: tuple[Path, str, subprocess.Popen[str]],
    impatient: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, run_id, process = holder
    use(ip, path)
    lines = said(ip, capsys, f"%cortex resume {run_id}")
    assert_one_line(lines, f"%cortex resume {run_id}: the run store ")
    assert "database is locked" in lines[0]
    assert f"(pid {process.pid})" in lines[0] and "close the one holding it" in lines[0]
    # Reading goes on beside the writer (WAL): runs and open answer as ever.
    listed = said(ip, capsys, "%cortex runs")
    assert any(line.startswith(run_id) for line in listed)
    assert not any(line.startswith("cortex:") for line in listed)
    assert said(ip, capsys, "print(1 + 1)") == ["2"]


# ---- a full disk ----------------------------------------------------------------------


def _resume_past_the_limit(ip: InteractiveShell, run_id: str, out: Any) -> None:
    """In a child: ``%cortex resume`` while no file may grow (a full disk, to SQLite)."""
    import contextlib
    import io

    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
    written = io.StringIO()
    with contextlib.redirect_stdout(written), contextlib.redirect_stderr(written):
        ip.run_cell(f"%cortex resume {run_id}")
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    out.put(written.getvalue())


def test_resume_on_a_full_disk_is_one_line(
    ip: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    run_id = a_run(path)
    store.open_store(path).close()  # everything is in the main file: the WAL is empty
    use(ip, path)
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_resume_past_the_limit, args=(ip, run_id, out))
    child.start()
    text = out.get(timeout=120)
    child.join(30)
    lines = [line for line in text.splitlines() if line.strip()]
    assert_one_line(lines, f"%cortex resume {run_id}: the run store ")
    assert "disk I/O error: the disk is full" in lines[0] and "free some room" in lines[0]
    assert [row.status for row in store.runs(store=path) if row.id == run_id] == ["cancelled"]
