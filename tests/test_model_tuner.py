"""ps.tune_model: one budget over a network's tasks, the scheduler's picks, resume, end to end.

Most tests drive the real tuning loop with a scripted measurer (no worker processes, no
numba): a candidate's time is a deterministic function of its program, and chosen tasks can
be made to fail. One test tunes a tiny model for real and checks the compiled network.
"""

import hashlib
import runpy

import numpy as np
import pytest

import jax

import probsched as ps
from probsched.database import Database
from probsched.measure import MeasureResult

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


class ScriptedMeasurer:
    """Times are a hash of the scheduled program (1-2 ms, scaled by the task's FLOPs);
    tasks whose function name contains one of ``failing`` fail every candidate."""

    def __init__(self, failing=()):
        self.failing = tuple(failing)
        self.calls = []  # (task name, candidates) per measure call

    def _result(self, workload, sch):
        if any(f in workload.func.name for f in self.failing):
            return MeasureResult.failure("runtime", "scripted failure")
        h = int(hashlib.sha256(sch.mod.structural_hash().encode()).hexdigest()[:8], 16)
        return MeasureResult(((1 + h / 2**32) * 1e-3 * (1 + workload.flops / 1e7),), 0.1)

    def measure(self, workload, schedules, on_result=None):
        self.calls.append((workload.name, len(schedules)))
        out = []
        for i, sch in enumerate(schedules):
            r = self._result(workload, sch)
            out.append(r)
            if on_result:
                on_result(i, r)
        return out

    def measure_together(self, workload, schedules, rounds=15):
        return [MeasureResult((1e-3,) * 3) for _ in schedules]

    def settle(self):
        pass


@pytest.fixture(scope="module")
def bert_tiny():
    return ps.models.get("bert_tiny")


def tune(model, **kw):
    kw.setdefault("strategy", "replay")
    kw.setdefault("compile", False)
    kw.setdefault("retime_top", 0)
    fn, args = model
    return ps.tune_model(fn, *args, **kw)


@pytest.mark.parametrize("trials, batch", [(37, 8), (8, 3), (0, 8)])
def test_budget_is_honoured_exactly(bert_tiny, trials, batch):
    m = ScriptedMeasurer()
    res = tune(bert_tiny, trials=trials, batch_size=batch, measurer=m)
    assert len(res.history) == trials == sum(n for _, n in m.calls)
    assert sum(t.trials for t in res.tasks) == trials
    assert all(n <= batch for _, n in m.calls)


def test_every_task_gets_a_round_then_the_gradient_picks(bert_tiny):
    m = ScriptedMeasurer()
    res = tune(bert_tiny, trials=8 * 8 + 40, batch_size=8, measurer=m)
    first = [name for name, _ in m.calls[:8]]
    assert len(set(first)) == 8  # one round each, in task order, before any second round
    assert [r.trials for r in res.tasks].count(8) < 8  # then the rounds went by gain, not evenly
    est = res.estimated_seconds
    assert est == pytest.approx(sum(t.weight * t.best_seconds for t in res.tasks))
    assert res.history[-1].estimated_seconds == pytest.approx(est)


def test_round_robin_spreads_the_rounds_evenly(bert_tiny):
    res = tune(bert_tiny, trials=8 * 3 * 4, batch_size=4, measurer=ScriptedMeasurer(), scheduler="round-robin")
    assert [t.trials for t in res.tasks] == [12] * 8


def test_a_task_that_keeps_failing_leaves_the_rotation(bert_tiny):
    m = ScriptedMeasurer(failing=("max_maximum_subtract_exp",))
    res = tune(bert_tiny, trials=150, batch_size=5, measurer=m)
    softmax = [t for t in res.tasks if "max_maximum_subtract_exp" in t.name][0]
    assert softmax.trials == 3 * 5  # its first round, then two more: three failed rounds in a row
    assert len(res.history) == 150


def test_resume_measures_only_new_candidates(bert_tiny, tmp_path):
    path = str(tmp_path / "model.db")
    tune(bert_tiny, trials=24, batch_size=4, measurer=ScriptedMeasurer(), database=path)
    with Database(path) as db:
        before = {w.hash: {r.candidate_hash for r in db.records(w.hash)} for w in db.workloads()}
    res = tune(bert_tiny, trials=24, batch_size=4, measurer=ScriptedMeasurer(), database=path, seed=1)
    with Database(path) as db:
        after = {w.hash: [r.candidate_hash for r in db.records(w.hash)] for w in db.workloads()}
    assert sum(len(v) for v in after.values()) == 48
    for key, hashes in after.items():
        assert len(hashes) == len(set(hashes))  # nothing measured twice
        assert before.get(key, set()) <= set(hashes)
    assert len(res.history) == 24


def test_the_shared_cost_model_learns_from_every_task(bert_tiny):
    from probsched.cost_model import RidgeModel

    model = RidgeModel()
    evo = ps.search.EvolutionarySearch(population=16, genetic_iters=1)
    tune(bert_tiny, trials=16, batch_size=2, measurer=ScriptedMeasurer(), strategy=evo, cost_model=model)
    groups = set(model._data_g)
    assert len(groups) == 8 and len(model._data_x) == 16


