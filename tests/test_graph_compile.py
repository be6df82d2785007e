"""ps.compile: whole networks built task by task compute what jax.jit computes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jax

import probsched as ps
from probsched.graph.memory import plan_memory

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
    with pytest.raises(ps.FrontEndError, match=r"argument 0 has shape \(1, 8, 32\)"):
        model(np.ones((1, 8, 32), np.float32))
    with pytest.raises(ps.FrontEndError, match="argument 0 has shape .* float64"):
        model(args[0].astype(np.float64))
    with pytest.raises(ps.FrontEndError, match="expected 1 arguments, got 0"):
        model()


def test_pytree_outputs_come_back_as_the_function_returns_them():
    w = np.eye(4, dtype=np.float32)
    fn = lambda x: {"y": x @ w, "z": (x * 2.0, jax.nn.relu(x))}  # noqa: E731
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    out = ps.compile(fn, x, candidates=2)(x)
    assert sorted(out) == ["y", "z"] and isinstance(out["z"], tuple)
    np.testing.assert_allclose(out["z"][1], np.maximum(x, 0))


def test_function_without_example_arguments_is_refused():
    with pytest.raises(ps.FrontEndError, match="needs example arguments"):
        ps.compile(lambda x: x)


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
