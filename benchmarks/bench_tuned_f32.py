"""Tuned float32 operators against numpy and the FMA peak, on one thread, in one run.

For each workload (default GMM:2 and C2D:2): tune it first when ``--trials`` is given (the
default tuner, both threads), then build the database's best schedule for ``--threads``
threads and time it beside numpy's baseline (:mod:`probsched.baselines`: OpenBLAS, told to
use as many threads, which it must be told before numpy is imported) and the FMA peak of
:mod:`bench_peak` on the same threads: single calls in interleaved rounds, each figure the
best call (the machine may be shared: a call of a few milliseconds often runs undisturbed,
a repeat of many calls seldom does). Every output is checked against the reference first.

::

    python benchmarks/bench_tuned_f32.py --db D --trials 64     # tune 64 more trials each, then time
    python benchmarks/bench_tuned_f32.py --db D                 # time the stored bests again
"""

from __future__ import annotations

import argparse
import os
import sys


def _threads(argv) -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--threads", type=int, default=1)
    return ap.parse_known_args(argv)[0].threads


def _best_calls(fns, rounds: int) -> dict:
    """Seconds of the fastest of ``rounds`` calls of each function, called in turn."""
    import time

    best = {name: float("inf") for name in fns}
    for fn in fns.values():
        fn()  # warm: caches, pages
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    threads = _threads(argv)
    # numpy's BLAS reads its thread count once, when numpy is first imported
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
        if os.environ[var] != str(threads):
            raise SystemExit(f"{var}={os.environ[var]} is set: numpy's BLAS would not run on {threads} thread(s)")
    import numpy as np

    import probsched as ps
    from probsched.baselines import baselines, check_baselines
    from probsched.database import Database

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_peak import vector_peak

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="GMM:2,C2D:2")
    ap.add_argument("--db", required=True)
    ap.add_argument("--trials", type=int, default=0, help="tune this many more trials per workload first")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="threads of our kernels and of numpy's BLAS (default 1)")
    ap.add_argument("--rounds", type=int, default=30, help="interleaved calls of each (default 30)")
    args = ap.parse_args(argv)
    workloads = [ps.workloads.get(n) for n in args.workloads.split(",")]
    for w in workloads if args.trials else ():
        ps.tune(w, trials=args.trials, database=args.db, seed=args.seed)
    target = ps.Target.from_str(f"cpu -threads={args.threads}")
    peak = vector_peak("fma", args.threads)
    print(target)
    print()
    print(f"FMA peak on {args.threads} thread(s): {peak:.1f} GFLOP/s; each time the best of {args.rounds} interleaved calls")
    print()
    print("| workload | ours µs | numpy µs | ours GFLOP/s | of the FMA peak | numpy / ours |")
    print("|---|---:|---:|---:|---:|---:|")
    with Database(args.db) as db:
        for w in workloads:
            best = db.best(w, k=1)
            if not best:
                print(f"| {w.name} | no records | | | | |")
                continue
            kernel = ps.build(best[0].schedule(w.func), target)
            inputs = w.random_inputs(np.random.default_rng(0))
            outputs = w.empty_outputs()
            kernel(*inputs, *outputs)
            w.check(outputs, w.reference(*inputs))
            run = kernel.bind(*inputs, *outputs)
            fns = {"ours": run, **check_baselines(w, inputs, {"numpy": baselines(w, inputs)["numpy"]})}
            best = _best_calls(fns, args.rounds)
            ours, theirs = best["ours"], best["numpy"]
            gflops = w.flops / ours / 1e9
            print(f"| {w.name} | {ours * 1e6:.1f} | {theirs * 1e6:.1f} | {gflops:.1f} | {gflops / peak:.0%} | {theirs / ours:.2f}x |")


if __name__ == "__main__":
    main()
