"""bfloat16 micro-kernels (native vdpbf16ps and emulated), their tensorize matching, and
the design space that tiles bf16 matmuls and convolutions around them (and int8 ones: the
trace tests cover both reduced precisions)."""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import probsched as ps
import probsched.workloads as wl
from handlers import condition, seed, trace
from probsched.intrinsics.disk_cache import load_module
from probsched.intrinsics.matmul_bf16 import matmul_bf16_source, native_available
from probsched.ir.interpreter import evaluate
from probsched.schedule.layout import LAYOUT_FREE
from probsched.space.intrin_tiling import MultiLevelTilingWithIntrin, int8_weights, matmul_roles

BF16 = ml_dtypes.bfloat16
PATHS = [pytest.param(True, marks=pytest.mark.skipif(not native_available(), reason="no avx512_bf16")), False]


def kernel(m, n, native, zero_start=False):
    name = f"test_bf16_{m}x{n}{'_zero' if zero_start else ''}{'' if native else '_emulated'}"
    return load_module(name, matmul_bf16_source(m, n, zero_start, native)).kernel


def bf16(rng, size):
    return rng.uniform(-1, 1, size).astype(BF16)


@pytest.mark.parametrize("native", PATHS)
@pytest.mark.parametrize("zero_start", [False, True])
@pytest.mark.parametrize("n", [32, 24])  # 24: a 16-lane and an 8-lane vector per row
def test_kernel_with_strided_operands(native, zero_start, n):
    m = 4
    mk = kernel(m, n, native, zero_start)
    rng = np.random.default_rng(0)
    for P, a_si, a_sp, b_sp, c_si, pad in [(1, 2, 2 * m, 2 * n, n, 0), (7, 19, 2, 2 * n + 6, n + 5, 2), (3, 6, 2 * m + 2, 4 * n, 2 * n, 1)]:
        A = bf16(rng, pad + (m - 1) * a_si + (P - 1) * a_sp + 2)
        B = bf16(rng, pad + (P - 1) * b_sp + 2 * n)
        C = rng.uniform(-1, 1, pad + (m - 1) * c_si + n).astype(np.float32)
        a = np.array([[A[pad + r * a_si + p * a_sp + t] for p in range(P) for t in (0, 1)] for r in range(m)], np.float64)
        b = np.array([[B[pad + p * b_sp + 2 * j + t] for j in range(n)] for p in range(P) for t in (0, 1)], np.float64)
        c0 = np.array([[C[pad + r * c_si + j] for j in range(n)] for r in range(m)], np.float64)
        before = C.copy()
        mk(C, pad, c_si, 1, A.view(np.uint16), pad, a_si, a_sp, 1, B.view(np.uint16), pad, 2, b_sp, 1, P)
        got = np.array([[C[pad + r * c_si + j] for j in range(n)] for r in range(m)])
        np.testing.assert_allclose(got, (0 if zero_start else c0) + a @ b, rtol=1e-5, atol=1e-5)
        mask = np.ones(C.shape, bool)
        for r in range(m):
            mask[pad + r * c_si : pad + r * c_si + n] = False
        assert np.array_equal(C[mask], before[mask]), "the kernel wrote outside its tile"


@pytest.mark.skipif(not native_available(), reason="no avx512_bf16")
def test_native_and_emulated_dot_products_agree_bit_for_bit():
    rng = np.random.default_rng(1)
    P = 64
    A, B = bf16(rng, 6 * 2 * P), (bf16(rng, 2 * P * 32) * BF16(3.0)).astype(BF16)
    C0 = rng.uniform(-8, 8, 6 * 32).astype(np.float32)
    for n in (32, 24):
        results = []
        for native in (True, False):
            C = C0[: 6 * n].copy()
            kernel(6, n, native)(C, 0, n, 1, A.view(np.uint16), 0, 2 * P, 2, 1, B.view(np.uint16), 0, 2, 2 * n, 1, P)
            results.append(C)
        assert np.array_equal(*results), n


@pytest.mark.parametrize("precision, step", [("bf16", 2), ("int8", 4)])
def test_tensorize_refuses_a_b_not_stored_in_pairs(precision, step):
    w = wl.matmul(8, 16, 8, batch=None).with_precision(precision)
    sch = ps.Schedule(w.func)
    i, j, k = sch.get_loops(sch.get_block("Z"))
    k0, t = sch.split(k, [None, step])
    sch.reorder(i, j, k0, t)  # a 8x16 tile: i, j, pairs (quads), t
    sch.decompose_reduction(sch.get_block("Z"), i)
    match = f"Y has a step of 1 along loop j; intrinsic needs {step} .is the operand laid out or packed"
    with pytest.raises(ps.ScheduleError, match=match):
        sch.tensorize(i, f"matmul_{precision}_8x16")


# reduced shapes: N a multiple of 8 (24: MobileNet's channels, a 16- and an 8-lane vector),
# reductions of whole pairs and quads (the int8 kernels' tests share them), M not a
# multiple of the kernel heights
FRIENDLY = {
    "GMM": lambda: wl.matmul(11, 32, 12, batch=2),
    "C2D": lambda: wl.conv2d_nhwc(1, 6, 7, 4, 16, 3, 2, 1),
    "GRP": lambda: wl.conv2d_nhwc(1, 6, 7, 8, 64, 3, 2, 1, dilation=1, groups=2),
    "P24": lambda: wl.conv2d_nhwc(1, 5, 7, 8, 24, 1, 1, 0),
}
_DATA: dict = {}


