"""The tuning-throughput levers of ``benchmarks/README.md`` (issue #53), each measured alone and rerunnable.

They take the databases a ``bench_throughput.py run`` wrote (its JSON lists them under
``runs[].db``) or any database of one suite workload:

``early-stop DB...`` (``export DB...`` writes the records' repeats as JSON, which it also reads)
    Replays each run's records in order and counts the candidates a rule "stop after k
    repeats when the fastest of them is over r x the best median so far" would have stopped
    (r, k in 2.0/2, 1.5/2, 2.0/1, 3.0/1), how many of those had a full median under the
    threshold (a wrong stop) and how many were in the run's final top 8.

``opt-level --db DB --workload W [-k 8]``
    Builds k records (half the best, half drawn) at numba's ``OPT`` 3, 2 and 1, rotating the
    order per record, in this process; prints the mean build seconds per level and each
    level's kernel run time over OPT 3's (one interleaved timing per record).

``front-end --db DB --workload W [-k 8]``
    The same builds with numba's default pipeline and with the shorter front end of
    generated functions (:func:`probsched.codegen.compile.generated_options`).

``protocol --db DB --workload W [-k 24] [--times 4]``
    How the timing protocols (repeats x minimum repeat ms: 5 x 50, the default until
    2026-12-05, 3 x 50, 5 x 25, the default since, 3 x 25) rank k records against all of
    them timed together: seconds per candidate, error, rank correlation, top-8 overlap, and
    the reference time of each protocol's pick over the best's.

``build-times --arm NAME=TREE --arm NAME=TREE --db DB --workload W [-k 8] [--rounds 2]``
    Build seconds of the same k records by two source trees (one process per tree and
    round, alternating; the program cache off), and the per-record ratio of the second
    tree's to the first's.

``quality RUN.json... [--tree TREE] [--rounds 31] [--times 2]``
    Per workload, the best kernel of every run in the files (``bench_throughput.py run
    --out``), all arms and repeats, timed together in one worker, interleaved, ``--times``
    times: how far the bests of one arm spread against another's in one stretch of time.

``retime-warmup --db DB --workload W [--times 3]``
    The 8 best records of DB timed together as the re-timing does (15 interleaved rounds of
    50 ms) with a whole untimed repeat before each timed one and with a tenth of one,
    alternating; prints each timing's seconds, its winner and every median.

Each prints a Markdown table or lines; ``--json`` where it says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# ----------------------------------------------------------------------------- early stop


def repeats_in_order(path: str) -> dict:
    """workload name -> every record's repeat means, in measuring order: from a database, or
    from a JSON file of that mapping (what ``export`` writes)."""
    if path.endswith(".json"):
        with open(path) as fh:
            return json.load(fh)
    import sqlite3

    con = sqlite3.connect(path)
    name = con.execute("SELECT name FROM workloads").fetchone()[0]
    runs = [json.loads(r[0]) for r in con.execute("SELECT run_seconds FROM records ORDER BY id")]
    con.close()
    return {name: runs}


def early_stop(paths) -> str:
    rules = [(2.0, 2), (1.5, 2), (2.0, 1), (3.0, 1)]
    lines = [
        "| workload | rule (ratio, after repeats) | stopped | full median under the threshold | in the final top 8 | repeats saved |",
        "|---|---|---:|---:|---:|---:|",
    ]
    runs_of = {}
    for path in paths:
        runs_of.update(repeats_in_order(path))
    for name, runs in runs_of.items():
        top = sorted(statistics.median(r) for r in runs if r)[:8]
        for ratio, k in rules:
            best, stopped, wrong, in_top, saved = float("inf"), 0, 0, 0, 0
            for r in runs:
                if not r:
                    continue
                med = statistics.median(r)
                if best < float("inf") and min(r[:k]) > ratio * best:
                    stopped += 1
                    saved += len(r) - k
                    wrong += med <= ratio * best
                    in_top += bool(top) and med <= top[-1]
                else:
                    best = min(best, med)
            lines.append(f"| {name} | {ratio}, {k} | {stopped}/{len(runs)} | {wrong} | {in_top} | {saved} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- numba OPT


def _picked_records(args):
    """(workload, k records of ``args.db``: the ``k // 2`` best, then ones drawn from the rest
    with a fixed seed, and that count of best)."""
    import numpy as np

    import probsched as ps
    from probsched.database import Database

    w = ps.workloads.get(args.workload)
    with Database(args.db) as db:
        records = db.best(w, k=10**6)
    half = args.k // 2
    rng = np.random.default_rng(0)
    picked = records[:half] + [records[i] for i in rng.choice(np.arange(half, len(records)), size=args.k - half, replace=False)]
    return w, picked, half


def _bound_calls(w, records) -> dict:
    """index -> a compiled kernel of each record bound to one set of aligned inputs."""
    import numpy as np

    import probsched as ps
    from probsched.aligned import aligned_copy, aligned_empty

    inputs = [aligned_copy(a) for a in w.random_inputs(np.random.default_rng(0))]
    calls = {}
    for i, rec in enumerate(records):
        kernel = ps.build(rec.schedule(w.func))
        calls[i] = kernel.bind(*inputs, *[aligned_empty(b.shape, b.dtype) for b in kernel.outputs])
    return calls


def _compare_builds(args, variants: dict, title: str) -> str:
    """Build k records of ``args.db`` (half the best, half drawn) under each of ``variants``
    (name -> a function that sets the variant up and returns the one that undoes it),
    rotating their order per record, in this process; mean build seconds per variant and
    each variant's kernel run time over the first's (one interleaved timing per record)."""
    import probsched as ps
    from probsched.codegen.compile import warm_up
    from probsched.measure.reference import from_workload
    from probsched.measure.timer import time_interleaved

    os.environ["PROBSCHED_PROGRAM_CACHE"] = "0"
    names = list(variants)
    warm_up()
    warm_up(True)
    w, picked, half = _picked_records(args)
    ps.build(picked[0].schedule(w.func), cache=False)  # first-kernel costs (launcher, micro-kernels) out of the figures
    ref = from_workload(w)
    seconds = {n: [] for n in names}
    ratios = {n: [] for n in names}
    for j, rec in enumerate(picked):
        sch = rec.schedule(w.func)
        calls = {}
        for n in names[j % len(names):] + names[: j % len(names)]:
            undo = variants[n]()
            try:
                t = time.perf_counter()
                kernel = ps.build(sch, cache=False)
                seconds[n].append(time.perf_counter() - t)
            finally:
                undo()
            outs = ref.empty_outputs(kernel)
            arrays = ref.arguments(kernel, outs)
            kernel(*arrays)
            ref.check(w.func, outs)
            calls[n] = kernel.bind(*arrays)
        timed = time_interleaved(calls, rounds=9, min_repeat_ms=30, settle_s=0.0)
        for n in names:
            ratios[n].append(timed[n].median / timed[names[0]].median)
    lines = [f"{args.workload}, {len(picked)} records ({half} best), {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}", "",
             f"| {title} | build s (mean) | run time / {names[0]}'s (median) | of the best half | max |", "|---|---:|---:|---:|---:|"]
    for n in names:
        r = ratios[n]
        lines.append(f"| {n} | {statistics.mean(seconds[n]):.2f} | {statistics.median(r):.3f} | {statistics.median(r[:half]):.3f} | {max(r):.3f} |")
    return "\n".join(lines)


def opt_level(args) -> str:
    from numba.core import config

    def at(level):
        def setup():
            saved = config.OPT
            config.OPT = config._OptLevel(level)
            return lambda: setattr(config, "OPT", saved)
        return setup

    return _compare_builds(args, {str(lv): at(lv) for lv in (3, 2, 1)}, "numba OPT")


def front_end(args) -> str:
    """numba's default pipeline for generated functions against :func:`generated_options`."""
    import probsched.codegen.compile as compile_mod

    def default():
        saved = compile_mod.generated_options
        compile_mod.generated_options = lambda by_address=False: compile_mod.compile_options()
        return lambda: setattr(compile_mod, "generated_options", saved)

    return _compare_builds(args, {"default pipeline": default, "generated_options": lambda: (lambda: None)}, "numba front end")


