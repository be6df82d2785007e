"""AMX bf16 tile kernels: the process's permission, the kernels against numpy where AMX is
usable, and the design space that offers them only there."""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import probsched as ps
import probsched.workloads as wl
from handlers import condition, seed, trace
from probsched.intrinsics import amx
from probsched.ir.interpreter import evaluate
from probsched.schedule.layout import LAYOUT_FREE, lay_out_inputs
from probsched.space.intrin_tiling import MultiLevelTilingWithIntrin, kernel_candidates

BF16 = ml_dtypes.bfloat16
AMX_FLAGS = ("amx_bf16", "amx_int8", "amx_tile")
needs_amx = pytest.mark.skipif(not amx.usable(), reason=f"AMX not usable here: {amx.unavailable()}")


@pytest.fixture
def fresh_permission():
    """``amx.unavailable`` asked anew in the test, and the real answer back afterwards."""
    amx.unavailable.cache_clear()
    yield
    amx.unavailable.cache_clear()


HOST = ps.Target.host()


def host_with(flags):
    return replace(HOST, isa=tuple(sorted(set(f for f in HOST.isa if f not in AMX_FLAGS) | set(flags))))


NO_AMX, WITH_AMX = host_with(()), host_with(AMX_FLAGS)


def test_no_amx_on_the_cpu_is_one_info_line(monkeypatch, caplog, fresh_permission):
    monkeypatch.setattr(ps.Target, "host", staticmethod(lambda: NO_AMX))
    with caplog.at_level(logging.INFO, logger="probsched.intrinsics"):
        assert amx.unavailable() == "the CPU has no amx_tile amx_bf16" and not amx.usable()
        amx.unavailable()
    (record,) = caplog.records  # asked and said once
    assert record.levelno == logging.INFO and "AMX bf16 kernels not offered" in record.message
    with pytest.raises(ps.ProbschedError, match="AMX tile kernels cannot run in this process: the CPU has no amx_tile"):
        amx.require()


def test_a_refused_permission_is_one_warning(monkeypatch, caplog, fresh_permission):
    monkeypatch.setattr(ps.Target, "host", staticmethod(lambda: WITH_AMX))
    monkeypatch.setattr("probsched.intrinsics.simd.compiles_for", lambda feature: True)
    refused = "Linux refused the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM): Invalid argument)"
    monkeypatch.setattr(amx, "_request_permission", lambda: refused)
    with caplog.at_level(logging.INFO, logger="probsched.intrinsics"):
        assert not amx.usable() and amx.unavailable() == refused
    assert [(r.levelno, r.message) for r in caplog.records] == [(logging.WARNING, f"AMX bf16 kernels not offered: {refused}")]
    with pytest.raises(ps.ProbschedError, match="Linux refused"):
        ps.intrinsics.get("matmul_bf16amx_32x16").meta["zero_start_variant"](3)()  # no kernel loads without it


def test_kernel_candidates_offer_tiles_only_when_asked():
    vector = kernel_candidates(64, 16, 28, "bfloat16")
    assert vector and not [c for c in vector if "amx" in c]
    assert [c for c in kernel_candidates(64, 16, 28, "bfloat16", amx=True) if "amx" not in c] == vector
    # tiles hold the accumulators: no vector register budget applies
    assert {"matmul_bf16amx_32x32", "matmul_bf16amx_32x16"} <= set(kernel_candidates(64, 8, 12, "bfloat16", amx=True))
    assert [c for c in kernel_candidates(48, 16, 28, "bfloat16", amx=True) if "amx" in c] == ["matmul_bf16amx_32x16"]
    assert not [c for c in kernel_candidates(64, 16, 28, "float32", amx=True) if "amx" in c]


# ------------------------------------------------------------------ the kernels themselves


def kernel(rows, n, zero_start):
    meta = ps.intrinsics.get(f"matmul_bf16amx_32x{n}").meta
    return (meta["zero_start_variant"](rows) if zero_start else meta["variant"](rows))()


