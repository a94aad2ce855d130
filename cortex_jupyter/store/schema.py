"""The store's tables, their version, and the steps from each older version to this one.

The version is SQLite's ``PRAGMA user_version``. ``MIGRATIONS[n]`` takes a database at
version ``n`` to ``n + 1``; a new database runs them all. A database written by a newer
cortex_jupyter (a version past the last step) is refused whole, never touched: this
version does not know what its tables mean.

Version 1:

- ``runs``: one row per run, updated as it goes: ``id``, ``started``/``ended`` (Unix
  times), ``clock`` (the run's ``time.monotonic()`` start, which its events' times count
  from), ``model``, ``status``, ``reason``, ``turns``, ``actions`` (top-level actions
  seen), ``prompt_tokens``, ``completion_tokens``, ``cost`` (USD, NULL when unknown),
  ``prompt``, ``answer``, ``options`` (JSON: the cell's or the agent's settings), ``host``
  (``pid@hostname`` of the process that wrote it last).
- ``events``: ``run``, ``seq``, ``t`` (monotonic seconds), ``kind``, ``body``: each event as
  the transcript encodes it (``runtime.core.record.run.encode_event``), redacted. A nested
  agent's events are its caller's ``nested`` events, inside its action.
- ``nodes``: ``run``, ``id``, ``seq`` (the event that first named it: the actions'
  order), ``body``: each action's latest state as the transcript's node line
  (``encode_node``, without its output).
- ``outputs``: ``run``, ``action``, ``kind`` (``json`` | ``pickle`` | ``repr`` |
  ``redacted``), ``value`` (JSON text, or the short repr), ``data`` (cloudpickle bytes).
- ``search``: FTS5 over prompts, answers, action names and outputs' text (``run``,
  ``field``, ``text``).

Version 2:

- ``runs.claimed``: when (Unix time) the process in ``host`` took the run: its start, or
  the moment a resume took it over (NULL in a run written by version 1: its ``started``).
  A live process that started after it is another one that got the same pid
  (``store.claim``).

Version 3:

- ``runs.text_chars``: the characters of the text the model wrote, counted as the run's
  view counts them for its ``~N tokens`` estimate (thought, response and text, and each
  action's name and parameters). A run whose server never said how many tokens it wrote
  (a ``--script`` cell, a replay) shows that estimate, marked ``~`` (0 in an older row).

Version 4: the ``experiments`` and ``tries`` tables (``store.experiments``).

Version 5:

- ``experiments.claimed``: when the process in ``experiments.host`` made the experiment or
  resumed it (NULL in a version-4 row: its ``created``), so a resume refuses one another
  live kernel runs (``ExperimentRows.take``).
"""

from __future__ import annotations

import sqlite3

__all__ = ["MIGRATIONS", "VERSION", "NewerStore", "NotAStore", "check", "migrate"]

_V1 = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    started REAL NOT NULL,
    ended REAL,
    clock REAL NOT NULL,
    model TEXT,
    status TEXT NOT NULL,
    reason TEXT,
    turns INTEGER NOT NULL DEFAULT 0,
    actions INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost REAL,
    prompt TEXT NOT NULL DEFAULT '',
    answer TEXT,
    options TEXT NOT NULL DEFAULT '{}',
    host TEXT
);
CREATE INDEX runs_started ON runs (started);
CREATE TABLE events (
    run TEXT NOT NULL,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run, seq)
) WITHOUT ROWID;
CREATE TABLE nodes (
    run TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run, id)
) WITHOUT ROWID;
CREATE TABLE outputs (
    run TEXT NOT NULL,
    action TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('json', 'pickle', 'repr', 'redacted')),
    value TEXT,
    data BLOB,
    PRIMARY KEY (run, action)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE search USING fts5 (run UNINDEXED, field UNINDEXED, text);
