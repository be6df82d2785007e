"""int8 micro-kernels (vpdpbusd on 512 and 256 bits, and emulated), their tensorize matching, and the
design space that tiles int8 matmuls and convolutions around them (its traces are tested
beside the bf16 ones, test_intrinsics_bf16.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import probsched as ps
from probsched.intrinsics.disk_cache import load_module
from probsched.intrinsics.matmul_int8 import matmul_int8_source
from probsched.intrinsics.simd import compiles_for
from probsched.intrinsics.simd_int8 import vnni_available
from probsched.space.intrin_tiling import int8_weights, kernel_candidates, matmul_roles

import test_intrinsics_bf16 as shared  # the reduced shapes and helpers; its trace tests cover int8 too
from test_intrinsics_bf16 import draw

NATIVE = pytest.mark.skipif(not vnni_available(), reason="no avx512_vnni")
# the 256-bit VNNI runs where either VNNI does (AVX-VNNI, or AVX-512 VNNI with its VL forms)
HALF = pytest.mark.skipif(not (compiles_for("avxvnni") or (vnni_available() and compiles_for("avx512vl"))), reason="no VNNI")
PATHS = [pytest.param("dot_quads", marks=NATIVE), pytest.param("dot_quads_256", marks=HALF), "dot_quads_madd",
         "dot_quads_emulated", "dot_quads_maddubs"]
#: the weights each dot product is exact on (vpmaddubsw: the reduced range, int8r)
WEIGHTS = {"dot_quads_maddubs": (-64, 65)}


def kernel(m, n, dot, zero_start=False):
    name = f"test_int8_{m}x{n}{'_zero' if zero_start else ''}_{dot}"
    return load_module(name, matmul_int8_source(m, n, zero_start, dot)).kernel


@pytest.mark.parametrize("dot", PATHS)
@pytest.mark.parametrize("zero_start", [False, True])
@pytest.mark.parametrize("n", [32, 24])  # 24: a 16-lane and an 8-lane vector per row
def test_kernel_with_strided_operands(dot, zero_start, n):
    m = 4
    mk = kernel(m, n, dot, zero_start)
    rng = np.random.default_rng(0)
    for Q, a_si, a_sq, b_sq, c_si, pad in [(1, 4, 4 * m, 4 * n, n, 0), (7, 37, 4, 4 * n + 12, n + 5, 3), (3, 12, 4 * m + 4, 8 * n, 2 * n, 1)]:
        A = rng.integers(0, 256, pad + (m - 1) * a_si + (Q - 1) * a_sq + 4).astype(np.uint8)
        B = rng.integers(*WEIGHTS.get(dot, (-128, 128)), pad + (Q - 1) * b_sq + 4 * n).astype(np.int8)
        C = rng.integers(-1000, 1000, pad + (m - 1) * c_si + n).astype(np.int32)
        a = np.array([[A[pad + r * a_si + q * a_sq + t] for q in range(Q) for t in range(4)] for r in range(m)], np.int64)
        b = np.array([[B[pad + q * b_sq + 4 * j + t] for j in range(n)] for q in range(Q) for t in range(4)], np.int64)
        c0 = np.array([[C[pad + r * c_si + j] for j in range(n)] for r in range(m)], np.int64)
        before = C.copy()
        mk(C, pad, c_si, 1, A, pad, a_si, a_sq, 1, B, pad, 4, b_sq, 1, Q)
        got = np.array([[C[pad + r * c_si + j] for j in range(n)] for r in range(m)])
        assert np.array_equal(got, (0 if zero_start else c0) + a @ b)
        mask = np.ones(C.shape, bool)
        for r in range(m):
            mask[pad + r * c_si : pad + r * c_si + n] = False
        assert np.array_equal(C[mask], before[mask]), "the kernel wrote outside its tile"


def _extreme_operands(rng, Q, low=-128):
    """A 6 x 4Q uint8, a 4Q x 32 int8 (4-interleaved) and a 6 x 32 int32 start: the first
    halves at the extremes (255 x ``low``: -128 saturates ``vpmaddubsw``), the rest random
    (weights in ``[low, -low]``)."""
    A = np.concatenate([np.full(6 * 4 * Q // 2, 255, np.uint8), rng.integers(0, 256, 6 * 4 * Q // 2).astype(np.uint8)])
    B = np.concatenate([np.full(4 * Q * 32 // 2, low, np.int8), rng.integers(low, -low, 4 * Q * 32 // 2).astype(np.int8)])
    return A, B, rng.integers(-2**20, 2**20, 6 * 32).astype(np.int32)


def _agree(dots, Q=64, low=-128):
    A, B, C0 = _extreme_operands(np.random.default_rng(1), Q, low)
    for n in (32, 24):
        results = []
        for dot in dots:
            C = C0[: 6 * n].copy()
            kernel(6, n, dot)(C, 0, n, 1, A, 0, 4 * Q, 4, 1, B, 0, 4, 4 * n, 1, Q)
            results.append(C)
        assert all(np.array_equal(results[0], r) for r in results[1:]), n


@NATIVE
def test_native_and_emulated_dot_products_agree_bit_for_bit():
    _agree(("dot_quads", "dot_quads_256", "dot_quads_madd", "dot_quads_emulated"))


def test_the_pairwise_product_of_cpus_without_vnni_is_exact_where_vpmaddubsw_saturates():
    """vpmaddwd on widened bytes: 255 x -128 pairs (-65280, not int16's -32768) and int32
    wrap-around (a long panel of them) as vpdpbusd computes them."""
    _agree(("dot_quads_madd", "dot_quads_emulated"))
    A, B, _ = _extreme_operands(np.random.default_rng(2), 4)
    C = np.full(6 * 32, -2**31, np.int32)  # at the bottom of int32: a negative sum wraps
    kernel(6, 32, "dot_quads_madd")(C, 0, 32, 1, A[:6 * 16], 0, 16, 4, 1, B[:16 * 32], 0, 4, 128, 1, 4)
    exact = -2**31 + A[:96].reshape(6, 16).astype(np.int64) @ B[:512].reshape(4, 32, 4).transpose(0, 2, 1).reshape(16, 32)
    assert (exact < -2**31).any()
    assert np.array_equal(C.reshape(6, 32), ((exact + 2**31) % 2**32 - 2**31).astype(np.int32))


def test_the_vpmaddubsw_product_is_exact_on_weights_of_reduced_range():
    """255 x -64 and 255 x 64 pairs (+-32640: int16 holds them) and int32 wrap-around as
    vpdpbusd computes them; on weights outside [-64, 64] it saturates, which is why only
    int8r weights (a type of their own) are given to its kernels."""
    _agree(("dot_quads_maddubs", "dot_quads_emulated"), low=-64)
    A, B, _ = _extreme_operands(np.random.default_rng(2), 4, -64)
    B[: B.size // 2] = np.where(np.arange(B.size // 2) % 2, 64, -64)  # 64 too, the top of the range
    C = np.full(6 * 32, -2**31, np.int32)
    kernel(6, 32, "dot_quads_maddubs")(C, 0, 32, 1, A[:6 * 16], 0, 16, 4, 1, B[:16 * 32], 0, 4, 128, 1, 4)
    exact = -2**31 + A[:96].reshape(6, 16).astype(np.int64) @ B[:512].reshape(4, 32, 4).transpose(0, 2, 1).reshape(16, 32)
    assert np.array_equal(C.reshape(6, 32), ((exact + 2**31) % 2**32 - 2**31).astype(np.int32))
    A, B, C0 = _extreme_operands(np.random.default_rng(3), 4)  # -128: the pair's sum leaves int16
    got, want = C0.copy(), C0.copy()
    for dot, C in (("dot_quads_maddubs", got), ("dot_quads_emulated", want)):
        kernel(6, 32, dot)(C, 0, 32, 1, A[:6 * 16], 0, 16, 4, 1, B[:16 * 32], 0, 4, 128, 1, 4)
    assert not np.array_equal(got, want)


AVX2 = "+avx,+avx2,+fma,+sse4.2,+popcnt,+f16c,+bmi,+bmi2"


@pytest.mark.parametrize("cpu, features, dot, reduced", [
    # what an AMD Zen 3 compiles (AVX2, no VNNI); compiled for another CPU, so a rotation of the slow tests
    pytest.param("haswell", AVX2, "dot_quads_madd", "dot_quads_maddubs", marks=pytest.mark.slow(rotation=5)),
    pytest.param("alderlake", AVX2 + ",+avxvnni", "dot_quads_256", "dot_quads_256",  # Intel client: AVX-VNNI, no AVX-512
                 marks=pytest.mark.skipif(not ps.Target.host().has("avx_vnni"), reason="the host runs no AVX-VNNI")),
])
def test_cpus_without_avx512_vnni_compile_exact_kernels(tmp_path, cpu, features, dot, reduced):
    code = (
        "import numpy as np, probsched as ps\n"
        "from probsched.intrinsics.simd_int8 import dot_quads_name\n"
        f"assert (dot_quads_name(), dot_quads_name('int8r')) == {(dot, reduced)!r}, dot_quads_name()\n"
        "from handlers import seed, trace\n"
        "for p in ('int8', 'int8r'):\n"
        "    w = ps.workloads.matmul(8, 32, 16, batch=None).with_precision(p)\n"
        "    sch = ps.Schedule(w.func)\n"
        "    trace(seed(ps.space.default(), 0)).get_trace(sch)\n"
        "    assert any(b.annotation('tensorize') for b in sch.mod.blocks())\n"
        "    x = w.random_inputs(0)\n"
        "    w.check(ps.build(sch).run(*x), w.reference(*x))\n"
    )
    env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=features, PROBSCHED_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]


def data(name, layout_free=False, precision="int8"):
    return shared.data(name, layout_free, precision)


def test_roles_of_an_int8_block():
    sch = ps.Schedule(data("C2D")[0].func)
    r = matmul_roles(sch, "conv2d")
    assert (r.m, r.n, r.k, r.a, r.b, r.precision, r.b_k_dim, r.a_k_contiguous) == (
        "v_w", "v_co", "v_rc", "padded", "weight", "int8", 2, True,
    )
    assert kernel_candidates(64, 16, 28, "int8")[:2] == ["matmul_int8_12x32", "matmul_int8_4x16"]
    # 24 channels (MobileNet-V2's): the 8- and 24-column kernels, a row of one 16- and one 8-lane vector
    assert kernel_candidates(24, 16, 28, "int8") == [
        "matmul_int8_12x24", "matmul_int8_4x24", "matmul_int8_4x8", "matmul_int8_8x24", "matmul_int8_8x8"]


def test_weights_of_reduced_range_take_the_vpmaddubsw_kernels_where_the_cpu_has_no_vnni():
    sch = ps.Schedule(data("C2D", precision="int8r")[0].func)
    r = matmul_roles(sch, "conv2d")
    assert (r.precision, r.b_dtype) == ("int8", "int8r")
    reduced = kernel_candidates(24, 16, 28, "int8", weights="int8r")
    assert reduced == [k.replace("int8", "int8r") for k in kernel_candidates(24, 16, 28, "int8")]
    host = ps.Target.host()
    vnni = host.has("avx512_vnni") or host.has("avx_vnni")
    assert int8_weights(host, "int8r") == ("int8" if vnni else "int8r") and int8_weights(host, "int8") == "int8"


def test_an_int8_kernel_reads_weights_of_reduced_range_but_not_the_reverse():
    """int8r values are int8 ones (an int8 kernel is exact on them); a vpmaddubsw kernel is
    not exact on every int8, so tensorize refuses it a B of type int8."""
    sch, _ = draw(data("GMM")[0], 0, {"Z/unit": "vector"} if _amx_offered() else None)
    log = sch.instructions.to_json()
    assert '"matmul_int8_' in log
    cases = (("int8r", "matmul_int8_", True), ("int8r", "matmul_int8r_", True), ("int8", "matmul_int8r_", False))
    for precision, kernels, ok in cases:
        w, x, expected = data("GMM", precision=precision)
        again = ps.Schedule(w.func)
        replay = ps.InstructionLog.from_json(log.replace('"matmul_int8_', '"' + kernels))
        if ok:
            replay.apply(again)
            assert all(k.startswith(kernels) for k in shared.tensorized(again))
            w.check(ps.build(again).run(*x), expected)
        else:
            with pytest.raises(ps.errors.ScheduleError, match="is int8, the description's B is int8r"):
                replay.apply(again)


def _amx_offered() -> bool:
    from probsched.space.intrin_tiling import _amx_usable

    return _amx_usable(ps.Target.host(), "int8")


def test_a_signed_activation_is_not_a_vnni_product():
    X = ps.placeholder((8, 8), "int8", name="X")
    Y = ps.placeholder((8, 16), "uint8", name="Y")
    k = ps.reduce_axis(8, name="k")
    f = ps.create_func([X, Y, ps.compute((8, 16), lambda i, j: ps.sum(X[i, k] * Y[k, j], axis=k), name="Z")])
    assert matmul_roles(ps.Schedule(f), "Z") is None


def test_b_is_packed_in_quads_and_the_packing_replays():
    w, x, expected = data("GMM")
    sch, tr = draw(w, 0)
    (local,) = [b for b in sch.mod.allocs if b.name.startswith("Y_local")]
    assert local.shape[-1] == 4 and local.dtype == "int8" and "Z/pack" not in tr
    again = ps.Schedule(w.func)
    ps.InstructionLog.from_json(sch.instructions.to_json()).apply(again)
    assert again.mod == sch.mod
