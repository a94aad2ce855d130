"""The store across processes: two writing at once, one killed mid-run, one reading another's."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

import cortex_jupyter
from tests.store.procs import start

DELTAS = ("thought", "response", "text", "chunk")


def finish(process: subprocess.Popen[str]) -> list[str]:
    out, err = process.communicate(timeout=240)
    assert process.returncode == 0, err
    return out.splitlines()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "shared.db"


def test_two_processes_write_to_one_store_at_once(db: Path) -> None:
    writers = [start("write", str(db), "6", tag) for tag in ("left", "right")]
    written = {tag: finish(p) for tag, p in zip(("left", "right"), writers, strict=True)}
    rows = {row.id: row for row in cortex_jupyter.runs(limit=100, store=db)}
    assert len(rows) == 12
    for tag, lines in written.items():
        for i, line in enumerate(lines):
            run_id, events = line.split()
            back = cortex_jupyter.open_run(run_id, store=db)
            assert rows[run_id].status == "completed" and rows[run_id].prompt.endswith(tag)
            # every event but the text deltas (joined when stored), none of the other's
            assert len([e for e in back.events if e.kind not in DELTAS]) == int(events)
            assert back.answer == f"run {i} of {tag} answered"
            assert back.actions["a1"].output == {"tag": tag, "i": i}


def test_a_killed_process_leaves_the_run_up_to_its_last_second(db: Path) -> None:
    process = start("kill", str(db))
    assert process.stdout is not None
    run_id = process.stdout.readline().split()[1]
    assert process.stdout.readline().strip() == "SECOND RUNNING"
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)  # and its pipes closed
    back = cortex_jupyter.open_run(run_id, store=db)
    assert back.status == "running"  # it never ended
    assert back.actions["a1"].status == "done"
    assert back.actions["a1"].output == {"kept": "after the kill"}
    assert back.variables["first"] == {"kept": "after the kill"}
    assert back.actions["a2"].status == "running"
    assert cortex_jupyter.runs("killed", store=db)[0].id == run_id


def test_another_process_opens_a_run_with_its_outputs(db: Path) -> None:
    (line,) = finish(start("write", str(db), "1", "elsewhere"))
    run_id = line.split()[0]
    opened = [json.loads(text) for text in finish(start("open", str(db), run_id[:7]))]
    assert opened == [
        ["a1", "dict", {"tag": "elsewhere", "i": 0}, "done"],
        ["a2", "ndarray", [[0, 1, 2], [3, 4, 5], [6, 7, 8]], "done"],
        ["answer", "run 0 of elsewhere answered", "completed"],
    ]