def test_custom_task_scheduler_example(bert_tiny):
    mod = runpy.run_path(str(ROOT / "examples" / "custom_task_scheduler.py"))
    assert len((ROOT / "examples" / "custom_task_scheduler.py").read_text().splitlines()) <= 40
    m = ScriptedMeasurer()
    res = tune(bert_tiny, trials=40, batch_size=4, measurer=m, scheduler=mod["LargestShareFirst"]())
    assert res.scheduler == "largest-share" and len(res.history) == 40
    biggest = max(res.tasks, key=lambda t: t.weight * t.best_seconds)
    assert biggest.trials == max(t.trials for t in res.tasks)


def test_tune_model_end_to_end_matches_jax_jit(bert_tiny, tmp_path):
    """Real workers: a handful of trials, then the compiled network against jax.jit."""
    fn, args = bert_tiny
    with ps.measure.LocalMeasurer(workers=2, repeat=2, min_repeat_ms=2) as m:
        res = ps.tune_model(
            fn, *args, trials=6, batch_size=3, measurer=m, database=str(tmp_path / "m.db"), retime_top=2,
            candidates=4, strategy="replay",
        )
    assert len(res.history) == 6 and res.model is not None
    sources = {c.source for c in res.model.choices}
    assert sources == {"database", "predicted"}  # two tasks tuned, the others predicted
    x = np.random.default_rng(3).standard_normal(args[0].shape).astype(np.float32)
    np.testing.assert_allclose(res.model(x), np.asarray(jax.jit(fn)(x)), rtol=1e-4, atol=1e-4)
    assert "| task | weight | trials |" in res.summary()


class QueuedMeasurer(ScriptedMeasurer):
    """Takes a batch without waiting (as DaskMeasurer.submit); logs sends and waits."""

    def __init__(self):
        super().__init__()
        self.log = []

    def submit(self, workload, schedules):
        self.log.append(("send", workload.name))
        results = [self._result(workload, s) for s in schedules]
        outer = self

        class Handle:
            def wait(self, on_result=None):
                outer.log.append(("wait", workload.name))
                for i, r in enumerate(results):
                    if on_result:
                        on_result(i, r)
                return results

        return Handle()


def test_a_measurer_that_queues_batches_is_fed_one_round_ahead(bert_tiny):
    m = QueuedMeasurer()
    res = tune(bert_tiny, trials=24, batch_size=4, measurer=m, scheduler="round-robin")
    kinds = [k for k, _ in m.log]
    assert kinds[:3] == ["send", "send", "wait"]  # round 2 is out before round 1's results are read
    assert kinds.count("send") == kinds.count("wait") == 6 and len(res.history) == 24
    assert sum(t.trials for t in res.tasks) == 24


class SlowMeasurer(ScriptedMeasurer):
    """Each trial takes ``seconds`` of wall time, as a real measurer's do."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def _result(self, workload, sch):
        import time

        time.sleep(self.seconds)
        return super()._result(workload, sch)


def test_a_time_budget_running_short_still_gives_every_task_a_first_round(bert_tiny):
    # 8 tasks, rounds of 32 trials at 50 ms: 12.8 s for the first rounds alone, 7.2 s of
    # budget (from the start: importing the model and its tasks count)
    m = SlowMeasurer(0.05)
    res = tune(bert_tiny, minutes=0.12, batch_size=32, measurer=m)
    assert all(t.trials > 0 for t in res.tasks), [(t.name, t.trials) for t in res.tasks]
    assert m.calls[0][1] == 32  # the first round is whole: nothing measured yet to say it is short
    assert min(n for _, n in m.calls) < 32  # later first rounds shrank to fit


def test_a_budget_spent_before_every_task_had_a_round_still_gives_each_its_smallest_round(bert_tiny):
    # the first round alone (32 trials at 50 ms) outlasts 0.6 s of budget: the other 7 tasks
    # get one round of MIN_FIRST_ROUND trials each past the deadline, and nothing more
    from probsched.tuning.loop import MIN_FIRST_ROUND

    m = SlowMeasurer(0.05)
    res = tune(bert_tiny, minutes=0.01, batch_size=32, measurer=m)
    assert all(t.trials > 0 for t in res.tasks), [(t.name, t.trials) for t in res.tasks]
    assert [n for _, n in m.calls[1:]] == [MIN_FIRST_ROUND] * (len(res.tasks) - 1), m.calls


def test_a_task_raced_in_two_precisions_counts_once_in_the_estimate(bert_tiny):
    # tuned in bf16, each task with products is raced against itself in float32 (a group of
    # two alternatives); the network runs the faster, so the estimate and the shares count it once
    res = tune(bert_tiny, trials=8 * 16, batch_size=8, measurer=ScriptedMeasurer(), precision="bf16")
    groups = {}
    for t in res.tasks:
        if t.group:
            groups.setdefault(t.group, []).append(t)
    assert groups and all(len(g) == 2 for g in groups.values())
    alone = sum(t.weight * t.best_seconds for t in res.tasks if not t.group)
    fastest = sum(min(t.weight * t.best_seconds for t in g) for g in groups.values())
    assert res.estimated_seconds == pytest.approx(alone + fastest)
    assert res.estimated_seconds < sum(t.weight * t.best_seconds for t in res.tasks)
    assert res.history[-1].estimated_seconds == pytest.approx(res.estimated_seconds)
    assert sum(t.share for t in res.tasks) == pytest.approx(1.0)
    slower = [max(g, key=lambda t: t.weight * t.best_seconds) for g in groups.values()]
    assert all(t.share == 0.0 for t in slower)
    assert res.summary().count("slower alternative") == len(slower)
