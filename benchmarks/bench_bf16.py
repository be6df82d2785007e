"""bfloat16 kernels against the machine's bf16 peak (issue #62's kernel-level target).

Tunes GMM:2 and C2D:2 in bfloat16 (``--trials`` more trials each, resuming what ``--db``
holds; ``--trials 0`` only times the stored bests), then in one process: the bf16
dot-product peak (``vdpbf16ps``, 16 register-resident vectors), the FMA peak and, where AMX
is usable, the AMX tile peak (``tdpbf16ps``) on all threads (:mod:`bench_peak`), and the
best kernel of each workload timed interleaved
(:func:`probsched.measure.timer.time_interleaved`), each checked against its reference
first. Prints, per workload, the median time, GFLOP/s, and the fraction of each peak; the
target is 85% of the bf16 peak. ``--float32`` adds the float32 workloads beside them. On a
CPU with AMX the bf16 kernels include the tile ones (:mod:`probsched.intrinsics.matmul_amx`);
``taskset -c 0`` runs everything (tuning too) on one thread. The second operand of each
workload is a constant, as a network's weight is: the design space may lay it out once, in
the pair-interleaved order the kernel reads, outside the timed call (``--weights-as-inputs``
times it converted and packed on every call instead: a workload of its own in the database).

Usage::

    python benchmarks/bench_bf16.py --trials 256 --db bf16.db          # tune, then time
    python benchmarks/bench_bf16.py --trials 0 --db bf16.db --json out.json   # time again, quiet
    taskset -c 0 python benchmarks/bench_bf16.py --float32 --trials 256 --db amx.db  # one thread, beside float32
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numba
import numpy as np

import probsched as ps
from probsched.aligned import aligned_copy
from probsched.database import Database
from probsched.intrinsics.matmul_bf16 import native_available
from probsched.measure.timer import time_interleaved

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_peak import amx_peak, vector_peak  # noqa: E402

from probsched.intrinsics import amx  # noqa: E402

TARGET = 0.85


def best_kernel(w, db: Database):
    """The stored best of ``w`` compiled, bound to checked inputs (None without records)."""
    best = db.best(w, k=1)
    if not best:
        return None
    kernel = ps.build(best[0].schedule(w.func))
    # 64-byte aligned, as the measurer's and a compiled network's arrays are: a tile row or
    # vector load split across two cache lines costs an AMX kernel far more than the tuner saw
    inputs = [aligned_copy(x) for x in w.random_inputs(np.random.default_rng(0))]
    outputs = [aligned_copy(x) for x in w.empty_outputs()]
    kernel(*inputs, *outputs)
    w.check(outputs, w.reference(*inputs))
    return kernel.bind(*inputs, *outputs)


def constant_weight(w):
    """``w`` with its second parameter a constant (layout-free: what a network's weight is)."""
    from dataclasses import replace

    from probsched.ir.layout import LAYOUT_FREE

    return replace(w, func=w.func.replace(attrs={LAYOUT_FREE: (w.func.params[1].name,)}))


def tuned_kernels(workloads: dict, trials: int, db_path: str, seed: int) -> dict:
    """``trials`` more trials of each workload (by name) into ``db_path``, then the stored best
    of each as a checked, bound kernel (workloads without records are left out)."""
    if trials:
        for w in workloads.values():
            ps.tune(w, trials=trials, database=db_path, seed=seed)
    with Database(db_path) as db:
        return {n: k for n, k in ((n, best_kernel(w, db)) for n, w in workloads.items()) if k is not None}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="GMM:2:bf16,C2D:2:bf16")
    ap.add_argument("--float32", action="store_true", help="also the float32 version of each workload")
    ap.add_argument("--trials", type=int, default=256, help="more trials per workload (0: time the stored bests)")
    ap.add_argument("--db", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the table's numbers here too")
    ap.add_argument("--weights-as-inputs", action="store_true", help="B an input, packed on every call (module docstring)")
    args = ap.parse_args(argv)
    names = args.workloads.split(",")
    if args.float32:
        names += [n.rsplit(":", 1)[0] for n in names if n.endswith(":bf16")]
    workloads = {n: ps.workloads.get(n) for n in names}
    if not args.weights_as_inputs:
        workloads = {n: constant_weight(w) for n, w in workloads.items()}
    threads = numba.config.NUMBA_NUM_THREADS
    kernels = tuned_kernels(workloads, args.trials, args.db, args.seed)
    timed = time_interleaved(kernels, rounds=args.rounds)
    peaks = {"fma": vector_peak("fma", threads)}
    if native_available():
        peaks["vdpbf16ps"] = vector_peak("dot_pairs", threads)
    if amx.usable():
        peaks["tdpbf16ps"] = amx_peak(threads)
    tiles = "tdpbf16ps" in peaks
    print(ps.Target.host())
    print()
    print(f"peaks on {threads} threads: " + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in peaks.items()))
    print()
    print("| workload | µs | GFLOP/s | of the vdpbf16ps peak | of the FMA peak |" + (" of the AMX peak |" if tiles else ""))
    print("|---|---:|---:|---:|---:|" + ("---:|" if tiles else ""))
    rows = {}
    for n, t in timed.items():
        gflops = workloads[n].flops / t.median / 1e9
        bf16 = gflops / peaks["vdpbf16ps"] if "vdpbf16ps" in peaks else float("nan")
        rows[n] = {"us": t.median * 1e6, "gflops": gflops, "of_bf16_peak": bf16, "of_fma_peak": gflops / peaks["fma"]}
        mark = " (target met)" if bf16 >= TARGET and n.endswith(":bf16") else ""
        extra = ""
        if tiles:
            rows[n]["of_amx_peak"] = gflops / peaks["tdpbf16ps"]
            extra = f" {rows[n]['of_amx_peak']:.0%} |"
        print(f"| {n} | {t.median * 1e6:.1f} | {gflops:.1f} | {bf16:.0%}{mark} | {gflops / peaks['fma']:.0%} |{extra}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"target": str(ps.Target.host()), "threads": threads, "peaks": peaks, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
