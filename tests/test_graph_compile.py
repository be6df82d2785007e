"""ps.compile: whole networks built task by task compute what jax.jit computes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jax

import probsched as ps
from probsched.runtime.memory import plan_memory

TINY = ["resnet_tiny", "mobilenet_tiny", "bert_tiny"]


@pytest.fixture(scope="module")
def compiled():
    """The tiny models compiled once for the module (8 predicted candidates per task)."""
    out = {}
    for name in TINY:
        fn, args = ps.models.get(name)
        out[name] = (fn, args, ps.compile(fn, *args, candidates=8))
    return out


@pytest.mark.parametrize("name", TINY)
def test_tiny_model_matches_jax_jit_on_new_inputs(compiled, name):
    fn, args, model = compiled[name]
    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal(args[0].shape).astype(np.float32)
        np.testing.assert_allclose(model(x), np.asarray(jax.jit(fn)(x)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["bert_tiny", "resnet_tiny"])
def test_calls_from_several_threads_are_each_right(compiled, name):
    # a server calls one model from several threads: every result must be its own input's
    import threading

    fn, args, model = compiled[name]
    inputs = [np.random.default_rng(s).standard_normal(args[0].shape).astype(np.float32) for s in range(4)]
    expected = [model(x) for x in inputs]  # this thread's, one call at a time
    wrong, errors = [], []

    def serve(worker: int) -> None:
        try:
            for i in range(150):
                k = (i + worker) % len(inputs)
                if not np.array_equal(model(inputs[k]), expected[k]):
                    wrong.append((worker, i))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not wrong, (errors[:1], len(wrong))


@pytest.mark.parametrize("name", ["bert_tiny", "resnet_tiny"])
def test_the_kernels_of_a_call_share_one_scratch_buffer_and_compute_what_their_own_would(compiled, name, monkeypatch):
    # the steps run one after another and their intermediates are dead when they return:
    # one buffer serves them all (kept in cache; each kernel's own was cold in every call)
    import probsched.runtime.model as runtime_model

    fn, args, model = compiled[name]
    def scratch(m):  # the intermediates the bound kernels of this thread's call write, one per task
        out = {}
        for step, run in zip(m.steps, m._context().runs):
            n = len(step.kernel.params)
            out.setdefault(id(step.kernel), run._flat[n : n + len(step.kernel.scratch_specs)])
        return [s for s in out.values() if s]

    mine = scratch(model)
    assert len(mine) >= 2 and np.shares_memory(mine[0][0], mine[1][0])
    monkeypatch.setattr(runtime_model, "SHARED_SCRATCH", False)
    own = runtime_model.CompiledModel(model.interface, model.steps, model.choices)
    theirs = scratch(own)
    assert not np.shares_memory(theirs[0][0], theirs[1][0])
    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal(args[0].shape).astype(np.float32)
        np.testing.assert_array_equal(model(x), own(x))


@pytest.mark.parametrize("name", ["bert_tiny", "resnet_tiny"])
def test_a_bound_model_reads_and_writes_the_callers_arrays(compiled, name):
    fn, args, model = compiled[name]
    x = np.ascontiguousarray(args[0]).copy()
    y = np.empty_like(np.asarray(model(x)))
    run = model.bind(x, outputs=[y])
    run()
    np.testing.assert_array_equal(y, model(x))
    x[...] = np.random.default_rng(3).standard_normal(x.shape)  # a new request, written in place
    run()
    np.testing.assert_array_equal(y, model(x))
    assert x.size >= y.size
    with pytest.raises(ps.KernelArgumentError, match="shares memory"):  # an output over the input
        model.bind(x, outputs=[x.reshape(-1)[: y.size].reshape(y.shape)])


def test_calls_do_not_leak_state(compiled):
    fn, args, model = compiled["bert_tiny"]
    a = model(*args)
    _ = model(np.zeros_like(args[0]))
    np.testing.assert_array_equal(model(*args), a)


def test_every_task_got_a_predicted_schedule_and_the_arena_shares_memory(compiled):
    _, _, model = compiled["resnet_tiny"]
    assert {c.source for c in model.choices} == {"predicted"}
    assert len(model.choices) == len(model.graph.tasks())
    assert 0 < model.peak_bytes < model.plan.total_bytes
    assert "| task | weight |" in model.summary()


def test_wrong_call_is_one_clear_error(compiled):
    _, args, model = compiled["bert_tiny"]
    with pytest.raises(ps.KernelArgumentError, match=r"argument 0 \(input0\) has shape \(1, 8, 32\)"):
        model(np.ones((1, 8, 32), np.float32))
    with pytest.raises(ps.KernelArgumentError, match="argument 0 .* has shape .* float64"):
        model(args[0].astype(np.float64))
    with pytest.raises(ps.KernelArgumentError, match="expected 1 arguments .*, got 0"):
        model()


def test_pytree_outputs_come_back_as_the_function_returns_them():
    w = np.eye(4, dtype=np.float32)
    fn = lambda x: {"y": x @ w, "z": (x * 2.0, jax.nn.relu(x))}  # noqa: E731
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    out = ps.compile(fn, x, candidates=2)(x)
    assert sorted(out) == ["y", "z"] and isinstance(out["z"], tuple)
    np.testing.assert_allclose(out["z"][1], np.maximum(x, 0))


def test_function_called_without_its_arguments_is_one_front_end_error():
    with pytest.raises(ps.FrontEndError, match="missing 1 required positional argument: 'x'"):
        ps.compile(lambda x: x)


def test_function_without_inputs_compiles_as_tune_model_takes_it():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    model = ps.compile(lambda: jax.nn.relu(w - 5.0) * 2.0, candidates=2)
    np.testing.assert_allclose(model(), np.maximum(w - 5.0, 0) * 2.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 8), st.integers(0, 8)), min_size=1, max_size=25))
def test_memory_plan_never_overlaps_live_values(values):
    sizes = {i: s for i, (s, _, _) in enumerate(values)}
    lifetimes = {i: (min(a, b), max(a, b)) for i, (_, a, b) in enumerate(values)}
    plan = plan_memory(sizes, lifetimes)
    for i in sizes:
        assert plan.offsets[i] % 64 == 0
        for j in sizes:
            if i < j and not (lifetimes[i][1] < lifetimes[j][0] or lifetimes[j][1] < lifetimes[i][0]):
                a, b = plan.offsets[i], plan.offsets[j]
                assert a + sizes[i] <= b or b + sizes[j] <= a
    assert plan.peak_bytes <= plan.total_bytes


# the README's three networks: a rotation each (tests/conftest.py), so CI runs all three
@pytest.mark.parametrize("name", [
    pytest.param("resnet50", marks=pytest.mark.slow(rotation=0)),
    pytest.param("mobilenet_v2", marks=pytest.mark.slow(rotation=1)),
    pytest.param("bert_base", marks=pytest.mark.slow(rotation=2)),
])
def test_full_model_matches_jax_jit(name):
    fn, args = ps.models.get(name)
    model = ps.compile(fn, *args, candidates=16)
    np.testing.assert_allclose(model(*args), np.asarray(jax.jit(fn)(*args)), rtol=2e-3, atol=2e-3)
