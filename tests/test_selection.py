"""Naming the best: re-timing sessions rank the stored candidates (probsched.tuning.selection)."""

import pytest

import probsched as ps
from probsched.database import Database, TuningRecord
from probsched.measure import MeasureResult
from probsched.tuning.selection import best_schedule, retime

W = ps.workloads.small("GMM")


def schedule(f: int) -> ps.Schedule:
    sch = ps.Schedule(W.func)
    sch.split(sch.get_loops(sch.get_block("Z"))[1], [f, 4 // f])
    return sch


A, B, C = schedule(1), schedule(2), schedule(4)


def h(sch) -> str:
    return sch.mod.structural_hash()


@pytest.fixture
def db():
    with Database(":memory:") as d:
        d.commit_workload(W)
        for sch, sec in ((A, 1.0), (B, 2.0)):
            d.commit_record(TuningRecord.from_result(W, sch, MeasureResult((sec,))))
        yield d


class TogetherMeasurer:
    """Stands in for LocalMeasurer.measure_together: fixed seconds per candidate."""

    def __init__(self, seconds):
        self.seconds, self.calls = seconds, []

    def measure_together(self, workload, schedules, rounds=5):
        self.calls.append((len(schedules), rounds))
        return [self.seconds.pop(0) for _ in schedules]


def test_retime_commits_one_session_and_renames_the_best(db):
    m = TogetherMeasurer([MeasureResult((5.0, 5.0)), MeasureResult((3.0,))])  # stored order: A then B
    pairs = retime(W, db, m, top=8, rounds=3)
    assert m.calls == [(2, 3)]  # the two stored candidates, in one group
    assert [(rec.candidate_hash, res.median) for rec, res in pairs] == [(h(B), 3.0), (h(A), 5.0)]
    best = best_schedule(db, W)
    assert best.record.candidate_hash == h(B) and best.seconds == 3.0 and best.search_seconds == 2.0
    assert best.gflops == pytest.approx(W.flops / 3.0 / 1e9)
    with pytest.raises(ValueError, match="top"):
        retime(W, db, m, top=0)


def test_a_faster_record_after_the_session_makes_it_stale(db):
    db.commit_retiming(W, [(h(A), MeasureResult((5.0,))), (h(B), MeasureResult((3.0,)))])
    assert best_schedule(db, W).record.candidate_hash == h(B)
    db.commit_record(TuningRecord.from_result(W, C, MeasureResult((0.5,))))  # never re-timed
    best = best_schedule(db, W)
    assert best.record.candidate_hash == h(C) and best.retimed == () and best.seconds == 0.5


def test_a_session_whose_members_all_failed_falls_back_to_the_search(db):
    db.commit_retiming(W, [(h(A), MeasureResult.failure("crash", "gone")), (h(B), MeasureResult.failure("crash", "gone"))])
    best = best_schedule(db, W)
    assert best.record.candidate_hash == h(A) and best.seconds == 1.0


def test_nothing_stored_names_nothing():
    with Database(":memory:") as d:
        d.commit_workload(W)
        assert best_schedule(d, W) is None
        assert retime(W, d, TogetherMeasurer([])) == []


def test_retime_adds_each_other_family_s_fastest_and_times_the_weights_cold_where_the_measurer_can():
    from handlers.trace_struct import Site, Trace

    from handlers import Categorical
    from probsched.schedule.distributions import ALGORITHM

    def family(value):  # decisions naming one algorithm choice (as a Winograd site does)
        return Trace([Site("Z/winograd", value, Categorical([0, 2, 4]), infer={"tag": ALGORITHM})]).to_json()

    with Database(":memory:") as d:
        d.commit_workload(W)
        for sch, sec, fam in ((A, 1.0, 4), (B, 2.0, 4), (C, 3.0, 0)):  # C: the only one of family 0, slowest
            d.commit_record(TuningRecord.from_result(W, sch, MeasureResult((sec,)), decisions=family(fam)))

        class ColdMeasurer(TogetherMeasurer):
            def measure_together(self, workload, schedules, rounds=5, *, cold_weights=None):
                self.cold = cold_weights
                return super().measure_together(workload, schedules, rounds)

        m = ColdMeasurer([MeasureResult((5.0,)), MeasureResult((2.5,))])
        pairs = retime(W, d, m, top=1, rounds=3, cold_weights=True, families=True)
        assert [rec.candidate_hash for rec, _ in pairs] == [h(C), h(A)] and m.cold is True  # cold, C is the faster
        assert best_schedule(d, W).record.candidate_hash == h(C)
        plain = TogetherMeasurer([MeasureResult((1.0,))])  # no cold_weights keyword: timed as it can
        assert len(retime(W, d, plain, top=1, cold_weights=True)) == 1
