"""Reading the store: the runs it holds (newest first, or found by words), and one run
rebuilt as the record it was.

A stored run is its transcript: ``open_run`` puts the rows back into the transcript's
lines and reads them with ``Run.from_jsonl``, then gives each action its stored output
(the object itself for JSON and pickled outputs) and binds ``output_key`` names as the
run did. Search is SQLite FTS5 over prompts, answers, action names and outputs' text;
the user's words are quoted, so no text can be an FTS syntax error.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cortex_jupyter.runtime.core.record.run import (
    TRANSCRIPT_FORMAT,
    TRANSCRIPT_VERSION,
    Run,
    encode_event,
)
from cortex_jupyter.store.outputs import restore

__all__ = ["RunRow", "StoredRun", "Timeline", "UnknownRun", "fts_query", "load", "rows"]

_COLUMNS = (
    "id, started, ended, model, status, reason, turns, actions, prompt_tokens, "
    "completion_tokens, cost, prompt, answer, options"
)


class UnknownRun(LookupError):
    """Raised when no stored run has the id asked for (or a prefix names several)."""

    #: What was called (``cortex_jupyter.open_run()``): IPython's one line names it.
    command = ""

    def _render_traceback_(self) -> list[str]:  # IPython shows this one line
        return [f"cortex: {self.command + ': ' if self.command else ''}{self}"]


@dataclass(frozen=True)
class RunRow:
    """One stored run as ``runs()`` lists it."""

    id: str
    started: dt.datetime
    ended: dt.datetime | None
    model: str | None
    status: str
    reason: str | None
    turns: int
    actions: int
    prompt_tokens: int
    completion_tokens: int
    #: US dollars; None when the price is unknown (never 0 for unknown).
    cost: float | None
    prompt: str
    answer: str | None
    options: dict[str, Any]

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def of(cls, row: tuple[Any, ...]) -> RunRow:
        (id_, started, ended, model, status, reason, turns, actions, prompt_tokens,
         completion_tokens, cost, prompt, answer, options) = row  # fmt: skip
        return cls(
            id_, _when(started), None if ended is None else _when(ended), model, status,
            reason, turns, actions, prompt_tokens, completion_tokens, cost, prompt, answer,
            json.loads(options or "{}"),
        )  # fmt: skip


def fts_query(text: str) -> str:
    """The user's ``text`` as an FTS5 query: each word a quoted phrase (so ``AND``,
    ``"``, ``*``, ``:`` and brackets are words, never syntax), all of them required."""
    words = text.replace("\x00", " ").split()  # FTS5 ends a string at a NUL
    return " ".join('"' + word.replace('"', '""') + '"' for word in words)


def rows(db: sqlite3.Connection, query: str | None = None, limit: int = 20) -> list[RunRow]:
    """The stored runs, newest first; with ``query``, those whose prompt, answer, action
    names or outputs hold all its words (a text of no words, a NUL alone: every run)."""
    words = fts_query(query) if query is not None else ""
    if not words:
        found = db.execute(
            f"SELECT {_COLUMNS} FROM runs ORDER BY started DESC LIMIT ?", (limit,)
        ).fetchall()
    else:
        found = db.execute(
            f"SELECT {_COLUMNS} FROM runs WHERE id IN "
            "(SELECT run FROM search WHERE search MATCH ?) ORDER BY started DESC LIMIT ?",
            (words, limit),
        ).fetchall()
    return [RunRow.of(row) for row in found]


def find_id(db: sqlite3.Connection, given: str) -> str:
    """The id of the one stored run whose id is ``given`` or starts with it."""
    text = given.strip()
    if not text:
        raise UnknownRun("give a run id (%cortex runs lists them)")
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    found = [
        str(row[0])
        for row in db.execute(
            "SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\' LIMIT 6", (escaped + "%",)
        )
    ]
    if text in found:
        return text
    if not found:
        raise UnknownRun(f"no stored run has the id {text!r} (%cortex runs lists them)")
    if len(found) > 1:
        raise UnknownRun(
            f"{text!r} starts several runs' ids ({', '.join(found[:5])}): give more of it"
        )
    return found[0]


@dataclass(frozen=True)
class Timeline:
    """A run's events with their times (seconds from its start): ``print()`` it; in a
    notebook it is the timeline picture."""

    run: Run
    lines: tuple[tuple[float, str, str], ...]

    def __str__(self) -> str:
        return "\n".join(f"{t:9.3f} s  {kind:<14} {what}" for t, kind, what in self.lines)

    def __repr__(self) -> str:
        return str(self)

    def __iter__(self) -> Iterator[tuple[float, str, str]]:
        return iter(self.lines)

    def __len__(self) -> int:
        return len(self.lines)

    def _repr_svg_(self) -> str:
        from cortex_jupyter.display import timeline_svg

        return timeline_svg(self.run)


class StoredRun(Run):
    """A run read back from the store: the run record, plus what its row says."""

    #: The prompt the run was asked, and the settings it ran with.
    prompt: str = ""
    options: dict[str, Any] = {}  # noqa: RUF012  (set per instance by ``load``)
    when: dt.datetime | None = None

    def timeline(self) -> Timeline:
        """The run's events in order, each with its time from the run's start."""
        start = self.started
        lines = []
        for event, at in zip(self.events, self.event_times, strict=True):
            data = encode_event(event)
            kind = str(data.pop("kind"))
            data.pop("time", None)
            what = json.dumps(data, ensure_ascii=False, default=str)
            lines.append((at - start, kind, what if len(what) <= 120 else what[:119] + "…"))
        return Timeline(self, tuple(lines))


def load(db: sqlite3.Connection, given: str) -> StoredRun:
    """The stored run ``given`` (an id, or a prefix only one id starts with), rebuilt."""
    run_id = find_id(db, given)
    row = db.execute(f"SELECT {_COLUMNS}, clock FROM runs WHERE id = ?", (run_id,)).fetchone()
    info, clock = RunRow.of(row[:-1]), float(row[-1])
    text = "".join(json.dumps(line) + "\n" for line in _lines(db, info, clock))
    run = StoredRun.from_jsonl(text)
    run.prompt, run.options, run.when = info.prompt, info.options, info.started
    if info.answer is not None and not run.events:
        run.notes.append("no events were kept for this run")
    for action, kind, value, data in db.execute(
        "SELECT action, kind, value, data FROM outputs WHERE run = ?", (run_id,)
    ):
        node = run.actions.get(action)
        if node is not None:
            node.output = restore(kind, value, data)
    for node in run.actions.values():
        if node.output_key and node.status == "done":
            run.variables[node.output_key] = node.output
    return run


def _lines(db: sqlite3.Connection, info: RunRow, clock: float) -> Iterator[dict[str, Any]]:
    """The transcript lines of a stored run (``Run.to_jsonl``'s shape)."""
    started = info.started.timestamp()
    yield {
        "record": TRANSCRIPT_FORMAT,
        "version": TRANSCRIPT_VERSION,
        "id": info.id,
        "status": info.status,
        "started": clock,
        "ended": None if info.ended is None else clock + info.ended.timestamp() - started,
        "notes": [],
        "model": info.model,
        "turns": info.turns,
        "reason": info.reason,
    }
    for t, body in db.execute("SELECT t, body FROM events WHERE run = ? ORDER BY seq", (info.id,)):
        yield {"record": "event", "t": t, **json.loads(body)}
    for (body,) in db.execute("SELECT body FROM nodes WHERE run = ? ORDER BY seq", (info.id,)):
        yield json.loads(body)


def _when(unix: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(unix, tz=dt.timezone.utc).astimezone()
