"""Relics: persistent services an agent can use across cells and kernel restarts.

The built-in ``cache`` relic is a key -> JSON value store in an SQLite file. Its
methods are plain synchronous functions: the scheduler runs them in worker threads,
so each thread gets its own connection (SQLite connections are per thread). WAL mode
and a busy timeout make concurrent actions and concurrent kernels safe; ``ttl`` is
stored as a wall-clock expiry time because it must survive restarts.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cortex_jupyter.runtime.core.errors import CacheValueError

DATA_DIR_ENV = "CORTEX_JUPYTER_DATA_DIR"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS cache (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    expires_at REAL
)
"""


def data_dir() -> Path:
    """Where cortex_jupyter keeps its files.

    ``$CORTEX_JUPYTER_DATA_DIR``, else ``$XDG_DATA_HOME/cortex_jupyter``, else
    ``~/.local/share/cortex_jupyter``.
    """
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "cortex_jupyter"


def default_cache_path() -> Path:
    return data_dir() / "cache.sqlite3"


class CacheRelic:
    """A persistent key -> JSON value cache backed by an SQLite database file.

    The file is created on first use, not when the relic is made, so registering the
    relic costs nothing. ``path`` defaults to ``default_cache_path()`` read at first use.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ):
        self._path = Path(path) if path is not None else None
        self._busy_timeout = busy_timeout
        #: The wall clock expiry times are read on (injectable for tests).
        self._clock = clock
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._ready = False

    @property
    def path(self) -> Path:
        return self._path if self._path is not None else default_cache_path()

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            path = self.path
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            conn.execute("PRAGMA synchronous = NORMAL")
            with self._lock:
                if not self._ready:
                    self._initialise(conn)
                    self._ready = True
                self._connections.append(conn)
            self._local.conn = conn
        return conn

    def _initialise(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL and create the table, once per relic.

        Changing the journal mode takes an exclusive lock and SQLite reports "locked" at
        once instead of waiting, so another process doing the same is waited for here.
        """
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(_SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, or ``default`` when it is missing or expired."""
        row = (
            self._connection()
            .execute("SELECT value, expires_at FROM cache WHERE key = ?", (key,))
            .fetchone()
        )
        if row is None:
            return default
        value, expires_at = row
        if expires_at is not None and expires_at <= self._clock():
            with self._write() as conn:
                conn.execute(
                    "DELETE FROM cache WHERE key = ? AND expires_at <= ?", (key, self._clock())
                )
            return default
        return json.loads(value)

    def set(self, key: str, value: Any, ttl: float | None = None) -> bool:
        """Store ``value`` (JSON) under ``key``; with ``ttl`` it expires after that many seconds."""
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise CacheValueError(key, type(value).__name__) from None
        expires_at = self._clock() + ttl if ttl is not None else None
        with self._write() as conn:
            conn.execute(
                "INSERT INTO cache (key, value, expires_at) VALUES (?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
                "expires_at = excluded.expires_at",
                (key, text, expires_at),
            )
        return True

    def delete(self, key: str) -> bool:
        """Remove ``key``; returns whether it was there."""
        with self._write() as conn:
            cursor = conn.execute("DELETE FROM cache WHERE key = ?", (key,))
        return cursor.rowcount > 0

    def close(self) -> None:
        """Close every connection this relic opened (in any thread)."""
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()
