"""Taking a stored run to resume it: never one that is still going somewhere.

Every kernel of a user shares one store, and a run a kernel writes is marked with the
process writing it (``runs.host``, ``pid@hostname``) and when that process took it
(``runs.claimed``: the run's start, or the moment a resume took it over). A run whose
status is ``running`` may be going on right now: resuming it then would run its actions
a second time (tools with side effects called twice, two writers appending to one run).

``take`` decides and takes in one transaction: the run is refused when it is finished,
or when it is ``running`` and its process on this machine still lives and is the one
that took it (a pid reused by a process started later, or a zombie, is dead); a process
on another machine cannot be checked, so it is refused unless ``force``. Otherwise a
compare-and-set on ``runs.host`` takes the run: of two kernels resuming one dead run at
once, exactly one goes on, and the other reads the winner's host, alive, and is refused.
A run going on in this very process is refused before that (``here``): the store's
writer knows the runs it is recording.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psutil

from cortex_jupyter.runtime.core.trust.secrets import shorten
from cortex_jupyter.runtime.loop.pickup import FINISHED

__all__ = ["SLACK", "Owner", "RunTaken", "Taken", "give_back", "here", "owner", "take"]

#: Most characters of a writer's name a refusal shows (``runs.host`` is any text).
SHOWN = 80

#: Seconds a process's start time may read later than it was: psutil counts it from the
#: boot time, which the kernel gives in whole seconds (and a clock may be stepped).
SLACK = 2.0


class RunTaken(Exception):
    """Raised when a stored run cannot be taken to resume it: the message (one sentence)
    says where it runs and what to do."""

    #: What was called (``cortex_jupyter.open_run()``): IPython's one line names it.
    command = ""

    def _render_traceback_(self) -> list[str]:  # IPython shows this one line
        return [f"cortex: {self.command + ': ' if self.command else ''}{self}"]


@dataclass(frozen=True)
class Owner:
    """Who holds a run: ``state`` is ``"alive"`` (its process lives), ``"gone"`` (dead,
    a zombie, or a pid reused since), or ``"unknown"`` (another machine, or a process
    that cannot be inspected)."""

    state: str
    pid: int | None
    hostname: str
    why: str = ""


@dataclass(frozen=True)
class Taken:
    """What a run's row said before ``take`` took it (``give_back`` puts it back)."""

    run: str
    status: str
    host: str | None
    claimed: float | None


def owner(host: str | None, since: float, this_hostname: str) -> Owner:
    """Whether the process ``host`` (``pid@hostname``), which took its run at the Unix
    time ``since``, still holds it."""
    if not host:
        return Owner("gone", None, "")
    pid_text, _, hostname = host.partition("@")
    # No pid has 20 digits; int() refuses thousands of them (a ValueError, not a pid).
    if not (pid_text.isascii() and pid_text.isdigit() and len(pid_text) < 20) or not hostname:
        why = f"{_shown(host)} is not a pid@hostname"
        return Owner("unknown", None, "an unknown writer", why)
    pid = int(pid_text)
    if hostname != this_hostname:
        why = "another machine, which cannot be checked from here"
        return Owner("unknown", pid, _shown(hostname), why)
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return Owner("gone", pid, hostname)
        started = process.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return Owner("gone", pid, hostname)
    except psutil.AccessDenied:
        return Owner("unknown", pid, hostname, "a process this user cannot inspect")
    # A process started after it took the run is another one that got the same pid.
    return Owner("alive" if started <= since + SLACK else "gone", pid, hostname)


def _shown(text: str) -> str:
    """``runs.host``'s text as a refusal line shows it: any row may hold anything (a
    newline, a terminal's escapes, a secret, megabytes), and the line stays one short
    line with no secret."""
    return shorten(text if text.isprintable() else repr(text), SHOWN)


def take(
    db: sqlite3.Connection,
    run: str,
    me: str,
    now: float,
    *,
    force: bool = False,
    keep: Callable[[Taken], None] = lambda taken: None,
) -> Taken:
    """Take ``run`` for the process ``me`` (``pid@hostname``) at the Unix time ``now``,
    in one transaction; ``RunTaken`` when it is finished, or going on in another
    process (``here`` says when it goes on in this one). What the row said before is
    returned, and handed to ``keep`` before the take is committed: a Stop between the
    commit and the return still leaves the caller what to give back."""
    with immediate(db):  # the check and the take: no other kernel in between
        before = _check(db, run, me, force=force)
        changed = db.execute(
            "UPDATE runs SET host = ?, claimed = ?, status = 'running' "
            "WHERE id = ? AND host IS ? AND status = ?",
            (me, now, run, before.host, before.status),
        ).rowcount
        if changed != 1:  # cannot happen inside BEGIN IMMEDIATE; never taken blindly
            raise RunTaken(f"run {run} was taken by another kernel meanwhile.")
        keep(before)
    return before


def here(run: str) -> RunTaken:
    """The refusal of a run going on in this very process."""
    return RunTaken(
        f"run {run} is still running in this kernel (a cell, a thread or a task here runs "
        "it): resuming it would run its actions twice; wait for it to end, or stop it, then "
        "resume it."
    )


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[None]:
    """A write transaction begun at once (``BEGIN IMMEDIATE``), so no other kernel writes
    between what it reads and what it writes; committed at the end, rolled back on any
    error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def refuse_held(
    what: str,
    host: str | None,
    since: float,
    me: str,
    *,
    force: bool,
    twice: str,
    take_over: str,
    error: Callable[[str], Exception],
) -> None:
    """Raise ``error`` when ``what`` (``"run ID"``), marked running by ``host`` since the
    Unix time ``since``, is held by a process that lives, or one that cannot be checked
    (unless ``force``): resuming it would run its ``twice`` (``"actions"``) twice.
    ``take_over`` says how to take it anyway."""
    found = owner(host, since, me.partition("@")[2])
    if found.state == "alive":
        raise error(
            f"{what} is still running in another kernel (process {found.pid} on "
            f"{found.hostname}): resuming it would run its {twice} twice; wait for it "
            "to end, or stop that kernel and resume it again."
        )
    if found.state == "unknown" and not force:
        where = f"process {found.pid} on {found.hostname}" if found.pid else found.hostname
        raise error(
            f"{what} is marked running by {where} ({found.why}): if that kernel is "
            f"gone, {take_over} (if it still runs, its {twice} run twice)."
        )


def _check(db: sqlite3.Connection, run: str, me: str, *, force: bool) -> Taken:
    row = db.execute(
        "SELECT status, host, claimed, coalesce(claimed, started) FROM runs WHERE id = ?", (run,)
    ).fetchone()
    if row is None:
        raise RunTaken(f"no stored run has the id {run!r} (%cortex runs lists them).")
    status, host, claimed, since = row
    if status in FINISHED:
        raise RunTaken(
            f"run {run} already {status}: there is nothing to resume (%cortex open {run} shows it)."
        )
    if status == "running" and host != me:
        refuse_held(
            f"run {run}",
            host,
            float(since),
            me,
            force=force,
            twice="actions",
            take_over=f"%cortex resume {run} --force takes the run over",
            error=RunTaken,
        )
    return Taken(run, str(status), host, claimed)


def give_back(db: sqlite3.Connection, taken: Taken, me: str) -> None:
    """Put back what ``taken`` took, while ``me`` still holds the run and nothing was
    written for it (the resume stopped before the run went on)."""
    db.execute(
        "UPDATE runs SET status = ?, host = ?, claimed = ? WHERE id = ? AND host IS ?",
        (taken.status, taken.host, taken.claimed, taken.run, me),
    )
