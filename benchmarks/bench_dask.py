"""DaskMeasurer against LocalMeasurer, and the SIMULATED scaling of the tuning loop (issue #49).

``throughput``
    Trials per minute of :class:`LocalMeasurer` (2 worker processes) and of
    :class:`DaskMeasurer` on a ``distributed.LocalCluster`` of 2 worker processes (one thread
    each) on this machine: the same ``-n`` random candidates of ``--workload`` per repeat
    (seeds ``--seed + repeat * n ...``, new candidates each repeat so that no process has
    compiled them before), both measurers warm (a warm-up batch first, untimed), the order
    alternating between repeats. Prints each repeat, then the medians and the ratio Dask /
    local of the medians, and how the two timed the same candidates (median over candidates
    of Dask's median / local's).
``scaling``
    SIMULATED: 1, 2, 4, 8, 16 Dask workers (threads of one in-process ``LocalCluster``) whose
    measuring is a sleep of a GMM:2 trial's compile + run time on this machine (0.81 + 0.49 s
    +-50%: :mod:`probsched.measure.simulate`), fed by the real tuner: trials per minute of
    ``ps.tune`` with the evolutionary search and its default cost model, and with random
    search (``replay``); and of a PROTOTYPE pipelined loop (not ``ps.tune``: it generates the
    next batch while this one is measured, with ``DaskMeasurer.submit``), with random search
    and, at 16 workers only, the evolutionary search with larger batches. Each row also gives
    the workers' busy share while work was waiting (first task start to last task start).

    python benchmarks/bench_dask.py throughput -n 32 --repeats 3
    python benchmarks/bench_dask.py scaling --trials 96

Every table is headed by the CPU (``lscpu``'s model name) and the load average.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import probsched as ps  # noqa: E402
from handlers import seed, trace  # noqa: E402
from probsched.measure import DaskMeasurer, LocalMeasurer  # noqa: E402
from probsched.measure.simulate import Simulation  # noqa: E402


def cpu() -> str:
    """``lscpu``'s model name (``Target.host()``'s when lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return ps.Target.host().model


def header(what: str) -> str:
    return (f"{what}: {cpu()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, "
            f"{time.strftime('%Y-%m-%d %H:%M')}")


def candidates(workload, first_seed: int, n: int) -> list:
    """``n`` random candidates of the default space (seeds ``first_seed ...``)."""
    space = ps.space.default()
    out = []
    for i in range(n):
        sch = ps.Schedule(workload.func)
        trace(seed(space, first_seed + i)).get_trace(sch)
        out.append(sch)
    return out


def timed(measurer, workload, scheds) -> tuple:
    start = time.perf_counter()
    results = measurer.measure(workload, scheds)
    return time.perf_counter() - start, results