@needs_amx
@pytest.mark.parametrize("rows, n", [(32, 32), (17, 32), (14, 32), (32, 16), (1, 16)])
@pytest.mark.parametrize("zero_start", [False, True])
def test_kernel_with_strided_operands_partial_rows_and_panels(rows, n, zero_start):
    mk = kernel(rows, n, zero_start)
    rng = np.random.default_rng(rows + n)
    # P: one step, steps and pairs left, fewer pairs than a step; strides wider than a row, offsets
    for P, a_si, b_sp, c_si, pad in [(16, 32, 2 * n, n, 0), (37, 80, 2 * n + 6, n + 5, 3), (5, 10, 2 * n, 2 * n, 1)]:
        A = rng.uniform(-1, 1, pad + (rows - 1) * a_si + 2 * P).astype(BF16)
        B = rng.uniform(-1, 1, pad + (P - 1) * b_sp + 2 * n).astype(BF16)
        C = rng.uniform(-1, 1, pad + (rows - 1) * c_si + n).astype(np.float32)
        a = np.array([A[pad + r * a_si : pad + r * a_si + 2 * P] for r in range(rows)], np.float64)
        b = np.array([[B[pad + p * b_sp + 2 * j + t] for j in range(n)] for p in range(P) for t in (0, 1)], np.float64)
        tile = np.add.outer(np.arange(rows) * c_si, np.arange(n)) + pad
        expected = (0 if zero_start else C[tile].astype(np.float64)) + a @ b
        before = C.copy()
        mk(C, pad, c_si, 1, A.view(np.uint16), pad, a_si, 2, 1, B.view(np.uint16), pad, 2, b_sp, 1, P)
        np.testing.assert_allclose(C[tile], expected, rtol=1e-5, atol=1e-5)
        outside = np.ones(C.shape, bool)
        outside[tile] = False
        assert np.array_equal(C[outside], before[outside]), "the kernel wrote outside its tile"


FRESH_CALLS = {  # one step of ones (bf16: 16256 is 1.0), or of 255 x -128
    "bf16": ("np.zeros(32 * 32, np.float32), np.full(32 * 32, 16256, np.uint16), np.full(32 * 32, 16256, np.uint16)",
             "C, 0, 32, 1, A, 0, 32, 2, 1, B, 0, 2, 64, 1, 16", "32.0"),
    "int8": ("np.zeros(32 * 32, np.int32), np.full(32 * 64, 255, np.uint8), np.full(64 * 32, -128, np.int8)",
             "C, 0, 32, 1, A, 0, 64, 4, 1, B, 0, 4, 128, 1, 16", str(64 * 255 * -128)),
}


