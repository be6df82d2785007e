"""AMX int8 tile kernels (``tdpbusd``): the unit asked about apart from bf16, the kernels
against numpy int32 where AMX int8 is usable, and the design space that offers them beside
the VNNI ones (the bf16 tile kernels: test_intrinsics_amx.py)."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import probsched as ps
import probsched.workloads as wl
from handlers import condition, seed, trace
from probsched.intrinsics import amx
from probsched.ir.interpreter import evaluate
from probsched.measure import LocalMeasurer
from probsched.schedule.layout import LAYOUT_FREE, lay_out_inputs
from probsched.space.intrin_tiling import MultiLevelTilingWithIntrin, kernel_candidates

import test_intrinsics_amx as amx_tests  # the bf16 tile tests: their helpers and data
from test_intrinsics_amx import AMX_FLAGS, fresh_permission, host_with  # noqa: F401 (a fixture)

needs_amx_int8 = pytest.mark.skipif(not amx.usable("int8"), reason=f"AMX int8 not usable here: {amx.unavailable('int8')}")
TILES = {"matmul_int8amx_32x32", "matmul_int8amx_32x16"}


def test_int8_tiles_are_asked_about_apart_from_bf16(monkeypatch, caplog, fresh_permission):
    bf16_only = host_with(("amx_tile", "amx_bf16"))
    monkeypatch.setattr(ps.Target, "host", staticmethod(lambda: bf16_only))
    monkeypatch.setattr("probsched.intrinsics.simd.compiles_for", lambda feature: True)
    monkeypatch.setattr(amx, "_request_permission", lambda: None)
    with caplog.at_level(logging.INFO, logger="probsched.intrinsics"):
        assert amx.usable("bf16") and amx.usable("tile")
        assert amx.unavailable("int8") == "the CPU has no amx_int8" and not amx.usable("int8")
    assert [r.message for r in caplog.records] == ["AMX int8 kernels not offered: the CPU has no amx_int8"]
    with pytest.raises(ps.ProbschedError, match="the CPU has no amx_int8"):
        ps.intrinsics.get("matmul_int8amx_32x32").meta["variant"](5)()  # no int8 kernel loads without it
    with pytest.raises(ValueError, match="no AMX unit 'fp16'"):
        amx.unavailable("fp16")


def test_int8_tiles_where_numba_compiles_without_amx_int8(monkeypatch, fresh_permission):
    monkeypatch.setattr(ps.Target, "host", staticmethod(lambda: host_with(AMX_FLAGS)))
    monkeypatch.setattr("probsched.intrinsics.simd.compiles_for", lambda feature: feature != "amx-int8")
    monkeypatch.setattr(amx, "_request_permission", lambda: None)
    assert amx.unavailable("int8") == "numba compiles without amx-int8 (NUMBA_CPU_FEATURES)" and amx.usable("bf16")


def test_kernel_candidates_offer_int8_tiles_only_when_asked():
    vector = kernel_candidates(64, 16, 28, "int8")
    assert vector and not [c for c in vector if "amx" in c]
    assert [c for c in kernel_candidates(64, 16, 28, "int8", amx=True) if "amx" not in c] == vector
    assert TILES <= set(kernel_candidates(64, 8, 12, "int8", amx=True))  # tiles: no vector register budget
    assert [c for c in kernel_candidates(48, 16, 28, "int8", amx=True) if "amx" in c] == ["matmul_int8amx_32x16"]
    assert not TILES & set(kernel_candidates(64, 16, 28, "bfloat16", amx=True))
    meta = ps.intrinsics.get("matmul_int8amx_32x32").meta
    assert (meta["precision"], meta["dot"], meta["unit"], meta["panel_multiple"]) == ("int8", "tdpbusd", "amx", 16)


# ------------------------------------------------------------------ the kernels themselves


def kernel(rows, n, zero_start):
    meta = ps.intrinsics.get(f"matmul_int8amx_32x{n}").meta
    return (meta["zero_start_variant"](rows) if zero_start else meta["variant"](rows))()


def operands(rng, rows, n, Q, a_si, b_sq, c_si, pad, extremes):
    """Flat A (u8), B (s8), C (s32) with the given strides, and their logical int64 matrices;
    with ``extremes`` every product is 255 x -128 (the largest magnitude a quad sums)."""
    A = rng.integers(0, 256, pad + (rows - 1) * a_si + 4 * Q).astype(np.uint8)
    B = rng.integers(-128, 128, pad + (Q - 1) * b_sq + 4 * n).astype(np.int8)
    if extremes:
        A[:], B[:] = 255, -128
    C = rng.integers(-2**20, 2**20, pad + (rows - 1) * c_si + n).astype(np.int32)
    a = np.array([A[pad + r * a_si : pad + r * a_si + 4 * Q] for r in range(rows)], np.int64)
    b = np.array([[B[pad + q * b_sq + 4 * j + t] for j in range(n)] for q in range(Q) for t in range(4)], np.int64)
    return A, B, C, a, b


@needs_amx_int8
@pytest.mark.parametrize("rows, n", [(32, 32), (17, 32), (32, 16), (1, 16)])
@pytest.mark.parametrize("zero_start", [False, True])
def test_kernel_with_strided_operands_partial_rows_and_panels(rows, n, zero_start):
    mk = kernel(rows, n, zero_start)
    rng = np.random.default_rng(rows + n)
    # Q: one step of extremes, steps and quads left, fewer quads than a step; strides wider than a row, offsets
    for Q, a_si, b_sq, c_si, pad, extremes in [
        (16, 64, 4 * n, n, 0, True), (37, 160, 4 * n + 12, n + 5, 3, False), (5, 20, 4 * n, 2 * n, 1, False),
        (21, 84, 4 * n, n, 0, True),
    ]:
        A, B, C, a, b = operands(rng, rows, n, Q, a_si, b_sq, c_si, pad, extremes)
        tile = np.add.outer(np.arange(rows) * c_si, np.arange(n)) + pad
        expected = (0 if zero_start else C[tile].astype(np.int64)) + a @ b
        before = C.copy()
        mk(C, pad, c_si, 1, A, pad, a_si, 4, 1, B, pad, 4, b_sq, 1, Q)
        assert np.array_equal(C[tile], expected), (Q, extremes)
        outside = np.ones(C.shape, bool)
        outside[tile] = False
        assert np.array_equal(C[outside], before[outside]), "the kernel wrote outside its tile"


@needs_amx_int8
def test_tiles_and_vnni_agree_bit_for_bit():
    # int32 sums are exact (wrapping alike): the tiles and vpdpbusd give the same bits
    rng = np.random.default_rng(3)
    Q = 48
    A = np.concatenate([np.full(16 * 4 * Q, 255, np.uint8), rng.integers(0, 256, 16 * 4 * Q).astype(np.uint8)])
    B = np.concatenate([np.full(4 * Q * 16, -128, np.int8), rng.integers(-128, 128, 4 * Q * 16).astype(np.int8)])
    C0 = rng.integers(-2**30, 2**30, 32 * 32).astype(np.int32)
    results = []
    for name in ("matmul_int8amx_32x32", "matmul_int8_8x32"):
        C = C0.copy()
        step = ps.intrinsics.get(name).meta["M"]
        for r in range(0, 32, step):
            ps.intrinsics.get(name).kernel()(C, r * 32, 32, 1, A, r * 4 * Q, 4 * Q, 4, 1, B, 0, 4, 128, 1, Q)
        results.append(C)
    assert np.array_equal(*results)


# ------------------------------------------------------------------ the design space

# name -> (workload, the AMX kernel its N takes): a GMM with M not a multiple of 32 and a
# reduction not of whole steps (20 quads), one of less than a step, and convolutions
SHAPES = {
    "GMM": (lambda: wl.matmul(40, 32, 80), "matmul_int8amx_32x32"),
    "GMM_SHORT": (lambda: wl.matmul(11, 16, 24, batch=2), "matmul_int8amx_32x16"),
    "C2D": (lambda: wl.conv2d_nhwc(1, 2, 7, 64, 32, 3, 1, 1), "matmul_int8amx_32x32"),  # 576 = 144 quads
    "GRP": (lambda: wl.conv2d_nhwc(1, 6, 7, 8, 64, 3, 2, 1, groups=2), "matmul_int8amx_32x32"),
}


def data(name, layout_free=False):
    return amx_tests.data(name, layout_free, "int8", SHAPES)


def amx_space(name, w, intrin=True):
    """The default space with the AMX unit forced (and the kernel of shape ``name``)."""
    block = w.func.blocks()[-1].name
    return ps.space.fixing(ps.space.default(), {f"{block}/unit": "amx", **({f"{block}/intrin": SHAPES[name][1]} if intrin else {})})


@pytest.fixture
def amx_offered(monkeypatch):
    """The design space as on a CPU with AMX, wherever the tests run (interpreted, no tile runs)."""
    monkeypatch.setattr(ps.Target, "host", staticmethod(lambda: host_with(AMX_FLAGS)))
    monkeypatch.setattr(amx, "usable", lambda unit="bf16": True)


@pytest.mark.parametrize("usable_units, flags", [
    (("bf16",), AMX_FLAGS),  # Linux or numba says no to int8 only
    (("bf16", "int8"), ("amx_tile", "amx_bf16")),  # the target has no amx_int8
    (("bf16", "int8"), AMX_FLAGS),
])
def test_the_rule_offers_int8_tiles_only_where_amx_int8_is_usable(monkeypatch, usable_units, flags):
    monkeypatch.setattr(amx, "usable", lambda unit="bf16": unit in usable_units)
    w, _, _ = data("GMM")
    rule = MultiLevelTilingWithIntrin(target=host_with(flags))

    def draw(decisions):
        return trace(seed(condition(lambda s: rule(s, s.get_block("Z")), decisions), 0)).get_trace(ps.Schedule(w.func))

    tr = draw({})
    if "int8" not in usable_units or "amx_int8" not in flags:
        assert "Z/unit" not in tr and not [k for k in tr["Z/intrin"].dist.support() if "amx" in k]
        return
    assert tr["Z/unit"].infer.get("tag") == "algorithm"
    assert set(draw({"Z/unit": "amx"})["Z/intrin"].dist.support()) == TILES
    vnni = set(draw({"Z/unit": "vector"})["Z/intrin"].dist.support())
    assert vnni and all(k.startswith("matmul_int8_") for k in vnni)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(SHAPES)), layout_free=st.booleans(), s=st.integers(0, 10**6))
def test_amx_traces_match_the_unscheduled_program_interpreted(amx_offered, name, layout_free, s):
    w, x, expected = data(name, layout_free)
    sch = ps.Schedule(w.func)
    tr = trace(seed(amx_space(name, w, intrin=False), s)).get_trace(sch)
    kernels = [b.annotation("tensorize") for b in sch.mod.blocks() if b.annotation("tensorize")]
    assert kernels and all(k in TILES for k in kernels), tr
    panel = [k for k in tr.choices() if k.endswith("/panel")]
    assert all(tr[k].value % 16 == 0 for k in panel)  # whole steps where the reduction has any
    w.check(evaluate(sch.mod, *lay_out_inputs(sch.mod, x)), expected)


@needs_amx_int8
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(SHAPES)), layout_free=st.booleans(), s=st.integers(0, 10**6))
def test_compiled_amx_traces_match_the_unscheduled_program(name, layout_free, s):
    w, x, expected = data(name, layout_free)
    sch = ps.Schedule(w.func)
    trace(seed(amx_space(name, w), s)).get_trace(sch)
    kernel = ps.build(sch)
    assert "matmul_int8amx" in kernel.source
    w.check(kernel.run(*x), expected)


@needs_amx_int8
def test_a_tuned_schedule_on_the_tiles_computes_what_the_program_does(tmp_path):
    w, x, expected = data("GMM")
    with LocalMeasurer(workers=1, repeat=1, min_repeat_ms=1) as measurer:
        result = ps.tune(w, trials=3, space=amx_space("GMM", w, intrin=False), strategy="replay", cost_model=None,
                         database=str(tmp_path / "t.db"), measurer=measurer, seed=0, batch_size=3, retime_top=0)
    assert len(result.history) == 3 and not [t.error for t in result.history if t.error]
    assert "matmul_int8amx" in result.kernel.source
    got = result.kernel.run(*x)
    w.check(got, expected)
    w.check(got, evaluate(w.func, *x))  # the unscheduled program, interpreted