# ----------------------------------------------------------------------------- timing protocol


PROTOCOLS = {"5 x 50 ms": (5, 50.0), "3 x 50 ms": (3, 50.0), "5 x 25 ms": (5, 25.0), "3 x 25 ms": (3, 25.0)}


def protocol(args) -> str:
    """How well each timing protocol ranks k records (half the best, half drawn) against a
    reference: all k timed together, interleaved (9 rounds of 50 ms). Each protocol times
    every candidate alone, as a worker does (``time_callable``, calibration reused), in a
    shuffled order, ``--times`` passes, the protocols alternating."""
    import numpy as np

    from probsched.measure.timer import time_callable, time_interleaved

    w, picked, half = _picked_records(args)
    rng = np.random.default_rng(1)  # the protocols' candidate orders
    calls = _bound_calls(w, picked)
    ref = {i: t.median for i, t in time_interleaved(dict(calls), rounds=9, min_repeat_ms=50, settle_s=0.0, warm_up=0.1).items()}
    ref_rank = sorted(ref, key=ref.get)
    best_ref = ref[ref_rank[0]]
    rows = {name: {"seconds": [], "err": [], "rho": [], "top8": [], "regret": []} for name in PROTOCOLS}
    names = list(PROTOCOLS)
    for t in range(args.times):
        for name in names if t % 2 == 0 else names[::-1]:
            repeat, ms = PROTOCOLS[name]
            order = list(calls)
            rng.shuffle(order)
            med = {}
            start = time.perf_counter()
            for i in order:
                med[i] = time_callable(calls[i], repeat=repeat, min_repeat_ms=ms, reuse_calibration=True).median
            rows[name]["seconds"].append((time.perf_counter() - start) / len(order))
            rank = sorted(med, key=med.get)
            pos = {i: r for r, i in enumerate(rank)}
            ref_pos = {i: r for r, i in enumerate(ref_rank)}
            n = len(rank)
            d2 = sum((pos[i] - ref_pos[i]) ** 2 for i in calls)
            rows[name]["rho"].append(1 - 6 * d2 / (n * (n * n - 1)))
            rows[name]["err"].append(statistics.median(abs(np.log(med[i] / ref[i])) for i in calls) * 100)
            rows[name]["top8"].append(len(set(rank[:8]) & set(ref_rank[:8])) / 8)
            rows[name]["regret"].append(ref[rank[0]] / best_ref)
    lines = [f"{args.workload}: {len(picked)} records of {args.db} ({half} best), {time.strftime('%Y-%m-%d %H:%M')}, "
             f"load {os.getloadavg()[0]:.1f}; reference: all timed together, 9 interleaved rounds of 50 ms; "
             f"{args.times} passes per protocol", "",
             "| protocol (repeats x min ms) | s per candidate | median error vs reference % | Spearman rank | top-8 overlap | reference time of its pick / best |",
             "|---|---:|---:|---:|---:|---:|"]
    for name in names:
        r = rows[name]
        lines.append(f"| {name} | {statistics.mean(r['seconds']):.3f} | {statistics.mean(r['err']):.1f} | "
                     f"{statistics.mean(r['rho']):.3f} | {statistics.mean(r['top8']):.2f} | {max(r['regret']):.3f} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- two trees

_BUILD_SCRIPT = r"""
import json, os, sys, time
os.environ["PROBSCHED_PROGRAM_CACHE"] = "0"
import numpy as np, probsched as ps
from probsched.codegen.compile import warm_up
from probsched.database import Database
path, name, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
warm_up(); warm_up(True)
w = ps.workloads.get(name)
with Database(path) as db:
    recs = db.records(w, include_failed=False)
picked = [recs[i] for i in np.random.default_rng(7).choice(len(recs), size=min(k + 1, len(recs)), replace=False)]
ps.build(picked[0].schedule(w.func), cache=False)  # the process's first-kernel costs (launcher, spin pool)
out = []
for r in picked[1:]:
    sch = r.schedule(w.func)
    t = time.perf_counter(); ps.build(sch, cache=False); out.append(time.perf_counter() - t)
print(json.dumps(out))
"""


def build_times(args) -> str:
    arms = [a.partition("=")[::2] for a in args.arm]
    if len(arms) != 2:
        raise SystemExit("build-times: give two --arm NAME=TREE")
    got = {name: [] for name, _ in arms}
    for rnd in range(args.rounds):
        for name, tree in (arms if rnd % 2 == 0 else arms[::-1]):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            out = subprocess.run([sys.executable, "-c", _BUILD_SCRIPT, args.db, args.workload, str(args.k)],
                                 env=env, capture_output=True, text=True, check=True)
            got[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    (a, _), (b, _) = arms
    ratios = [y / x for ra, rb in zip(got[a], got[b]) for x, y in zip(ra, rb)]
    mean = {n: statistics.mean(sum(v, [])) for n, v in got.items()}
    return (f"{args.workload}: {args.k} records x {args.rounds} rounds, load {os.getloadavg()[0]:.1f}: "
            f"build s mean {a} {mean[a]:.2f}, {b} {mean[b]:.2f}; per-record {b} / {a} median {statistics.median(ratios):.2f}")


# ----------------------------------------------------------------------------- re-timing


def _retime_variants(args, variants: dict, title: str) -> str:
    """The 8 best records of ``args.db`` timed together as the re-timing does (15
    interleaved rounds of 50 ms), under each of ``variants`` (name -> ``time_interleaved``
    keywords), alternating their order, ``args.times`` times: seconds, winner, medians."""
    import probsched as ps
    from probsched.database import Database
    from probsched.measure.timer import time_interleaved

    w = ps.workloads.get(args.workload)
    with Database(args.db) as db:
        top = db.best(w, k=8)
    calls = _bound_calls(w, top)
    lines = [f"{args.workload}: the 8 best of {args.db}, {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}", "",
             f"| {title} | seconds | winner (search rank) | medians µs, search rank 0-7 |", "|---|---:|---:|---|"]
    names = list(variants)
    for t in range(args.times):
        for name in names if t % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            timed = time_interleaved(dict(calls), rounds=15, min_repeat_ms=50, settle_s=0.0, **variants[name])
            took = time.perf_counter() - start
            med = {i: x.median for i, x in timed.items()}
            winner = min(med, key=med.get)
            cells = " ".join(f"{med[i] * 1e6:.0f}" for i in range(len(med)))
            lines.append(f"| {name} | {took:.1f} | #{winner} | {cells} |")
    return "\n".join(lines)


def retime_warmup(args) -> str:
    return _retime_variants(args, {"1.0": dict(warm_up=1.0), "0.1": dict(warm_up=0.1)}, "warm-up (of a repeat)")


# ----------------------------------------------------------------------------- quality

_QUALITY_SCRIPT = r"""
import json, sys, probsched as ps
from probsched.measure import LocalMeasurer
d = json.load(sys.stdin)
w = ps.workloads.get(d["workload"])
with LocalMeasurer(workers=1) as m:
    out = [[r.median * 1e6 if r.ok else None for r in m.measure_together(w, d["traces"], rounds=d["rounds"])] for _ in range(d["times"])]
print(json.dumps(out))
"""


def quality(args) -> str:
    """Every run's best kernel of each workload timed together (one worker, interleaved)."""
    runs = []
    for path in args.json:
        with open(path) as fh:
            runs += [r for r in json.load(fh)["runs"] if r.get("best_trace")]
    lines = [f"{time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}; each cell: median µs of {args.rounds} "
             f"interleaved rounds, {args.times} timings (the code of {args.tree})", ""]
    for workload in dict.fromkeys(r["workload"] for r in runs):
        mine = [r for r in runs if r["workload"] == workload]
        labels = [f"{r['arm']}#{r.get('rep', 0)}" for r in mine]
        payload = json.dumps({"workload": workload, "traces": [r["best_trace"] for r in mine], "rounds": args.rounds, "times": args.times})
        env = dict(os.environ, PYTHONPATH=os.path.abspath(args.tree))
        out = subprocess.run([sys.executable, "-c", _QUALITY_SCRIPT], input=payload, env=env, capture_output=True, text=True, check=True)
        timings = json.loads(out.stdout.strip().splitlines()[-1])
        lines += [f"**{workload}**", "", "| run's best | " + " | ".join(f"timing {i + 1}" for i in range(args.times)) + " |",
                  "|---|" + "---:|" * args.times]
        for j, label in enumerate(labels):
            lines.append(f"| {label} | " + " | ".join("-" if t[j] is None else f"{t[j]:.1f}" for t in timings) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("early-stop")
    e.add_argument("db", nargs="+", help="databases, or JSON files written by export")
    x = sub.add_parser("export", help="the repeat means of databases' records, in order, as JSON (for early-stop)")
    x.add_argument("db", nargs="+")
    o = sub.add_parser("opt-level")
    f = sub.add_parser("front-end")
    pr = sub.add_parser("protocol")
    pr.add_argument("--times", type=int, default=4)
    b = sub.add_parser("build-times")
    b.add_argument("--arm", action="append", required=True)
    b.add_argument("--rounds", type=int, default=2)
    qa = sub.add_parser("quality", help="every run's best kernel of a workload timed together")
    qa.add_argument("json", nargs="+", help="bench_throughput.py run --out files")
    qa.add_argument("--tree", default=os.path.join(HERE, ".."))
    qa.add_argument("--rounds", type=int, default=31)
    qa.add_argument("--times", type=int, default=2)
    r = sub.add_parser("retime-warmup")
    r.add_argument("--times", type=int, default=3)
    for q in (o, f, pr, b, r):
        q.add_argument("--db", required=True)
        q.add_argument("--workload", required=True)
    for q in (o, f, b):
        q.add_argument("-k", type=int, default=8)
    pr.add_argument("-k", type=int, default=24)
    args = p.parse_args(argv)
    if args.cmd == "early-stop":
        print(early_stop(args.db))
    elif args.cmd == "export":
        out = {}
        for path in args.db:
            out.update(repeats_in_order(path))
        print(json.dumps(out))
    elif args.cmd == "quality":
        print(quality(args))
    elif args.cmd == "opt-level":
        print(opt_level(args))
    elif args.cmd == "protocol":
        print(protocol(args))
    elif args.cmd == "front-end":
        print(front_end(args))
    elif args.cmd == "build-times":
        print(build_times(args))
    else:
        print(retime_warmup(args))


if __name__ == "__main__":
    main()
