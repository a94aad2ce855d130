"""Writing runs as they happen: a queue, and one thread that commits it.

A run's events are handed to its ``Recording`` on the thread the run emits them from;
the recording only puts them on the store's queue (a microsecond), so the run never
waits on the disk. The store's writer thread takes what was queued, encodes it as the
transcript does (redacted), and commits it in one short transaction at most
``INTERVAL`` seconds after the first of it arrived, and at once when a run ends: a
killed kernel loses at most the last half second. SQLite in WAL mode, with a
``busy_timeout``, lets several kernels write to one store at once.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import dataclasses
import json
import math
import os
import queue
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cortex_jupyter.protocol.events import ActionReady, ResponseDelta, TextDelta, ThoughtDelta
from cortex_jupyter.runtime.core.events import ActionStatus, AnyEvent, End, Metric, Nested, Turn
from cortex_jupyter.runtime.core.record.graph import ActionNode
from cortex_jupyter.runtime.core.record.joining import Joiner
from cortex_jupyter.runtime.core.record.run import Run, encode_event, encode_node, summarize
from cortex_jupyter.runtime.core.trust.secrets import redact, redact_value, secrets
from cortex_jupyter.store.claim import RunTaken, Taken, give_back, here, take
from cortex_jupyter.store.outputs import keep
from cortex_jupyter.store.problems import StoreUnavailable, busy, full, why
from cortex_jupyter.store.read import find_id
from cortex_jupyter.store.redacting import RedactingConnection
from cortex_jupyter.store.schema import NewerStore, NotAStore, check, migrate

__all__ = ["INTERVAL", "RunTaken", "Store", "StoreUnavailable", "connect", "why"]

#: Most seconds between an event and its commit.
INTERVAL = 0.5
#: How long a write waits for another kernel's to end before it gives up.
BUSY_MS = 10_000
_NODE_TIMES = ("submitted", "started", "finished")
#: Most seconds between two tries of a write that failed and may succeed later.
_MOST_BETWEEN_TRIES = 8.0

#: The runs this process is recording (from ``Store.record``, or a ``Store.claim``, to
#: ``Recording.finish``), whatever ``Store`` records them: they are going on here.
_going: set[str] = set()
#: Runs claimed and not recorded yet -> what their row said before (``Store.release``).
_taken: dict[str, Taken] = {}
_going_lock = threading.Lock()


def _keeper(run_id: str) -> Callable[[Taken], None]:
    """What ``take`` hands what it took to: ``_taken``, where ``Store.release`` (or a
    claim stopped halfway) finds what to give back."""

    def keep(taken: Taken) -> None:
        with _going_lock:
            _taken[run_id] = taken

    return keep


def connect(path: str | os.PathLike[str], *, create: bool = True) -> sqlite3.Connection:
    """A connection to the store at ``path``, migrated to this schema (created when
    ``create``); ``StoreUnavailable`` says why one cannot be had."""
    where = os.fspath(path)
    try:
        if create:
            Path(where).parent.mkdir(parents=True, exist_ok=True)
        elif not Path(where).exists():
            raise StoreUnavailable(where, "there is no such file")
        db = sqlite3.connect(
            where,
            timeout=BUSY_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
            factory=RedactingConnection,  # every text it binds is redacted: no column can miss
        )
        try:
            db.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
            _open(db, where)
        except BaseException:
            db.close()
            raise
    except (NewerStore, NotAStore) as exc:
        raise StoreUnavailable(where, exc.why) from None
    except (sqlite3.Error, OSError) as exc:
        raise StoreUnavailable(where, why(exc, where)) from None
    return db


def _open(db: sqlite3.Connection, where: str) -> None:
    """Check, switch to WAL and migrate ``db``, waiting out other kernels doing the same.

    Switching a new store to WAL needs it to itself, and SQLite answers "database is
    locked" at once, without its busy wait, when another connection holds it meanwhile
    (two kernels opening a new store together): so that answer is waited out here, for as
    long as a write would wait.
    """
    deadline = time.monotonic() + BUSY_MS / 1000
    while True:
        try:
            check(db, where)  # a newer store is refused before anything could change it
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            migrate(db, where)
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is another connection holding the store (it passes: try again)."""
    return busy(exc)


