"""Reading the store: the runs it holds (newest first, or found by words), and one run
rebuilt as the record it was.

A stored run is its transcript: ``open_run`` puts the rows back into the transcript's
lines and reads them with ``Run.from_jsonl``, then gives each action its stored output
(the object itself for JSON and pickled outputs) and binds ``output_key`` names as the
run did. Search is SQLite FTS5 over prompts, answers, action names and outputs' text;
the user's words are quoted, so no text can be an FTS syntax error.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
import secrets
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from cortex_jupyter.runtime.core.record.run import (
    TRANSCRIPT_FORMAT,
    TRANSCRIPT_VERSION,
    Run,
    encode_event,
)
from cortex_jupyter.runtime.core.trust import secrets as shown
from cortex_jupyter.store.outputs import restore

__all__ = [
    "RunList",
    "RunRow",
    "Snippet",
    "StoredRun",
    "Timeline",
    "UnknownRun",
    "fts_query",
    "load",
    "rows",
]

_COLUMNS = (
    "id, started, ended, model, status, reason, turns, actions, prompt_tokens, "
    "completion_tokens, cost, prompt, answer, options"
)
#: What a row adds to ``_COLUMNS`` for ``runs()`` (``load`` reads ``_COLUMNS`` alone).
_LISTED = ", text_chars"


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
    #: The characters of the model's text, as the view counts them for its estimate.
    text_chars: int = 0
    #: Where a search found its words: ``(field, pieces)``, each piece ``(text, matched)``.
    snippet: Snippet | None = None

    @property
    def estimated(self) -> bool:
        """True when the server never counted the tokens written (a script, a replay):
        ``tokens`` is then the view's estimate, ~4 characters a token."""
        return self.completion_tokens == 0 and self.text_chars > 0

    @property
    def tokens(self) -> int:
        """The tokens the model wrote, as the run's view counted them: the server's
        count, else the estimate the view showed (``~`` before it)."""
        return math.ceil(self.text_chars / 4) if self.estimated else self.completion_tokens

    @property
    def title(self) -> str:
        """The prompt as the user wrote it, on one line; for a ``--script`` cell (the
        cell is the model's reply) the first words of its text, not its tags."""
        from cortex_jupyter.display.listing import prompt_words

        return prompt_words(self.prompt, script=bool(self.options.get("script")))

    @classmethod
    def of(cls, row: tuple[Any, ...], snippet: Snippet | None = None) -> RunRow:
        (id_, started, ended, model, status, reason, turns, actions, prompt_tokens,
         completion_tokens, cost, prompt, answer, options, *more) = row  # fmt: skip
        return cls(
            id_, _when(started), None if ended is None else _when(ended), model, status,
            reason, turns, actions, prompt_tokens, completion_tokens, cost, prompt, answer,
            json.loads(options or "{}"), int(more[0] or 0) if more else 0, snippet,
        )  # fmt: skip


@dataclass(frozen=True)
class Snippet:
    """Where a search found its words in one run: the ``field`` (``prompt``, ``answer``,
    ``action``, ``output:ID``) and a short cut of its text around them, as ``pieces``
    of ``(text, matched)``. Plain text: whoever shows it escapes it."""

    field: str
    pieces: tuple[tuple[str, bool], ...]

    def __str__(self) -> str:
        return "".join(f"[{text}]" if hit else text for text, hit in self.pieces)


class RunList(list[RunRow]):
    """The stored runs ``runs()`` found (a list of ``RunRow``), and how many more there
    are: ``total`` is every run that matched, ``query`` what was searched.
    ``to_pandas()`` (or ``pd.DataFrame(rows)``) makes a DataFrame of them; in a notebook
    it shows as a table."""

    def __init__(
        self, found: Iterable[RunRow] = (), *, total: int | None = None, query: str | None = None
    ) -> None:
        super().__init__(found)
        self.total = len(self) if total is None else total
        self.query = query

    @property
    def more(self) -> int:
        """How many matching runs are not in this list (a larger ``limit`` shows them)."""
        return max(self.total - len(self), 0)

    def to_pandas(self) -> Any:
        """One row a run: its fields, the prompt as shown (``title``), the tokens as the
        view counted them with ``estimated``. pandas is imported here, not before."""
        import pandas as pd  # type: ignore[import-untyped]

        return pd.DataFrame(
            [
                {**dataclasses.asdict(row), "title": row.title, "tokens": row.tokens,
                 "estimated": row.estimated,
                 "snippet": None if row.snippet is None else str(row.snippet)}
                for row in self
            ],
            columns=[*_FRAME_COLUMNS],
        )  # fmt: skip

    def _repr_html_(self) -> str:
        from cortex_jupyter.display.listing import runs_html

        return runs_html(self, query=self.query, more=self.more)

    def __repr__(self) -> str:
        from cortex_jupyter.display.listing import runs_text

        return runs_text(self, query=self.query, more=self.more)


