"""Quickstart: a schedule written as a probabilistic program, searched by prior sampling.

Run:  python examples/quickstart.py [--trials 6] [--workload GMM:2]

The schedule below tiles a matmul around a register-blocked micro-kernel. Every choice it
cannot make alone (micro-kernel shape, tile sizes, panel length) is a ``sample`` site, so
``trace(seed(...))`` draws a candidate, ``replay`` rebuilds it, and the instruction log
prints as Python. Each candidate is compiled with numba, checked against numpy, and timed.
(``probsched tune``, with the cost model and evolutionary search, replaces this loop later.)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import probsched as ps
from handlers import replay, seed, trace
from probsched.measure.timer import time_callable


def matmul_schedule(sch: ps.Schedule) -> None:
    """Tile Z[b, i, j] = sum_k X[b, i, k] * Y[b, k, j] for a micro-kernel; pack the B panel."""
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    # the kernel's columns must tile j exactly (its rows may leave a remainder)
    candidates = ("matmul_4x16", "matmul_6x16", "matmul_8x8", "matmul_4x24")
    shapes = [s for s in candidates if sch.get(j).extent % ps.intrinsics.get(s).meta["N"] == 0]
    shape = sch.sample_categorical(shapes, name="Z/micro_kernel")
    m, n = ps.intrinsics.get(shape).meta["M"], ps.intrinsics.get(shape).meta["N"]
    i_outer, i_tile = sch.split(i, [None, m])
    ic, i0 = sch.split(i_outer, sch.sample_perfect_tile(i_outer, n=2, max_innermost_factor=32))
    j0, j_tile = sch.split(j, [None, n])
    k0, k_tile = sch.split(k, sch.sample_perfect_tile(k, n=2, max_innermost_factor=256))
    sch.reorder(ic, j0, k0, i0, k_tile, i_tile, j_tile)
    sch.decompose_reduction(z, k0)
    packed_b = sch.cache_read(z, 1, "local")  # compacted to the k_tile x n panel
    sch.compute_at(packed_b, k0)
    sch.parallel(ic)
    sch.tensorize(k_tile, shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="GMM:2")
    parser.add_argument("--trials", type=int, default=6)
    args = parser.parse_args()

    w = ps.workloads.get(args.workload)
    print(f"{w.name}: {w.flops / 1e6:.0f} MFLOP on {ps.Target.host()}")
    inputs = w.random_inputs(np.random.default_rng(0))
    expected = w.reference(*inputs)
    x, y = (a[0] for a in inputs)
    numpy_s = time_callable(lambda: x @ y, repeat=5, min_repeat_ms=100).median
    print(f"numpy: {w.flops / numpy_s / 1e9:.1f} GFLOP/s\n")

    best = None
    print("trial  kernel        tiles (i / k)     build s   GFLOP/s   vs numpy")
    for t in range(args.trials):
        sch = ps.Schedule(w.func)
        decisions = trace(seed(matmul_schedule, rng_seed=t)).get_trace(sch)
        start = time.perf_counter()
        kernel = ps.build(sch)
        build_s = time.perf_counter() - start
        outputs = w.empty_outputs()
        kernel(*inputs, *outputs)
        w.check(outputs, expected)  # every candidate computes what numpy computes
        seconds = time_callable(lambda: kernel(*inputs, *outputs), repeat=5, min_repeat_ms=100).median
        gflops = w.flops / seconds / 1e9
        tiles = f"{decisions['Z/i_0/tile'].value} / {decisions['Z/k/tile'].value}"
        print(f"{t:5d}  {decisions['Z/micro_kernel'].value:12s}  {tiles:16s}  {build_s:7.2f}  {gflops:8.1f}  {numpy_s / seconds:8.2f}x")
        if best is None or seconds < best[0]:
            best = (seconds, decisions, sch)

    seconds, decisions, sch = best
    print(f"\nbest: {w.flops / seconds / 1e9:.1f} GFLOP/s; its decisions:\n{decisions}")
    print(f"\nits instruction log (Python that rebuilds it):\n{sch.instructions}")
    again = ps.Schedule(w.func)
    replay(matmul_schedule, decisions)(again)
    assert again.mod == sch.mod, "replaying the decisions rebuilds the same program"
    print("\nreplayed the best decisions: same program")


if __name__ == "__main__":
    main()