def _passing(exc: sqlite3.Error) -> bool:
    """Whether a write that failed with ``exc`` may succeed later: the store was held
    by another kernel, or the disk was full (or the file at its size limit)."""
    return busy(exc) or full(exc)


@dataclass
class _Kept:
    """What the writer knows of a run it is writing (counted from its events)."""

    seq: int = 0
    shift: float = 0.0  # added to this process's monotonic times (a resumed run)
    turns: int = 0
    actions: set[str] = field(default_factory=set)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: The model's text as the view counts it for its estimate (``schema``, version 3).
    text_chars: int = 0
    model: str | None = None
    status: str = "running"
    node_seq: dict[str, int] = field(default_factory=dict)
    joiner: Joiner = field(default_factory=Joiner)

    def copy(self) -> _Kept:
        """A copy that later writes leave as it is (kept while a commit is tried)."""
        return dataclasses.replace(
            self, actions=set(self.actions), node_seq=dict(self.node_seq),
            joiner=self.joiner.copy(),
        )  # fmt: skip


@dataclass(frozen=True)
class _Start:
    run: str
    clock: float
    wall: float
    prompt: str
    options: Mapping[str, Any]
    model: str | None
    at: float  # Unix time it was handed over: when this process took the run
    claimed: bool  # a resumed run ``Store.claim`` took (its row is this process's)


@dataclass(frozen=True)
class _Event:
    run: str
    event: AnyEvent
    t: float
    node: ActionNode | None
    output: Any = None
    has_output: bool = False


@dataclass(frozen=True)
class _Finish:
    run: str
    status: str
    reason: str | None
    answer: str
    cost: float | None
    wall: float


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.written = True  # False: what came before it is still to be written


_STOP = object()


class Recording:
    """One run being written (``RunStore.record``'s answer): an observer of the run
    (``runtime.core.record.observer``) that queues each event for the writer thread."""

    def __init__(self, store: Store, run: Run) -> None:
        self._store = store
        self._run = run

    def on_event(self, event: AnyEvent) -> None:
        at = getattr(event, "time", None)
        t = at if isinstance(at, float) else time.monotonic()
        node = output = None
        has_output = False
        if isinstance(event, ActionStatus):
            node = self._run.actions.get(event.id)
            if node is not None:
                # As the event leaves it (status, error, times), not as the writer would
                # find it later: the row and the events it is committed with agree.
                node = copy.copy(node)
                if event.status == "done":
                    output, has_output = node.output, True  # the object now; encoded later
        self._store.put(_Event(self._run.id, event, t, node, output, has_output))
        if isinstance(event, End):
            self._store.put(_Flush())  # the run's end is committed at once

    def acting(self, action_id: str) -> AbstractContextManager[object]:
        """Nothing is current while a tool runs: the store only keeps events."""
        return nullcontext()

    def finish(self) -> None:
        """The run ended: keep its status, reason, answer and cost, and commit."""
        run = self._run
        with _going_lock:
            _going.discard(run.id)  # it may be resumed again (in this kernel or another)
        try:
            answer = run.answer
        except Exception as exc:  # a value's own str() may fail while the answer is filled
            answer = summarize(exc)
        cost = getattr(run, "cost", None)
        self._store.put(
            _Finish(
                run.id, run.status, run.reason, answer,
                cost if isinstance(cost, int | float) else None,
                _wall(run.ended if run.ended is not None else time.monotonic()),
            )
        )  # fmt: skip
        self._store.put(_Flush())


