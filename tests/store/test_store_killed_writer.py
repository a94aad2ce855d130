"""A process killed (SIGKILL) while it writes runs to the store: another process then lists
and opens them. Every run listed opens, or fails in one ``cortex:``-style line; the file is
never left corrupted (SQLite's integrity check passes)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from cortex_jupyter import store

WRITER = """
import sys
from cortex_jupyter import Agent
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Registry
from cortex_jupyter import store

kept = store.open_store(sys.argv[1])
reply = "<thought>x</thought><response>" + "words " * 2000 + "</response>"
n = 0
while True:
    Agent(model=ScriptModel(reply, chunk_size=64), registry=Registry(builtins=False)).run_sync(
        f"run {n}", store=kept
    )
    n += 1
    print(n, flush=True)
"""


def test_a_writer_killed_mid_write_leaves_a_store_others_read(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    for _ in range(3):  # a few runs written whole, then killed in the middle of more
        assert writer.stdout.readline(), "the writer ended before it wrote a run"
    time.sleep(0.05)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    writer.stdout.close()

    listed = store.runs(limit=1000, store=path)
    assert len(listed) >= 3
    for row in listed:
        try:
            run = store.open_run(row.id, store=path)
        except Exception as error:
            assert "\n" not in str(error).strip() and "Traceback" not in str(error)
        else:
            assert run.prompt.startswith("run ")
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
