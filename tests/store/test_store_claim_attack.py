"""A fresh-eye attack on taking a stored run to resume it (``Store.claim``): hostile rows,
id prefixes with SQL wildcards, and a Stop in the middle of the claim."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cortex_jupyter import Run, store
from cortex_jupyter.store import writer

HOSTNAME = socket.gethostname()


def stored(path: Path, *ids: str, status: str = "cancelled") -> store.Store:
    """A store at ``path`` holding stopped runs with the ids ``ids``."""
    kept = store.Store(path)
    for run_id in ids:
        run = Run(id=run_id)
        recording = kept.record(run, "go")
        run.status = status
        recording.finish()
    kept.flush()
    return kept


def set_host(path: Path, run_id: str, host: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET status = 'running', host = ? WHERE id = ?", (host, run_id))
    db.close()


@pytest.mark.parametrize(
    "hostname",
    [
        "evil\ncortex: run completed, nothing to do",
        "evil\r\x1b[2K\x1b[1Amasked",
        "x" * 100_000,
    ],
)
def test_a_hostile_host_is_shown_in_one_short_line(tmp_path: Path, hostname: str) -> None:
    path = tmp_path / "runs.db"
    kept = stored(path, "hostile1")
    try:
        set_host(path, "hostile1", f"4242@{hostname}")
        with pytest.raises(store.RunTaken) as refused:
            kept.claim("hostile1")
        said = str(refused.value)
        assert said.isprintable(), said  # no newline, no terminal escape
        assert len(said) < 600
        assert "--force" in said
    finally:
        kept.close()


@pytest.mark.parametrize("host", ["9" * 5000 + "@elsewhere.invalid", "9" * 5000 + "@" + HOSTNAME])
def test_a_pid_of_thousands_of_digits_is_no_pid_and_refused_in_one_line(
    tmp_path: Path, host: str
) -> None:
    path = tmp_path / "runs.db"
    kept = stored(path, "longpid")
    try:
        set_host(path, "longpid", host)
        with pytest.raises(store.RunTaken, match="is not a pid@hostname") as refused:
            kept.claim("longpid")
        assert len(str(refused.value)) < 600
        assert kept.claim("longpid", force=True) == "longpid"
    finally:
        kept.close()


def test_an_id_with_like_wildcards_names_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    kept = stored(path, "ab_1", "abc1", "ab%2", "abd2")
    try:
        assert kept.claim("ab_") == "ab_1"  # "_" is a character here, not any one
        assert kept.claim("ab%") == "ab%2"
        with pytest.raises(store.UnknownRun, match="starts several runs' ids"):
            kept.claim("ab")
    finally:
        kept.close()


def test_an_exact_id_wins_over_many_longer_ones_it_starts(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    kept = stored(path, *(f"abc{i}" for i in range(8)), "abc")
    try:
        assert kept.claim("abc") == "abc"
    finally:
        kept.close()


def test_a_stop_right_after_the_take_gives_the_run_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    kept = stored(path, "stopme")
    real = writer.take

    def take_then_stop(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise KeyboardInterrupt  # Stop, after the take was committed

    try:
        with sqlite3.connect(path) as db:
            before = db.execute("SELECT status, host, claimed FROM runs").fetchone()
        db.close()
        monkeypatch.setattr(writer, "take", take_then_stop)
        with pytest.raises(KeyboardInterrupt):
            kept.claim("stopme")
        monkeypatch.setattr(writer, "take", real)
        with sqlite3.connect(path) as db:
            after = db.execute("SELECT status, host, claimed FROM runs").fetchone()
        db.close()
        assert after == before  # not left running with this kernel's host
        assert kept.claim("stopme") == "stopme"  # and resumable here at once
    finally:
        kept.close()