@pytest.mark.parametrize("unit", [
    pytest.param(u, marks=pytest.mark.skipif(not amx.usable(u), reason=f"AMX {u} not usable here: {amx.unavailable(u)}"))
    for u in FRESH_CALLS
])
def test_a_kernel_module_asks_for_the_tiles_itself_in_a_fresh_process(unit):
    # a saved model imports its kernels' modules without the tuner, and numba loads their
    # machine code from its cache without typing anything: the module itself must ask
    mk = ps.intrinsics.get(f"matmul_{unit}amx_32x32").kernel()
    module = sys.modules[mk.py_func.__module__]
    arrays, call, value = FRESH_CALLS[unit]
    code = f"""
import numpy as np
from probsched import cache
from probsched.intrinsics import amx
assert amx.unavailable.cache_info().currsize == 0  # nothing asked yet
with open({module.__file__!r}) as fh:
    m = cache.import_source({module.__name__!r}, fh.read())   # as a saved model's loader does
C, A, B = {arrays}
m.kernel({call})
print(C.min(), C.max())
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [value, value]


@needs_amx
def test_tiles_and_vector_dot_products_agree():
    # the same sums as vdpbf16ps (or its emulation) up to the order of float32 additions
    rng = np.random.default_rng(3)
    P = 48
    A, B = rng.uniform(-1, 1, 32 * 2 * P).astype(BF16), rng.uniform(-1, 1, 2 * P * 32).astype(BF16)
    results = []
    for name in ("matmul_bf16amx_32x32", "matmul_bf16_8x32"):
        C = np.zeros(32 * 32, np.float32)
        step = ps.intrinsics.get(name).meta["M"]
        for r in range(0, 32, step):
            ps.intrinsics.get(name).kernel()(C, r * 32, 32, 1, A.view(np.uint16), r * 2 * P, 2 * P, 2, 1, B.view(np.uint16), 0, 2, 64, 1, P)
        results.append(C)
    np.testing.assert_allclose(*results, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ the design space

# name -> (workload, the AMX kernel its N takes, pairs of its reduction): reductions of whole
# steps and less than one, M not a multiple of 32
SHAPES = {
    "GMM": (lambda: wl.matmul(33, 32, 64, batch=None), "matmul_bf16amx_32x32", 32),
    "GMM_REST": (lambda: wl.matmul(11, 32, 24, batch=2), "matmul_bf16amx_32x32", 12),
    "C2D": (lambda: wl.conv2d_nhwc(1, 2, 7, 32, 48, 3, 1, 1), "matmul_bf16amx_32x16", 16),  # 7 rows
}
_DATA: dict = {}


def data(name, layout_free=False, precision="bf16", shapes=None):
    """(workload, inputs, reference) of ``name`` in ``shapes`` (default: the bf16 ones)."""
    key = (name, layout_free, precision)
    if key not in _DATA:
        w = (shapes or SHAPES)[name][0]().with_precision(precision)
        if layout_free:
            w = replace(w, func=w.func.replace(attrs={LAYOUT_FREE: (w.func.params[1].name,)}))
        x = w.random_inputs(np.random.default_rng(7))
        _DATA[key] = (w, x, w.reference(*x))
    return _DATA[key]


def amx_trace(name, w, s):
    """A draw of the default space with the AMX kernel of shape ``name``."""
    block = w.func.blocks()[-1].name
    sch = ps.Schedule(w.func)
    tr = trace(seed(condition(ps.space.default(), {f"{block}/unit": "amx", f"{block}/intrin": SHAPES[name][1]}), s)).get_trace(sch)
    return sch, tr


@pytest.fixture
def amx_offered(monkeypatch):
    """The design space as on a CPU with AMX, wherever the tests run (interpreted, no tile runs)."""
    monkeypatch.setattr(ps.Target, "host", staticmethod(lambda: WITH_AMX))
    monkeypatch.setattr(amx, "usable", lambda unit="bf16": True)


@pytest.mark.parametrize("usable, has_flags", [(False, True), (True, False), (True, True)])
def test_the_rule_offers_tiles_only_where_usable(monkeypatch, usable, has_flags):
    monkeypatch.setattr(amx, "usable", lambda unit="bf16": usable)
    w, _, _ = data("GMM")
    rule = MultiLevelTilingWithIntrin(target=host_with(AMX_FLAGS if has_flags else ()))

    def draw(decisions):
        return trace(seed(condition(lambda s: rule(s, s.get_block("Z")), decisions), 0)).get_trace(ps.Schedule(w.func))

    tr = draw({})
    if not (usable and has_flags):  # no choice of unit: the vector kernels only
        assert "Z/unit" not in tr and not [k for k in tr["Z/intrin"].dist.support() if "amx" in k]
        return
    # the unit is an algorithm decision, so the search's family cap keeps both in its batches
    assert tr["Z/unit"].infer.get("tag") == "algorithm"
    tiles = set(draw({"Z/unit": "amx"})["Z/intrin"].dist.support())
    assert tiles == {"matmul_bf16amx_32x32", "matmul_bf16amx_32x16"}
    assert not tiles & set(draw({"Z/unit": "vector"})["Z/intrin"].dist.support())


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(SHAPES)), layout_free=st.booleans(), s=st.integers(0, 10**6))
def test_amx_traces_match_the_reference_interpreted(amx_offered, name, layout_free, s):
    w, x, expected = data(name, layout_free)
    sch, tr = amx_trace(name, w, s)
    kernels = [b.annotation("tensorize") for b in sch.mod.blocks() if b.annotation("tensorize")]
    assert kernels and all(k.startswith("matmul_bf16amx_") for k in kernels)
    pairs = SHAPES[name][2]
    panel = [k for k in tr.choices() if k.endswith("/panel")]
    assert bool(panel) == (pairs >= 16) and all(tr[k].value % 16 == 0 for k in panel)  # whole steps where there are any
    w.check(evaluate(sch.mod, *lay_out_inputs(sch.mod, x)), expected)


def test_a_tile_program_fails_to_build_where_there_are_no_tiles(amx_offered, monkeypatch, fresh_permission):
    # a record tuned on a CPU with AMX (shipped, or borrowed by another vendor's family) met on
    # one without: a BuildError, which the network compiler skips for the next candidate
    w, _, _ = data("GMM", True)
    sch, _ = amx_trace("GMM", w, 0)
    monkeypatch.setattr(ps.Target, "host", staticmethod(lambda: NO_AMX))
    with pytest.raises(ps.BuildError, match="AMX tile kernels cannot run in this process: the CPU has no amx_tile"):
        ps.build(sch)


@needs_amx
@pytest.mark.parametrize("name, layout_free, s", [("GMM", False, 0), ("GMM_REST", False, 1), ("C2D", True, 2)])
def test_compiled_amx_traces_match_the_reference(name, layout_free, s):
    w, x, expected = data(name, layout_free)
    sch, _ = amx_trace(name, w, s)
    kernel = ps.build(sch)
    assert "matmul_bf16amx" in kernel.source
    w.check(kernel.run(*x), expected)
