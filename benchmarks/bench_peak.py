"""The machine's float32, bfloat16 and int8 ceilings, as numba reaches them: what a tuned
kernel can hope for.

Prints, for one and for all threads, each figure the best of 5 runs (the machine may be
shared: the best run is the one least disturbed):

- ``fma``: independent vector FMAs on values held in registers (12 accumulators of one
  vector each, enough to cover the FMA latency on one 512-bit FMA pipe or two 256-bit
  ones: Zen 4, AVX2 CPUs), no memory traffic: the arithmetic peak;
- ``fma, 16 vectors``: the same with 16 independent 16-lane vectors (:mod:`probsched.intrinsics.simd`):
  the peak of a CPU with two 512-bit FMA pipes (Intel Xeon since Skylake-SP), which 12
  accumulators of 8 lanes (6 vectors) cannot keep busy;
- ``vdpbf16ps``: 16 independent bfloat16 dot products (:func:`~probsched.intrinsics.simd.dot_pairs`,
  4 flops per float32 lane: two products, two sums), on CPUs with ``avx512_bf16``: the
  bfloat16 peak, beside the float32 one;
- ``vpdpbusd``: 16 independent u8 x s8 dot products (:func:`~probsched.intrinsics.simd_int8.dot_quads`,
  128 integer ops per instruction: 16 int32 lanes of 4 products and 4 sums), on CPUs with
  ``avx512_vnni``: the int8 peak (the emulated dot product elsewhere);
- ``tdpbf16ps``: AMX tile multiplies on tiles held in the tile registers (6 independent
  16 x 16 float32 accumulators, 16 x 32 bf16 times 32 x 16 bf16 each: 16384 flops), where
  AMX is usable (:mod:`probsched.intrinsics.amx`): the AMX bfloat16 peak;
- ``matmul_MxN``, ``matmul_bf16_MxN``, ``matmul_bf16amx_MxN``, ``matmul_int8_MxN``: each named micro-kernel on
  operands that stay in L1 (a K panel of 512), called from a numba loop as a tuned kernel calls it: the best a
  tensorized matmul or convolution can do per core; a bf16 kernel also as a fraction of
  the ``vdpbf16ps`` peak (where there is none, it runs its emulated path: the fraction is
  of the FMA peak), an AMX one of the ``tdpbf16ps`` peak (its operands, 32 x 512 and
  512 x 32 bf16, fill L1: they are read from L2 in part), an int8 one of the ``vpdpbusd``
  peak (GOP/s: integer operations).

A tuned GMM, C2D or CBR runs at most at the micro-kernel's rate (its inner loop *is* the
micro-kernel); the gap between the peak and the kernels is what the register block loses to
loads and broadcasts.

Usage: ``python benchmarks/bench_peak.py [--kernels matmul_3x32,matmul_bf16_8x32]`` (the AMX
kernels are added where AMX is usable)
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numba
import numpy as np

import probsched as ps
from probsched.intrinsics import amx
from probsched.intrinsics.matmul_bf16 import native_available
from probsched.intrinsics.simd_int8 import dot_quads_name
from probsched.codegen.stackalloc import stack_empty

RUNS = 5


def _best_seconds(run, runs: int = RUNS) -> float:
    run()  # warm-up (and compile)
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    return best


LANES = 8  # one AVX2 vector of float32; on AVX-512 the loop still vectorizes by 16
ACCS = 12
WIDTH = 96  # ACCS * LANES, a literal for stack_empty


@numba.njit(fastmath=True, parallel=True)
def _fma_loop(x, reps, threads):
    out = np.zeros(threads, np.float32)
    for t in numba.prange(threads):
        a = stack_empty(WIDTH, np.float32)
        for r in range(ACCS * LANES):
            a[r] = x[r % LANES] + r
        b, c = x[LANES], x[LANES + 1]
        for _ in range(reps):
            for r in range(ACCS * LANES):
                a[r] = a[r] * b + c
        s = np.float32(0)
        for r in range(ACCS * LANES):
            s += a[r]
        out[t] = s
    return out


def fma_peak(threads: int, reps: int = 4_000_000) -> float:
    """GFLOP/s of register-resident FMAs on ``threads`` threads (best of 5)."""
    x = (np.random.default_rng(0).random(LANES + 2) * 1e-3).astype(np.float32)
    return threads * ACCS * LANES * 2 * reps / _best_seconds(lambda: _fma_loop(x, reps, threads)) / 1e9


VECTORS = 16  # independent accumulators of the vector peaks: latency x pipes on any x86 CPU


def _vector_peak_loop(op: str):
    """A numba loop of VECTORS independent ``acc = op(acc, a, b)`` per step on each thread."""
    accs = [f"c{i}" for i in range(VECTORS)]
    source = "\n".join(
        ["def loop(xf, xh, reps, threads):", "    for t in numba.prange(threads):"]
        + ["        a, b = (broadcast_pair(xh, 0), load_pairs(xh, 0)) if BF16 else (load(xf, 0), load(xf, 16))"]
        + [f"        {c} = zeros()" for c in accs]
        + ["        for _ in range(reps):"]
        + [f"            {c} = {op}({c}, a, b)" for c in accs]
        + [f"        store(xf, 32 + 16 * ({VECTORS} * t + {i}), {c})" for i, c in enumerate(accs)]  # keep every chain alive
    )
    from probsched.intrinsics import simd

    scope = {"numba": numba, "BF16": op != "fma", op: getattr(simd, op), **{f: getattr(simd, f) for f in ("broadcast_pair", "load", "load_pairs", "store", "zeros")}}
    exec(compile(source, f"<{op} peak>", "exec"), scope)
    return numba.njit(parallel=True)(scope["loop"])


def vector_peak(op: str, threads: int, reps: int = 4_000_000) -> float:
    """GFLOP/s of register-resident ``fma`` or ``dot_pairs`` on ``threads`` threads (best of 5)."""
    loop = _vector_peak_loop(op)
    xf = (np.random.default_rng(0).random(32 + 16 * VECTORS * threads) * 1e-3).astype(np.float32)
    xh = xf[:64].astype(ml_dtypes.bfloat16).view(np.uint16)
    flops = 16 * (4 if op == "dot_pairs" else 2)  # per vector op: 16 lanes of 2 products + 2 sums, or of an FMA
    return threads * VECTORS * flops * reps / _best_seconds(lambda: loop(xf, xh, reps, threads)) / 1e9


AMX_ACCUMULATORS = 6  # C tiles; one A and one B tile take the other two registers


@numba.njit(parallel=True)
def _amx_loop(x, reps, threads):
    for t in numba.prange(threads):
        amx.configure((16, 16, 16, 16, 16, 16, 16, 16), (64, 64, 64, 64, 64, 64, 64, 64))  # per thread
        amx.tile_load(0, x, 0, 32)  # tile numbers are literals: no loop over them
        amx.tile_load(1, x, 0, 32)
        amx.tile_load(2, x, 0, 32)
        amx.tile_load(3, x, 0, 32)
        amx.tile_load(4, x, 0, 32)
        amx.tile_load(5, x, 0, 32)
        amx.tile_load(6, x, 0, 32)
        amx.tile_load(7, x, 0, 32)
        for _ in range(reps):
            amx.dot_bf16(0, 6, 7)
            amx.dot_bf16(1, 6, 7)
            amx.dot_bf16(2, 6, 7)
            amx.dot_bf16(3, 6, 7)
            amx.dot_bf16(4, 6, 7)
            amx.dot_bf16(5, 6, 7)
        out = 512 * (1 + AMX_ACCUMULATORS * t)  # every chain stored: none is dead code
        amx.tile_store(0, x, out, 32)
        amx.tile_store(1, x, out + 512, 32)
        amx.tile_store(2, x, out + 1024, 32)
        amx.tile_store(3, x, out + 1536, 32)
        amx.tile_store(4, x, out + 2048, 32)
        amx.tile_store(5, x, out + 2560, 32)


def amx_peak(threads: int, reps: int = 100_000) -> float:
    """GFLOP/s of register-resident ``tdpbf16ps`` on ``threads`` threads (best of 5)."""
    x = (np.random.default_rng(0).random(512 * (1 + AMX_ACCUMULATORS * threads)) * 1e-3).astype(ml_dtypes.bfloat16).view(np.uint16)
    seconds = _best_seconds(lambda: _amx_loop(x, reps, threads))
    return threads * AMX_ACCUMULATORS * 16 * 16 * 32 * 2 * reps / seconds / 1e9


def _vnni_peak_loop(dot: str):
    """A numba loop of VECTORS independent ``acc = dot(acc, a, b)`` per step on each thread."""
    accs = [f"c{i}" for i in range(VECTORS)]
    source = "\n".join(
        ["def loop(xu, xs, xi, reps, threads):", "    for t in numba.prange(threads):",
         "        a, b = broadcast_quad(xu, 0), load_quads(xs, 0)"]
        + [f"        {c} = zeros()" for c in accs]
        + ["        for _ in range(reps):"]
        + [f"            {c} = dot({c}, a, b)" for c in accs]
        + [f"        store(xi, 16 * ({VECTORS} * t + {i}), {c})" for i, c in enumerate(accs)]
    )
    from probsched.intrinsics import simd_int8

    scope = {"numba": numba, "dot": getattr(simd_int8, dot), **{f: getattr(simd_int8, f) for f in ("broadcast_quad", "load_quads", "store", "zeros")}}
    exec(compile(source, "<vpdpbusd peak>", "exec"), scope)
    return numba.njit(parallel=True)(scope["loop"])


def vnni_peak(threads: int, reps: int = 4_000_000) -> float:
    """GOP/s of register-resident ``vpdpbusd`` (on 256 bits with AVX-VNNI only, emulated
    without VNNI) on ``threads`` threads (best of 5)."""
    loop = _vnni_peak_loop(dot_quads_name())
    rng = np.random.default_rng(0)
    xu, xs = rng.integers(0, 4, 64).astype(np.uint8), rng.integers(-2, 2, 64).astype(np.int8)
    xi = np.zeros(16 * VECTORS * threads, np.int32)
    return threads * VECTORS * 16 * 8 * reps / _best_seconds(lambda: loop(xu, xs, xi, reps, threads)) / 1e9


def kernel_peak(name: str, threads: int, k: int = 512, reps: int = 20_000) -> float:
    """GFLOP/s (int8: GOP/s) of micro-kernel ``name`` on L1-resident operands, ``threads`` threads."""
    intrin = ps.intrinsics.get(name)
    m, n = int(intrin.meta["M"]), int(intrin.meta["N"])
    mk = intrin.kernel()
    rng = np.random.default_rng(0)
    C = np.zeros(threads * m * n, np.float32)
    if intrin.meta.get("precision") == "int8":
        q = k // 4
        C = np.zeros(threads * m * n, np.int32)

        @numba.njit(parallel=True)
        def loop(C, A, B, reps):
            for t in numba.prange(threads):
                for _ in range(reps):
                    mk(C, t * m * n, n, 1, A, t * m * k, k, 4, 1, B, t * k * n, 4, 4 * n, 1, q)

        A = rng.integers(0, 256, threads * m * k).astype(np.uint8)
        B = rng.integers(-128, 128, threads * k * n).astype(np.int8)
    elif intrin.meta.get("precision") == "bfloat16":
        p = k // 2

        @numba.njit(parallel=True)
        def loop(C, A, B, reps):
            for t in numba.prange(threads):
                for _ in range(reps):
                    mk(C, t * m * n, n, 1, A, t * m * k, k, 2, 1, B, t * k * n, 2, 2 * n, 1, p)

        A = rng.random(threads * m * k).astype(ml_dtypes.bfloat16).view(np.uint16)
        B = rng.random(threads * k * n).astype(ml_dtypes.bfloat16).view(np.uint16)
    else:

        @numba.njit(parallel=True)
        def loop(C, A, B, reps):
            for t in numba.prange(threads):
                for _ in range(reps):
                    mk(C, t * m * n, n, 1, A, t * m * k, k, 1, B, t * k * n, 1, n, k)

        A = rng.random(threads * m * k, dtype=np.float32)
        B = rng.random(threads * k * n, dtype=np.float32)
    return threads * 2 * m * n * k * reps / _best_seconds(lambda: loop(C, A, B, reps)) / 1e9


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--kernels",
        default="matmul_3x32,matmul_4x16,matmul_6x16,matmul_bf16_4x32,matmul_bf16_8x32,matmul_bf16_12x32,matmul_bf16fma_8x32,"
        "matmul_bf16fma_4x64,matmul_int8_8x32,matmul_int8_12x32,matmul_int8_6x64",
        help="comma-separated micro-kernels",
    )
    args = ap.parse_args(argv)
    threads = numba.config.NUMBA_NUM_THREADS
    target = ps.Target.host()
    print(f"{target}")
    print()
    print(f"| kernel | GFLOP/s, 1 thread | GFLOP/s, {threads} threads | of the peak (1, {threads} threads) |")
    print("|---|---:|---:|---:|")
    print(f"| fma ({ACCS} x {LANES}-lane accumulators) | {fma_peak(1):.1f} | {fma_peak(threads):.1f} | |")
    fma = (vector_peak("fma", 1), vector_peak("fma", threads))
    print(f"| fma, {VECTORS} vectors | {fma[0]:.1f} | {fma[1]:.1f} | |")
    bf16 = None
    if native_available():
        bf16 = (vector_peak("dot_pairs", 1), vector_peak("dot_pairs", threads))
        print(f"| vdpbf16ps, {VECTORS} vectors | {bf16[0]:.1f} | {bf16[1]:.1f} | {bf16[0] / fma[0]:.0%}, {bf16[1] / fma[1]:.0%} of fma |")
    int8 = (vnni_peak(1), vnni_peak(threads))
    print(f"| vpdpbusd ({dot_quads_name()}), {VECTORS} vectors (GOP/s) | {int8[0]:.1f} | {int8[1]:.1f} | |")
    names = args.kernels.split(",")
    tiles = None
    if amx.usable():
        tiles = (amx_peak(1), amx_peak(threads))
        print(f"| tdpbf16ps, {AMX_ACCUMULATORS} tiles | {tiles[0]:.1f} | {tiles[1]:.1f} | {tiles[0] / fma[0]:.1f}x, {tiles[1] / fma[1]:.1f}x fma |")
        names += [n for n in ("matmul_bf16amx_32x32", "matmul_bf16amx_32x16") if n not in names]
    for name in names:
        one, all_ = kernel_peak(name, 1), kernel_peak(name, threads)
        meta = ps.intrinsics.get(name).meta
        is_bf16 = meta.get("precision") == "bfloat16"
        peak, label = (bf16, "vdpbf16ps") if is_bf16 and bf16 else (fma, "fma")
        if meta.get("unit") == "amx":
            peak, label = tiles, "tdpbf16ps"
        if meta.get("precision") == "int8":
            peak, label = int8, "vpdpbusd"
        emulated = is_bf16 and (meta.get("dot") == "fma" or not bf16)
        print(f"| {name}{' (FMAs)' if emulated else ''} (L1, K={512}) | {one:.1f} | {all_:.1f} | {one / peak[0]:.0%}, {all_ / peak[1]:.0%} of {label} |")


if __name__ == "__main__":
    main()
