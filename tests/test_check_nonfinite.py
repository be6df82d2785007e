"""Outputs holding infinities and NaNs: equal infinities and NaNs in the same places match,
in the workloads' check (which the measurer and ``ps.compile`` both call) and end to end
through a causal attention mask (``jnp.where(mask, x, -jnp.inf)``)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jax
import jax.numpy as jnp

import probsched as ps
from probsched.workloads.workload import check_close

INF, NAN = np.inf, np.nan
SEQ = 72  # above the front end's folding limit (64 x 64): -inf stays a literal of the task


def _causal(n: int):
    i = jax.lax.broadcasted_iota(jnp.int32, (n, n), 0)
    j = jax.lax.broadcasted_iota(jnp.int32, (n, n), 1)
    return i >= j


def masked_scores(x):
    """The output itself holds -inf above the diagonal."""
    s = x @ x.T
    return jnp.where(_causal(s.shape[0]), s, -jnp.inf)


def causal_attention(x):
    """GPT-2's form: masked scores, then softmax (exp(-inf) = 0)."""
    return jax.nn.softmax(masked_scores(x), axis=-1)


X = np.random.default_rng(0).standard_normal((SEQ, 8)).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.5, -2.0, INF, -INF, NAN]), min_size=1, max_size=12), st.data())
def test_equal_non_finite_values_match_and_any_other_difference_fails(values, data):
    exp = np.array(values, np.float32)
    check_close("x", exp.copy(), exp, 1e-4, 1e-4)  # the same values, infinities and NaNs included
    k = data.draw(st.integers(0, exp.size - 1))
    other = data.draw(st.sampled_from([v for v in [0.5, -2.0, INF, -INF, NAN] if not (v == exp[k] or np.isnan(v) and np.isnan(exp[k]))]))
    got = exp.copy()
    got[k] = other
    with pytest.raises(AssertionError, match=r"1 of \d+ elements differ"):
        check_close("x", got, exp, 1e-4, 1e-4)


def test_the_message_names_the_worst_mismatch_not_a_matched_infinity():
    exp = np.array([-INF, 1.0, NAN], np.float32)
    with pytest.raises(AssertionError, match=r"1 of 3 .* index \(1,\): got 2, expected 1; max abs err 1,"):
        check_close("x", np.array([-INF, 2.0, NAN], np.float32), exp, 1e-4, 1e-4)


@pytest.mark.parametrize("fn", [masked_scores, causal_attention])
def test_a_causal_mask_model_compiles_and_matches_jax(fn):
    model = ps.compile(fn, X, candidates=2)
    want = np.asarray(jax.jit(fn)(X))
    assert (np.isneginf(want).any()) == (fn is masked_scores)
    np.testing.assert_allclose(model(X), want, rtol=1e-4, atol=1e-4)  # equal infinities are equal here too


def test_the_measurer_accepts_a_kernel_whose_output_holds_minus_infinity():
    (task,) = ps.from_jax(masked_scores, X).tasks()
    with ps.measure.LocalMeasurer(workers=1, repeat=1, min_repeat_ms=1.0) as m:
        good, wrong = m.measure(task.workload, [ps.Schedule(task.func)] * 2, _faults={1: "wrong"})
    assert good.ok, good.error_message
    assert wrong.error_kind == ps.measure.WRONG_RESULT  # a wrong kernel still fails beside the infinities


def test_the_measurers_fast_screen_passes_no_number_where_an_infinity_is_expected():
    from probsched.measure.reference import Reference

    (task,) = ps.from_jax(masked_scores, X).tasks()
    out = task.func.output_buffers()[0].name
    expected = task.workload.reference(X)[0]
    ref = Reference({"x0": X}, {out: expected}, 1e-4, 1e-4)
    ref.check(task.func, {out: expected.copy()})  # the same infinities: passes
    one = np.where(np.isinf(expected), np.float32(0.0), expected)
    one[0, 1] = -np.inf  # the only infinity: no matched one sends the screen to the exact check
    got = one.copy()
    got[0, 1] = 1.0  # a number where -inf belongs
    with pytest.raises(AssertionError, match=r"got 1, expected -inf"):
        Reference({"x0": X}, {out: one}, 1e-4, 1e-4).check(task.func, {out: got})
    got = expected.copy()
    got[0, 0] = np.nan
    with pytest.raises(AssertionError, match=r"got nan"):
        ref.check(task.func, {out: got})
