"""The machine's float32 ceilings, as numba reaches them: what a tuned kernel can hope for.

Prints, for one and for all threads:

- ``fma``: independent vector FMAs on values held in registers (12 accumulators of one
  vector each, enough to cover the FMA latency), no memory traffic: the arithmetic peak;
- ``matmul_MxN``: each registered micro-kernel on operands that stay in L1 (a K panel of
  512), called from a numba loop as a tuned kernel calls it: the best a tensorized
  matmul or convolution can do per core.

A tuned GMM, C2D or CBR runs at most at the micro-kernel's rate (its inner loop *is* the
micro-kernel); the gap between ``fma`` and the kernels is what the register block loses to
loads and broadcasts.

Usage: ``python benchmarks/bench_peak.py [--kernels matmul_3x32,matmul_4x16]``
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import probsched as ps
from probsched.codegen.stackalloc import stack_empty

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
    """GFLOP/s of register-resident FMAs on ``threads`` threads (median of 5)."""
    x = (np.random.default_rng(0).random(LANES + 2) * 1e-3).astype(np.float32)
    _fma_loop(x, 10, threads)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        _fma_loop(x, reps, threads)
        times.append(time.perf_counter() - t)
    return threads * ACCS * LANES * 2 * reps / float(np.median(times)) / 1e9


def kernel_peak(name: str, threads: int, k: int = 512, reps: int = 20_000) -> float:
    """GFLOP/s of micro-kernel ``name`` on L1-resident operands, ``threads`` threads."""
    meta = ps.intrinsics.get(name).meta
    m, n = int(meta["M"]), int(meta["N"])
    mk = ps.intrinsics.get(name).kernel()

    @numba.njit(parallel=True)
    def loop(C, A, B, reps):
        for t in numba.prange(threads):
            for _ in range(reps):
                mk(C, t * m * n, n, 1, A, t * m * k, k, 1, B, t * k * n, 1, n, k)

    rng = np.random.default_rng(0)
    A = rng.random(threads * m * k, dtype=np.float32)
    B = rng.random(threads * k * n, dtype=np.float32)
    C = np.zeros(threads * m * n, np.float32)
    loop(C, A, B, 1)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        loop(C, A, B, reps)
        times.append(time.perf_counter() - t)
    return threads * 2 * m * n * k * reps / float(np.median(times)) / 1e9


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default="matmul_3x32,matmul_4x16,matmul_6x16", help="comma-separated micro-kernels")
    args = ap.parse_args(argv)
    threads = numba.config.NUMBA_NUM_THREADS
    print(f"| kernel | GFLOP/s, 1 thread | GFLOP/s, {threads} threads |")
    print("|---|---:|---:|")
    print(f"| fma ({ACCS} x {LANES}-lane accumulators) | {fma_peak(1):.1f} | {fma_peak(threads):.1f} |")
    for name in args.kernels.split(","):
        print(f"| {name} (L1, K={512}) | {kernel_peak(name, 1):.1f} | {kernel_peak(name, threads):.1f} |")


if __name__ == "__main__":
    main()
