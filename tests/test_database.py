"""Tuning-record database: queries, durability, concurrency, JSONL, bad files."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

import probsched as ps
from probsched.database import Database, DatabaseError, TuningRecord, default_path
from probsched.measure import MeasureResult

W = ps.workloads.small("GMM")


def schedule(f: int) -> ps.Schedule:
    sch = ps.Schedule(W.func)
    i = sch.get_loops(sch.get_block("Z"))[1]
    sch.split(i, [f, 4 // f])
    return sch


def record(sch, *times, kind=None, **kw) -> TuningRecord:
    result = MeasureResult.failure(kind, "boom") if kind else MeasureResult(times, 0.25)
    return TuningRecord.from_result(W, sch, result, **kw)


@pytest.fixture
def db():
    with Database(":memory:") as d:
        d.commit_workload(W)
        yield d


def test_best_orders_successes_per_candidate_and_skips_failures(db):
    a, b, c = schedule(1), schedule(2), schedule(4)
    db.commit_record(record(a, 3.0, 3.0, 3.0))
    db.commit_record(record(b, 2.0, 1.0, 2.0))
    db.commit_record(record(a, 0.5, 0.5, 0.5))  # the same candidate measured again, faster
    db.commit_record(record(c, kind="crash"))
    best = db.best(W, k=5)
    assert [r.median for r in best] == [0.5, 2.0]
    assert [r.candidate_hash for r in best] == [a.mod.structural_hash(), b.mod.structural_hash()]
    assert db.best(W)[0].schedule(W.func).mod == a.mod
    assert len(db.records(W)) == 4 and len(db.records(W, include_failed=False)) == 3
    failed = db.records(W)[3]
    assert not failed.ok and failed.error_kind == "crash" and failed.median == float("inf")
    assert db.candidate_hashes(W) == {s.mod.structural_hash() for s in (a, b, c)}
    assert db.has_candidate(W.func, c.mod.structural_hash())
    assert not db.has_candidate(W.func.structural_hash(), "0" * 64)


def test_target_filter(db):
    other = replace(ps.Target.host(), model="Some Other CPU", cores=64).to_json()
    db.commit_record(record(schedule(1), 1.0, target=other))
    db.commit_record(record(schedule(2), 2.0))
    assert [r.median for r in db.best(W, k=3)] == [2.0]  # this machine's by default
    assert [r.median for r in db.best(W, k=3, target=None)] == [1.0, 2.0]
    assert [r.median for r in db.best(W, k=3, target=other)] == [1.0]
    assert len(db.records(W, target=None)) == 2 and len(db.records(W, target=ps.Target.host())) == 1
    assert db.candidate_hashes(W) == {schedule(2).mod.structural_hash()}


def test_record_fields_round_trip(db):
    from handlers import seed, trace

    sch = ps.Schedule(W.func)
    decisions = trace(seed(ps.space.default(), 3)).get_trace(sch)
    rec = record(sch, 1e-3, 2e-3, decisions=decisions, space="default", strategy="replay")
    db.commit_record(rec)
    (got,) = db.records(W)
    assert got == rec and got.decisions == decisions.to_json() and got.space == "default"
    assert got.result == MeasureResult((1e-3, 2e-3), 0.25)
    db.commit_record(rec)  # an identical record is stored once
    assert len(db) == 1


def test_record_needs_its_workload_and_a_valid_kind():
    with Database(":memory:") as d:
        with pytest.raises(DatabaseError, match="commit_workload"):
            d.commit_record(record(schedule(1), 1.0))
    with pytest.raises(ValueError, match="error_kind"):
        replace(record(schedule(1), 1.0), error_kind="oops")
    with pytest.raises(TypeError, match="Schedule"):
        TuningRecord.from_result(W, schedule(1).instructions, MeasureResult((1.0,)))


def test_file_persists_and_default_path(tmp_path, monkeypatch):
    path = str(tmp_path / "t.db")
    with Database(path) as d:
        d.commit_workload(W)
        d.commit_record(record(schedule(2), 1.0))
    with Database(path) as d:
        assert len(d.records(W)) == 1 and d.workloads()[0].func == W.func
        assert d._query("PRAGMA journal_mode")[0][0] == "wal"
    monkeypatch.setenv("PROBSCHED_DB", path)
    assert default_path() == path
    monkeypatch.delenv("PROBSCHED_DB")
    assert default_path() == os.path.join(os.getcwd(), "probsched.db")


def test_jsonl_round_trip_is_idempotent(db, tmp_path):
    db.commit_record(record(schedule(1), 1.0, 2.0))
    db.commit_record(record(schedule(2), kind="timeout"))
    path = str(tmp_path / "records.jsonl")
    assert db.export_jsonl(path) == 2
    lines = [json.loads(x) for x in open(path)]
    assert lines[0]["format"] == "probsched-tuning-records" and [x.get("type") for x in lines[1:]] == [
        "workload", "record", "record"
    ]
    with Database(str(tmp_path / "copy.db")) as other:
        assert other.import_jsonl(path) == 2
        assert other.import_jsonl(path) == 0
        assert other.records(W) == db.records(W) and other.workloads() == db.workloads()
    assert db.import_jsonl(path) == 0


def test_jsonl_carries_the_re_timing_sessions_once(db, tmp_path):
    from probsched.measure import MeasureResult

    a, b = schedule(1), schedule(2)
    db.commit_record(record(a, 1.0))
    db.commit_record(record(b, 2.0))
    session = db.commit_retiming(W, [(a.mod.structural_hash(), MeasureResult((5.0,))), (b.mod.structural_hash(), MeasureResult((3.0,)))])
    path = str(tmp_path / "records.jsonl")
    db.export_jsonl(path)
    assert [json.loads(x).get("type") for x in open(path)][-2:] == ["retiming", "retiming"]
    with Database(str(tmp_path / "copy.db")) as other:
        other.import_jsonl(path)
        other.import_jsonl(path)  # a session's entries are added once
        assert other.latest_retiming(W) == db.latest_retiming(W) and other.latest_session(W) == session
    old = tmp_path / "v1.jsonl"  # a file of version 1 (records only) still imports
    old.write_text("".join(x.replace('"version": 2', '"version": 1') for x in open(path) if '"retiming"' not in x))
    with Database(str(tmp_path / "v1.db")) as other:
        assert other.import_jsonl(str(old)) == 2 and other.latest_retiming(W) == []


def test_bad_jsonl(db, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"format": "something else"}\n')
    with pytest.raises(DatabaseError, match=r"bad\.jsonl, line 1"):
        db.import_jsonl(str(path))


def test_not_a_sqlite_file(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 100)
    with pytest.raises(DatabaseError, match=r"notes\.db.*not a SQLite database"):
        Database(str(path))
    with pytest.raises(DatabaseError, match="is a directory"):
        Database(str(tmp_path))


def _sql(path: str, statement: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    conn.close()


def test_foreign_sqlite_file_and_wrong_schema_version(tmp_path):
    path = str(tmp_path / "other.db")
    _sql(path, "CREATE TABLE stuff (x)")
    with pytest.raises(DatabaseError, match=r"other\.db: a SQLite file but not a probsched database"):
        Database(path)
    path = str(tmp_path / "old.db")
    Database(path).close()
    _sql(path, "UPDATE schema_version SET version = 99")
    with pytest.raises(DatabaseError, match=r"old\.db: schema version 99, this probsched reads version 1"):
        Database(path)
    assert issubclass(DatabaseError, ps.ProbschedError)


WRITER = textwrap.dedent(
    """
    import sys, time
    from probsched.database import Database, TuningRecord
    path, tag, n, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    db = Database(path)
    have = db.candidate_hashes("w" * 64, target=None)  # resume: skip what an earlier run measured
    for i in range(n):
        cand = f"{tag}-{i}"
        if cand in have:
            continue
        db.commit_record(TuningRecord("w" * 64, cand, None, "{}", (float(i),), 0.1))
        print(cand, flush=True)
        time.sleep(pause)
    print("done", flush=True)
    """
)


def _prepare_shared_db(path: str) -> None:
    with Database(path) as d:  # records of a fake workload: the writers need no numba
        d._write([("INSERT INTO workloads VALUES (?, ?, ?, ?)", ("w" * 64, "fake", "{}", 0.0))])


def _writer(path, tag, n, pause=0.0):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, path, tag, str(n), str(pause)], stdout=subprocess.PIPE, text=True
    )


def test_two_processes_write_one_database(tmp_path):
    path = str(tmp_path / "shared.db")
    _prepare_shared_db(path)
    procs = [_writer(path, tag, 150) for tag in ("a", "b")]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert all(out.endswith("done\n") for out in outs)
    with Database(path) as d:
        got = d.candidate_hashes("w" * 64, target=None)
    assert got == {f"{t}-{i}" for t in "ab" for i in range(150)}


def test_sigkill_mid_run_loses_nothing_and_a_second_run_resumes(tmp_path):
    path = str(tmp_path / "killed.db")
    _prepare_shared_db(path)
    proc = _writer(path, "c", 1000, pause=0.01)
    committed = [proc.stdout.readline().strip() for _ in range(20)]  # printed after each commit
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with Database(path) as d:
        first = d.candidate_hashes("w" * 64, target=None)
    assert set(committed) <= first and len(first) < 1000
    again = _writer(path, "c", 1000)
    out = again.communicate(timeout=120)[0].split()
    assert out[-1] == "done" and not set(out) & first  # resumed: nothing measured twice
    with Database(path) as d:
        assert len(d) == 1000


def test_retiming_sessions_latest_wins_per_target_failed_last(db):
    a, b, c = (schedule(f).mod.structural_hash() for f in (1, 2, 4))
    assert db.latest_retiming(W) == []
    first = db.commit_retiming(W, [(a, MeasureResult((1.0,)))])
    second = db.commit_retiming(W, [(a, MeasureResult((3.0, 5.0))), (b, MeasureResult.failure("crash", "boom")),
                                    (c, MeasureResult((2.0,)))])
    got = db.latest_retiming(W)
    assert first != second and {r.session for r in got} == {second}
    assert [(r.candidate_hash, r.median) for r in got] == [(c, 2.0), (a, 4.0), (b, None)]
    assert got[0].run_seconds == (2.0,) and got[2].error_kind == "crash" and got[2].error_message == "boom"
    other = replace(ps.Target.host(), model="Some Other CPU").to_json()
    assert db.latest_retiming(W, target=other) == []
    with pytest.raises(TypeError, match="MeasureResult"):
        db.commit_retiming(W, [(a, 1.0)])


def test_a_version_1_file_without_retimings_gains_the_table(tmp_path):
    path = str(tmp_path / "old.db")
    with Database(path) as d:
        d.commit_workload(W)
        d.commit_record(record(schedule(1), 1.0))
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE retimings")  # as a file written before the table existed
    conn.commit()
    conn.close()
    with Database(path) as d:
        assert [r.median for r in d.best(W)] == [1.0] and d.latest_retiming(W) == []
        d.commit_retiming(W, [(schedule(1).mod.structural_hash(), MeasureResult((2.0,)))])
        assert [r.median for r in d.latest_retiming(W)] == [2.0]
