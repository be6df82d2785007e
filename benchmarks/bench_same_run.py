"""Does a kernel time the same in the caller's process as in a measure worker?

``probsched bench`` times the best kernel in its own process beside numpy and jax.jit
(``TuneResult.compare``: interleaved rounds, a 0.2 s pause and an untimed repeat before each
timed one), while the tuner's numbers come from measure workers. This script takes the named
best of one database and, in one window, times it under four in-process protocols and once in
a worker, ``--reps`` times in rotation, then prints each protocol's median over the reps,
and how the in-process protocols' parallel launches went
(:func:`probsched.codegen.spin_pool.counting_launches`):

- ``alone``: only our kernel, no pauses (the workers' re-timing protocol, in this process);
- ``alone_paused``: only our kernel, with the compare's pauses;
- ``compare``: the bench's own protocol (ours, numpy, jax.jit; pauses);
- ``compare_no_pause``: the same without the pauses;
- ``worker``: ``LocalMeasurer.measure_together`` of the same candidate (one worker).

The measurer is settled before each in-process protocol, so that no measure worker is
starting beside them (see ``LocalMeasurer.settle``)::

    python benchmarks/bench_same_run.py GMM:2 --db tuning.db --reps 3
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np


def main() -> None:
    from probsched.baselines import baselines
    from probsched.cli.common import resolve_workload
    from probsched.aligned import aligned_copy, aligned_empty
    from probsched.codegen.spin_pool import counting_launches
    from probsched.database import Database
    from probsched.measure import LocalMeasurer
    from probsched.measure.timer import time_interleaved
    from probsched.tuning.selection import best_schedule
    from probsched.tuning import TuneResult

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("workload", help="a suite workload, e.g. GMM:2")
    p.add_argument("--db", required=True, help="a database holding tuned records of it")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()

    w = resolve_workload(args.workload)
    with Database(args.db) as db:
        best = best_schedule(db, w)
    if best is None:
        raise SystemExit(f"{args.db}: no successful record of {args.workload}")
    kernel = TuneResult(w, best, [], best.record.strategy).kernel
    inputs = [aligned_copy(a) for a in w.random_inputs(np.random.default_rng(0))]
    outputs = [aligned_empty(b.shape, b.dtype) for b in kernel.outputs]
    ours = kernel.bind(*inputs, *outputs)
    others = baselines(w, inputs)
    protocols = {
        "alone": lambda: time_interleaved({"o": ours}, settle_s=0.0),
        "alone_paused": lambda: time_interleaved({"o": ours}, settle_s=0.2),
        "compare": lambda: time_interleaved({"o": ours, **others}, settle_s=0.2),
        "compare_no_pause": lambda: time_interleaved({"o": ours, **others}, settle_s=0.0),
    }
    out = {name: [] for name in [*protocols, "worker"]}
    # per in-process protocol, summed over the reps: our parallel launches, those whose wait
    # for the worker's chunk outlasted a spin, those that fell back to prange, and the
    # workers' naps (each one a wake-up the next launch may wait for)
    launches = {name: {"launches": 0, "slow_collects": 0, "fallbacks": 0, "naps": 0} for name in protocols}
    with LocalMeasurer(workers=1) as m:
        for rep in range(args.reps):
            for name, protocol in protocols.items():
                m.settle()
                with counting_launches() as counts:
                    out[name].append(protocol()["o"].median)
                for k in launches[name]:
                    launches[name][k] += counts[k]
            (r,) = m.measure_together(w, [best.record.instruction_log()], rounds=7)
            out["worker"].append(r.median)
            print(rep, {k: round(v[-1] * 1e6, 1) for k, v in out.items()}, flush=True)
    print(f"{args.workload} median µs over {args.reps} reps:", {k: round(statistics.median(v) * 1e6, 1) for k, v in out.items()})
    print("our launches (all reps):", launches)


if __name__ == "__main__":
    main()
