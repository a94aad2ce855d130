"""Small helpers several test files share, so each is written once.

- ``recording_tool``: a tool on the default registry that keeps what it was given;
- ``registered_agent``: an ``Agent`` on the default registry, for one test;
- ``genai_price``: what genai-prices itself charges for a usage, to hold cortex's
  price against;
- ``dump``: every row of every table of a SQLite file, as SQL (``iterdump``);
- ``run_and_save``: a ``%%cortex`` cell run with a store, then ``%cortex save``d: the
  run, and the text of each surface it was kept on;
- ``local_cluster``: a real Dask cluster of one worker thread in this process;
- ``config_says``: what ``%config`` reports for a line setting ``CortexMagics``, and
  ``config_refusal``: the one line it refuses a value with, the old one kept;
- ``magics``: the shell's ``CortexMagics``;
- ``next_cell_runs``: a ``%%cortex`` cell after a refusal runs as if nothing happened.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magics import config as config_magics
from traitlets import TraitError

from cortex_jupyter import Agent, default_registry, store
from cortex_jupyter.magic import CortexMagics


@contextmanager
def recording_tool(name: str, says: str) -> Iterator[list[Any]]:
    """A tool ``name`` taking one ``value`` on the default registry while the block runs:
    it appends each value to the list given and returns ``says`` with ``{}`` filled by it."""
    received: list[Any] = []

    @default_registry.tool(name=name)
    def record(value: Any) -> str:
        """Look at a value."""
        received.append(value)
        return says.format(value)

    try:
        yield received
    finally:
        default_registry.remove("tool", name)


@contextmanager
def registered_agent(
    name: str, model: Any = None, *, instructions: str = "Help.", **options: Any
) -> Iterator[Agent]:
    """An ``Agent`` ``name`` on ``model`` (the cell's when None), registered on the
    default registry while the block runs."""
    agent = Agent(name, instructions=instructions, model=model, **options)
    try:
        yield agent
    finally:
        default_registry.remove("agent", name)


def genai_price(
    model: str, prompt: int, completion: int, cached: int | None = None, **where: Any
) -> float:
    """genai-prices' own price of that usage (``cached``: prompt tokens read from cache)."""
    tokens = genai_prices.Usage(
        input_tokens=prompt, output_tokens=completion, cache_read_tokens=cached
    )
    return float(genai_prices.calc_price(tokens, model_ref=model, **where).total_price)


def dump(path: Path) -> str:
    """Every row of every table of the SQLite file at ``path``, as SQL (``iterdump``)."""
    db = sqlite3.connect(path)
    try:
        return "\n".join(db.iterdump())
    finally:
        db.close()


def run_and_save(
    ip: InteractiveShell, folder: Path, options: str, body: str
) -> tuple[Any, list[tuple[str, str]]]:
    """Run ``%%cortex options`` on ``body`` with its store in ``folder``, then ``%cortex
    save`` it there: the run, and what each surface holds (the transcript, the saved
    file, the store's tables, the raw bytes of its file, -wal and -shm)."""
    path, saved = folder / "runs.db", folder / "run.jsonl"
    ip.run_line_magic("config", f"CortexMagics.store = {str(path)!r}")
    ip.run_cell_magic("cortex", options, body)
    run = ip.user_ns["_cortex"]
    ip.run_line_magic("cortex", f"save {saved}")
    store.open_store(path).flush()
    surfaces = [
        ("to_jsonl", run.to_jsonl()),
        ("save", saved.read_text(encoding="utf-8")),
        ("iterdump", dump(path)),
    ]
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        if file.exists():
            surfaces.append((file.name, file.read_bytes().decode("utf-8", "replace")))
    return run, surfaces


@contextmanager
def local_cluster() -> Iterator[Any]:
    """A real local Dask cluster: one worker thread in this process (``processes=False``:
    it shares the test's state, and starts in a second instead of spawning processes)."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",  # None still serves its HTTP endpoints on 8787
    ) as cluster:
        yield cluster


def magics(ip: InteractiveShell) -> CortexMagics:
    """The shell's ``CortexMagics`` (what ``%config CortexMagics...`` sets)."""
    found = ip.magics_manager.registry[CortexMagics.__name__]
    assert isinstance(found, CortexMagics)
    return found


def config_says(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> list[Any]:
    """Run ``%config CortexMagics.<name> = <value>``: what ``%config`` reported (the
    errors it prints, as they were given to it), ``[]`` when it took the value."""
    reported: list[Any] = []
    monkeypatch.setattr(config_magics, "error", reported.append)  # what %config prints
    ip.run_line_magic("config", f"CortexMagics.{name} = {value}")
    return reported


def config_refusal(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> str:
    """Run ``%config CortexMagics.<name> = <value>`` expecting a refusal: ``%config``
    reports one ``TraitError`` of one line, and the setting keeps its old value. The line."""
    settings = magics(ip)
    before = getattr(settings, name)
    reported = config_says(ip, monkeypatch, name, value)
    assert len(reported) == 1 and isinstance(reported[0], TraitError), reported
    message = str(reported[0])
    assert "\n" not in message
    assert getattr(settings, name) == before
    return message


def next_cell_runs(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    """The next ``%%cortex`` cell completes, and nothing printed a traceback."""
    ip.run_cell_magic("cortex", "--script --delay 0", "<response>fine</response>")
    assert ip.user_ns["_cortex"].status == "completed"
    assert "Traceback" not in capsys.readouterr().err