def throughput(args) -> None:
    import distributed

    workload = ps.workloads.get(args.workload)
    opts = dict(compile_timeout=args.compile_timeout, run_timeout=args.run_timeout)
    rows = []
    print(header("throughput"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, \
            LocalMeasurer(workers=2, **opts) as local, DaskMeasurer(cluster, **opts) as dask:
        warm = candidates(workload, 10**6, 4)  # seeds no repeat uses
        local.measure(workload, warm)
        dask.measure(workload, warm)
        local.settle()
        for r in range(args.repeats):
            scheds = candidates(workload, args.seed + r * args.n, args.n)
            order = [("local", local), ("dask", dask)]
            if r % 2:
                order.reverse()
            row: Dict[str, object] = {"repeat": r}
            for name, m in order:
                wall, results = timed(m, workload, scheds)
                row[name] = 60.0 * len(scheds) / wall
                row[name + "_results"] = results
                row[name + "_failed"] = sum(not x.ok for x in results)
                local.settle()
            both = [d.median / lo.median for lo, d in zip(row["local_results"], row["dask_results"]) if lo.ok and d.ok]
            row["time_ratio"] = statistics.median(both) if both else float("nan")
            rows.append(row)
            print(f"repeat {r} ({order[0][0]} first): local {row['local']:.1f}/min ({row['local_failed']} failed), "
                  f"dask {row['dask']:.1f}/min ({row['dask_failed']} failed), dask / local {row['dask'] / row['local']:.2f}, "
                  f"same candidates' times dask / local (median) {row['time_ratio']:.2f}", flush=True)
    lo = statistics.median(r["local"] for r in rows)
    da = statistics.median(r["dask"] for r in rows)
    print()
    print(f"| measurer ({args.workload}, {args.n} candidates x {args.repeats} repeats, medians) | trials / min |")
    print("|---|---:|")
    print(f"| LocalMeasurer, 2 worker processes | {lo:.1f} |")
    print(f"| DaskMeasurer, LocalCluster of 2 workers x 1 thread | {da:.1f} |")
    print(f"| **Dask / local** (of the medians; median of each repeat's ratio) | **{da / lo:.2f}** "
          f"({statistics.median(r['dask'] / r['local'] for r in rows):.2f}) |")
    print(f"| kernel times, Dask / local, same candidates (median of per-repeat medians) | "
          f"{statistics.median(r['time_ratio'] for r in rows):.2f} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


# ---------------------------------------------------------------------------- SIMULATED


def busy_while_work_waited(m: DaskMeasurer, since: float) -> float:
    starts = [s for _, s, _ in m.busy if s >= since]
    return m.busy_fraction(min(starts), max(starts)) if len(starts) > 1 else float("nan")


def via_tune(m: DaskMeasurer, strategy: str, trials: int, batch: int, seed: int) -> tuple:
    """``ps.tune`` as it is: trials per minute of the loop, workers' busy share."""
    cost_model = None if strategy == "replay" else ps.cost_model.DEFAULT_COST_MODEL
    since = time.time()
    result = ps.tune("GMM:2", trials=trials, strategy=strategy, cost_model=cost_model, measurer=m, seed=seed,
                     retime_top=0, batch_size=batch)
    wall = time.time() - since
    return 60.0 * len(result.history) / wall, busy_while_work_waited(m, since)


def pipelined(m: DaskMeasurer, strategy: str, trials: int, batch: int, seed: int) -> tuple:
    """PROTOTYPE of a pipelined loop (not ps.tune): ``ps.tune``'s steps (a
    :class:`~probsched.tuning.task_search.TaskSearch`: propose, record, observe), but batch k+1 is
    proposed and queued (``DaskMeasurer.submit``) before batch k is waited for."""
    from probsched.database import Database
    from probsched.tuning.task_search import TaskSearch
    from probsched.tuning.warm_start import warm_start

    w = ps.workloads.get("GMM:2")
    model = None if strategy == "replay" else ps.cost_model.get(ps.cost_model.DEFAULT_COST_MODEL, seed=seed)
    with Database(":memory:") as db:
        search = TaskSearch(w, db, strategy=strategy, model=model, seed=seed)
        warm_start(model, [search])
        since = time.time()

        def send(n: int):
            cands = search.propose(n)  # in flight from here: never proposed again
            return cands, m.submit(w, [c.schedule for c in cands])

        current, sent = send(min(batch, trials)), min(batch, trials)
        while current is not None:
            following = send(min(batch, trials - sent)) if sent < trials else None
            sent += len(following[0]) if following else 0
            cands, out = current
            results = out.wait(lambda i, r, cands=cands: search.record(cands, i, r))
            search.observe(cands, results)
            current = following
        wall = time.time() - since
        return 60.0 * search.trials / wall, busy_while_work_waited(m, since)


def scaling(args) -> None:
    import distributed

    sim = Simulation()
    per_trial = sim.compile_seconds + sim.run_seconds
    print(header("SIMULATED scaling"))
    print(f"SIMULATED workers: each candidate is a sleep of {sim.compile_seconds} + {sim.run_seconds} s "
          f"(+-{sim.spread:.0%}); {args.trials} trials per cell, batches of {args.batch}, seed {args.seed}\n")
    print("| workers | ideal trials / min | ps.tune, evolutionary (busy) | ps.tune, replay (busy) | "
          "pipelined prototype, replay (busy) |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.workers:
        with distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=False, dashboard_address=":0",
                                      silence_logs=logging.ERROR) as cluster, DaskMeasurer(cluster, simulate=sim) as m:
            cells = [f"{60.0 * n / per_trial:.0f}"]
            for fn, strategy in ((via_tune, "evolutionary"), (via_tune, "replay"), (pipelined, "replay")):
                rate, busy = fn(m, strategy, args.trials, args.batch, args.seed)
                cells.append(f"{rate:.0f} ({busy:.0%})")
            print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
    if args.evolutionary_batch:
        n = max(args.workers)
        with distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=False, dashboard_address=":0",
                                      silence_logs=logging.ERROR) as cluster, DaskMeasurer(cluster, simulate=sim) as m:
            for b in args.evolutionary_batch:
                rate, busy = pipelined(m, "evolutionary", 3 * b, b, args.seed)
                print(f"\n{n} workers, pipelined prototype, evolutionary, batches of {b} ({3 * b} trials): "
                      f"{rate:.0f} trials / min (busy {busy:.0%})", flush=True)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("throughput", help="LocalMeasurer against DaskMeasurer on a 2-worker LocalCluster")
    t.add_argument("--workload", default="GMM:2")
    t.add_argument("-n", type=int, default=32)
    t.add_argument("--repeats", type=int, default=3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--compile-timeout", type=float, default=30.0)
    t.add_argument("--run-timeout", type=float, default=10.0)
    s = sub.add_parser("scaling", help="SIMULATED workers fed by the tuner")
    s.add_argument("--workers", type=lambda x: [int(v) for v in x.split(",")], default=[1, 2, 4, 8, 16])
    s.add_argument("--trials", type=int, default=96)
    s.add_argument("--batch", type=int, default=32)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--evolutionary-batch", type=lambda x: [int(v) for v in x.split(",")], default=[],
                   help="also the pipelined prototype with the evolutionary search at the most workers, these batch sizes")
    args = p.parse_args(argv)
    throughput(args) if args.command == "throughput" else scaling(args)


if __name__ == "__main__":
    main()
