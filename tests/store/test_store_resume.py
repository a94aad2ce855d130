"""``%cortex resume ID`` never runs a run that is still going on, and takes a dead one once.

The store is shared by every kernel of the user. A run marked ``running`` may be going on
right now in another kernel, or in this one (a thread, a task): resuming it would call its
tools a second time. A process on this machine that still lives and wrote the run refuses
the resume in one line; once it is killed (a zombie too) the resume goes on; a pid that
now belongs to a process started after the run blocks nothing; two kernels resuming one
dead run at once: exactly one runs it. Processes are ``tests/store/procs.py`` in real
IPython shells; the tools count their calls in a file.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from cortex_jupyter import Agent, Run, default_registry, store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.session import CortexRunError
from cortex_jupyter.store.claim import owner
from tests.store.procs import ANSWER, CELL, register, start

HOSTNAME = socket.gethostname()


@pytest.fixture
def here(tmp_path: Path) -> Iterator[Path]:
    """This process's ``rt_first``/``rt_second`` (tag ``here``), counting in ``tmp_path``."""
    register(tmp_path, "here")
    yield tmp_path
    (tmp_path / "hold-here").unlink(missing_ok=True)
    for name in ("rt_first", "rt_second"):
        default_registry.remove("tool", name)


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts: none outlives it."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


@dataclass
class Kernels:
    """This process's tools, counting in ``here``, and the other kernels a test starts
    there (``holders``: none outlives the test)."""

    here: Path
    holders: list[subprocess.Popen[str]]


@pytest.fixture
def kernels(here: Path, holders: list[subprocess.Popen[str]]) -> Kernels:
    return Kernels(here, holders)


def holding(kernels: Kernels, *options: str) -> Any:
    """A process whose ``%%cortex`` run holds in its second action: (process, run id)."""
    (kernels.here / "hold-holder").touch()
    process = start("hold", str(kernels.here), *options)
    kernels.holders.append(process)
    assert process.stdout is not None
    for text in process.stdout:  # the cell's text view may write lines before it
        line = text.split()
        if line[:2] == ["SECOND", "RUNNING"]:
            return process, line[2]
    raise AssertionError(process.communicate(timeout=60))  # it ended without holding


def dead_run(kernels: Kernels, *options: str) -> str:
    """The id of a run whose process was killed (SIGKILL) in its second action."""
    process, run_id = holding(kernels, *options)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    return run_id


def sleeping(holders: list[subprocess.Popen[str]]) -> tuple[int, float]:
    """A process that only sleeps (stopped after the test): its pid and when it started."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], text=True)
    holders.append(sleeper)
    return sleeper.pid, psutil.Process(sleeper.pid).create_time()


def calls(directory: Path) -> list[str]:
    path = directory / "calls"
    return path.read_text().splitlines() if path.exists() else []


def row(run_id: str) -> tuple[Any, ...]:
    """The run's status, host, whole row and number of events, as committed."""
    store.open_store().flush()
    with sqlite3.connect(store.current_path() or "") as db:
        db.row_factory = sqlite3.Row
        found = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        (events,) = db.execute("SELECT count(*) FROM events WHERE run = ?", (run_id,)).fetchone()
    db.close()
    return found["status"], found["host"], tuple(found), events


def set_row(run_id: str, **values: Any) -> None:
    store.open_store().flush()
    names = ", ".join(f"{name} = ?" for name in values)
    with sqlite3.connect(store.current_path() or "") as db:
        db.execute(f"UPDATE runs SET {names} WHERE id = ?", (*values.values(), run_id))
    db.close()


def resumed(ip: InteractiveShell, run_id: str, line: str = "") -> Any:
    """``%cortex resume RUN_ID LINE``: the run it went on with, None when refused."""
    ip.user_ns.pop("_cortex", None)
    ip.run_line_magic("cortex", f"resume {run_id} {line}".strip())
    run = ip.user_ns.get("_cortex")
    return run if run is not None and run.id == run_id else None


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("cortex: ") and "\n" not in err, err
    return err


