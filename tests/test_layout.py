"""Weights laid out for the schedule (transform_layout, the design space's weight_layout
decision): the index map, the primitive's checks, replay, the database, the measurer's
check and compiled networks."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jax

import probsched as ps
from handlers import condition, seed, trace
from probsched.database import Database, TuningRecord
from probsched.ir.expr import Const, Var
from probsched.measure import MeasureResult
from probsched.schedule import InstructionLog
from probsched.ir.interpreter import evaluate
from probsched.schedule.layout import LAYOUT_FREE, LAYOUT_TRANSFORMS, Layout, layouts_of
from probsched.tuning.selection import best_schedule


def _value(e, env):
    """An integer index expression evaluated with Python ints."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[e.name]
    a, b = _value(e.a, env), _value(e.b, env)
    return {"add": a + b, "sub": a - b, "mul": a * b, "floordiv": a // b, "mod": a % b}[e.op]


@st.composite
def layouts(draw):
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=1, max_size=3)))
    splits = []
    for extent in shape:
        divisors = [d for d in range(1, extent + 1) if extent % d == 0]
        f = draw(st.sampled_from(divisors))
        splits.append((extent // f, f) if f not in (1, extent) else (extent,))
    order = draw(st.permutations(range(sum(len(s) for s in splits))))
    return Layout(shape, tuple(splits), tuple(order))


@settings(max_examples=60, deadline=None)
@given(lay=layouts())
def test_apply_and_index_agree(lay):
    a = np.arange(int(np.prod(lay.shape)), dtype=np.float32).reshape(lay.shape)
    stored = lay.apply(a)
    assert stored.shape == lay.physical_shape and stored.flags.c_contiguous
    names = [Var(f"i{d}") for d in range(len(lay.shape))]
    for point in itertools.product(*(range(s) for s in lay.shape)):
        env = {v.name: p for v, p in zip(names, point)}
        phys = tuple(_value(e, env) for e in lay.index(names))
        assert stored[phys] == a[point]
    assert Layout.from_json(lay.to_json()) == lay


@pytest.mark.parametrize(
    "shape, splits, order, message",
    [
        ((4, 6), ((2, 2), (6,)), (0, 1), "not a permutation"),
        ((4, 6), ((2, 3), (6,)), (0, 1, 2), "product differs"),
        ((4,), ((4,), (1,)), (0, 1), "2 splits for a rank-1"),
    ],
)
def test_bad_layouts_are_refused(shape, splits, order, message):
    with pytest.raises(ValueError, match=message):
        Layout(shape, splits, order)


def test_transform_layout_checks_its_buffer():
    w = ps.workloads.small("GMM")
    sch = ps.Schedule(w.func)
    with pytest.raises(ps.ScheduleError, match="Q is neither a parameter nor an allocation"):
        sch.transform_layout("Q", [[2]], [0])
    with pytest.raises(ps.ScheduleError, match="parameter Z is written"):
        sch.transform_layout("Z", [[2], [4], [6]], [0, 1, 2])
    with pytest.raises(ps.ScheduleError, match="product differs"):
        sch.transform_layout("Y", [[2], [5], [4]], [0, 1, 2])
    sch.transform_layout("Y", [[2], [5], [3, 2]], [0, 2, 1, 3])
    with pytest.raises(ps.ScheduleError, match="laid out already"):
        sch.transform_layout("Y", [[2], [5], [6]], [0, 1, 2])


def test_an_allocated_buffer_is_laid_out_where_it_is_written_and_read():
    w = ps.workloads.small("C2D")  # padded: (1, 8, 9, 3), written by one block, read by the conv
    sch = ps.Schedule(w.func)
    sch.transform_layout("padded", [[1], [4, 2], [9], [3]], [0, 1, 3, 4, 2])
    assert sch.mod.buffer("padded").shape == (1, 4, 9, 3, 2)
    assert "padded" not in dict(sch.mod.attr(LAYOUT_TRANSFORMS) or ())  # no caller passes it
    assert "padded[0, v_h // 2, v_w, v_c, v_h % 2] =" in str(sch.mod)
    x = w.random_inputs(np.random.default_rng(0))
    w.check(evaluate(sch.mod, *x), w.reference(*x))
    w.check(ps.build(sch).run(*x), w.reference(*x))


def _gmm_with_layout():
    w = ps.workloads.small("GMM")
    sch = ps.Schedule(w.func)
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    j0, j1 = sch.split(j, [None, 2])
    sch.reorder(b, j0, k, i, j1)
    lay = sch.tile_layout(z, "Y")
    sch.transform_layout("Y", lay.splits, lay.order)
    return w, sch, lay


def test_tile_layout_follows_the_loops_and_the_kernel_takes_logical_arrays():
    w, sch, lay = _gmm_with_layout()
    # Y[b, k, j] read in loops (b, j_0, k, i, j_1): stored as Y'[b, j_0, k, j_1]
    assert lay.physical_shape == (2, 3, 5, 2)
    assert sch.mod.buffer("Y").shape == (2, 3, 5, 2) and layouts_of(sch.mod)["Y"] == lay
    kernel = ps.build(sch)
    assert [b.shape for b in kernel.inputs] == [(2, 4, 5), (2, 5, 6)]
    x, y = w.random_inputs(0)
    w.check(kernel.run(x, y), w.reference(x, y))


def test_layouts_replay_from_the_instruction_log_and_the_database():
    w, sch, _ = _gmm_with_layout()
    again = InstructionLog.from_json(sch.instructions.to_json()).apply(ps.Schedule(w.func))
    assert again.mod == sch.mod
    assert "sch.transform_layout(buffer=\"Y\"" in str(sch.instructions)
    db = Database(":memory:")
    key = db.commit_workload(w)
    db.commit_record(TuningRecord.from_result(key, sch, MeasureResult((1e-6,))))
    assert best_schedule(db, w).schedule(w.func).mod == sch.mod


def test_the_measurer_checks_and_times_a_laid_out_candidate():
    w, sch, _ = _gmm_with_layout()
    with ps.measure.LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1) as m:
        (r,) = m.measure(w, [sch])
    assert r.ok, r.error_message


def _bert_task(index):
    fn, args = ps.models.get("bert_tiny")
    return ps.from_jax(fn, *args).tasks()[index]


def test_the_space_lays_out_only_layout_free_buffers():
    task = _bert_task(0)
    assert task.func.attr(LAYOUT_FREE) == ("w0", "w1")
    space = ps.space.default()
    tr = trace(seed(condition(space, {"matmul/weight_layout": True}), 0)).get_trace(sch := ps.Schedule(task.func))
    assert tr["matmul/weight_layout"].value is True and set(layouts_of(sch.mod)) == {"w0"}
    gmm = ps.Schedule(ps.workloads.small("GMM").func)  # a suite workload: no constant inputs
    assert not any(n.endswith("weight_layout") for n in trace(seed(space, 0)).get_trace(gmm))
    no_layout = ps.space.default(rewrite_layout=False)
    assert not any(n.endswith("weight_layout") for n in trace(seed(no_layout, 0)).get_trace(ps.Schedule(task.func)))


def test_a_weight_read_by_two_tasks_in_two_layouts_is_laid_out_for_each(tmp_path):
    w = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    fn = lambda x: jax.nn.relu(x @ w) @ w  # noqa: E731
    x = np.random.default_rng(1).standard_normal((12, 32)).astype(np.float32)
    graph = ps.from_jax(fn, x)
    tasks = graph.tasks()
    assert len(tasks) == 2
    db = Database(str(tmp_path / "l.db"))
    seen = []
    for t, s in zip(tasks, (0, 5)):
        for attempt in range(s, s + 50):
            sch = ps.Schedule(t.func)
            trace(seed(condition(ps.space.default(), {"matmul/weight_layout": True}), attempt)).get_trace(sch)
            lay = layouts_of(sch.mod)["w0"]
            if lay not in seen:
                break
        seen.append(lay)
        key = db.commit_workload(t.workload)
        db.commit_record(TuningRecord.from_result(key, sch, MeasureResult((1e-6,))))
    assert seen[0] != seen[1]
    model = ps.compile(graph, database=db)
    assert {c.source for c in model.choices} == {"database"}
    assert [layouts_of(model.kernels[t.key].func)["w0"] for t in tasks] == seen
    np.testing.assert_allclose(model(x), np.asarray(jax.jit(fn)(x)), rtol=1e-4, atol=1e-4)
    db.close()


def test_multi_level_tiling_stores_a_weight_no_micro_kernel_takes_in_the_order_its_tiles_read_it():
    # 10 columns are no whole vector on any CPU: no micro-kernel takes this classifier, and
    # MultiLevelTiling tiles it; its weight must still stream from memory in the network
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((24, 10)).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    x = rng.standard_normal((1, 24)).astype(np.float32)
    (task,) = ps.from_jax(lambda x: x @ w + b, x).tasks()
    assert "w0" in task.func.attr(LAYOUT_FREE)
    for s in range(3):
        sch = ps.Schedule(task.func)
        tr = trace(seed(ps.space.default(), s)).get_trace(sch)
        assert "matmul/intrin" not in tr and not any(n.endswith("weight_layout") for n in tr)  # not sampled: always
        lay = layouts_of(sch.mod)["w0"]
        assert lay.shape == (24, 10) and not lay.is_identity
        out = np.zeros((1, 10), np.float32)
        ps.build(sch.mod)(x, w, b.reshape(task.func.params[2].shape), out)
        np.testing.assert_allclose(out, x @ w + b, rtol=1e-5, atol=1e-5)
    plain = ps.Schedule(task.func)
    trace(seed(ps.space.default(rewrite_layout=False), 0)).get_trace(plain)
    assert layouts_of(plain.mod) == {}