class Store:
    """A run store: one SQLite file, written by one thread of this process.

    ``record(run, prompt, options)`` starts keeping a run (``runtime.core.record.observer``'s
    ``RunStore``); ``flush()`` waits until everything handed over is committed.
    ``problem`` is the last write that failed (a full disk...), in a sentence.
    ``claim(id)`` takes a stored run to resume it, refusing one still going on.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._db = connect(self.path)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._runs: dict[str, _Kept] = {}
        self.problem: str | None = None
        self._retrying: str | None = None  # the problem said while a write is tried again
        self._host = f"{os.getpid()}@{socket.gethostname()}"
        self._thread = threading.Thread(target=self._work, name="cortex-store", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def record(self, run: Run, prompt: str, options: Mapping[str, Any] | None = None) -> Recording:
        """Start keeping ``run`` (asked ``prompt``; ``options``: its settings). A run
        already in the store (resumed) goes on where its rows end."""
        now = time.monotonic()
        settings = dict(options or {})
        model = run.model or settings.get("model")
        with _going_lock:
            _going.add(run.id)
            claimed = _taken.pop(run.id, None) is not None
        self.put(_Start(run.id, run.started, _wall(run.started, now), prompt, settings,
                        None if model is None else str(model), time.time(), claimed))  # fmt: skip
        return Recording(self, run)

    def claim(self, given: str, *, force: bool = False) -> str:
        """Take the stored run ``given`` (its id, or the start of one) for this process,
        to resume it: at once, in one transaction, before anything runs; returns its id.
        ``RunTaken`` says why not (in a sentence): it is finished, or still going on in
        this process, or in another one on this machine; a run marked running on another
        machine cannot be checked and is refused unless ``force``. ``UnknownRun``: no
        such run. Then read the run (``open_run``) and ``record`` it; ``release`` gives
        it back if it is never recorded."""
        self.flush()  # this process's own writes first (a run of it that just ended)
        db = connect(self.path, create=False)
        try:
            return self._claim(db, given, force)
        except sqlite3.Error as exc:  # held past the busy wait, a full disk, not a store
            raise StoreUnavailable(self.path, why(exc, self.path)) from None
        finally:
            db.close()

    def _claim(self, db: sqlite3.Connection, given: str, force: bool) -> str:
        """``claim`` on an open connection (its sqlite errors are the caller's)."""
        run_id = find_id(db, given)
        with _going_lock:
            if run_id in _going:
                raise here(run_id)
            _going.add(run_id)  # two threads of this process: one claims
        try:
            take(db, run_id, self._host, time.time(), force=force, keep=_keeper(run_id))
        except BaseException:  # refused, or stopped (a Stop may come after the commit)
            with _going_lock:
                _going.discard(run_id)
                taken = _taken.pop(run_id, None)
            if taken is not None:
                # What stopped it is what to say: a give-back the same full disk refuses
                # too must not replace it (a take that failed to commit took nothing).
                with contextlib.suppress(sqlite3.Error):
                    give_back(db, taken, self._host)
            raise
        return run_id

    def release(self, run_id: str) -> None:
        """Give back a run ``claim`` took that was never recorded (the resume stopped
        before the run went on): its row says what it said before. A recorded run is
        its recording's: nothing to do."""
        with _going_lock:
            taken = _taken.pop(run_id, None)
            if taken is None:
                return
            _going.discard(run_id)
        try:
            db = connect(self.path, create=False)
            try:
                give_back(db, taken, self._host)
            finally:
                db.close()
        except StoreUnavailable as exc:
            self.problem = redact(str(exc))
        except sqlite3.Error as exc:
            said = _said(exc, self.path)
            self.problem = redact(f"the run store {self.path} could not be written: {said}")

    @property
    def alive(self) -> bool:
        """Whether its writer still runs (a closed store is opened again when asked for)."""
        return self._thread.is_alive()

    def put(self, item: Any) -> None:
        self._queue.put(item)

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until everything handed over so far is committed; False on timeout, or
        when it could not be written yet (``problem`` says why; it is tried again)."""
        if not self._thread.is_alive():
            return False
        marker = _Flush()
        self.put(marker)
        return marker.done.wait(timeout) and marker.written

    def close(self) -> None:
        """Commit what is queued and stop the writer (at exit, or when the store changes)."""
        if self._thread.is_alive():
            self.put(_STOP)
            self._thread.join(timeout=10)
        atexit.unregister(self.close)

    # ---- the writer thread ---------------------------------------------------------

    def _work(self) -> None:
        batch: list[Any] = []
        deadline: float | None = None
        failures = 0
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                item = None
            if item is not None and not isinstance(item, _Flush) and item is not _STOP:
                batch.append(item)
                deadline = deadline or time.monotonic() + INTERVAL
                if time.monotonic() < deadline:
                    continue
            written = self._commit(batch)
            if written or item is _STOP:
                batch, deadline, failures = [], None, 0
            else:  # kept, and tried again a little later, with what comes meanwhile
                failures = min(failures + 1, 16)  # 2**1024 is too large a float
                deadline = time.monotonic() + min(INTERVAL * 2**failures, _MOST_BETWEEN_TRIES)
            if isinstance(item, _Flush):
                item.written = written
                item.done.set()
            if item is _STOP:
                self._db.close()
                return

    def _commit(self, batch: list[Any], *, alone: bool = False) -> bool:
        """Write ``batch`` in one transaction; False when it must be tried again (the
        store was held by another kernel past the busy wait, the disk was full): what
        the writer knows of its runs is then as it was before, so nothing is lost or
        written twice. A batch that fails otherwise (something in it cannot be written)
        is written item by item (``alone``): only what cannot be written is lost."""
        if not batch:
            return True
        db = self._db
        runs = {str(item.run) for item in batch}
        before = {run: self._runs[run].copy() for run in runs if run in self._runs}
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                touched = {self._write(db, item) for item in batch}
                for run in touched:
                    kept = self._runs.setdefault(run, _Kept())
                    for event, t in kept.joiner.flush(cut=True):
                        self._row(db, run, kept, event, t)  # a block still streaming
                    self._update_counts(db, run)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except Exception as exc:  # a full disk, a store locked too long: say so, go on
            said = f"the run store {self.path} could not be written: {_said(exc, self.path)}"
            for run in runs:
                self._runs.pop(run, None)
            self._runs.update(before)
            if alone or not (isinstance(exc, sqlite3.Error) and _passing(exc)):
                self.problem = redact(said)
                if not alone and len(batch) > 1:
                    for item in batch:
                        self._commit([item], alone=True)
                return True  # never going to fit: dropped, not retried forever
            for value in secrets.values():  # a variable unset before the next try
                secrets.add(value)  # still names a secret the batch may hold
            self.problem = self._retrying = redact(f"{said} (still trying)")
            return False
        if self._retrying is not None and self.problem == self._retrying:
            self.problem = None  # it was written in the end: nothing to say
        self._retrying = None
        return True

    def _write(self, db: sqlite3.Connection, item: Any) -> str:
        if isinstance(item, _Start):
            self._start(db, item)
        elif isinstance(item, _Event):
            self._event(db, item)
        elif isinstance(item, _Finish):
            self._finish(db, item)
        return str(item.run)

    def _start(self, db: sqlite3.Connection, item: _Start) -> None:
        row = db.execute("SELECT started, clock FROM runs WHERE id = ?", (item.run,)).fetchone()
        kept = self._runs[item.run] = _Kept(model=_name(item.model))
        options = json.dumps(redact_value(dict(item.options)), default=summarize)
        if row is None:
            db.execute(
                "INSERT INTO runs (id, started, clock, model, status, prompt, options, host, "
                "claimed) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?)",
                (item.run, item.wall, item.clock, kept.model, redact(item.prompt), options,
                 self._host, item.at),
            )  # fmt: skip
            _index(db, item.run, "prompt", item.prompt)
            return
        # A resumed run: its rows go on, its times on the clock it started on, under the
        # settings it goes on with (a budget given to resume holds for a later resume too).
        started, clock = row
        db.execute("UPDATE runs SET options = ? WHERE id = ?", (options, item.run))
        kept.shift = clock + (item.wall - started) - item.clock
        kept.seq = int(db.execute(
            "SELECT coalesce(max(seq) + 1, 0) FROM events WHERE run = ?", (item.run,)
        ).fetchone()[0])  # fmt: skip
        self._recount(db, item.run, kept)
        self._take_over(db, item)

    def _take_over(self, db: sqlite3.Connection, item: _Start) -> None:
        """A resumed run is this process's from now on. One ``claim`` took is already
        (its ``host`` and ``claimed`` stay as the claim left them), unless another
        kernel was let take it since (``--force``): that is said, never overwritten.
        One resumed without a claim (``Agent.resume(store=...)``) is taken as it is."""
        if not item.claimed:
            db.execute(
                "UPDATE runs SET status = 'running', ended = NULL, host = ?, claimed = ? "
                "WHERE id = ?",
                (self._host, item.at, item.run),
            )
            return
        mine = db.execute(
            "UPDATE runs SET status = 'running', ended = NULL WHERE id = ? AND host IS ?",
            (item.run, self._host),
        ).rowcount
        if mine != 1:
            (holder,) = db.execute("SELECT host FROM runs WHERE id = ?", (item.run,)).fetchone()
            self.problem = redact(
                f"run {item.run} was taken over by {holder} while this kernel resumed it: "
                "both are running it."
            )

    def _recount(self, db: sqlite3.Connection, run: str, kept: _Kept) -> None:
        row = db.execute(
            "SELECT turns, prompt_tokens, completion_tokens, text_chars FROM runs WHERE id = ?",
            (run,),
        ).fetchone()
        kept.turns, kept.prompt_tokens, kept.completion_tokens, kept.text_chars = row
        for node, seq in db.execute("SELECT id, seq FROM nodes WHERE run = ?", (run,)):
            kept.node_seq[node] = seq  # (ids as stored: redacted)
            if "/" not in node:
                kept.actions.add(node)

    def _event(self, db: sqlite3.Connection, item: _Event) -> None:
        kept = self._runs.setdefault(item.run, _Kept())
        for event, t in kept.joiner.add(item.event, item.t):
            self._row(db, item.run, kept, event, t)
        if item.node is not None:
            self._node(db, item, kept, kept.seq - 1)

    def _row(
        self, db: sqlite3.Connection, run: str, kept: _Kept, event: AnyEvent, t: float
    ) -> None:
        """Write one event as the transcript encodes it, redacted."""
        seq = kept.seq
        kept.seq += 1
        body = json.dumps(redact_value(encode_event(event)), default=summarize)
        db.execute(
            "INSERT INTO events (run, seq, t, kind, body) VALUES (?, ?, ?, ?, ?)",
            (run, seq, t + kept.shift, event.kind, body),
        )
        self._count(kept, event)
        if isinstance(event, ActionReady):
            _index(db, run, "action", event.action.name)

    def _count(self, kept: _Kept, event: AnyEvent) -> None:
        if isinstance(event, Turn):
            kept.turns = max(kept.turns, event.number)
            kept.model = _name(event.model) or kept.model
        elif isinstance(event, Metric) and event.name in ("prompt_tokens", "completion_tokens"):
            _add_tokens(kept, event.name, event.value)
        elif isinstance(event, ActionStatus):
            kept.actions.add(redact(event.id))  # as ``nodes.id`` keeps it
        elif isinstance(event, TEXT_DELTAS):
            kept.text_chars += len(event.text)
        elif isinstance(event, ActionReady):
            kept.text_chars += written_chars(event.action)
        elif isinstance(event, End):
            kept.status = event.status
        elif isinstance(event, Nested):
            inner = event.event
            if isinstance(inner, Metric) and inner.name in ("prompt_tokens", "completion_tokens"):
                _add_tokens(kept, inner.name, inner.value)

    def _node(self, db: sqlite3.Connection, item: _Event, kept: _Kept, seq: int) -> None:
        node = item.node
        assert node is not None
        line = encode_node(node, output=False)
        for name in _NODE_TIMES:
            if isinstance(line.get(name), float):
                line[name] += kept.shift
        first = kept.node_seq.setdefault(redact(node.id), seq)  # as ``nodes.id`` keeps it
        db.execute(
            "INSERT OR REPLACE INTO nodes (run, id, seq, body) VALUES (?, ?, ?, ?)",
            (item.run, node.id, first, json.dumps(redact_value(line), default=summarize)),
        )
        if item.has_output:
            stored = keep(item.output)
            db.execute(
                "INSERT OR REPLACE INTO outputs (run, action, kind, value, data) "
                "VALUES (?, ?, ?, ?, ?)",
                (item.run, node.id, stored.kind, stored.value, stored.data),
            )
            db.execute(
                "DELETE FROM search WHERE run = ? AND field = ?", (item.run, f"output:{node.id}")
            )
            _index(db, item.run, f"output:{node.id}", stored.text)

    def _finish(self, db: sqlite3.Connection, item: _Finish) -> None:
        kept = self._runs.setdefault(item.run, _Kept())
        kept.status = item.status
        db.execute(
            "UPDATE runs SET status = ?, reason = ?, answer = ?, cost = ?, ended = ? "
            "WHERE id = ?",
            (item.status, redact(item.reason or "") or None, redact(item.answer), item.cost,
             item.wall, item.run),
        )  # fmt: skip
        db.execute("DELETE FROM search WHERE run = ? AND field = 'answer'", (item.run,))
        _index(db, item.run, "answer", item.answer)

    def _update_counts(self, db: sqlite3.Connection, run: str) -> None:
        kept = self._runs.get(run)
        if kept is None:
            return
        db.execute(
            "UPDATE runs SET turns = ?, actions = ?, prompt_tokens = ?, completion_tokens = ?, "
            "text_chars = ?, model = coalesce(?, model), "
            "status = CASE WHEN status = 'running' THEN ? ELSE status END WHERE id = ?",
            (kept.turns, len(kept.actions), kept.prompt_tokens, kept.completion_tokens,
             min(kept.text_chars, _MOST_TOKENS), kept.model, kept.status, run),
        )  # fmt: skip


def _said(exc: BaseException, path: str) -> str:
    """Why a write failed: for a store held or a full disk, what to do too."""
    if isinstance(exc, sqlite3.Error) and (busy(exc) or full(exc)):
        return why(exc, path, look=False)
    return str(exc)


def _index(db: sqlite3.Connection, run: str, what: str, text: str) -> None:
    """Make ``text`` (redacted) findable as ``what`` of ``run``."""
    if text:
        db.execute(
            "INSERT INTO search (run, field, text) VALUES (?, ?, ?)", (run, what, redact(text))
        )


#: The most an SQLite INTEGER holds.
_MOST_TOKENS = 2**63 - 1


def _add_tokens(kept: _Kept, name: str, value: float) -> None:
    """Count ``value`` more tokens as ``name``: a count past what SQLite holds (a replayed
    transcript says what it likes) is kept as the most it holds, not the run refused."""
    more = 0 if isinstance(value, float) and not math.isfinite(value) else int(value)
    setattr(kept, name, max(-_MOST_TOKENS, min(getattr(kept, name) + more, _MOST_TOKENS)))


#: The text deltas whose characters the view's token estimate counts.
TEXT_DELTAS = (ThoughtDelta, ResponseDelta, TextDelta)


def written_chars(action: Any) -> int:
    """An action's share of the view's estimate (``display.state``'s ``_on_action``): its
    name and parameters as the model wrote them, and the tags around them."""
    parameters = action.parameters if isinstance(action.parameters, Mapping) else {}
    return len(str(action.name)) + len(repr(parameters)) + 40


def _name(model: object) -> str | None:
    """A model's name as the ``runs`` table keeps it: text, redacted (a name is only
    text from a model's object, or a transcript a replay read)."""
    return None if model is None else redact(str(model))


def _wall(clock: float, now: float | None = None) -> float:
    """The Unix time of a ``time.monotonic()`` reading ``clock``."""
    now = time.monotonic() if now is None else now
    return time.time() - (now - clock)