def completed(ip: InteractiveShell, run_id: str, line: str = "") -> None:
    """``%cortex resume RUN_ID LINE`` went on with the run and completed it."""
    run = resumed(ip, run_id, line)
    assert run is not None and (run.status, run.answer) == ("completed", ANSWER)


def refusal(ip: InteractiveShell, run_id: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``%cortex resume RUN_ID`` refused: the one line it says why in."""
    capsys.readouterr()
    assert resumed(ip, run_id) is None
    return one_line(capsys)


def test_a_run_going_on_in_another_live_kernel_is_refused_and_left_as_it_is(
    ip: InteractiveShell, kernels: Kernels, capsys: pytest.CaptureFixture[str]
) -> None:
    here = kernels.here
    process, run_id = holding(kernels)
    before = row(run_id)
    assert before[:2] == ("running", f"{process.pid}@{HOSTNAME}")
    assert refusal(ip, run_id, capsys) == (
        f"cortex: %cortex resume {run_id}: "
        f"run {run_id} is still running in another kernel (process {process.pid} "
        f"on {HOSTNAME}): resuming it would run its actions twice; wait for it to end, or "
        "stop that kernel and resume it again."
    )
    assert calls(here) == ["first holder", "second holder"]  # nothing ran here
    assert process.poll() is None
    assert row(run_id) == before  # not taken, not written

    # Killed, it is a zombie until it is reaped: dead all the same.
    process.send_signal(signal.SIGKILL)
    while psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    completed(ip, run_id)
    assert calls(here) == ["first holder", "second holder", "second here"]
    assert row(run_id)[:2] == ("completed", f"{os.getpid()}@{HOSTNAME}")


def test_a_pid_now_of_a_process_started_after_the_run_was_taken_blocks_nothing(
    ip: InteractiveShell, kernels: Kernels, capsys: pytest.CaptureFixture[str]
) -> None:
    here = kernels.here
    run_id = dead_run(kernels)
    pid, born = sleeping(kernels.holders)
    # Its pid, as if the run's kernel had it: taken after the sleeper started, it is that
    # kernel, alive...
    set_row(run_id, host=f"{pid}@{HOSTNAME}", claimed=born + 60)
    said = refusal(ip, run_id, capsys)
    assert f"still running in another kernel (process {pid} " in said
    # ...taken an hour before the sleeper started, the pid was reused: the kernel is gone.
    set_row(run_id, claimed=born - 3600)
    completed(ip, run_id)
    assert calls(here) == ["first holder", "second holder", "second here"]


def test_a_run_going_on_in_a_thread_of_this_kernel_is_refused(
    ip: InteractiveShell, here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (here / "hold-here").touch()
    run = Run()
    agent = Agent(model=ScriptModel(CELL), registry=default_registry)
    thread = threading.Thread(
        target=lambda: agent.run_sync("two steps", run=run, store=store.open_store())
    )
    thread.start()
    try:
        while thread.is_alive() and calls(here) != ["first here", "second here"]:
            time.sleep(0.01)
        assert row(run.id)[0] == "running"
        assert refusal(ip, run.id, capsys) == (
            f"cortex: %cortex resume {run.id}: "
            f"run {run.id} is still running in this kernel (a cell, a thread or a "
            "task here runs it): resuming it would run its actions twice; wait for it to "
            "end, or stop it, then resume it."
        )
        assert calls(here) == ["first here", "second here"]
    finally:
        (here / "hold-here").unlink()
        thread.join(timeout=60)
    assert (run.status, run.answer) == ("completed", ANSWER)
    assert resumed(ip, run.id) is None
    assert one_line(capsys) == (
        f"cortex: %cortex resume {run.id}: "
        f"run {run.id} already completed: there is nothing to resume "
        f"(%cortex open {run.id} shows it)."
    )


def test_two_kernels_resuming_one_dead_run_at_once_run_it_once(kernels: Kernels) -> None:
    here = kernels.here
    run_id = dead_run(kernels)
    resumers = [start("resume", str(here), run_id) for _ in range(2)]
    kernels.holders.extend(resumers)
    for process in resumers:
        assert process.stdout is not None
        assert "READY" in (line.strip() for line in iter(process.stdout.readline, "")), (
            process.communicate(timeout=60)
        )  # stops reading at it (or at the end of a process that failed)
    (here / "go").touch()  # both resume now
    said = [process.communicate(timeout=240) for process in resumers]
    last = [out.strip().splitlines()[-1] for out, _ in said]  # after the run's text view
    assert sorted(last) == ["REFUSED", "RESUMED completed"]
    refused = said[last.index("REFUSED")][1]
    assert f"cortex: %cortex resume {run_id}: run {run_id} " in refused
    assert ("still running in another kernel" in refused) or ("already completed" in refused)
    ran = [line for line in calls(here) if not line.endswith("holder")]
    assert len(ran) == 1 and ran[0].startswith("second resumer-")  # the first was restored
    back = store.open_run(run_id)
    assert (back.status, back.answer) == ("completed", ANSWER)


def test_a_run_marked_running_on_another_machine_takes_force(
    ip: InteractiveShell, kernels: Kernels, capsys: pytest.CaptureFixture[str]
) -> None:
    here = kernels.here
    run_id = dead_run(kernels)
    set_row(run_id, host="4242@another-machine.invalid")
    before = row(run_id)
    assert refusal(ip, run_id, capsys) == (
        f"cortex: %cortex resume {run_id}: "
        f"run {run_id} is marked running by process 4242 on another-machine.invalid "
        "(another machine, which cannot be checked from here): if that kernel is gone, "
        f"%cortex resume {run_id} --force takes the run over (if it still runs, its actions "
        "run twice)."
    )
    assert row(run_id) == before and calls(here) == ["first holder", "second holder"]
    completed(ip, run_id, "--force")
    assert calls(here)[-1] == "second here"


@pytest.mark.parametrize("line", ["", "a b", "--force", "ID --force --force", "ID --forse"])
def test_resume_takes_one_id_and_force_only(ip: InteractiveShell, line: str) -> None:
    with pytest.raises(UsageError, match=r"give one run id.*--force only to take a run marked"):
        ip.run_line_magic("cortex", f"resume {line}")


def test_a_resume_stopped_before_the_run_went_on_leaves_it_resumable(
    ip: InteractiveShell, kernels: Kernels, capsys: pytest.CaptureFixture[str]
) -> None:
    # The cell's --output type is a name only its kernel knew: the resume stops before
    # the run goes on, and the run is given back as it was.
    run_id = dead_run(kernels, "--output RtAnswer")
    before = row(run_id)
    ip.user_ns.pop("RtAnswer", None)
    with pytest.raises(CortexRunError, match="RtAnswer"):
        ip.run_line_magic("cortex", f"resume {run_id}")
    assert row(run_id) == before
    ip.user_ns["RtAnswer"] = str
    completed(ip, run_id)


# ---- the writer and the claim ---------------------------------------------------------


def stopped_run(path: Path) -> tuple[store.Store, Run]:
    """A run of this process stopped before its end (``cancelled``), kept at ``path``."""
    kept = store.Store(path)
    run = Run()
    recording = kept.record(run, "go")
    run.status = "cancelled"
    recording.finish()
    kept.flush()
    return kept, run


def host_of(path: Path, run_id: str) -> tuple[Any, ...]:
    with sqlite3.connect(path) as db:
        found: tuple[Any, ...] = db.execute(
            "SELECT status, host, claimed FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
    db.close()
    return found


def test_the_writer_keeps_the_claim_and_never_writes_over_a_later_one(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    kept, run = stopped_run(path)
    me = f"{os.getpid()}@{HOSTNAME}"
    try:
        kept.claim(run.id)
        status, host, claimed = host_of(path, run.id)
        assert (status, host) == ("running", me)
        with pytest.raises(store.RunTaken, match="still running in this kernel"):
            kept.claim(run.id)  # taken: a second resume here is refused at once
        recording = kept.record(run, "go")  # the resume goes on
        kept.flush()
        assert host_of(path, run.id) == ("running", me, claimed)  # as the claim left it
        run.status = "cancelled"
        recording.finish()
        kept.flush()

        kept.claim(run.id)  # resumed again; meanwhile another machine's kernel is let in
        with sqlite3.connect(path) as db:
            db.execute("UPDATE runs SET host = '7@elsewhere.invalid' WHERE id = ?", (run.id,))
        db.close()
        kept.record(run, "go")
        kept.flush()
        assert host_of(path, run.id)[1] == "7@elsewhere.invalid"  # never written over
        assert kept.problem is not None
        assert f"run {run.id} was taken over by 7@elsewhere.invalid" in kept.problem
    finally:
        kept.close()


def test_a_claim_never_recorded_is_given_back_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    kept, run = stopped_run(path)
    try:
        before = host_of(path, run.id)
        kept.claim(run.id)
        assert host_of(path, run.id)[0] == "running"
        kept.release(run.id)
        assert host_of(path, run.id) == before
        kept.claim(run.id)  # resumable again, here as anywhere
    finally:
        kept.close()


def test_a_version_1_store_is_migrated_and_its_runs_checked_from_their_start(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    from cortex_jupyter.store import schema

    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as db:
        db.executescript(schema.MIGRATIONS[0])
        db.execute("PRAGMA user_version = 1")
    db.close()
    pid, born = sleeping(holders)
    parent = psutil.Process(os.getpid()).parent()
    assert parent is not None
    written = (
        ("r-alive", parent.pid, parent.create_time() + 10),  # started after its writer
        ("r-reused", pid, born - 60),  # started before the sleeper was
    )
    with sqlite3.connect(path) as db:
        for run_id, pid, started in written:
            db.execute(
                "INSERT INTO runs (id, started, clock, status, host) VALUES (?, ?, 0, "
                "'running', ?)",
                (run_id, started, f"{pid}@{HOSTNAME}"),
            )
    db.close()
    kept = store.Store(path)
    try:
        assert host_of(path, "r-alive")[2] is None  # version 2's column, empty for old runs
        with pytest.raises(store.RunTaken, match=f"another kernel \\(process {parent.pid} "):
            kept.claim("r-alive")
        kept.claim("r-reused")
        assert host_of(path, "r-reused")[1] == f"{os.getpid()}@{HOSTNAME}"
    finally:
        kept.close()


@given(
    host=st.one_of(
        st.none(),
        st.text(),
        st.builds(lambda pid, name: f"{pid}@{name}", st.integers(-5, 2**70), st.text()),
        st.builds(lambda digits: f"{digits}@{HOSTNAME}", st.text("0123456789²٣", min_size=1)),
    ),
    since=st.floats(-1e12, 1e12),
)
def test_any_host_text_is_read_without_error_and_alive_only_for_a_live_pid_here(
    host: str | None, since: float
) -> None:
    found = owner(host, since, HOSTNAME)
    assert found.state in ("alive", "gone", "unknown")
    if found.state == "alive":
        assert host is not None and found.pid is not None
        pid_text, _, hostname = host.partition("@")
        assert (int(pid_text), hostname) == (found.pid, HOSTNAME)  # "01@host" is pid 1
        # (Not re-checked with psutil here: a short-lived process of the machine may have
        # had that pid a moment ago. A live and a dead process: the tests above.)
        assert pid_text.isascii()
    if host is not None and "@" in host and host.partition("@")[2] not in ("", HOSTNAME):
        assert found.state == "unknown"  # another machine: never taken as dead