"""

#: ``MIGRATIONS[n]``: the SQL that takes a version-``n`` database to version ``n + 1``.
MIGRATIONS: list[str] = [
    _V1,
    "ALTER TABLE runs ADD COLUMN claimed REAL",
    "ALTER TABLE runs ADD COLUMN text_chars INTEGER NOT NULL DEFAULT 0",
    # Experiments (``store.experiments``): each try is an ordinary run in ``runs``; these
    # say which experiment, case, agent and repeat it was, and how it was judged.
    """
    CREATE TABLE experiments (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created REAL NOT NULL,
        status TEXT NOT NULL,
        note TEXT,
        repeat INTEGER NOT NULL,
        dataset TEXT,
        agents TEXT NOT NULL DEFAULT '{}',
        host TEXT
    );
    CREATE INDEX experiments_created ON experiments (created);
    CREATE TABLE tries (
        experiment TEXT NOT NULL,
        case_name TEXT NOT NULL,
        agent TEXT NOT NULL,
        repeat INTEGER NOT NULL,
        run TEXT,
        status TEXT NOT NULL,
        verdicts TEXT NOT NULL DEFAULT '{}',
        cost REAL,
        tokens INTEGER NOT NULL DEFAULT 0,
        seconds REAL,
        first_action REAL,
        error TEXT,
        PRIMARY KEY (experiment, case_name, agent, repeat)
    ) WITHOUT ROWID
    """,
    # When (Unix time) the process in ``experiments.host`` took the experiment: made it,
    # or resumed it (``ExperimentRows.take``), so a pid reused since is told apart.
    "ALTER TABLE experiments ADD COLUMN claimed REAL",
]
VERSION = len(MIGRATIONS)


class NewerStore(Exception):
    """Raised when a store was written by a newer cortex_jupyter (its schema version is
    past this one's): it is left as it is."""

    def __init__(self, path: str, found: int) -> None:
        self.why = (
            f"it has schema version {found}, newer than this cortex_jupyter's {VERSION}; "
            "upgrade cortex_jupyter to use it (it was left as it is)"
        )
        super().__init__(f"the run store {path}: {self.why}")


class NotAStore(Exception):
    """Raised when a SQLite file is another program's database, not a run store: it is
    left as it is (no table of ours is added to it)."""

    def __init__(self, path: str, tables: list[str]) -> None:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        self.why = (
            f"it is another program's SQLite database (its tables: {shown}), not a run "
            "store; point CortexMagics.store (or CORTEX_STORE) at another file (it was left "
            "as it is)"
        )
        super().__init__(f"the run store {path}: {self.why}")


#: The tables every version of the store has (FTS5's own shadow tables aside).
_OURS = ("runs", "events", "nodes", "outputs", "search")


def check(db: sqlite3.Connection, path: str) -> int:
    """``db``'s schema version; ``NewerStore`` when it is newer than this one,
    ``NotAStore`` when it is another program's database (tables at version 0, or a
    store's tables missing). Read only: call it before anything that could write, even a
    journal mode."""
    reading = not db.in_transaction
    if reading:  # the version and the tables read together (another kernel may migrate)
        db.execute("BEGIN")
    try:
        found = int(db.execute("PRAGMA user_version").fetchone()[0])
        tables = [
            str(name)
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
    finally:
        if reading and db.in_transaction:  # (an I/O error may have ended it already)
            db.execute("COMMIT")
    if found > VERSION:
        raise NewerStore(path, found)
    # A store of ours sets its version with its first tables, in one transaction: a
    # database at version 0 with tables, or one past it without ours, is another's.
    # (Tables a user adds to a store of ours are theirs to add.)
    if (found == 0 and tables) or (found > 0 and not set(_OURS) <= set(tables)):
        theirs = [name for name in tables if not name.startswith(_OURS)]
        raise NotAStore(path, theirs or tables or ["none"])
    return found


def migrate(db: sqlite3.Connection, path: str) -> None:
    """Bring ``db`` to ``VERSION``, one step a transaction; refuse a newer one."""
    found = check(db, path)
    for step in range(found, VERSION):
        # BEGIN IMMEDIATE: two kernels opening a new store at once do not both migrate it.
        db.execute("BEGIN IMMEDIATE")
        try:
            now = int(db.execute("PRAGMA user_version").fetchone()[0])
            if now == step:
                for statement in MIGRATIONS[step].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {step + 1}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