def data(name, layout_free=False, precision="bf16"):
    key = (name, layout_free, precision)
    if key not in _DATA:
        w = FRIENDLY[name]().with_precision(precision)
        if layout_free:  # a network's weight: the layout rewrite may store it in pairs once
            w = replace(w, func=w.func.replace(attrs={LAYOUT_FREE: (w.func.params[1].name,)}))
        x = w.random_inputs(np.random.default_rng(5))
        _DATA[key] = (w, x, w.reference(*x))
    return _DATA[key]


def draw(w, s, decisions=None):
    sch = ps.Schedule(w.func)
    program = seed(ps.space.default(), s)
    if decisions:
        program = condition(program, decisions)
    return sch, trace(program).get_trace(sch)


def tensorized(sch):
    return [b.annotation("tensorize") for b in sch.mod.blocks() if b.annotation("tensorize")]


def test_roles_of_a_bf16_block():
    sch = ps.Schedule(data("C2D")[0].func)
    r = matmul_roles(sch, "conv2d")
    assert (r.m, r.n, r.k, r.a, r.b, r.precision, r.b_k_dim, r.a_k_contiguous) == (
        "v_w", "v_co", "v_rc", "padded", "weight", "bfloat16", 2, True,
    )


# the kernel families each reduced precision is tiled around (the int8 ones: test_intrinsics_int8.py);
# int8r weights (reduced range) take the vpmaddubsw kernels where the CPU has no VNNI, the int8 ones elsewhere
_INT8 = ("matmul_int8_", "matmul_int8amx_")
FAMILY = {"bf16": ("matmul_bf16",), "int8": _INT8,
          "int8r": _INT8 if int8_weights(ps.Target.host(), "int8r") == "int8" else ("matmul_int8r_",)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(FRIENDLY)), layout_free=st.booleans(), s=st.integers(0, 10**6),
       precision=st.sampled_from(sorted(FAMILY)))
def test_tensorized_traces_match_the_reference_interpreted(name, layout_free, s, precision):
    w, x, expected = data(name, layout_free, precision)
    sch, tr = draw(w, s)
    kernels = tensorized(sch)
    assert kernels and all(k.startswith(FAMILY[precision]) for k in kernels), tr
    stored = ps.schedule.layout.lay_out_inputs(sch.mod, x)
    w.check(evaluate(sch.mod, *stored), expected)


@pytest.mark.parametrize("precision", sorted(FAMILY))
@pytest.mark.parametrize("name, layout_free", [("GMM", False), ("C2D", True), ("GRP", False), ("P24", True)])
def test_compiled_traces_match_the_reference(name, layout_free, precision):
    w, x, expected = data(name, layout_free, precision)
    sch, tr = draw(w, 0)
    assert tensorized(sch)
    if name == "P24":  # 24 output channels: a kernel of 8 or 24 columns (an 8-lane vector)
        assert all(k.endswith(("x8", "x24")) for k in tensorized(sch)), tensorized(sch)
    assert ("conv2d/weight_layout" in tr) == layout_free
    w.check(ps.build(sch).run(*x), expected)


def test_b_is_packed_in_pairs_or_laid_out_in_pairs_once():
    w, x, expected = data("GMM")
    sch, tr = draw(w, 0)
    (local,) = [b for b in sch.mod.allocs if b.name.startswith("Y_local")]
    assert local.shape[-1] == 2 and "Z/pack" not in tr  # packing is not a choice: the kernel reads pairs
    again = ps.Schedule(w.func)  # the packed layout is an instruction like any other: it replays
    ps.InstructionLog.from_json(sch.instructions.to_json()).apply(again)
    assert again.mod == sch.mod
    w, x, expected = data("C2D", layout_free=True)
    sch, tr = draw(w, 1, {"conv2d/weight_layout": True})
    lay = ps.schedule.layout.layouts_of(sch.mod)["weight"]
    assert lay.physical_shape[-1] == 2 and not [b for b in sch.mod.allocs if b.name.startswith("weight_local")]
    w.check(ps.build(sch).run(*x), expected)


@pytest.mark.parametrize("precision, k", [("bf16", 7), ("int8", 6)])
def test_odd_reductions_and_strided_a_are_left_to_the_other_rules(precision, k):
    # reductions not of whole pairs (quads): 3 and k terms
    for w in (wl.small("C2D", precision), wl.matmul(8, 16, k, batch=None).with_precision(precision)):
        sch = ps.Schedule(w.func)
        block = w.func.blocks()[-1].name
        before = sch.mod
        MultiLevelTilingWithIntrin()(sch, sch.get_block(block))
        assert sch.mod is before
        sch, _ = draw(w, 0)  # the default space still schedules it, in float32 (int32) arithmetic
        x = w.random_inputs(np.random.default_rng(0))
        w.check(evaluate(sch.mod, *x), w.reference(*x))


@pytest.mark.parametrize("bf16_isa", [True, False])
def test_both_kernel_families_are_offered_only_where_they_differ(bf16_isa):
    host = ps.Target.host()
    isa = tuple(f for f in host.isa if f not in ("avx512_bf16", "amx_bf16")) + (("avx512_bf16",) if bf16_isa else ())
    target = replace(host, isa=tuple(sorted(isa)))
    w, _, _ = data("GMM")
    sch = ps.Schedule(w.func)
    tr = trace(seed(lambda s: MultiLevelTilingWithIntrin(target=target)(s, s.get_block("Z")), 0)).get_trace(sch)
    families = {c.rsplit("_", 1)[0] for c in tr["Z/intrin"].dist.support()}
    assert families == ({"matmul_bf16", "matmul_bf16fma"} if bf16_isa else {"matmul_bf16"})
