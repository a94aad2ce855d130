"""Experiments in the run store: which runs were which tries, and how they were judged.

Each try of an experiment is an ordinary run (``runs``, written by the store's writer
thread like any other); the ``experiments`` row says what the experiment was (its name,
repeats, the dataset as plain data when it could be saved, each agent column's
settings) and each ``tries`` row one (case, agent, repeat): its run's id, status,
figures and verdicts (JSON). A try's row is written when the try ends, in its own short
transaction through the same redacting connection (``store.redacting``), so a killed
kernel loses at most the tries still running, and ``load`` gives back every try that
ended: resuming never runs one of them again.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cortex_jupyter.runtime.core.trust.secrets import redact_value
from cortex_jupyter.store.claim import immediate, refuse_held
from cortex_jupyter.store.writer import StoreUnavailable, connect, why

__all__ = [
    "ExperimentRows", "ExperimentTaken", "StoredExperiment", "TryRow", "UnknownExperiment",
]  # fmt: skip


class ExperimentTaken(RuntimeError):
    """Raised when an experiment cannot be resumed: another kernel is running it (its
    tries would run twice)."""


class UnknownExperiment(LookupError):
    """Raised when no stored experiment has the id or name asked for."""

    def __init__(self, given: str, where: str, known: list[str]) -> None:
        self.given = given
        listed = ", ".join(known[:5]) + (" ..." if len(known) > 5 else "")
        hint = f"; the newest are {listed}" if known else "; the store has no experiment yet"
        super().__init__(f"no experiment {given!r:.60} in the run store {where}{hint}")


@dataclass(frozen=True)
class TryRow:
    """A stored try, as plain data (the experiment makes its ``Try`` of it)."""

    case: str
    agent: str
    repeat: int
    run_id: str | None
    status: str
    verdicts: dict[str, dict[str, Any]]
    cost: float | None
    tokens: int
    seconds: float | None
    first_action: float | None
    error: str | None


@dataclass(frozen=True)
class StoredExperiment:
    id: str
    name: str
    created: float
    status: str
    note: str | None
    repeat: int
    dataset: dict[str, Any] | None
    agents: dict[str, dict[str, Any]]
    tries: list[TryRow] = field(default_factory=list)


class ExperimentRows:
    """The experiment tables of the store at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    @contextmanager
    def _db(self, *, create: bool = True) -> Iterator[sqlite3.Connection]:
        db = connect(self.path, create=create)
        try:
            yield db
        except sqlite3.Error as exc:
            raise StoreUnavailable(self.path, why(exc, self.path)) from None
        finally:
            db.close()

    def create(
        self,
        experiment_id: str,
        name: str,
        repeat: int,
        dataset: Mapping[str, Any] | None,
        agents: Mapping[str, Mapping[str, Any]],
    ) -> None:
        now = time.time()
        with self._db() as db:
            db.execute(
                "INSERT INTO experiments (id, name, created, status, repeat, dataset, agents, host,"
                " claimed) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                (experiment_id, name, now, repeat, _json(dataset), _json(agents), _me(), now),
            )

    def take(self, experiment_id: str, *, force: bool = False) -> None:
        """Take the experiment to resume it (``host``: this process), in one transaction;
        ``ExperimentTaken`` when another process marked it running and still lives (or
        lives on another machine, unless ``force``): two kernels resuming one experiment
        at once, one goes on."""
        me = _me()
        # the check and the take: no other kernel between
        with self._db() as db, immediate(db):
            status, host, since = db.execute(
                "SELECT status, host, coalesce(claimed, created) FROM experiments WHERE id = ?",
                (experiment_id,),
            ).fetchone()
            if status == "running" and host != me:
                refuse_held(
                    f"experiment {experiment_id}",
                    host,
                    float(since),
                    me,
                    force=force,
                    twice="tries",
                    error=ExperimentTaken,
                    take_over=f"Experiment.resume({experiment_id!r}, force=True) takes it over",
                )
            db.execute(
                "UPDATE experiments SET host = ?, claimed = ?, status = 'running' WHERE id = ?",
                (me, time.time(), experiment_id),
            )

    def status(self, experiment_id: str, status: str, note: str | None = None) -> None:
        with self._db() as db:
            db.execute(
                "UPDATE experiments SET status = ?, note = ? WHERE id = ?",
                (status, note, experiment_id),
            )

    def put_try(self, experiment_id: str, row: TryRow) -> None:
        """Keep one ended try (again: its row is replaced, as ``rescore`` does)."""
        with self._db() as db:
            db.execute(
                "INSERT OR REPLACE INTO tries (experiment, case_name, agent, repeat, run, status,"
                " verdicts, cost, tokens, seconds, first_action, error)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    experiment_id, row.case, row.agent, row.repeat, row.run_id, row.status,
                    _json(row.verdicts), row.cost, row.tokens, row.seconds, row.first_action,
                    row.error,
                ),
            )  # fmt: skip

    def find(self, given: str, *, before: float | None = None, name: str | None = None) -> str:
        """The id of the experiment ``given`` names: its id (or the start of one), or its
        name (the newest of that name); ``"last"``: the newest created before ``before``
        (when given) of the name ``name`` (when given and there is one), else of all."""
        with self._db(create=False) as db:
            if given == "last":
                row = None
                for same in ((name,) if name else ()) + (None,):
                    clauses = [c for c, v in (("created < ?", before), ("name = ?", same)) if v]
                    args = [v for v in (before, same) if v]
                    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
                    row = db.execute(
                        f"SELECT id FROM experiments{where} ORDER BY created DESC LIMIT 1", args
                    ).fetchone()
                    if row is not None:
                        break
            else:
                row = db.execute(
                    "SELECT id FROM experiments WHERE id = ? OR name = ? "
                    "ORDER BY (id = ?) DESC, created DESC LIMIT 1",
                    (given, given, given),
                ).fetchone()
                if row is None and len(given) >= 4:
                    rows = db.execute(
                        "SELECT id FROM experiments WHERE substr(id, 1, ?) = ? LIMIT 2",
                        (len(given), given),
                    ).fetchall()
                    row = rows[0] if len(rows) == 1 else None
            if row is None:
                newest = db.execute(
                    "SELECT name || ' (' || id || ')' FROM experiments "
                    "ORDER BY created DESC LIMIT 6"
                )
                known = [r[0] for r in newest]
                raise UnknownExperiment(given, self.path, known)
            return str(row[0])

    def load(self, given: str) -> StoredExperiment:
        experiment_id = self.find(given)
        with self._db(create=False) as db:
            head = db.execute(
                "SELECT id, name, created, status, note, repeat, dataset, agents "
                "FROM experiments WHERE id = ?",
                (experiment_id,),
            ).fetchone()
            tries = [
                TryRow(
                    case,
                    agent,
                    repeat,
                    run,
                    status,
                    _read(verdicts) or {},
                    cost,
                    tokens,
                    seconds,
                    first,
                    error,
                )
                for (
                    case,
                    agent,
                    repeat,
                    run,
                    status,
                    verdicts,
                    cost,
                    tokens,
                    seconds,
                    first,
                    error,
                ) in db.execute(
                    "SELECT case_name, agent, repeat, run, status, verdicts, cost, tokens, "
                    "seconds, first_action, error FROM tries WHERE experiment = ?",
                    (experiment_id,),
                )
            ]
        return StoredExperiment(
            head[0], head[1], head[2], head[3], head[4], head[5], _read(head[6]),
            _read(head[7]) or {}, tries,
        )  # fmt: skip

    def listing(self, limit: int = 20) -> list[tuple[str, str, float, str, int]]:
        """(id, name, created, status, tries) of the newest experiments."""
        with self._db(create=False) as db:
            return [
                (str(a), str(b), float(c), str(d), int(e))
                for a, b, c, d, e in db.execute(
                    "SELECT e.id, e.name, e.created, e.status, "
                    "(SELECT count(*) FROM tries t WHERE t.experiment = e.id) "
                    "FROM experiments e ORDER BY e.created DESC LIMIT ?",
                    (limit,),
                )
            ]


def _me() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(redact_value(value), ensure_ascii=False, default=str)


def _read(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
