"""The store while another connection holds it: opening waits, a write waits or is kept.

Two kernels opening a new store at once met SQLite's "database is locked", which it
answers at once (no busy wait) to a connection switching the file to WAL while another
holds it: the second kernel's runs were not kept at all. And a write that waited out the
busy timeout was dropped, its events gone. Both are waited out now, or tried again.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import cortex_jupyter
from cortex_jupyter import store
from cortex_jupyter.models import ScriptModel
from cortex_jupyter.runtime import Agent, Registry, Run
from cortex_jupyter.runtime.core.trust.secrets import secrets
from cortex_jupyter.store import writer

SCRIPT = """<action id="a1">{"name": "sea", "parameters": {"n": 3}, "output_key": "sea"}</action>
--- next turn ---
<response final="true">The sea holds $sea fish.</response>"""


@contextmanager
def held(path: Path) -> Iterator[threading.Event]:
    """Another connection holds ``path`` for writing until the event is set."""
    ready, release = threading.Event(), threading.Event()

    def hold() -> None:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the write lock (as a kernel writing holds it)
        ready.set()
        release.wait(30)
        other.execute("COMMIT")
        other.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert ready.wait(10)
    try:
        yield release
    finally:
        release.set()
        thread.join(10)


def test_a_new_store_held_by_another_connection_is_opened_once_it_is_let_go(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    with held(path) as release:
        threading.Timer(0.3, release.set).start()
        db = writer.connect(path)  # failed at once with "database is locked"
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == store.schema.VERSION
    finally:
        db.close()


def _open(path: str, barrier: object, out: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    try:
        writer.connect(path).close()
        out.put("opened")  # type: ignore[attr-defined]
    except store.StoreUnavailable as exc:
        out.put(str(exc))  # type: ignore[attr-defined]


def test_kernels_opening_a_new_store_at_the_same_moment_all_open_it(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    answers: list[str] = []
    for trial in range(20):  # each trial failed about one time in five
        path = str(tmp_path / f"runs-{trial}.db")
        barrier, out = context.Barrier(3), context.Queue()
        processes = [context.Process(target=_open, args=(path, barrier, out)) for _ in range(3)]
        for process in processes:
            process.start()
        answers += [out.get(timeout=60) for _ in processes]
        for process in processes:
            process.join(30)
    assert set(answers) == {"opened"}


def tools() -> Registry:
    registry = Registry()

    @registry.tool
    def sea(n: int) -> int:
        """Count fish."""
        return n * 7

    return registry


def fish(kept: writer.Store, prompt: str = "how many fish?") -> Run:
    """SCRIPT's run (``sea`` counts 3 * 7 fish, then the answer), kept in ``kept``."""
    return Agent(model=ScriptModel(SCRIPT), registry=tools()).run_sync(prompt, store=kept)


def fish_kept(path: str | Path, run_id: str) -> Run:
    """The run ``run_id`` as the store at ``path`` gives it back: whole, answered."""
    back = cortex_jupyter.open_run(run_id, store=path)
    assert back.status == "completed" and back.answer == "The sea holds 21 fish."
    return back


