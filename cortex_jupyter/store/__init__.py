"""The run store: every run kept in one SQLite file as it happens, found and opened again.

An observer of run events, like the display: the session (and ``Agent.run(store=...)``)
hands it each run's events, and it never drives a run. Modules:

- ``schema``: the tables, their version (``PRAGMA user_version``) and the migrations;
- ``claim``: taking a stored run to resume it, never one still going on (in this
  process, or in another that still lives: ``runs.host``);
- ``writer``: ``Store``, whose one thread commits what runs hand it (WAL, at most half a
  second behind), and ``Recording``, what one run's events go to;
- ``outputs``: how an action's output is kept (JSON, a pickle, or a marked repr) without
  a secret ever reaching the disk;
- ``read``: the stored runs (``runs``), FTS5 search, and a run rebuilt (``open_run``).
- ``problems``: why a store cannot be used (``StoreUnavailable``), in one line that says
  what to do (and, for a lock another program holds, who has the store open).

Where: ``CortexMagics.store``, by default ``runs.db`` in the user data directory; the
environment variable ``CORTEX_STORE`` overrides the default, and an empty one turns the
store off.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import platformdirs

from cortex_jupyter.runtime.core.record.run import user_path
from cortex_jupyter.runtime.core.trust.secrets import shorten
from cortex_jupyter.store.read import (
    RunList,
    RunRow,
    Snippet,
    StoredRun,
    Timeline,
    UnknownRun,
    fts_query,
)
from cortex_jupyter.store.read import load as _load
from cortex_jupyter.store.read import rows as _rows
from cortex_jupyter.store.schema import VERSION
from cortex_jupyter.store.writer import Recording, RunTaken, Store, StoreUnavailable, connect, why

#: The most rows ``runs`` may ask for: the largest INTEGER SQLite holds.
MOST_ROWS = 2**63 - 1

__all__ = [
    "ENVIRONMENT",
    "VERSION",
    "Recording",
    "RunList",
    "RunRow",
    "RunTaken",
    "Snippet",
    "Store",
    "StoreUnavailable",
    "StoredRun",
    "Timeline",
    "UnknownRun",
    "configure",
    "configure_default",
    "current_path",
    "default_path",
    "fts_query",
    "open_run",
    "open_store",
    "runs",
    "take_problem",
]

#: The environment variable that says where the store is ("" or "none": nowhere).
ENVIRONMENT = "CORTEX_STORE"
_OFF = ("", "none", "off")

_lock = threading.Lock()
_stores: dict[str, Store] = {}
#: What ``CortexMagics.store`` says (set by the magic); unset: ``default_path()``.
_configured: list[str | None] = []


def default_path() -> str | None:
    """Where the store is unless configured: ``$CORTEX_STORE`` (empty or ``none``: no
    store), else ``runs.db`` in the user data directory."""
    given = os.environ.get(ENVIRONMENT)
    if given is not None:
        return None if given.strip().lower() in _OFF else os.fspath(user_path(given.strip()))
    return os.fspath(Path(platformdirs.user_data_dir("cortex_jupyter")) / "runs.db")


def configure(path: str | os.PathLike[str] | None) -> None:
    """Use ``path`` as this process's store (``CortexMagics.store`` calls it; None: off)."""
    _configured[:] = [None if path is None else _normal(path)]


def configure_default() -> None:
    """Forget ``configure``: the store is ``default_path()`` again (``%unload_ext``)."""
    _configured.clear()


def current_path() -> str | None:
    """The store this process writes to and reads from (None: the store is off)."""
    return _configured[0] if _configured else default_path()


def _normal(path: str | os.PathLike[str]) -> str | None:
    text = os.fspath(path).strip()
    return None if text.lower() in _OFF else os.fspath(user_path(text))


def open_store(path: str | os.PathLike[str] | None = None) -> Store:
    """The ``Store`` at ``path`` (the current one when None), one per file in a process;
    ``StoreUnavailable`` says why it cannot be used."""
    where = current_path() if path is None else _normal(path)
    if where is None:
        raise StoreUnavailable("(none)", "the run store is off (CortexMagics.store is None)")
    key = os.path.abspath(where)
    with _lock:
        store = _stores.get(key)
        if store is None or not store.alive:
            store = _stores[key] = Store(key)
        return store


def take_problem() -> str | None:
    """The last write to the current store that failed, in a sentence (then forgotten)."""
    where = current_path()
    with _lock:
        kept = None if where is None else _stores.get(os.path.abspath(where))
    if kept is None or kept.problem is None:
        return None
    problem, kept.problem = kept.problem, None
    return problem


def runs(
    query: str | None = None, limit: int = 20, *, store: str | os.PathLike[str] | None = None
) -> RunList:
    """The stored runs, newest first (at most ``limit``); with ``query``, those whose
    prompt, answer, action names or outputs hold all of its words, each with the
    ``snippet`` that matched. A ``RunList``: ``.more`` says how many did not fit, and
    ``.to_pandas()`` (or ``pd.DataFrame(rows)``) makes a DataFrame."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MOST_ROWS:
        raise ValueError(
            f"limit must be a whole number from 1 to {MOST_ROWS:,} (the most SQLite "
            f"holds); got {shorten(repr(limit), 60)}"
        )
    with _called("cortex_jupyter.runs()"):
        db, where = _reader(store)
        try:
            return _rows(db, query, limit)
        except sqlite3.Error as exc:  # the file went bad, or is held, after it was opened
            raise StoreUnavailable(where, why(exc, where)) from None
        finally:
            db.close()


def open_run(run_id: str, *, store: str | os.PathLike[str] | None = None) -> StoredRun:
    """The stored run ``run_id`` (or the one run whose id starts with it), rebuilt: its
    answer, actions with their outputs (the objects, for JSON and pickled ones), usage,
    cost and ``timeline()``. ``UnknownRun`` when no run (or several) match."""
    with _called("cortex_jupyter.open_run()"):
        db, where = _reader(store)
        try:
            return _load(db, str(run_id))
        except sqlite3.Error as exc:
            raise StoreUnavailable(where, why(exc, where)) from None
        finally:
            db.close()


@contextlib.contextmanager
def _called(command: str) -> Iterator[None]:
    """A store error raised inside says, in IPython's one line, which call it came from."""
    try:
        yield
    except (StoreUnavailable, UnknownRun) as exc:
        exc.command = command
        raise


def _reader(store: str | os.PathLike[str] | None) -> tuple[sqlite3.Connection, str]:
    """A connection to read the store, and where it is (what this process wrote is
    committed first)."""
    where = current_path() if store is None else _normal(store)
    if where is None:
        raise StoreUnavailable("(none)", "the run store is off (CortexMagics.store is None)")
    with _lock:
        writing = _stores.get(os.path.abspath(where))
    if writing is not None:
        writing.flush()
    return connect(where, create=False), where