_FRAME_COLUMNS = (
    "id", "started", "ended", "model", "status", "reason", "turns", "actions", "tokens",
    "estimated", "prompt_tokens", "completion_tokens", "cost", "title", "prompt", "answer",
    "snippet", "options",
)  # fmt: skip


def fts_query(text: str) -> str:
    """The user's ``text`` as an FTS5 query: each word a quoted phrase (so ``AND``,
    ``"``, ``*``, ``:`` and brackets are words, never syntax), all of them required."""
    words = text.replace("\x00", " ").split()  # FTS5 ends a string at a NUL
    return " ".join('"' + word.replace('"', '""') + '"' for word in words)


def rows(db: sqlite3.Connection, query: str | None = None, limit: int = 20) -> RunList:
    """The stored runs, newest first; with ``query``, those whose prompt, answer, action
    names or outputs hold all its words (a text of no words, a NUL alone: every run),
    each with the ``snippet`` where its words were found."""
    words = fts_query(query) if query is not None else ""
    if not words:
        found = db.execute(
            f"SELECT {_COLUMNS}{_LISTED} FROM runs ORDER BY started DESC LIMIT ?", (limit,)
        ).fetchall()
        (total,) = db.execute("SELECT count(*) FROM runs").fetchone()
        return RunList([RunRow.of(row) for row in found], total=total, query=None)
    matching = "id IN (SELECT run FROM search WHERE search MATCH ?)"
    found = db.execute(
        f"SELECT {_COLUMNS}{_LISTED} FROM runs WHERE {matching} ORDER BY started DESC LIMIT ?",
        (words, limit),
    ).fetchall()
    (total,) = db.execute(f"SELECT count(*) FROM runs WHERE {matching}", (words,)).fetchone()
    snippets = _snippets(db, words, [str(row[0]) for row in found])
    listed = [_in_title(RunRow.of(row, snippets.get(str(row[0]))), query or "") for row in found]
    return RunList([_safe(row) for row in listed], total=total, query=query)


def _safe(row: RunRow) -> RunRow:
    """``row`` with a snippet that shows no secret: the store holds none it knew of, but
    one set since (``%env``) is redacted too, as everywhere cortex shows text. The snippet's
    text is redacted whole (its marks can fall inside a secret: ``ghp_[abc]_def``), the
    part of one its cut left at an edge hidden; where that changed it, it loses its marks."""
    snippet = row.snippet
    if snippet is None:
        return row
    whole = "".join(text for text, _ in snippet.pieces)
    lead = "…" if whole.startswith("…") else ""
    trail = "…" if whole.endswith("…") and len(whole) > len(lead) else ""
    core = whole[len(lead) : len(whole) - len(trail)]
    safe = shown.hide_edges(shown.redact(core), start=bool(lead), end=bool(trail))
    if safe == core:
        return row
    return dataclasses.replace(row, snippet=Snippet(snippet.field, ((lead + safe + trail, False),)))


def _in_title(row: RunRow, query: str) -> RunRow:
    """A script's row found by its prompt: the words marked in its ``title`` (the words
    of the script), not in a cut of its protocol text (tags and action bodies)."""
    if row.snippet is None or row.snippet.field != "prompt" or not row.options.get("script"):
        return row
    # what FTS matched: the words' letters and digits ("weather*" found "weather")
    words = sorted(set(_TOKEN.findall(query)), key=len, reverse=True)
    title = shown.shorten(row.title, _TITLE_CHARS)  # secrets redacted before the cut
    pieces: list[tuple[str, bool]] = []
    at = 0
    for match in re.finditer("|".join(map(re.escape, words)), title, re.IGNORECASE):
        if match.start() > at:
            pieces.append((title[at : match.start()], False))
        pieces.append((match.group(), True))
        at = match.end()
    if not pieces:  # the words were in its actions: name the action, never show tags
        return dataclasses.replace(row, snippet=_in_actions(row, words))
    if at < len(title):
        pieces.append((title[at:], False))
    return dataclasses.replace(row, snippet=Snippet("prompt", tuple(pieces)))


