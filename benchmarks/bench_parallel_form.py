"""The two parallel forms of the code generator on the best records of tuning databases.

``python benchmarks/bench_parallel_form.py --db tuning.db [--db more.db] [--workloads GMM:2,DEP:0]``
takes each workload's best record, and times its kernel built with ``parallel="threads"``
and with ``parallel="prange"`` (see :mod:`probsched.codegen.emit`), each **in its own
process** (``--rounds`` processes per form, alternating): numba's OpenMP threads keep
spinning after a prange kernel, which slows a threads-form kernel timed in the same
process, so timing both in one process would compare the interference. Prints a Markdown
table: the median over processes of each process's median time, the prange/threads ratio,
the form ``auto`` picks, and statements per top-level parallel loop (what ``auto`` decides
on: :data:`~probsched.codegen.emit.THREADS_MIN_WORK`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import probsched as ps  # noqa: E402
from probsched.cli_commands.bench import DEFAULT_WORKLOADS  # noqa: E402


def best_record(dbs, name: str):
    """The best successful record of workload ``name`` over the databases, or None."""
    w = ps.workloads.get(name)
    bests = [r for path in dbs for r in ps.database.Database(path).best(w, k=1)]
    return min(bests, key=lambda r: r.median, default=None)


def time_one(dbs, name: str, form: str, rounds: int) -> float:
    """In this process: the median seconds of ``name``'s best kernel built in ``form``."""
    from probsched.measure.timer import time_interleaved

    w = ps.workloads.get(name)
    kernel = ps.build(best_record(dbs, name).schedule(w.func), parallel=form)
    ins = w.random_inputs(np.random.default_rng(0))
    outs = w.empty_outputs()
    return time_interleaved({form: lambda: kernel(*ins, *outs)}, rounds=rounds, min_repeat_ms=30)[form].median


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", action="append", required=True, help="tuning database (repeatable)")
    p.add_argument("--workloads", default=DEFAULT_WORKLOADS, help=f"comma-separated (default {DEFAULT_WORKLOADS})")
    p.add_argument("--rounds", type=int, default=3, help="processes per form")
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "FORM"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(time_one(args.db, args.child[0], args.child[1], rounds=7)))
        return 0
    from probsched.codegen.emit import choose_form, parallel_work
    from probsched.lowering import lower

    names = [n for n in args.workloads.split(",") if n]
    print("| workload | best stored µs | statements per parallel loop | auto picks | threads µs | prange µs | prange / threads |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for name in names:
        rec = best_record(args.db, name)
        if rec is None:
            print(f"| {name} | no record | | | | | |")
            continue
        func = lower(rec.schedule(ps.workloads.get(name).func).mod)
        work, outermost = parallel_work(func)
        loops = len(outermost)
        times = {"threads": [], "prange": []}
        for _ in range(args.rounds):
            for form in times:
                cmd = [sys.executable, __file__, "--child", name, form] + [a for d in args.db for a in ("--db", d)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                times[form].append(json.loads(out.strip().splitlines()[-1]))
        t, r = (statistics.median(times[f]) * 1e6 for f in ("threads", "prange"))
        per_loop = f"{work / max(loops, 1) / 1e6:.1f} M x {loops}"
        print(f"| {name} | {rec.median * 1e6:.0f} | {per_loop} | {choose_form(func)} | {t:.0f} | {r:.0f} | {r / t:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
