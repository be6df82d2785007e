"""The one tuning loop: budgets of trials and of time, for operators and networks alike."""

import os
import time

import numpy as np
import pytest

import jax

import probsched as ps
from probsched.measure import MeasureResult
from probsched.tuning import LoopTask, TuningLoop, TuningOptions, TuningResources


class SlowInstant:
    """A measurer stand-in: every candidate runs in 1 µs; a round takes ``pause`` seconds."""

    def __init__(self, pause: float = 0.0):
        self.pause = pause
        self.rounds = 0

    def measure(self, workload, schedules, on_result=None):
        time.sleep(self.pause)
        self.rounds += 1
        results = [MeasureResult((1e-6,))] * len(schedules)
        for i, r in enumerate(results):
            on_result(i, r)
        return results

    def measure_together(self, workload, schedules, rounds=15):
        return [MeasureResult((1e-6,))] * len(schedules)

    def settle(self):
        pass

    def close(self):
        pass


OPTIONS = TuningOptions(strategy="replay", cost_model=None, batch_size=2, retime_top=0)


def test_a_time_budget_stops_proposing_rounds():
    m = SlowInstant(pause=0.1)
    start = time.perf_counter()
    loop = TuningLoop([LoopTask(ps.workloads.small("GMM"))], trials=None, minutes=0.4 / 60, options=OPTIONS,
                      resources=TuningResources(None, m), start=start)
    t0 = time.perf_counter()
    loop.run()
    took = time.perf_counter() - t0
    left = 0.4 - (t0 - start)  # the minutes count from the start: setting up on a busy machine spends some
    assert m.rounds <= 6 and took < 1.5, (m.rounds, took)
    if left > 0.25:  # time for two rounds of 0.1 s at least
        assert m.rounds >= 2, (m.rounds, left)
    assert loop.states[0].trials == 2 * m.rounds


def test_trials_and_minutes_end_at_whichever_comes_first():
    m = SlowInstant()
    loop = TuningLoop([LoopTask(ps.workloads.small("GMM"))], trials=3, minutes=10, options=OPTIONS,
                      resources=TuningResources(None, m))
    loop.run()
    assert [len(r) for r in loop.rounds] == [2, 1]


def test_a_run_needs_a_budget():
    with pytest.raises(ValueError, match="tune: give a budget"):
        ps.tune("GMM:small")
    with pytest.raises(ValueError, match="minutes must be > 0"):
        ps.tune("GMM:small", minutes=0)


def test_tune_takes_minutes_and_the_command_line_too(tmp_path):
    from probsched.cli import build_parser
    from probsched.cli.common import budget

    for command in ("tune", "tune-model"):
        target = "GMM:small" if command == "tune" else "bert_tiny"
        assert budget(build_parser().parse_args([command, target, "--minutes", "3"])) == (None, 3.0)
        assert budget(build_parser().parse_args([command, target, "--minutes", "3", "--trials", "9"])) == (9, 3.0)
    assert budget(build_parser().parse_args(["tune", "GMM:small"])) == (128, None)
    assert budget(build_parser().parse_args(["tune-model", "bert_tiny"])) == (1500, None)
    result = ps.tune("GMM:small", minutes=0.2 / 60, measurer=SlowInstant(0.05), strategy="replay", cost_model=None,
                     retime_top=0, batch_size=1)
    assert result.best is not None and 1 <= len(result.history) <= 8


def test_a_new_task_starts_from_the_decisions_of_a_similar_one(tmp_path):
    from probsched.database import Database
    from probsched.tuning import TaskSearch

    small, other = ps.workloads.get("C2D:1"), ps.workloads.get("C2D:2")
    with Database(str(tmp_path / "s.db")) as db:
        first = TaskSearch(small, db, strategy="replay", seed=0)
        batch = first.propose(3)
        for i, c in enumerate(batch):
            first.record(batch, i, MeasureResult(((i + 1) * 1e-6,)))
        plain = TaskSearch(other, db, strategy="replay", seed=0)
        warm = TaskSearch(other, db, strategy="replay", seed=0, similar_tasks=True)
        assert plain.ctx.transfer == [] and len(warm.ctx.transfer) == 3
        # the fastest first, and each replays onto the new shapes (misfits drawn anew)
        assert warm.ctx.transfer[0].choices() == batch[0].decisions.choices()
        assert all(warm.ctx.replay(t) is not None for t in warm.ctx.transfer)
        assert warm.ctx.best_decisions(2) == warm.ctx.transfer[:2]


