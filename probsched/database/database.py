"""``Database``: tuning records in SQLite (see :mod:`.schema` for the file and its safety).

``Database(path)`` opens or creates a database: ``":memory:"`` works, and ``path=None`` is
:func:`default_path` (``$PROBSCHED_DB``, else ``./probsched.db``). Every record is committed
when :meth:`Database.commit_record` returns, so a tuner killed with SIGKILL loses nothing it
measured and the next run resumes from the file. Two processes may write one file at once.

Queries take a workload as a :class:`~probsched.workloads.Workload`, a ``PrimFunc`` or its
structural hash, and a ``target``: ``"host"`` (default: this machine, as
``Target.host()``), ``None`` (any machine), a :class:`~probsched.target.Target`, its JSON,
or ``"cpu -threads=N"``.

>>> import probsched as ps
>>> from probsched.measure import MeasureResult
>>> w = ps.workloads.small("GMM")
>>> db = Database(":memory:")
>>> key = db.commit_workload(w)
>>> sch = ps.Schedule(w.func)
>>> db.commit_record(TuningRecord.from_result(key, sch, MeasureResult((2e-6, 3e-6, 2e-6), 0.1)))
>>> db.commit_record(TuningRecord.from_result(key, sch, MeasureResult.failure("crash", "SIGSEGV")))
>>> [r.median for r in db.best(w, k=5)], len(db.records(w)), len(db.records(w, include_failed=False))
([2e-06], 2, 1)
>>> db.has_candidate(w, sch.mod.structural_hash()), db.workloads()[0].name
(True, 'GMM:small')

Candidates re-timed together (:meth:`LocalMeasurer.measure_together
<probsched.measure.LocalMeasurer.measure_together>`) are stored as one session; the latest
session of a workload is what :func:`probsched.tuning.selection.best_schedule` ranks by:

>>> session = db.commit_retiming(w, [(sch.mod.structural_hash(), MeasureResult((4e-6, 5e-6), 0.1))])
>>> [(r.median, r.session == session) for r in db.latest_retiming(w)]
[(4.5e-06, True)]
>>> db.close()
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import uuid
from typing import Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from ..ir.stmt import PrimFunc
from ..measure.result import LOST, MeasureResult
from ..target import Target
from ..workloads.workload import as_workload
from .errors import DatabaseError
from .record import TuningRecord, WorkloadRef, target_json, workload_key
from .schema import connect, retry

log = logging.getLogger("probsched.database")

HOST = "host"
JSONL_FORMAT = "probsched-tuning-records"
#: version 2 added re-timing sessions (``"type": "retiming"`` lines); version 1 files still import
JSONL_VERSION = 2
_JSONL_READS = (1, 2)
_RETIMING_FIELDS = ("session", "workload_hash", "candidate_hash", "target", "run_seconds", "median", "error_kind",
                    "error_message", "timestamp")

_COLUMNS = (
    "workload_hash, candidate_hash, decisions, instructions, run_seconds, compile_seconds, "
    "error_kind, error_message, target, space, strategy, timestamp, stopped_early"
)


def default_path() -> str:
    """``$PROBSCHED_DB`` if set, else ``probsched.db`` in the current directory."""
    return os.environ.get("PROBSCHED_DB") or os.path.join(os.getcwd(), "probsched.db")


class StoredWorkload(NamedTuple):
    """A workload as stored: structural hash, name and function JSON."""

    hash: str
    name: str
    func_json: str

    @property
    def func(self) -> PrimFunc:
        """The function, decoded."""
        return PrimFunc.from_json(self.func_json)


class Retiming(NamedTuple):
    """One candidate's measurement in a re-timing session (:meth:`Database.commit_retiming`)."""

    candidate_hash: str
    run_seconds: Tuple[float, ...]
    median: Optional[float]  # None when it failed this time
    error_kind: Optional[str]
    error_message: str
    session: str
    timestamp: float


