"""The float32 micro-kernels of an earlier revision against today's, in one process.

Each shape's kernel is generated twice, by today's ``matmul_source`` and by the one of the
git revision ``--against`` (read with ``git show`` and run as a module of today's package),
and both are timed on one thread as :mod:`bench_peak` times a kernel (L1-resident operands,
:func:`bench_peak.l1_panel`), in ``--rounds`` interleaved rounds beside the FMA peak; each
figure is the best round::

    python benchmarks/bench_kernels_ab.py --against 7ce2fed --shapes 6x16,3x32,8x32

(7ce2fed: the scalar kernels LLVM's SLP vectorizer vectorized.) Under
``NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=...,-avx512f,...`` both are AVX2 code, timed
on this CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types

import numba
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_peak import _best_seconds, l1_panel, vector_peak  # noqa: E402

from probsched.aligned import aligned_copy  # noqa: E402
from probsched.codegen.compile import configure_numba  # noqa: E402
from probsched.intrinsics import matmul  # noqa: E402
from probsched.intrinsics.disk_cache import load_module  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_at(revision: str):
    """``matmul_source(m, n)`` of ``revision``'s ``probsched/intrinsics/matmul.py``, run as a
    module of today's package (its relative imports are today's)."""
    text = subprocess.run(
        ["git", "show", f"{revision}:probsched/intrinsics/matmul.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType(f"probsched.intrinsics._matmul_{revision}")
    module.__package__ = "probsched.intrinsics"
    exec(compile(text, f"{revision}:probsched/intrinsics/matmul.py", "exec"), module.__dict__)
    return module.matmul_source


def kernel_rate(kernel, m: int, n: int, k: int):
    """A function returning the GFLOP/s of one timing (best of 5) of ``kernel``."""
    reps = max(10, int(2e8 // (2 * m * n * k)))

    @numba.njit
    def loop(C, A, B, reps):
        for _ in range(reps):
            kernel(C, 0, n, 1, A, 0, k, 1, B, 0, 1, n, k)

    rng = np.random.default_rng(0)
    A, B = aligned_copy(rng.random(m * k, dtype=np.float32)), aligned_copy(rng.random(k * n, dtype=np.float32))
    C = aligned_copy(np.zeros(m * n, np.float32))
    return lambda: 2 * m * n * k * reps / _best_seconds(lambda: loop(C, A, B, reps)) / 1e9


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", default="7ce2fed", help="git revision of the other kernels")
    ap.add_argument("--shapes", default=",".join(f"{m}x{n}" for m, n in matmul.SHAPES))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    configure_numba()  # the earlier scalar kernels relied on its SLP setting
    old_source = source_at(args.against)
    rates = {}
    for shape in args.shapes.split(","):
        m, n = (int(x) for x in shape.split("x"))
        k = l1_panel(m, n)
        rates[f"{shape} {args.against}"] = (kernel_rate(load_module(f"ab_{args.against}_{shape}", old_source(m, n)).kernel, m, n, k), k)
        rates[f"{shape} now"] = (kernel_rate(load_module(f"matmul_{shape}", matmul.matmul_source(m, n)).kernel, m, n, k), k)
    best = {name: 0.0 for name in rates}
    peak = 0.0
    for _ in range(args.rounds):
        peak = max(peak, vector_peak("fma", 1))
        for name, (rate, _) in rates.items():
            best[name] = max(best[name], rate())
    import probsched as ps

    print(ps.Target.from_str("cpu -threads=1"))
    print()
    print(f"FMA peak, 1 thread: {peak:.1f} GFLOP/s (best of {args.rounds} rounds)")
    print()
    print(f"| kernel | K | {args.against} GFLOP/s | now GFLOP/s | {args.against} of peak | now of peak |")
    print("|---|---:|---:|---:|---:|---:|")
    for shape in args.shapes.split(","):
        old, new = best[f"{shape} {args.against}"], best[f"{shape} now"]
        k = rates[f"{shape} now"][1]
        print(f"| matmul_{shape} | {k} | {old:.1f} | {new:.1f} | {old / peak:.0%} | {new / peak:.0%} |")


if __name__ == "__main__":
    main()