@pytest.fixture
def impatient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A write gives up on a held store after 0.2 s (not 10 s)."""
    monkeypatch.setattr(writer, "BUSY_MS", 200)


def test_a_write_to_a_store_held_too_long_is_kept_and_written_once_it_is_let_go(
    tmp_path: Path, impatient: None
) -> None:
    path = tmp_path / "runs.db"
    kept = writer.Store(path)
    try:
        with held(path):
            run = fish(kept)
            assert not kept.flush()  # not written: the store is held
            assert kept.problem is not None and "still trying" in kept.problem
            assert "database is locked" in kept.problem
        assert kept.flush()  # let go: written now, and nothing to say any more
        assert kept.problem is None
        back = fish_kept(path, run.id)
        assert back.actions["a1"].output == 21
        calm = writer.Store(tmp_path / "calm.db")  # the same run, kept with no one in the way
        try:
            twin = fish(calm)
            assert calm.flush()
        finally:
            calm.close()
        like = cortex_jupyter.open_run(twin.id, store=tmp_path / "calm.db")
        assert [e.kind for e in back.events] == [e.kind for e in like.events]
        seqs = [seq for (seq,) in sqlite3.connect(path).execute(
            "SELECT seq FROM events WHERE run = ? ORDER BY seq", (run.id,))]  # fmt: skip
        assert seqs == list(range(len(seqs)))  # each event once, none skipped
    finally:
        kept.close()


def test_a_write_that_can_never_succeed_is_said_and_later_runs_are_still_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    kept = writer.Store(path)
    try:
        sqlite3.connect(path).execute("DROP TABLE nodes")  # not a passing problem
        first = fish(kept, "one")
        kept.flush()
        assert kept.problem is not None and "nodes" in kept.problem
        assert "still trying" not in kept.problem
        kept.problem = None
        db = sqlite3.connect(path)
        db.executescript(
            "CREATE TABLE nodes (run TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "body TEXT NOT NULL, PRIMARY KEY (run, id)) WITHOUT ROWID;"
        )
        db.close()
        second = fish(kept, "two")
        assert kept.flush() and kept.problem is None
        ids = {row.id for row in cortex_jupyter.runs(store=path)}
        assert second.id in ids and first.id != second.id
    finally:
        kept.close()


def test_a_store_held_for_a_thousand_tries_and_more_is_still_written_once_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pause between two tries doubled as 2**tries, computed as a float: after 1024
    # tries (2.3 hours of a full disk at 8 s a try) it overflowed, the writer thread
    # died with a traceback, and everything queued was lost while the problem line
    # still said "still trying". Here the tries come with no pause at all.
    monkeypatch.setattr(writer, "BUSY_MS", 0)
    monkeypatch.setattr(writer, "INTERVAL", 0.0)
    monkeypatch.setattr(writer, "_MOST_BETWEEN_TRIES", 0.0)
    tries = threading.Semaphore(0)
    passing = writer._passing

    def counted(exc: sqlite3.Error) -> bool:
        tries.release()
        return passing(exc)

    monkeypatch.setattr(writer, "_passing", counted)
    path = tmp_path / "runs.db"
    kept = writer.Store(path)
    try:
        with held(path):
            run = fish(kept)
            for _ in range(1100):
                assert kept.alive and tries.acquire(timeout=10), "the writer stopped trying"
        assert kept.flush()
        fish_kept(path, run.id)
    finally:
        kept.close()


def _over_its_limit(path: str, out: object) -> None:
    """In a child: a run written while the store's file may not grow (a quota reached,
    a file-size limit: SQLite says 'disk I/O error'), then the limit lifted."""
    import resource

    kept = writer.Store(path)
    kept.flush()
    resource.setrlimit(resource.RLIMIT_FSIZE, (Path(path).stat().st_size, resource.RLIM_INFINITY))
    try:
        run = fish(kept, "x" * 50_000)
        said = (kept.flush(), kept.problem)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    out.put((run.id, *said, kept.flush(), kept.problem))  # type: ignore[attr-defined]
    kept.close()


def test_a_write_past_a_file_size_limit_is_kept_and_written_once_the_limit_is_lifted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite answers a write the file system refuses for its size (EFBIG, a quota's
    # EDQUOT) with SQLITE_IOERR_WRITE, not SQLITE_FULL: the run was dropped for good.
    monkeypatch.setattr(writer, "INTERVAL", 0.05)
    path = str(tmp_path / "runs.db")
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_over_its_limit, args=(path, out))
    child.start()
    run_id, written, problem, later, after = out.get(timeout=120)
    child.join(30)
    assert not written and problem is not None and "still trying" in problem, problem
    assert later and after is None
    fish_kept(path, run_id)


def test_a_secret_unset_while_its_write_waits_is_still_never_stored(
    tmp_path: Path, impatient: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redacted as it is written: a write kept for hours, tried again after the user
    # unset the variable, no longer knew the value was a secret and kept it whole.
    secret = "sk-WAITINGsecret0123456789abcdef"
    monkeypatch.setattr(secrets, "_added", set(secrets._added))  # forgotten afterwards
    monkeypatch.setenv("MY_API_KEY", secret)
    path = tmp_path / "runs.db"
    kept = writer.Store(path)
    try:
        with held(path):
            model = ScriptModel(f"<response>the key is {secret}</response>")
            Agent(model=model).run_sync(f"show {secret}", store=kept)
            assert not kept.flush()
            monkeypatch.delenv("MY_API_KEY")
        assert kept.flush()
    finally:
        kept.close()
    files = [Path(f"{path}{suffix}") for suffix in ("", "-wal", "-shm")]
    assert not any(secret.encode() in file.read_bytes() for file in files if file.exists())


def test_an_output_that_cannot_be_stored_loses_only_itself_not_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something in a batch that can never be written (here an output whose encoding
    fails: a bug of ours, an odd object) took the whole batch with it: the run's row, its
    other actions, its events. The batch is written item by item then: only it is lost."""
    script = """<action id="a1">{"name": "sea", "parameters": {"n": 3}}</action>
<action id="a2">{"name": "sea", "parameters": {"n": 4}}</action>
--- next turn ---
<response final="true">Done.</response>"""
    real = writer.keep

    def keep(value: object) -> object:
        if value == 28:
            raise RuntimeError("this output cannot be encoded")
        return real(value)

    monkeypatch.setattr(writer, "keep", keep)
    path = tmp_path / "runs.db"
    kept = writer.Store(path)
    try:
        run = Agent(model=ScriptModel(script), registry=tools()).run_sync("fish", store=kept)
        kept.flush()
        assert kept.problem is not None and "this output cannot be encoded" in kept.problem
    finally:
        kept.close()
    back = cortex_jupyter.open_run(run.id, store=path)
    assert back.status == "completed" and back.answer == "Done."
    assert back.actions["a1"].output == 21  # the other action's output is kept
    assert back.actions["a2"].output is None  # what could not be written (its event too)
    assert [row.id for row in cortex_jupyter.runs(store=path)] == [run.id]
