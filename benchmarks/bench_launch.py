"""What a parallel loop's launch costs: one tiny kernel with no, one and two parallel loops.

Each kernel adds 1 (and then doubles) ``--n`` float32 values, so the work is negligible
and the difference between the rows is the shared launcher's cost (:mod:`probsched.codegen.launch`:
numba's ``prange`` over one chunk per thread). Kernels are bound and timed interleaved in
this process (:func:`probsched.measure.timer.time_interleaved`)::

    python benchmarks/bench_launch.py --rounds 9
"""

from __future__ import annotations

import argparse

import numpy as np

import probsched as ps
from probsched.measure.timer import time_interleaved


def kernels(n: int) -> dict:
    A = ps.placeholder((n,), name="A")
    B = ps.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = ps.compute((n,), lambda i: B[i] * 2.0, name="C")
    one, two = ps.create_func([A, B], name="one"), ps.create_func([A, C], name="two")
    serial, s1, s2 = ps.Schedule(one), ps.Schedule(one), ps.Schedule(two)
    s1.parallel(s1.get_loops(s1.get_block("B"))[0])
    for blk in ("B", "C"):
        s2.parallel(s2.get_loops(s2.get_block(blk))[0])
    a, out = np.ones(n, np.float32), np.empty(n, np.float32)
    return {
        "serial": ps.build(serial).bind(a, out),
        "1 parallel loop": ps.build(s1).bind(a, out),
        "2 parallel loops": ps.build(s2).bind(a, out),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    timed = time_interleaved(kernels(args.n), rounds=args.rounds)
    base = timed["serial"].median
    print(f"n = {args.n}, {args.rounds} interleaved rounds\n")
    print("| kernel | µs per call | above serial |")
    print("|---|---:|---:|")
    for name, t in timed.items():
        print(f"| {name} | {t.median * 1e6:.2f} | {(t.median - base) * 1e6:.2f} |")


if __name__ == "__main__":
    main()
