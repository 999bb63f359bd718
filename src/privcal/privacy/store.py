"""The SQLite layer of privcal's ledgers: one file per data set, its tables, its transactions.

A ledger is a SQLite file (stdlib :mod:`sqlite3`) in write-ahead-log mode, written with
``synchronous=FULL``: a transaction that committed survives a crash (``SIGKILL``) and a restart.
Its tables (:data:`TABLES`, created here and nowhere else):

* ``budget``, ``spends``, ``filter``: the odometer's budget, every recorded spend, and the Rényi
  filter it admits spends by (:class:`~privcal.privacy.PrivacyOdometer`);
* ``data``: the fingerprint of the rows the ledger keeps the budget of
  (:class:`~privcal.private.DataSource`);
* ``source``: the scores file of a ledger-backed source (``privcal source init``) and whether
  its owner accepts seeded noise (``seeded_noise``; a file without the column: secure only).

Every write runs in one ``BEGIN IMMEDIATE`` transaction on a fresh connection
(:func:`transaction`): it takes SQLite's single write lock, so a read-check-write of two
processes is serialised, and it either commits whole or leaves nothing. Readers that must not
write open the file with ``mode=ro`` (:func:`connect_read_only`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "TABLES",
    "claim_row",
    "columns",
    "connect",
    "connect_read_only",
    "create_tables",
    "read_only",
    "read_only_message",
    "single_rows",
    "tables",
    "transaction",
    "use_wal",
]

#: The tables of a ledger by name, as created (a ledger written by any earlier version has the
#: same names and columns; the ``spends`` columns ``rdp`` and ``relation`` came with the filter
#: and are added to older files by :func:`create_tables`).
TABLES: dict[str, str] = {
    "budget": """
CREATE TABLE IF NOT EXISTS budget (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    name TEXT NOT NULL,
    created REAL NOT NULL
)""",
    "spends": """
CREATE TABLE IF NOT EXISTS spends (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    query TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    sensitivity REAL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    source TEXT NOT NULL,
    pid INTEGER NOT NULL,
    time REAL NOT NULL
)""",
    "filter": """
CREATE TABLE IF NOT EXISTS filter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    renyi_delta REAL NOT NULL,
    orders TEXT NOT NULL,
    relation TEXT NOT NULL DEFAULT 'add/remove'
)""",
    "data": """
CREATE TABLE IF NOT EXISTS data (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    fingerprint TEXT NOT NULL,
    n_classes INTEGER NOT NULL,
    created REAL NOT NULL
)""",
    "source": """
CREATE TABLE IF NOT EXISTS source (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    data TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    n_classes INTEGER NOT NULL,
    input TEXT NOT NULL,
    created REAL NOT NULL,
    seeded_noise INTEGER NOT NULL DEFAULT 0
)""",
}

#: Columns of ``spends`` that a ledger written before the Rényi filter lacks.
_SPENDS_ADDED = ("rdp", "relation")


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the ledger ``path`` in autocommit mode (transactions are explicit:
    :func:`transaction`), waiting up to 60 s for another process's lock, ``synchronous=FULL``."""
    con = sqlite3.connect(path, timeout=60.0, isolation_level=None)
    con.execute("PRAGMA busy_timeout = 60000")
    con.execute("PRAGMA synchronous = FULL")
    return con


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write the ledger ``path`` (``mode=ro``)."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60.0)


@contextlib.contextmanager
def transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction on a fresh connection (fork- and thread-safe):
    committed when the block ends, rolled back when it raises."""
    con = connect(path)
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    finally:
        con.close()


def use_wal(path: Path) -> None:
    """Put the ledger ``path`` (created if missing) in write-ahead-log mode.

    WAL is persistent in the file and switching needs no transaction; a process that creates
    the file at the same time may hold its lock for a moment, so this retries for 5 s.
    """
    with contextlib.closing(connect(path)) as con:
        for _ in range(100):
            try:
                con.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError:  # pragma: no cover - lock race at creation
                time.sleep(0.05)


def create_tables(con: sqlite3.Connection, *names: str) -> None:
    """Create the tables ``names`` of :data:`TABLES` that the ledger lacks (inside the caller's
    transaction); ``spends`` also gets the columns a ledger written before the filter lacks."""
    for name in names:
        con.execute(TABLES[name])
    if "spends" in names:
        have = columns(con, "spends")
        for column in _SPENDS_ADDED:
            if column not in have:
                con.execute(f"ALTER TABLE spends ADD COLUMN {column} TEXT")


def claim_row(path: Path, table: str, values: Mapping[str, Any], stored: tuple[str, ...]) -> Any:
    """Write the one row (``id = 1``) of the single-row ``table`` with ``values`` unless the
    ledger already has it, in one transaction (the table is created if missing).

    Returns ``None`` when this call wrote the row, else the row's ``stored`` columns as they
    are in the file: the caller refuses when they are not its own (a ledger keeps one data set).
    """
    with transaction(path) as con:
        create_tables(con, table)
        row = con.execute(f"SELECT {', '.join(stored)} FROM {table} WHERE id = 1").fetchone()
        if row is None:
            names = ", ".join(("id", *values))
            marks = ", ".join("?" * (len(values) + 1))
            con.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", (1, *values.values()))
        return row


def single_rows(path: Path, wanted: Mapping[str, tuple[str, ...]]) -> list[Any]:
    """The one row (``id = 1``) of each single-row table of ``wanted`` (table -> columns), in
    order: ``None`` for a missing row, and for every table when ``path`` is not a ledger (not a
    SQLite file, or a table missing)."""
    try:
        with contextlib.closing(connect(path)) as con:
            return [
                con.execute(f"SELECT {', '.join(cols)} FROM {table} WHERE id = 1").fetchone()
                for table, cols in wanted.items()
            ]
    except sqlite3.DatabaseError:
        return [None] * len(wanted)


def columns(con: sqlite3.Connection, table: str) -> set[str]:
    """The column names of ``table``."""
    return {row[1] for row in con.execute(f"PRAGMA table_info({table})").fetchall()}


def tables(con: sqlite3.Connection) -> set[str]:
    """The table names of the ledger."""
    rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {row[0] for row in rows}


def read_only(path: Path) -> bool:
    """Whether this process may not write the ledger file ``path`` or its folder.

    SQLite keeps a privcal ledger in write-ahead-log mode, so even reading it creates or updates
    the ``-wal`` and ``-shm`` files beside it: without write access to the file or its folder
    SQLite fails with "attempt to write a readonly database" or "unable to open database file".
    """
    folder = path.resolve().parent
    return (path.exists() and not os.access(path, os.W_OK)) or not os.access(folder, os.W_OK)


def read_only_message(path: Path, err: sqlite3.Error, *, spending: bool) -> str:
    """The error of a ledger that SQLite cannot open because it is read-only (with the fix).

    A copy is offered only for reading: spending from a copy would split the budget.
    """
    folder = path.resolve().parent
    fix = (
        "Give this user write access (chmod u+w on both, or run as the ledger's owner); a "
        "ledger records every spend before the release, so it cannot be used read-only."
        if spending
        else "Give this user write access (chmod u+w on both, or run as the ledger's owner), "
        "or copy the ledger with its -wal file to a writable folder to inspect it."
    )
    return (
        f"The ledger {str(path)!r} is read-only for this user ({err}): SQLite needs write "
        f"access to a ledger's file and its folder {str(folder)!r}, even to read it (its "
        f"write-ahead log lives beside it). {fix}"
    )
