"""Nanoseconds per element of the vectorizable float32 exps of ``probsched.codegen.mathlib``.

Each exp runs in the same numba loop over ``--n`` float32 values in [-20, 20] (one thread,
in L1/L2); the loops are timed interleaved (:func:`probsched.measure.timer.time_interleaved`)
and the medians printed with their ratio to ``np.exp`` in that loop (libm's ``expf``, a
call per element). ``exp_f32`` is the variant kernels use on this CPU.

    python benchmarks/bench_exp.py --n 65536 --rounds 9
"""

from __future__ import annotations

import argparse

import numpy as np

from probsched.codegen import mathlib
from probsched.codegen.compile import FASTMATH  # importing it also sets numba up as for kernels
from probsched.measure.timer import time_interleaved


def _loop(fn):
    from numba import njit

    @njit(fastmath=set(FASTMATH), error_model="numpy", boundscheck=False, nogil=True)
    def run(a, out):
        for i in range(a.size):
            out[i] = fn(a[i])

    return run


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1 << 16)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    a = np.random.default_rng(0).uniform(-20, 20, args.n).astype(np.float32)
    variants = {"np.exp": np.exp, "exp_f32_bits": mathlib.exp_f32_bits, "exp_f32_scalef": mathlib.exp_f32_scalef}
    loops = {name: _loop(fn) for name, fn in variants.items()}
    out = {name: np.empty_like(a) for name in loops}
    ref = np.exp(a.astype(np.float64))
    for name, run in loops.items():
        run(a, out[name])
    timed = time_interleaved({n: (lambda r=r, o=out[n]: r(a, o)) for n, r in loops.items()}, rounds=args.rounds)
    used = "exp_f32_scalef" if mathlib.exp_f32 is mathlib.exp_f32_scalef else "exp_f32_bits"
    base = timed["np.exp"].median
    print(f"n = {args.n}, {args.rounds} interleaved rounds; kernels use {used} on this CPU\n")
    print("| exp | ns / element | vs np.exp | max rel. error |")
    print("|---|---:|---:|---:|")
    for name, t in timed.items():
        err = float(np.max(np.abs(out[name] - ref) / ref))
        print(f"| {name} | {t.median / args.n * 1e9:.3f} | {base / t.median:.2f}x | {err:.1e} |")


if __name__ == "__main__":
    main()
