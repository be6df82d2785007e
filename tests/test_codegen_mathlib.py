"""The vectorizable float32 math of generated kernels (probsched.codegen.mathlib)."""

import numpy as np
import pytest
from numba import njit

import probsched as ps
from probsched.codegen import mathlib


def _looped(fn):
    @njit
    def run(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])

    def exp(x):
        out = np.empty_like(x)
        run(x, out)
        return out

    exp.loop = run  # the compiled loop, for its assembly
    return exp


# Both variants are correct on every CPU (only their speed depends on it), so both are tested.
VARIANTS = {"scalef": _looped(mathlib.exp_f32_scalef), "bits": _looped(mathlib.exp_f32_bits)}


@pytest.fixture(params=sorted(VARIANTS))
def _exp(request):
    return VARIANTS[request.param]


def test_exp_f32_is_as_accurate_as_numpy_over_the_normal_range(_exp):
    x = np.linspace(-87.0, 88.7, 400_001, dtype=np.float32)
    ref = np.exp(x.astype(np.float64))
    ours = np.max(np.abs(_exp(x) - ref) / ref)
    theirs = np.max(np.abs(np.exp(x).astype(np.float64) - ref) / ref)
    assert ours <= max(theirs, 2e-7), (ours, theirs)


def test_the_variants_agree_bit_for_bit():
    x = np.concatenate([np.linspace(-110.0, 90.0, 200_001, dtype=np.float32), [np.nan, np.inf, -np.inf, 3e38, -3e38]])
    x = x.astype(np.float32)
    np.testing.assert_array_equal(VARIANTS["scalef"](x), VARIANTS["bits"](x))


def test_kernels_use_the_scalef_variant_only_where_ldexp_vectorizes():
    expected = mathlib.exp_f32_scalef if mathlib.vector_ldexp() else mathlib.exp_f32_bits
    assert mathlib.FUNCTIONS[("exp", "float32")] is mathlib.exp_f32 is expected
    if mathlib.vector_ldexp():  # the reason to prefer it: one vscalefps, no call per element
        loop = VARIANTS["scalef"].loop
        asm = loop.inspect_asm(loop.signatures[0])
        assert "vscalefps" in asm and "ldexp" not in asm


def test_exp_f32_edge_cases_follow_ieee_exp(_exp):
    x = np.array([np.nan, np.inf, -np.inf, 88.72, 88.73, 1000.0, -87.5, -103.0, -110.0, 0.0, -0.0], np.float32)
    with np.errstate(over="ignore", under="ignore"):
        ref = np.exp(x.astype(np.float64)).astype(np.float32)
    got = _exp(x)
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:3], [np.inf, 0.0])
    np.testing.assert_allclose(got[3], ref[3], rtol=2e-7)
    np.testing.assert_array_equal(got[4:6], [np.inf, np.inf])
    # below exp(-87), the bottom of the normal range, results are flushed to 0 (no denormals)
    np.testing.assert_array_equal(got[6:9], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(got[9:], [1.0, 1.0])


def test_generated_softmax_calls_the_vectorizable_exp_and_matches_the_reference():
    from probsched.workloads.norm import softmax

    wl = softmax(4, 40)
    mod = ps.codegen.emit_module(wl.func)
    assert "_ps_exp_float32(" in mod.source and "np.exp(" not in mod.source
    kernel = ps.build(wl.func)
    inputs = wl.random_inputs(1)
    outputs = wl.empty_outputs()
    kernel(*inputs, *outputs)
    wl.check(outputs, wl.reference(*inputs))


@pytest.mark.parametrize("dtype", ["float64"])
def test_other_dtypes_keep_numpy_exp(dtype):
    from probsched.codegen.exprs import ExprWriter
    from probsched.ir.expr import Var, exp

    w = ExprWriter(None, helper=lambda hint, fn: "_ps_" + hint)
    assert w.src(exp(Var("x", dtype))) == "np.exp(x)"
    assert w.src(exp(Var("x", "float32"))) == "_ps_exp_float32(x)"
