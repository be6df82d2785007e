"""Tuning throughput (issue #53): the cuts in compile, check and timing keep what is measured right."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import probsched as ps
from handlers import seed, trace
from probsched.codegen.emit import emit_module
from probsched.lowering import lower


def _scheduled(workload: ps.workloads.Workload, rng_seed: int) -> ps.Schedule:
    sch = ps.Schedule(workload.func)
    trace(seed(ps.space.default(), rng_seed)).get_trace(sch)
    return sch


def test_no_unused_iterator_assignments():
    # DEP's compacted local tiles are indexed by the inner loops alone: the block iterators
    # bound by // and % were assigned in every copy and never read (numba compiled them all)
    w = ps.workloads.small("DEP")
    sch = _scheduled(w, 2)
    source = emit_module(lower(sch.mod)).source
    lines = source.splitlines()
    assigned = [(i, m.group(1)) for i, text in enumerate(lines) if (m := re.match(r"\s*(v_\w+) = ", text))]
    assert assigned, "the example no longer assigns an iterator: pick another seed"
    for i, name in assigned:
        assert any(re.search(rf"\b{name}\b", later) for later in lines[i + 1 :]), f"{name} assigned, never read"
    inputs = w.random_inputs(np.random.default_rng(0))
    w.check(ps.build(sch).run(*inputs), w.reference(*inputs))


def _synthetic(n: int = 48, seed: int = 0):
    rng = np.random.default_rng(seed)
    feats = [rng.random((int(rng.integers(1, 4)), 6)).astype("float32") for _ in range(n)]
    secs = [1.0 + float(f[:, 0].sum()) for f in feats]
    return feats, secs


def _count_fits(monkeypatch, cls) -> list:
    """Record the number of programs of every real training of ``cls``."""
    fits: list = []
    fit = cls._fit

    def counting(self, x, t, g):
        fits.append(len(x))
        return fit(self, x, t, g)

    monkeypatch.setattr(cls, "_fit", counting)
    return fits


def test_mlp_trains_when_asked_on_the_data_it_had(monkeypatch):
    from probsched.cost_model import MLPModel

    fits = _count_fits(monkeypatch, MLPModel)
    feats, secs = _synthetic()
    eager = MLPModel(seed=0, hidden=(16,), epochs=5)
    eager.lazy_training = False
    eager.update_features(feats[:40], secs[:40], ["g"] * 40)
    lazy = MLPModel(seed=0, hidden=(16,), epochs=5)
    assert lazy.update_features(feats[:40], secs[:40], ["g"] * 40) and fits == [40]  # the eager one trained
    assert not lazy.update_features(feats[40:], secs[40:], ["g"] * 8)  # too few new records to retrain
    # the deferred training uses the 40 records of its decision, as the eager one did
    np.testing.assert_allclose(lazy.predict_features(feats), eager.predict_features(feats), rtol=1e-5)
    assert fits == [40, 40] and lazy.n_trained == 40
    lazy.predict_features(feats)
    assert fits == [40, 40]  # trained once


@pytest.mark.slow(rotation=5)  # a transfer model trained twice
def test_transfer_training_is_read_from_the_cache(monkeypatch, tmp_path):
    from probsched.cost_model import MLPModel

    monkeypatch.setenv("PROBSCHED_CACHE_DIR", str(tmp_path))
    fits = _count_fits(monkeypatch, MLPModel)
    feats, secs = _synthetic()
    scores = []
    for _ in range(2):
        m = MLPModel(seed=0, hidden=(16,), epochs=5).set_transfer(feats, secs, ["other"] * len(feats))
        scores.append(m.predict_features(feats[:5]))
    assert fits == [len(feats)]
    np.testing.assert_array_equal(scores[0], scores[1])
    m.update_features(feats[:32], secs[:32], ["own"] * 32)  # own records: trained, not cached
    m.predict_features(feats[:5])
    assert fits == [len(feats), len(feats) + 32]


def test_timing_stops_early_for_a_clearly_slower_candidate_and_the_record_says_so():
    from probsched.database import Database, TuningRecord
    from probsched.measure import LocalMeasurer
    from probsched.tuning.selection import best_schedule

    w = ps.workloads.small("GMM")
    fast, slow = ps.Schedule(w.func), ps.Schedule(w.func)
    slow.split(slow.get_loops(slow.get_block("Z"))[1], [2, 2])
    with LocalMeasurer(workers=1, repeat=5, min_repeat_ms=2) as m:  # one worker: in order
        results = m.measure(w, [fast, slow], _faults={1: "slow"})
        # the next call (another tuning run, another database) stops against its own bests
        # and its caller's, not this one's: its first candidate is timed in full
        (later,) = m.measure(w, [slow], _faults={0: "slow"})
        (bounded,) = m.measure(w, [fast], best_seconds=results[0].median / 100)
    assert results[0].ok and not results[0].stopped_early and len(results[0].run_seconds) == 5
    assert results[1].ok and results[1].stopped_early and len(results[1].run_seconds) == 2
    assert min(results[1].run_seconds) > 2 * results[0].median and m.stats.stopped_early == 2
    assert later.ok and not later.stopped_early and len(later.run_seconds) == 5
    assert bounded.ok and bounded.stopped_early and len(bounded.run_seconds) == 2
    db = Database(":memory:")
    key = db.commit_workload(w)
    for sch, r in zip([fast, slow], results):
        db.commit_record(TuningRecord.from_result(key, sch, r))
    assert [r.stopped_early for r in db.records(w)] == [False, True]
    # even a stopped candidate stored as the fastest is never named best on its partial timing
    lucky = TuningRecord.from_result(key, slow, ps.measure.MeasureResult((1e-9, 1e-9), stopped_early=True))
    db.commit_record(lucky)
    assert db.best(w, k=1)[0].stopped_early and best_schedule(db, w).record.candidate_hash == fast.mod.structural_hash()


def test_a_measurer_used_for_a_second_run_leaves_its_database_a_best():
    """A measurer outlives a run (a Dask worker serves every client): what it timed for an
    earlier run must not stop every candidate of the next one early, which left that run's
    database without a candidate timed in full and ``ps.tune`` without a best (seen in CI on
    a Dask cluster, the host's speed having drifted between two tests)."""
    from probsched.measure import LocalMeasurer

    with LocalMeasurer(workers=1, repeat=3, min_repeat_ms=1) as m:
        first = ps.tune("GMM:small", trials=2, measurer=m, database=":memory:", strategy="replay", cost_model=None,
                        seed=0, retime_top=0)
        # the same candidates, each now slow: against the first run's times each would stop early
        real = m.measure
        m.measure = lambda w, s, on_result=None, **kw: real(w, s, on_result, _faults={i: "slow" for i in range(len(s))}, **kw)
        second = ps.tune("GMM:small", trials=2, measurer=m, database=":memory:", strategy="replay", cost_model=None,
                         seed=0, retime_top=0)
    assert first.best is not None and second.best is not None and not second.best.record.stopped_early
    assert second.best.seconds > 2 * first.best.seconds  # the slow kernels were measured, in full


def test_stopped_early_survives_json_and_leaves_old_record_keys_alone():
    from probsched.database import TuningRecord
    from probsched.measure import MeasureResult

    w = ps.workloads.small("GMM")
    sch = ps.Schedule(w.func)
    full = TuningRecord.from_result(w, sch, MeasureResult((1e-6,) * 5))
    assert "stopped_early" not in full.to_dict()  # keys (hashes of the JSON) as before the field
    early = TuningRecord.from_result(w, sch, MeasureResult((1e-6, 2e-6), stopped_early=True))
    assert TuningRecord.from_json(early.to_json()).stopped_early and early.result.stopped_early
    assert MeasureResult.from_json(early.result.to_json()).stopped_early


def test_float32_screen_never_passes_what_the_exact_check_fails():
    from probsched.measure.reference import Reference
    from probsched.workloads.workload import check_close

    rng = np.random.default_rng(0)
    e = (rng.standard_normal(200_000) * 10.0 ** rng.integers(-3, 4, 200_000)).astype(np.float32)
    rtol = atol = 1e-4
    tol = atol + rtol * np.abs(e.astype(np.float64))
    # outputs at the tolerance's edge: a hair inside, on it, a hair outside, in float32
    got = (e.astype(np.float64) + tol * rng.choice([-1.0, 1.0], e.size) * rng.uniform(0.999999, 1.000001, e.size)).astype(np.float32)
    ref = Reference({}, {"y": e}, rtol, atol)
    exact = np.abs(got.astype(np.float64) - e.astype(np.float64)) <= tol
    # elementwise: the screen's per-element verdict implies the exact one
    ref._screen("y", got, rtol, atol)
    ok = ref._screens["y", rtol, atol][2]
    assert not np.any(ok & ~exact) and ok.sum() > 0.3 * e.size and (~exact).sum() > 0.3 * e.size
    bad = got.copy()
    bad[5] = np.nan
    assert not ref._screen("y", bad, rtol, atol)
    try:
        check_close("y", bad, e, rtol, atol)
        raise AssertionError("NaN passed")
    except AssertionError as exc:
        assert "differ" in str(exc)


def _parallel_dep(seed_start: int = 0) -> ps.Schedule:
    """A scheduled small depthwise convolution with a parallel loop (run by a launcher)."""
    w = ps.workloads.small("DEP")
    for s in range(seed_start, seed_start + 50):
        sch = _scheduled(w, s)
        if "parallel" in str(sch.mod):
            return sch
    raise AssertionError("no parallel schedule in 50 seeds")


def test_compiled_program_is_loaded_by_another_process(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv("PROBSCHED_CACHE_DIR", str(tmp_path))
    w = ps.workloads.small("DEP")
    sch = _parallel_dep()
    log_json = sch.instructions.to_json()
    script = (
        "import sys, probsched as ps\n"
        "w = ps.workloads.small('DEP')\n"
        "sch = ps.InstructionLog.from_json(sys.stdin.read()).apply(ps.Schedule(w.func))\n"
        "k = ps.build(sch)\n"
        "print(k.from_cache, len(k.launches))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], input=log_json, capture_output=True, text=True, env=dict(os.environ), check=True)
    assert out.stdout.split() == ["False", "1"], out.stderr  # compiled there, with a parallel loop
    stored = set(os.listdir(tmp_path / "programs"))
    from probsched.codegen import launch, program_cache, spin_pool
    from probsched.codegen.build import clear_cache

    clear_cache()  # nothing of it compiled in this process either
    kernel = ps.build(ps.InstructionLog.from_json(log_json).apply(ps.Schedule(w.func)))
    assert kernel.from_cache and kernel.launches
    # the program, and the shared code it calls: its launcher and the spin pool's loop
    (name,) = [launch.launcher_name(ls.kinds) for ls in kernel.launches]
    shared = {name} | ({spin_pool.serve_name()} if not name.endswith(" prange") else set())
    assert {program_cache.shared_key(n) + ".bin" for n in shared} < stored and len(stored) == len(shared) + 1
    inputs = w.random_inputs(np.random.default_rng(1))
    w.check(kernel.run(*inputs), w.reference(*inputs))  # the loaded code calls this process's launcher
    assert all("ret" in text for text in kernel.inspect_asm().values())  # compiled again to be shown


def test_program_cache_is_bounded_and_skips_foreign_globals(tmp_path, monkeypatch):
    from probsched import cache
    from probsched.codegen import program_cache

    monkeypatch.setenv("PROBSCHED_CACHE_DIR", str(tmp_path))
    folder = cache.folder("programs")
    for i in range(4):
        path = os.path.join(folder, f"{i}.bin")
        with open(path, "wb") as fh:
            fh.write(b"x" * 1000)
        os.utime(path, (1000 + i, 1000 + i))  # 0 is the least recently used
    assert program_cache.trim(limit=2500) == 3 and os.listdir(folder) == ["3.bin"]
    # a kernel calling a function of the user's (here: a fault's ctypes call) is not stored
    from probsched.codegen.build import clear_cache
    from probsched.measure import _faults

    clear_cache()
    ps.build(_faults.inject(ps.workloads.small("GMM").func, "slow"))
    assert os.listdir(folder) == ["3.bin"]
    assert cache.clear(["programs"]) == 1 and not os.path.exists(folder)