#: A word as SQLite's FTS5 (``unicode61``) reads one: letters and digits.
_TOKEN = re.compile(r"[^\W_]+")
#: Characters of a script's words a row found by them keeps (the table shows fewer).
_TITLE_CHARS = 400
#: An action's name as a script writes it: the body's ``"name"`` or the tag's ``name=``.
_ACTION_NAME = re.compile(r"""(?:"name"\s*:\s*"|\bname\s*=\s*["']?)([\w.\-]{1,80})""")
#: How much of a script's words a row found in its actions keeps before naming them.
_TITLE_CUT = 60


def _in_actions(row: RunRow, words: list[str]) -> Snippet:
    """A script found by what its actions hold: the first words of its text, then the
    action whose name holds the words (marked), or a note that its actions matched."""
    title = shown.shorten(row.title, _TITLE_CUT)  # secrets redacted before the cut
    lead = (f"{title} · " if title else "", False)
    lowered = [w.lower() for w in words]
    for name in _ACTION_NAME.findall(row.prompt):
        hit = next((w for w in lowered if w in name.lower()), None)
        if hit is not None:
            at = name.lower().index(hit)
            pieces = [lead, ("action ", False), (name[:at], False)]
            pieces += [(name[at : at + len(hit)], True), (name[at + len(hit) :], False)]
            return Snippet("action", tuple(piece for piece in pieces if piece[0]))
    return Snippet("action", (lead, ("matched in its actions' parameters", False)))


#: Words of context a snippet keeps around what matched.
_SNIPPET_WORDS = 12
#: Where the field a snippet comes from is chosen: what the user wrote first.
_FIELD_ORDER = {"prompt": 0, "answer": 1, "action": 2}


def _snippets(db: sqlite3.Connection, words: str, runs: list[str]) -> dict[str, Snippet]:
    """Each run's best snippet: the prompt's, else the answer's, an action name's, an
    output's. The marks around a match are made of a random word for this query only, so
    no stored text can forge one (model text is untrusted)."""
    if not runs:
        return {}
    mark = secrets.token_hex(8)
    start, end = f"[{mark}:", f":{mark}]"
    holes = ", ".join("?" * len(runs))
    found: dict[str, tuple[int, Snippet]] = {}
    for run, what, text in db.execute(
        f"SELECT run, field, snippet(search, 2, ?, ?, '…', ?) FROM search "
        f"WHERE search MATCH ? AND run IN ({holes})",
        (start, end, _SNIPPET_WORDS, words, *runs),
    ):
        order = _FIELD_ORDER.get(str(what), 3)
        if run not in found or order < found[run][0]:
            found[run] = (order, Snippet(str(what), _pieces(str(text), start, end)))
    return {run: snippet for run, (_, snippet) in found.items()}


#: The protocol's tags, left out of a snippet (a ``--script`` cell's prompt holds them).
_TAGS = re.compile(
    r"</?(?:thought|think|thinking|response|action|context_feed)\b[^<>…]*>?"
    # a tag whose start the snippet's cut left out: "…thought> ..."
    r"|^…/?(?:thought|think|thinking|response|action|context_feed)\b[^<>…]*>"
)


def _pieces(text: str, start: str, end: str) -> tuple[tuple[str, bool], ...]:
    """``text`` on one line, without protocol tags, cut at the marks ``snippet()`` put
    around each match."""
    pieces: list[tuple[str, bool]] = []
    for part in " ".join(_TAGS.sub(" ", text).split()).split(start):
        hit, found, rest = part.partition(end)
        if found and hit:
            pieces.append((hit, True))
        tail = rest if found else hit
        if tail:
            pieces.append((tail, False))
    return tuple(pieces)


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
