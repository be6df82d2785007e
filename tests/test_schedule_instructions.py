"""The instruction log: printed Python rebuilds the program; JSON round-trips and replays."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import probsched as ps
import probsched.workloads as wl
from probsched.testing import random_schedule


def tiled_matmul_schedule():
    w = wl.matmul(12, 10, 8, batch=None)
    sch = ps.Schedule(w.func)
    c = sch.get_block(w.func.blocks()[0].name)
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 4])  # 10 is not a multiple of 4: guarded
    sch.reorder(i0, j0, k, i1, j1)
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, j0)
    sch.parallel(i0)
    sch.vectorize(j1)
    sch.annotate(i0, "pragma_auto_unroll_max_step", 16)
    sch.decompose_reduction(c, k)
    return sch


def test_printed_log_is_python_that_rebuilds_the_program():
    sch = tiled_matmul_schedule()
    text = str(sch.instructions)
    assert "sch.split(" in text and "factors=[None, 4]" in text
    fresh = ps.Schedule(sch.func)
    exec(text, {"sch": fresh})
    assert fresh.mod == sch.mod
    assert fresh.instructions == sch.instructions


def test_json_round_trip_and_apply():
    sch = tiled_matmul_schedule()
    text = sch.instructions.to_json()
    back = ps.InstructionLog.from_json(text)
    assert back == sch.instructions
    replayed = back.apply(ps.Schedule(sch.func))
    assert replayed.mod == sch.mod
    assert replayed.mod.structural_hash() == sch.mod.structural_hash()


def test_apply_to_another_function_fails_clearly():
    sch = tiled_matmul_schedule()
    other = wl.matmul(6, 6, 6, batch=None)  # same names, different extents: the guards differ, loops too
    replayed = sch.instructions.apply(ps.Schedule(other.func))
    assert replayed.mod != sch.mod
    with pytest.raises(ps.ScheduleError, match="no block named"):
        sch.instructions.apply(ps.Schedule(wl.small("SFM").func))


def test_bad_log_json():
    with pytest.raises(ps.ScheduleError, match="not valid JSON"):
        ps.InstructionLog.from_json("{")
    with pytest.raises(ps.ScheduleError, match="format"):
        ps.InstructionLog.from_json('{"instructions": []}')


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(wl.names()))
def test_random_schedules_replay_to_equal_programs(data, name):
    w = wl.small(name)
    sch = ps.Schedule(w.func)
    random_schedule(sch, lambda opts: data.draw(st.sampled_from(list(opts))), steps=8)
    replayed = ps.InstructionLog.from_json(sch.instructions.to_json()).apply(ps.Schedule(w.func))
    assert replayed.mod == sch.mod
    exec(str(sch.instructions), {"sch": ps.Schedule(w.func)})


def test_log_indexes_like_a_list():
    sch = tiled_matmul_schedule()
    assert sch.instructions[0] is sch.instructions.instructions[0]
    assert sch.instructions[-1].kind == "decompose_reduction"


def test_old_trace_names_still_work_and_warn():
    """The instruction log was called a trace (issue #52); the old names live one release."""
    from probsched.database import TuningRecord
    from probsched.measure import MeasureResult
    from probsched.tuning.selection import BestSchedule

    sch = tiled_matmul_schedule()
    with pytest.warns(DeprecationWarning, match="ps.InstructionLog"):
        assert ps.ScheduleTrace is ps.InstructionLog
    with pytest.warns(DeprecationWarning, match="probsched.schedule.InstructionLog"):
        from probsched.schedule import ScheduleTrace
    assert ScheduleTrace is ps.InstructionLog
    with pytest.warns(DeprecationWarning, match="probsched.schedule.instructions.InstructionLog"):
        from probsched.schedule.instruction_trace import ScheduleTrace as old_module_name
    assert old_module_name is ps.InstructionLog
    with pytest.warns(DeprecationWarning, match="probsched.schedule.instructions.BlockRV"):
        from probsched.schedule.instruction_trace import BlockRV
    assert BlockRV is ps.BlockRV
    with pytest.warns(DeprecationWarning, match=r"Schedule\.instructions"):
        assert sch.trace is sch.instructions
    rec = TuningRecord.from_result(sch.func, sch, MeasureResult((1e-3,)))
    with pytest.warns(DeprecationWarning, match=r"TuningRecord\.instruction_log\(\)"):
        assert rec.trace() == rec.instruction_log() == sch.instructions
    best = BestSchedule(rec, flops=None)
    with pytest.warns(DeprecationWarning, match=r"BestSchedule\.instructions"):
        assert best.trace == best.instructions == sch.instructions
    with pytest.raises(AttributeError):
        ps.NoSuchThing  # noqa: B018  (the module __getattr__ only knows the old names)
