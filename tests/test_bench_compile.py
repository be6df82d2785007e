"""``benchmarks/bench_compile.py --records``: the compile time of stored records, split by the
role of each generated function (entry, parallel-loop body); ``benchmarks/bench_launch.py
--db``: stored records built with each parallel launcher."""

import os

from scripts import load_script

import probsched as ps
from probsched.database import Database, TuningRecord
from probsched.measure import MeasureResult


def test_compile_breakdown_counts_each_role_of_the_stored_records(tmp_path):
    w = ps.workloads.small("GMM")
    nested = ps.Schedule(w.func)
    b, i, j, k = nested.get_loops(nested.get_block("Z"))
    nested.parallel(i)  # under serial loop b: only the prange form runs it (a body, a shared launcher)
    path = str(tmp_path / "r.db")
    with Database(path) as db:
        key = db.commit_workload(w)
        for sch in (ps.Schedule(w.func), nested):
            db.commit_record(TuningRecord.from_result(key, sch, MeasureResult((1e-5,) * 3, 0.1), strategy="replay"))
        failed = ps.Schedule(w.func)
        failed.split(failed.get_loops(failed.get_block("Z"))[1], [2, None])
        db.commit_record(TuningRecord.from_result(key, failed, MeasureResult.failure("crash", "boom"), strategy="replay"))
        assert len(db.records(w)) == 3
    bench = load_script("benchmarks/bench_compile.py")
    out = bench.compile_breakdown(path, k=5)
    assert out["workload"] == "GMM:small" and out["records"] == 2  # the failed record is left out
    assert out["count"] == {"entry": 2, "body": 1}
    assert all(s > 0 for s in out["seconds"].values()) and out["wall"] >= sum(out["seconds"].values()) * 0.5
    assert bench.launcher_seconds() > 0


def test_launch_ab_builds_the_best_record_with_each_launcher_and_restores_the_setting(tmp_path, monkeypatch):
    from probsched.codegen import spin_pool

    w = ps.workloads.small("GMM")
    sch = ps.Schedule(w.func)
    sch.parallel(sch.get_loops(sch.get_block("Z"))[1])
    path = str(tmp_path / "r.db")
    with Database(path) as db:
        key = db.commit_workload(w)
        db.commit_record(TuningRecord.from_result(key, sch, MeasureResult((1e-5,) * 3, 0.1), strategy="replay"))
    monkeypatch.delenv("PROBSCHED_LAUNCH", raising=False)
    bench = load_script("benchmarks/bench_launch.py")
    fns = bench.best_kernels_both_ways(path, ["GMM:small"])  # also checks the two outputs are equal
    assert sorted(fns) == ["GMM:small pool", "GMM:small prange"]
    assert fns["GMM:small prange"].kernel._uses_spin_pool is False
    assert fns["GMM:small pool"].kernel._uses_spin_pool is spin_pool.enabled()
    assert "PROBSCHED_LAUNCH" not in os.environ
