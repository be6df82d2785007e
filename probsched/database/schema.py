"""The SQLite schema of tuning records, opening a file safely, and retrying busy writes.

Tables: ``schema_version`` (one row), ``workloads`` (structural hash -> name and function
JSON), ``records`` (one row per measured candidate; ``median`` is NULL when it failed,
``record_key`` makes re-importing a record a no-op) and ``retimings`` (candidates measured
again *together*, interleaved, one ``session`` per re-timing: their medians compare with
each other, not with other sessions'). ``retimings`` and the ``records.stopped_early``
column were added within version 1: they are created when a version-1 file without them is
opened, and readers that predate them ignore them.

Files are opened in WAL mode (readers never block the writer, and a commit survives the
process being killed), ``synchronous=NORMAL`` (each commit reaches the OS before
``commit`` returns: a SIGKILL loses nothing; a power cut may lose the last commits), and
a busy timeout; :func:`retry` covers the ``database is locked`` errors SQLite can still
report when two processes start writing at the same instant.

>>> conn = connect(":memory:")
>>> conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
True
"""

from __future__ import annotations

import functools
import os
import random
import sqlite3
import time
from typing import Callable, Dict, Tuple, TypeVar

from .errors import DatabaseError

SCHEMA_VERSION = 1

_DDL = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE workloads (
    hash TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    func_json TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    record_key TEXT NOT NULL UNIQUE,
    workload_hash TEXT NOT NULL REFERENCES workloads(hash),
    candidate_hash TEXT NOT NULL,
    decisions TEXT,
    instructions TEXT NOT NULL,
    run_seconds TEXT NOT NULL,
    median REAL,
    compile_seconds REAL NOT NULL,
    error_kind TEXT,
    error_message TEXT NOT NULL,
    target TEXT NOT NULL,
    space TEXT NOT NULL,
    strategy TEXT NOT NULL,
    timestamp REAL NOT NULL
);
CREATE INDEX records_best ON records (workload_hash, target, median);
CREATE INDEX records_candidate ON records (workload_hash, candidate_hash);
"""

# additive tables of version 1 (``IF NOT EXISTS``: run on every file opened)
_DDL_ADDED = """
CREATE TABLE IF NOT EXISTS retimings (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    workload_hash TEXT NOT NULL REFERENCES workloads(hash),
    candidate_hash TEXT NOT NULL,
    target TEXT NOT NULL,
    run_seconds TEXT NOT NULL,
    median REAL,
    error_kind TEXT,
    error_message TEXT NOT NULL,
    timestamp REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS retimings_session ON retimings (workload_hash, target, id);
"""

# additive columns of ``records`` in version 1 (added when a file without them is opened;
# readers and writers that predate them name their columns and never see them):
# ``stopped_early`` marks a candidate timed with fewer repeats than asked because it was
# clearly slower than the best (probsched.measure.timer)
_COLUMNS_ADDED = (("stopped_early", "INTEGER NOT NULL DEFAULT 0"),)

T = TypeVar("T")
RETRY_SECONDS = 60.0


def retry(fn: Callable[[], T], path: str, seconds: float = RETRY_SECONDS) -> T:
    """Call ``fn`` until it does not fail with ``database is locked/busy`` (at most ``seconds``)."""
    deadline = time.monotonic() + seconds
    delay = 0.005
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                raise DatabaseError(f"database {path}: {exc}") from exc
        time.sleep(delay * (1 + random.random()))  # jitter: two waiting writers do not collide again
        delay = min(delay * 2, 0.2)


def connect(path: str, timeout: float = 30.0) -> sqlite3.Connection:
    """Open (creating if new) a probsched database; raise :class:`DatabaseError` naming ``path``."""
    if path != ":memory:" and os.path.isdir(path):
        raise DatabaseError(f"database {path}: is a directory, not a file")
    try:
        conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise DatabaseError(f"database {path}: cannot open: {exc}") from exc
    try:
        retry(lambda: _prepare(conn, path), path)
    except sqlite3.DatabaseError as exc:  # "file is not a database" and friends
        conn.close()
        raise DatabaseError(f"database {path}: not a SQLite database ({exc})") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _prepare(conn: sqlite3.Connection, path: str) -> None:
    if path != ":memory:":
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("BEGIN IMMEDIATE")  # two processes creating one new file: one creates, one checks
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        tables.discard("sqlite_sequence")
        if not tables:
            for statement in _DDL.split(";"):  # executescript would commit the open transaction
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
        else:
            _check_version(conn, path, tables)
        for statement in _DDL_ADDED.split(";"):
            if statement.strip():
                conn.execute(statement)
        columns = {r[1] for r in conn.execute("PRAGMA table_info(records)")}
        for name, ddl in _COLUMNS_ADDED:
            if columns and name not in columns:  # no table at all: _check_columns says so
                conn.execute(f"ALTER TABLE records ADD COLUMN {name} {ddl}")
        _check_columns(conn, path)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


@functools.lru_cache(maxsize=1)
def _expected_columns() -> Dict[str, Tuple[str, ...]]:
    """Table -> columns of the current schema (read off the DDL, made in memory)."""
    conn = sqlite3.connect(":memory:")
    try:
        for statement in (_DDL + _DDL_ADDED).split(";"):
            if statement.strip():
                conn.execute(statement)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'") if r[0] != "sqlite_sequence"]
        expected = {t: tuple(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
    finally:
        conn.close()
    expected["records"] += tuple(name for name, _ in _COLUMNS_ADDED)
    return expected


def _check_columns(conn: sqlite3.Connection, path: str) -> None:
    """A file that says version 1 but lacks a table or column of it (written by an early
    probsched, or edited by hand) is refused here, once, instead of failing query by
    query with ``no such column``."""
    missing = []
    for table, columns in _expected_columns().items():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if not have:
            missing.append(f"no table {table}")
        else:
            missing += [f"no column {table}.{c}" for c in columns if c not in have]
    if missing:
        raise DatabaseError(
            f"database {path}: schema version {SCHEMA_VERSION} but {', '.join(missing)}; this probsched reads version "
            f"{SCHEMA_VERSION} with every column (an older probsched wrote it, or it was edited): export its records "
            "with the probsched that wrote it (Database.export_jsonl) and import them here (Database.import_jsonl), "
            "or start a new database"
        )


def _check_version(conn: sqlite3.Connection, path: str, tables: set) -> None:
    if "schema_version" not in tables:
        raise DatabaseError(
            f"database {path}: a SQLite file but not a probsched database (tables: {', '.join(sorted(tables))})"
        )
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    version = row[0] if row else None
    if version != SCHEMA_VERSION:
        raise DatabaseError(
            f"database {path}: schema version {version}, this probsched reads version {SCHEMA_VERSION} "
            "(export it with the probsched that wrote it and import the JSONL here)"
        )