def test_shipped_records_serve_compile_without_a_database_and_start_a_search(tmp_path, monkeypatch):
    import numpy as np
    import jax

    from probsched.cli import main
    from probsched.database import Database
    from probsched.space import Space, default as default_space
    from probsched.tuning import TaskSearch, shipped

    w = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    fn = lambda x: jax.nn.relu(x @ w)  # noqa: E731
    x = np.ones((4, 8), np.float32)
    (task,) = ps.from_jax(fn, x).tasks()
    db_path = str(tmp_path / "tuned.db")
    with Database(db_path) as db:
        search = TaskSearch(task.workload, db, strategy="replay", seed=0)
        batch = search.propose(2)
        for i in range(len(batch)):
            search.record(batch, i, MeasureResult(((i + 1) * 1e-6,)))
    monkeypatch.setattr(shipped, "FOLDER", str(tmp_path / "records"))
    shipped.shipped_database.cache_clear()
    assert main(["build-records", db_path, "--top", "1"]) == 0
    assert os.path.exists(shipped.shipped_path(shipped.cpu_family()))
    try:
        model = ps.compile(fn, x, candidates=2, progress=None)
        assert [c.source for c in model.choices] == ["shipped"]
        np.testing.assert_allclose(model(x), np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
        Database(str(tmp_path / "other.db")).close()  # a database without records of this task
        again = ps.compile(fn, x, database=str(tmp_path / "other.db"), candidates=2, progress=None)
        assert [c.source for c in again.choices] == ["shipped"]
        own = ps.compile(fn, x, database=db_path, candidates=2, progress=None)  # its own records come first
        assert [c.source for c in own.choices] == ["database"]
        with Database(":memory:") as empty:
            fresh = TaskSearch(task.workload, empty, strategy="replay", seed=1, shipped=True)
            first = fresh.propose(1)
        assert first[0].hash == batch[0].hash  # the shipped best is measured first
        # in a space changed since (its rules dropped here), the record's own program, not what its decisions make now
        changed = Space(default_space().rules, [], name="changed")
        with Database(":memory:") as empty:
            seeded = TaskSearch(task.workload, empty, space=changed, strategy="replay", seed=1, shipped=True)
            assert seeded.ctx.replay(seeded.ctx.transfer[0]).hash != batch[0].hash
            first = seeded.propose(1)
        assert first[0].hash == batch[0].hash
        # re-timed (cold, at a tuning run's end), the other one is the faster: shipped so, it is the one compiled
        with Database(db_path) as db:
            db.commit_retiming(task.workload, [(batch[0].hash, MeasureResult((5e-6,))), (batch[1].hash, MeasureResult((3e-6,)))])
        assert main(["build-records", db_path, "--top", "1"]) == 0  # the session's records too, beyond the top 1
        shipped.shipped_database.cache_clear()
        model = ps.compile(fn, x, candidates=2, progress=None)
        assert model.choices[0].schedule.mod.structural_hash() == batch[1].hash and model.choices[0].seconds == 3e-6
    finally:
        shipped.shipped_database.cache_clear()


def test_build_records_takes_each_workload_from_the_database_that_timed_it_fastest(tmp_path):
    # a network tuned in bf16 holds its tasks' float32 versions, tried a few times: listed
    # first, that database must not hide a float32 database's faster records of the task
    import dataclasses
    import gzip

    from probsched.database import Database
    from probsched.tuning import TaskSearch
    from probsched.tuning.shipped import build_records

    w = ps.workloads.small("GMM")
    for seed, (name, seconds) in enumerate((("few.db", 9e-6), ("many.db", 2e-6))):
        with Database(str(tmp_path / name)) as db:
            search = TaskSearch(w, db, strategy="replay", seed=seed)
            batch = search.propose(1)
            search.record(batch, 0, MeasureResult((seconds,)))
    # fastest of all, but its instructions name blocks the function does not have: not shipped
    with Database(str(tmp_path / "many.db")) as db:
        good = db.best(w.func, k=1)[0]
    with Database(str(tmp_path / "stale.db")) as db:
        db.commit_workload(w)
        db.commit_record(dataclasses.replace(good, candidate_hash="0" * 64, run_seconds=(1e-6,),
                                             instructions=good.instructions.replace('"block":"', '"block":"gone_')))
    out = str(tmp_path / "shipped.jsonl.gz")
    dbs = [str(tmp_path / name) for name in ("few.db", "stale.db", "many.db")]
    assert build_records(dbs, out, top=4) == {"GMM:small": 1}
    with gzip.open(out, "rt") as fh:
        (tmp_path / "shipped.jsonl").write_text(fh.read())
    with Database(str(tmp_path / "merged.db")) as merged:
        merged.import_jsonl(str(tmp_path / "shipped.jsonl"))
        assert [r.median for r in merged.best(w.func, k=4)] == [2e-6]


def test_shipped_records_whose_kernels_cannot_run_here_are_left_out(tmp_path, monkeypatch):
    # the Intel file holds AMX records (tuned on Sapphire Rapids); an AVX-512 CPU without AMX
    # borrowing or owning it must not try them first on every compile (each fails to build,
    # and a compile that skipped a record is not cached)
    from probsched.tuning import shipped

    def amx_records(missing):
        monkeypatch.setattr(shipped, "_missing_kernels", lambda: missing)
        shipped.shipped_database.cache_clear()
        db = shipped.shipped_database("intel-avx512")
        path = str(tmp_path / f"{len(missing)}.jsonl")
        db.export_jsonl(path)
        lines = [ln for ln in open(path) if '"record"' in ln]
        return len(lines), sum(any(k in ln for k in shipped.UNIT_KERNELS) for ln in lines)

    try:
        everything, with_tiles = amx_records([])
        kept, tiles_kept = amx_records(list(shipped.UNIT_KERNELS))
    finally:
        shipped.shipped_database.cache_clear()
    assert with_tiles > 0 and tiles_kept == 0
    assert kept == everything - with_tiles


def test_a_family_without_shipped_records_borrows_another_vendors_with_the_same_vectors(tmp_path, monkeypatch):
    import gzip

    from probsched.tuning import shipped

    monkeypatch.setattr(shipped, "FOLDER", str(tmp_path))
    assert shipped.records_family("amd-avx512") is None
    with gzip.open(shipped.shipped_path("intel-avx512"), "wt") as fh:
        fh.write("{}\n")
    assert shipped.records_family("intel-avx512") == "intel-avx512"
    assert shipped.records_family("amd-avx512") == "intel-avx512"  # same vector width: borrowed
    assert shipped.records_family("amd-avx2") is None  # never another width's tiles
    with gzip.open(shipped.shipped_path("amd-avx512"), "wt") as fh:
        fh.write("{}\n")
    assert shipped.records_family("amd-avx512") == "amd-avx512"  # its own first


class ByName(SlowInstant):
    """Every candidate of a workload runs in the time its name says."""

    def __init__(self, seconds):
        super().__init__(0.0)
        self.seconds, self.names = seconds, []

    def measure(self, workload, schedules, on_result=None):
        self.names.append(workload.name)
        results = [MeasureResult((self.seconds[workload.name],))] * len(schedules)
        for i, r in enumerate(results):
            on_result(i, r)
        return results


def test_alternatives_race_and_the_slower_leaves_the_rotation():
    fast, slow, other = ps.workloads.small("GMM"), ps.workloads.small("C2D"), ps.workloads.small("C1D")
    m = ByName({fast.name: 1e-6, slow.name: 3e-6, other.name: 2e-6})
    tasks = [LoopTask(slow, 2, "t:bf16", group="t"), LoopTask(fast, 2, "t", group="t"), LoopTask(other, 1, "u")]
    loop = TuningLoop(tasks, trials=24, options=OPTIONS, resources=TuningResources(None, m), scheduler="round-robin")
    loop.run()
    assert [s.alive for s in loop.states[:2]] == [False, True]  # 3x slower than its alternative: retired
    assert m.names.count(slow.name) == 1 and m.names.count(fast.name) > 1
    assert loop.estimated_seconds == pytest.approx(2 * 1e-6 + 2e-6)  # the group counts once, by its fastest


def test_close_alternatives_both_stay():
    a, b = ps.workloads.small("GMM"), ps.workloads.small("C2D")
    m = ByName({a.name: 1e-6, b.name: 1.1e-6})
    loop = TuningLoop([LoopTask(a, group="t"), LoopTask(b, group="t")], trials=8, options=OPTIONS,
                      resources=TuningResources(None, m), scheduler="round-robin")
    loop.run()
    assert all(s.alive for s in loop.states)


def test_a_bf16_tuning_races_every_product_task_against_its_float32_version():
    from probsched.tuning.tune_network import alternatives

    w = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    x = np.ones((4, 8), np.float32)
    graph = ps.from_jax(lambda x: jax.nn.softmax(jax.nn.relu(x @ w)), x)
    tasks, groups = alternatives(graph.tasks(), "bf16")
    products = [t for t in graph.tasks() if t.in_precision("bf16") is not t]
    assert products and len(tasks) == len(graph.tasks()) + len(products)
    for t in products:  # each product task twice, in one group: bf16 and float32
        assert [(u.precision, g) for u, g in zip(tasks, groups) if g == t.key] == [("bfloat16", t.key), ("float32", t.key)]
    assert alternatives(graph.tasks(), "float32") == (graph.tasks(), [""] * len(graph.tasks()))


def test_an_alternative_its_records_show_clearly_slower_gets_no_round(tmp_path):
    # a later run on the same database: the float32 version won the earlier race (a depthwise
    # convolution), so it is the one tuned on; the bfloat16 one is retired before any round
    from probsched.database import Database, TuningRecord

    fast, slow, close = ps.workloads.small("GMM"), ps.workloads.small("C2D"), ps.workloads.small("C1D")
    with Database(str(tmp_path / "t.db")) as db:
        for w, seconds in ((fast, 1e-6), (slow, 2e-6), (close, 1.1e-6)):
            key = db.commit_workload(w)
            db.commit_record(TuningRecord.from_result(key, ps.Schedule(w.func), MeasureResult((seconds,))))
        m = ByName({fast.name: 1e-6, slow.name: 2e-6, close.name: 1.1e-6})
        tasks = [LoopTask(slow, name="t:bf16", group="t"), LoopTask(fast, name="t", group="t"),
                 LoopTask(close, name="u:bf16", group="u"), LoopTask(fast, name="u", group="u")]
        loop = TuningLoop(tasks, trials=12, options=OPTIONS, resources=TuningResources(db, m), scheduler="round-robin")
        assert [s.alive for s in loop.states] == [False, True, True, True]
        loop.run()
    assert slow.name not in m.names and close.name in m.names and fast.name in m.names


def test_only_the_fastest_alternative_is_retimed():
    fast, slow = ps.workloads.small("GMM"), ps.workloads.small("C2D")
    m = ByName({fast.name: 1e-6, slow.name: 3e-6})
    retimed = []
    m.measure_together = lambda workload, schedules, rounds=15: retimed.append(workload.name) or [MeasureResult((1e-6,))] * len(schedules)
    options = TuningOptions(strategy="replay", cost_model=None, batch_size=2, retime_top=2)
    loop = TuningLoop([LoopTask(slow, group="t"), LoopTask(fast, group="t")], trials=8, options=options,
                      resources=TuningResources(None, m), scheduler="round-robin")
    loop.run()
    assert retimed == [fast.name]


def test_network_tasks_are_retimed_with_their_weights_cold_each_alternative_of_a_group():
    w = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    (task,) = ps.from_jax(lambda x: x @ w, np.ones((4, 8), np.float32)).tasks()
    fast, slow = task.workload, task.in_precision("bf16").workload
    m = ByName({fast.name: 1e-6, slow.name: 1.2e-6})
    retimed = []

    def measure_together(workload, schedules, rounds=15, cold_weights=None):
        retimed.append((workload.name, cold_weights))
        return [MeasureResult((1e-6,))] * len(schedules)

    m.measure_together = measure_together
    options = TuningOptions(strategy="replay", cost_model=None, batch_size=2, retime_top=2)
    from probsched.database import Database

    with Database(":memory:") as db:
        loop = TuningLoop([LoopTask(slow, group="t"), LoopTask(fast, group="t")], trials=8, options=options,
                          resources=TuningResources(db, m), scheduler="round-robin")
        loop.run()
    # the slower one too: read cold, bfloat16's half the weight bytes may make it the faster
    assert sorted(retimed) == sorted([(fast.name, True), (slow.name, True)])


def test_a_search_without_records_measures_its_twins_best_program_first():
    # two tasks that differ only in a constant of their epilogue (as one layer quantized with
    # other scales does): the new one's search starts from the program the other's found fastest
    import numpy as np
    import jax

    from probsched.database import Database
    from probsched.tuning import TaskSearch

    w = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    x = np.ones((4, 8), np.float32)
    (a,) = ps.from_jax(lambda v: jax.nn.relu(v @ w) * 0.5, x).tasks()
    (b,) = ps.from_jax(lambda v: jax.nn.relu(v @ w) * 0.25, x).tasks()
    with Database(":memory:") as db:
        search = TaskSearch(a.workload, db, strategy="replay", seed=0)
        batch = search.propose(3)
        for i in range(len(batch)):
            search.record(batch, i, MeasureResult(((3 - i) * 1e-6,)))  # the last proposed is the fastest
        fastest = db.best(a.func, k=1)[0]
        twin = TaskSearch(b.workload, db, strategy="replay", seed=1, shipped=True)
        assert [r.candidate_hash for r, _ in twin.seeds][:1] == [fastest.candidate_hash]
        first = twin.propose(1)
    assert first[0].hash == fastest.schedule(b.func).mod.structural_hash() != batch[-1].hash
