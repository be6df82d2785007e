"""The two parallel forms of the code generator on the best records of tuning databases.

``python benchmarks/bench_parallel_form.py --db tuning.db [--db more.db] [--workloads GMM:2,DEP:0]``
takes each workload's best record, and times its kernel built with ``parallel="threads"``
and with ``parallel="prange"`` (see :mod:`probsched.codegen.emit`), each **in its own
process** (``--rounds`` processes per form, alternating): numba's OpenMP threads keep
spinning after a prange kernel, which slows a threads-form kernel timed in the same
process, so timing both in one process would compare the interference. Prints a Markdown
table: the median over processes of each process's median time, the prange/threads ratio,
the form ``auto`` picks (prange wherever a loop is parallel, since 2026-12-02), and
statements per top-level parallel loop (the work per call a thread handoff is weighed
against). ``--compile K`` also builds the K next-best records in each form (after the best,
whose build compiles the shared launcher) and reports the median over processes of their
mean build seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import probsched as ps  # noqa: E402
from probsched.cli.bench import DEFAULT_WORKLOADS  # noqa: E402


def fastest_records(dbs, name: str, k: int) -> list:
    """The ``k`` fastest successful records of workload ``name`` over the databases, fastest first."""
    w = ps.workloads.get(name)
    return sorted((r for path in dbs for r in ps.database.Database(path).best(w, k=k)), key=lambda r: r.median)[:k]


def best_record(dbs, name: str):
    """The best successful record of workload ``name`` over the databases, or None."""
    return next(iter(fastest_records(dbs, name, 1)), None)


def time_one(dbs, name: str, form: str, rounds: int, compiles: int = 0) -> dict:
    """In this process: ``{"median": seconds of name's best kernel built in form, "build":
    mean wall seconds to build the next ``compiles`` best records in form, without the
    build cache}`` (the best one, built first, also compiles the shared launcher, which
    would not be a kernel's cost)."""
    from probsched.measure.timer import time_interleaved

    w = ps.workloads.get(name)
    best, *others = fastest_records(dbs, name, compiles + 1)
    kernel = ps.build(best.schedule(w.func), parallel=form)
    ins = w.random_inputs(np.random.default_rng(0))
    outs = w.empty_outputs()
    median = time_interleaved({form: lambda: kernel(*ins, *outs)}, rounds=rounds, min_repeat_ms=30)[form].median
    builds = []
    for rec in others:
        sch = rec.schedule(w.func)
        t = time.perf_counter()
        ps.build(sch, parallel=form, cache=False)
        builds.append(time.perf_counter() - t)
    return {"median": median, "build": statistics.mean(builds) if builds else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", action="append", required=True, help="tuning database (repeatable)")
    p.add_argument("--workloads", default=DEFAULT_WORKLOADS, help=f"comma-separated (default {DEFAULT_WORKLOADS})")
    p.add_argument("--rounds", type=int, default=3, help="processes per form")
    p.add_argument("--compile", type=int, default=0, metavar="K",
                   help="also build the next K records in each form and report the mean build seconds")
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "FORM"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(time_one(args.db, args.child[0], args.child[1], rounds=7, compiles=args.compile)))
        return 0
    from probsched.codegen.emit import choose_form, parallel_work
    from probsched.lowering import lower

    names = [n for n in args.workloads.split(",") if n]
    head = "| workload | best stored µs | statements per parallel loop | auto picks | threads µs | prange µs | prange / threads |"
    rule = "|---|---:|---:|---|---:|---:|---:|"
    if args.compile:
        head += " threads build s | prange build s |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    for name in names:
        rec = best_record(args.db, name)
        if rec is None:
            print(f"| {name} | no record | | | | | |")
            continue
        func = lower(rec.schedule(ps.workloads.get(name).func).mod)
        work, outermost = parallel_work(func)
        loops = len(outermost)
        times = {"threads": [], "prange": []}
        builds = {"threads": [], "prange": []}
        for _ in range(args.rounds):
            for form in times:
                cmd = [sys.executable, __file__, "--child", name, form, "--compile", str(args.compile)]
                cmd += [a for d in args.db for a in ("--db", d)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                got = json.loads(out.strip().splitlines()[-1])
                times[form].append(got["median"])
                if got["build"] is not None:
                    builds[form].append(got["build"])
        t, r = (statistics.median(times[f]) * 1e6 for f in ("threads", "prange"))
        per_loop = f"{work / max(loops, 1) / 1e6:.1f} M x {loops}"
        row = f"| {name} | {rec.median * 1e6:.0f} | {per_loop} | {choose_form(func)} | {t:.0f} | {r:.0f} | {r / t:.2f} |"
        if args.compile:
            row += "".join(f" {statistics.median(builds[f]):.2f} |" if builds[f] else " - |" for f in ("threads", "prange"))
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