def _row_to_record(row: tuple) -> TuningRecord:
    w, c, dec, ins, runs, comp, kind, msg, tgt, space, strat, ts, early = row
    return TuningRecord(w, c, dec, ins, tuple(json.loads(runs)), comp, kind, msg, tgt, space, strat, ts, bool(early))


def _rows_to_records(rows: Iterable[tuple], path: str) -> List[TuningRecord]:
    """The records of ``rows``; a row that does not decode (a database edited by hand or
    damaged) is skipped with a warning naming it, so one bad row never hides the others."""
    out = []
    for row in rows:
        try:
            out.append(_row_to_record(row))
        except (TypeError, ValueError) as exc:
            log.warning("%s: record of candidate %s skipped: it does not decode (%s: %s)", path, str(row[1])[:12],
                        type(exc).__name__, exc)
    return out


def _target_filter(target) -> Optional[str]:
    if target is None:
        return None
    return target_json(None if target == HOST else target)


class Database:
    """Tuning records and their workloads in one SQLite file (a context manager)."""

    def __init__(self, path: Optional[str] = None, *, timeout: float = 30.0) -> None:
        self.path = default_path() if path is None else os.fspath(path)
        self._conn: Optional[sqlite3.Connection] = connect(self.path, timeout)
        self._lock = threading.Lock()  # one connection shared by threads: one statement at a time

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __repr__(self) -> str:
        return f"Database({self.path!r})"

    # ------------------------------------------------------------------ low level
    def _query(self, sql: str, args: tuple = ()) -> list:
        if self._conn is None:
            raise DatabaseError(f"database {self.path}: closed")
        with self._lock:
            try:
                return retry(lambda: self._conn.execute(sql, args).fetchall(), self.path)
            except sqlite3.DatabaseError as exc:
                raise DatabaseError(f"database {self.path}: {exc}") from exc

    def _write(self, statements: Iterable[tuple]) -> List[int]:
        """Run ``(sql, args)`` statements in one immediate transaction; rows each changed."""
        if self._conn is None:
            raise DatabaseError(f"database {self.path}: closed")
        statements = list(statements)
        conn = self._conn

        def transaction() -> List[int]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                changed = [conn.execute(sql, args).rowcount for sql, args in statements]
                conn.execute("COMMIT")
                return changed
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        with self._lock:
            try:
                return retry(transaction, self.path)
            except sqlite3.IntegrityError as exc:
                raise DatabaseError(
                    f"database {self.path}: {exc} (commit_workload(workload) before its records)"
                ) from exc
            except sqlite3.DatabaseError as exc:
                raise DatabaseError(f"database {self.path}: {exc}") from exc

    # ------------------------------------------------------------------ writing
    def commit_workload(self, workload: WorkloadRef) -> str:
        """Store a Workload's (or a PrimFunc's) function and name; returns its structural hash."""
        w = as_workload(workload)
        func, name = w.func, w.name
        key = func.structural_hash()
        sql = "INSERT OR IGNORE INTO workloads (hash, name, func_json, created) VALUES (?, ?, ?, ?)"
        self._write([(sql, (key, name, func.to_json(), time.time()))])
        return key

    @staticmethod
    def _insert(record: TuningRecord) -> tuple:
        sql = (
            f"INSERT OR IGNORE INTO records (record_key, {_COLUMNS}, median) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        r = record
        args = (
            r.key, r.workload_hash, r.candidate_hash, r.decisions, r.instructions, json.dumps(list(r.run_seconds)),
            r.compile_seconds, r.error_kind, r.error_message, r.target, r.space, r.strategy, r.timestamp,
            int(r.stopped_early), r.median if r.ok else None,
        )
        return sql, args

    def commit_record(self, record: TuningRecord) -> None:
        """Store one record, committed before this returns (an identical record is stored once)."""
        self._write([self._insert(record)])

    def commit_retiming(self, workload: WorkloadRef, entries: Sequence[Tuple[str, MeasureResult]]) -> str:
        """Store ``(candidate hash, result)`` pairs measured together on this machine as one
        session (one transaction); returns the session's id."""
        key, target, session, now = workload_key(workload), target_json(None), uuid.uuid4().hex, time.time()
        sql = (
            "INSERT INTO retimings (session, workload_hash, candidate_hash, target, run_seconds, median, "
            "error_kind, error_message, timestamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        statements = []
        for candidate_hash, res in entries:
            if not isinstance(res, MeasureResult):
                raise TypeError(f"commit_retiming: candidate {candidate_hash}: expected a MeasureResult, got {type(res).__name__}")
            runs = json.dumps(list(res.run_seconds))
            median = res.median if res.ok else None
            statements.append((sql, (session, key, candidate_hash, target, runs, median, res.error_kind, res.error_message, now)))
        self._write(statements)
        return session

    def latest_retiming(self, workload: WorkloadRef, target: Union[str, Target, None] = HOST) -> List[Retiming]:
        """The candidates of ``workload``'s latest re-timing session on ``target``, fastest
        first (failed ones last); ``[]`` when it was never re-timed."""
        session = self.latest_session(workload, target)
        if session is None:
            return []
        where, args = self._where(workload, target)
        rows = self._query(
            "SELECT candidate_hash, run_seconds, median, error_kind, error_message, session, timestamp "
            f"FROM retimings WHERE {where} AND session = ? ORDER BY median IS NULL, median, id",
            args + (session,),
        )
        out = []
        for c, runs, m, k, msg, ses, ts in rows:
            try:
                out.append(Retiming(c, tuple(json.loads(runs)), m, k, msg, ses, ts))
            except (TypeError, ValueError) as exc:
                log.warning("%s: re-timing of candidate %s skipped: it does not decode (%s)", self.path, str(c)[:12], exc)
        return out

    # ------------------------------------------------------------------ reading
    def _where(self, workload, target, extra: str = "") -> tuple:
        sql, args = "workload_hash = ?", [workload_key(workload)]
        tgt = _target_filter(target)
        if tgt is not None:
            sql += " AND target = ?"
            args.append(tgt)
        return sql + extra, tuple(args)

    def records(self, workload: WorkloadRef, target: Union[str, Target, None] = HOST, include_failed: bool = True) -> List[TuningRecord]:
        """Records of ``workload`` measured on ``target``, in commit order."""
        where, args = self._where(workload, target, "" if include_failed else " AND median IS NOT NULL")
        rows = self._query(f"SELECT {_COLUMNS} FROM records WHERE {where} ORDER BY id", args)
        return _rows_to_records(rows, self.path)

    def best(
        self, workload: WorkloadRef, k: int = 1, target: Union[str, Target, None] = HOST, *, candidate_hash: Optional[str] = None
    ) -> List[TuningRecord]:
        """The ``k`` fastest distinct candidates (each by its best record), fastest first;
        with ``candidate_hash``, that candidate's best record (or ``[]``)."""
        where, args = self._where(workload, target, " AND median IS NOT NULL")
        if candidate_hash is not None:
            where, args = where + " AND candidate_hash = ?", args + (candidate_hash,)
        sql = (
            f"SELECT {_COLUMNS} FROM (SELECT {_COLUMNS}, median, id, ROW_NUMBER() OVER "
            f"(PARTITION BY candidate_hash ORDER BY median, id) AS nth FROM records WHERE {where}) "
            "WHERE nth = 1 ORDER BY median, id LIMIT ?"
        )
        return _rows_to_records(self._query(sql, args + (int(k),)), self.path)

    def candidate_hashes(self, workload: WorkloadRef, target: Union[str, Target, None] = HOST) -> Set[str]:
        """Structural hashes of every candidate measured (successfully or not) for ``workload``;
        not those a cluster lost (kind ``"lost"``: never measured, a later run measures them)."""
        where, args = self._where(workload, target, " AND (error_kind IS NULL OR error_kind != ?)")
        rows = self._query(f"SELECT DISTINCT candidate_hash FROM records WHERE {where}", args + (LOST,))
        return {r[0] for r in rows}

    def has_candidate(self, workload: WorkloadRef, candidate_hash: str, target: Union[str, Target, None] = HOST) -> bool:
        """Whether a candidate with this structural hash was measured for ``workload``."""
        where, args = self._where(workload, target, " AND candidate_hash = ?")
        return bool(self._query(f"SELECT 1 FROM records WHERE {where} LIMIT 1", args + (candidate_hash,)))

    def workloads(self) -> List[StoredWorkload]:
        """Every stored workload, in the order they were first committed."""
        rows = self._query("SELECT hash, name, func_json FROM workloads ORDER BY created, hash")
        return [StoredWorkload(*r) for r in rows]

    def __len__(self) -> int:
        return self._query("SELECT COUNT(*) FROM records")[0][0]

    # ------------------------------------------------------------------ sharing
    def export_jsonl(self, path: str) -> int:
        """Write a header line, every workload, every record, then every re-timing session's
        entries (one JSON object a line); returns records."""
        tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
        rows = self._query(f"SELECT {_COLUMNS} FROM records ORDER BY id")
        with open(tmp, "w") as fh:
            fh.write(json.dumps({"format": JSONL_FORMAT, "version": JSONL_VERSION}) + "\n")
            for w in self.workloads():
                line = {"type": "workload", "hash": w.hash, "name": w.name, "func": w.func_json}
                fh.write(json.dumps(line, sort_keys=True) + "\n")
            for row in rows:
                fh.write(json.dumps({"type": "record", **_row_to_record(row).to_dict()}, sort_keys=True) + "\n")
            for line in self.retiming_lines():
                fh.write(json.dumps(line, sort_keys=True) + "\n")
        os.replace(tmp, path)
        return len(rows)

    def retiming_lines(self, sessions: Optional[Iterable[str]] = None) -> List[dict]:
        """The entries of the re-timing ``sessions`` (all when None) as export lines."""
        rows = self._query(f"SELECT {', '.join(_RETIMING_FIELDS)} FROM retimings ORDER BY id")
        wanted = None if sessions is None else set(sessions)
        return [{"type": "retiming", **dict(zip(_RETIMING_FIELDS, row))} for row in rows if wanted is None or row[0] in wanted]

    def latest_session(self, workload: WorkloadRef, target: Union[str, Target, None] = HOST) -> Optional[str]:
        """The id of ``workload``'s latest re-timing session on ``target``, or None."""
        where, args = self._where(workload, target)
        last = self._query(f"SELECT session FROM retimings WHERE {where} ORDER BY id DESC LIMIT 1", args)
        return last[0][0] if last else None

    def import_jsonl(self, path: str) -> int:
        """Add the workloads and records of a JSONL export; returns records added (0 the second time)."""
        statements, is_record = [], []
        with open(path) as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    if number == 1:
                        if d.get("format") != JSONL_FORMAT or d.get("version") not in _JSONL_READS:
                            raise ValueError(f"not a {JSONL_FORMAT} file of version {' or '.join(map(str, _JSONL_READS))}")
                        continue
                    kind = d.pop("type")
                    if kind == "workload":
                        sql = "INSERT OR IGNORE INTO workloads (hash, name, func_json, created) VALUES (?, ?, ?, ?)"
                        statements.append((sql, (d["hash"], d["name"], d["func"], time.time())))
                        is_record.append(False)
                    elif kind == "retiming":  # once: a session's entry is known by its session and candidate
                        values = tuple(d[f] for f in _RETIMING_FIELDS)
                        sql = (f"INSERT INTO retimings ({', '.join(_RETIMING_FIELDS)}) SELECT {', '.join('?' * len(values))} "
                               "WHERE NOT EXISTS (SELECT 1 FROM retimings WHERE session = ? AND candidate_hash = ?)")
                        statements.append((sql, values + (d["session"], d["candidate_hash"])))
                        is_record.append(False)
                    else:
                        statements.append(self._insert(TuningRecord.from_dict(d)))
                        is_record.append(True)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise DatabaseError(f"import_jsonl {path}, line {number}: {exc}") from exc
        changed = self._write(statements)
        return sum(n for n, rec in zip(changed, is_record) if rec)
