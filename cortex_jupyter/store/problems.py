"""Why a store cannot be used, in one sentence that says what to do.

Every way the store fails out in the world (a file that is not a run store, a folder that
cannot be written, a full disk, another program holding the write lock past the busy wait)
is a ``StoreUnavailable``: one row of the error table, whose message is one line. The
commands print it as one ``cortex:`` line naming the command typed; ``runs()`` and
``open_run()`` raise it, and IPython shows it as that one line too (``_render_traceback_``).

Another program holding the lock is named when it can be: the processes of this machine
that have the store's file open (``psutil``), so the line says whom to close.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field

import psutil

from cortex_jupyter.runtime.core.errors import CortexError
from cortex_jupyter.runtime.core.trust.secrets import redact, shorten

__all__ = ["StoreUnavailable", "busy", "coded", "full", "holders", "one_line", "why"]

_BUSY = {5: "database is locked", 6: "database table is locked"}  # SQLITE_BUSY, _LOCKED
# SQLITE_FULL; SQLITE_IOERR_WRITE: the file may not grow (a quota's EDQUOT, a file-size
# limit's EFBIG), which SQLite does not call full (Python 3.10 sees any I/O error so).
_FULL = {13: "database or disk is full", 778: "disk I/O error"}
_IO = {10: "disk I/O error"}  # SQLITE_IOERR, any of its kinds (a -shm that cannot grow)
_NOT_SQLITE = {26: "file is not a database"}  # SQLITE_NOTADB
_CANNOT_OPEN = {14: "unable to open database file", 8: "attempt to write a readonly database"}
#: Most processes a line names.
_NAMED = 3


@dataclass(eq=False, repr=False)
class StoreUnavailable(CortexError):
    """Raised when a run store cannot be used (its folder is read-only, the file is not a
    run store, another program holds it, the disk is full...): ``why`` says which."""

    path: str
    why: str
    template = "the run store {e.path} cannot be used: {e.why}"
    #: What was called (``cortex_jupyter.runs()``): IPython's one line names it.
    command: str = field(default="", init=False)

    def _render_traceback_(self) -> list[str]:
        return [one_line(self)]


def one_line(exc: BaseException) -> str:
    """The line IPython shows for a store error a Python call raised: ``cortex:``, the
    call (``command``, when the call set it), the message."""
    command = getattr(exc, "command", "")
    return redact(f"cortex: {command + ': ' if command else ''}{exc}")


def coded(exc: sqlite3.Error, codes: dict[int, str]) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if isinstance(code, int):
        return code in codes or (code & 0xFF) in codes  # an extended code, or its primary
    return str(exc).startswith(tuple(codes.values()))


def busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is another connection holding the store."""
    return coded(exc, _BUSY)


def full(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is a full disk (or a file at its size limit)."""
    return coded(exc, _FULL)


def why(exc: BaseException, path: str, *, look: bool = True) -> str:
    """What ``exc`` (met using the store at ``path``) means, and what to do, in a phrase;
    ``look``: name the processes that have the store open (about 0.1 s: not for the
    writer's every try)."""
    said = shorten(" ".join((str(exc) or type(exc).__name__).split()), 200)
    if isinstance(exc, sqlite3.Error) and busy(exc):
        return f"{said}: {holding(path if look else None)}"
    if isinstance(exc, sqlite3.Error) and (full(exc) or coded(exc, _IO)):
        return (
            f"{said}: the disk is full (or the file may not grow, or the disk fails); free "
            "some room, then try again"
        )
    if isinstance(exc, sqlite3.Error) and coded(exc, _NOT_SQLITE):
        return (
            f"{said}: it is not an SQLite file; point CortexMagics.store (or CORTEX_STORE) "
            "at another file"
        )
    if isinstance(exc, sqlite3.Error) and coded(exc, _CANNOT_OPEN):
        folder = os.path.dirname(os.path.abspath(path))
        return (
            f"{said}: its folder {folder} cannot be written (read-only?); point "
            "CortexMagics.store (or CORTEX_STORE) at a file in a folder you can write"
        )
    return said


def holding(path: str | None) -> str:
    """Who holds the store: the processes that have it open, to close."""
    found = [] if path is None else holders(path)
    if not found:
        return (
            "another program holds it for writing (a DB browser, a backup, an sqlite3 "
            "shell, another kernel); close it or let it finish, then try again"
        )
    named = ", ".join(found[:_NAMED]) + (
        f" and {len(found) - _NAMED} more" if len(found) > _NAMED else ""
    )
    return (
        f"another program holds it for writing; open it now: {named}; close the one "
        "holding it (a DB browser, a backup, an sqlite3 shell) or let it finish, then try again"
    )


def holders(path: str) -> list[str]:
    """The other processes of this machine that have the store's file (or its WAL or
    journal) open, as ``name (pid N)``; those that cannot be looked into are left out."""
    wanted = {os.path.realpath(path + end) for end in ("", "-wal", "-journal", "-shm")}
    me = os.getpid()
    found = []
    for process in psutil.process_iter(["pid", "name"]):
        if process.info["pid"] == me:
            continue
        try:
            files = process.open_files()
        except (psutil.Error, OSError):
            continue
        if any(os.path.realpath(f.path) in wanted for f in files):
            found.append(f"{process.info['name']} (pid {process.info['pid']})")
    return found
