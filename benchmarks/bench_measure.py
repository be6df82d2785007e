"""Throughput of the measurement pipeline: sample -> worker (replay, build, check, time) -> SQLite.

``python benchmarks/bench_measure.py`` samples ``-n`` (64) random candidates of ``--workload``
(GMM:2) from ``--space`` (default), measures them with a :class:`LocalMeasurer` and commits
every record to a SQLite file, then prints a Markdown table: trials per minute, mean wall
seconds per trial, and where the time went. Worker time is split per trial into compile
(replay + build, measured by the caller), run (check + timing, one kernel at a time) and
other (worker start-up, waiting for the cores, messages): ``workers x wall = compile + run +
other``. Caller time (sampling, committing) is listed apart. ``--json`` prints JSON instead.

``--memory`` measures instead how a worker's resident memory grows with its compiles (one
worker, never recycled) and prints RSS against the compile count: what
``DEFAULT_MAX_COMPILES`` is chosen from.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import probsched as ps  # noqa: E402
from handlers import seed, trace  # noqa: E402
from probsched.database import Database, TuningRecord  # noqa: E402
from probsched.measure import LocalMeasurer  # noqa: E402


def space_named(name: str):
    """The design space called ``name`` (only ``default`` exists for now)."""
    if name == "default":
        return ps.space.default()
    factory = getattr(ps.space, name, None)
    if not callable(factory):
        raise SystemExit(f"unknown space {name!r}")
    return factory()


def sample(workload, space, n: int, first_seed: int) -> list:
    """``n`` candidates: the space run with seeds ``first_seed ...`` (decisions kept)."""
    out = []
    for i in range(n):
        sch = ps.Schedule(workload.func)
        decisions = trace(seed(space, first_seed + i)).get_trace(sch)
        out.append((sch, decisions))
    return out


def throughput(args) -> dict:
    workload = ps.workloads.get(args.workload)
    space = space_named(args.space)
    t0 = time.perf_counter()
    candidates = sample(workload, space, args.n, args.seed)
    sample_s = time.perf_counter() - t0
    commit_s = [0.0]
    path = os.path.join(tempfile.mkdtemp(), "bench.db")
    with Database(path) as db, LocalMeasurer(
        workers=args.workers,
        compile_timeout=args.compile_timeout,
        run_timeout=args.run_timeout,
        overlap_builds=args.overlap,
    ) as m:
        key = db.commit_workload(workload)

        def commit(i: int, r) -> None:
            t = time.perf_counter()
            sch, decisions = candidates[i]
            db.commit_record(TuningRecord.from_result(key, sch, r, decisions, space=args.space, strategy="bench"))
            commit_s[0] += time.perf_counter() - t
            if args.verbose:
                print(f"  {i:3d} {r.error_kind or 'ok':12s} compile {r.compile_seconds:6.2f} s  "
                      f"median {r.median * 1e3:9.3f} ms", file=sys.stderr, flush=True)

        t1 = time.perf_counter()
        results = m.measure(workload, [c[0] for c in candidates], on_result=commit)
        wall = time.perf_counter() - t1
        stats = m.stats
        best = db.best(workload, k=1)
    n = len(results)
    slots = args.workers * wall
    failures = collections.Counter(r.error_kind for r in results if not r.ok)
    return {
        "workload": args.workload,
        "space": args.space,
        "trials": n,
        "workers": args.workers,
        "overlap_builds": args.overlap,
        "wall_s": wall,
        "trials_per_min": 60.0 * n / wall,
        "s_per_trial": wall / n,
        "compile_s_per_trial": stats.compile_seconds / n,
        "build_s_per_trial": stats.build_seconds / n,
        "run_s_per_trial": stats.run_seconds / n,
        "other_worker_s_per_trial": (slots - stats.compile_seconds - stats.run_seconds) / n,
        "wait_s_per_trial": stats.wait_seconds / n,
        "worker_starts": stats.worker_starts,
        "caller_sample_s_per_trial": sample_s / n,
        "caller_commit_s_per_trial": commit_s[0] / n,
        "ok": sum(r.ok for r in results),
        "failures": dict(failures),
        "best_gflops": workload.flops / best[0].median / 1e9 if best else 0.0,
        "max_worker_rss_mb": max((x[2] for x in stats.memory), default=0.0),
        "load_avg_1min": os.getloadavg()[0],
    }


def table(d: dict) -> str:
    fails = ", ".join(f"{k} {v}" for k, v in sorted(d["failures"].items())) or "none"
    rows = [
        ("trials (ok)", f"{d['trials']} ({d['ok']})"),
        ("workers (compiles during timing)", f"{d['workers']} ({'go on' if d['overlap_builds'] else 'paused'})"),
        ("wall s", f"{d['wall_s']:.1f}"),
        ("**trials / min**", f"**{d['trials_per_min']:.1f}**"),
        ("**mean s / trial (wall)**", f"**{d['s_per_trial']:.2f}**"),
        ("worker compile s / trial (of it in ps.build)", f"{d['compile_s_per_trial']:.2f} ({d['build_s_per_trial']:.2f})"),
        ("worker run s / trial (check + timing)", f"{d['run_s_per_trial']:.2f}"),
        ("worker other s / trial (start-up, waiting, messages)", f"{d['other_worker_s_per_trial']:.2f}"),
        ("of it waiting for the cores s / trial", f"{d['wait_s_per_trial']:.2f}"),
        ("worker starts", f"{d['worker_starts']}"),
        ("caller sample + commit s / trial", f"{d['caller_sample_s_per_trial']:.3f} + {d['caller_commit_s_per_trial']:.4f}"),
        ("failures by kind", fails),
        ("best candidate GFLOP/s", f"{d['best_gflops']:.1f}"),
        ("max worker RSS MiB", f"{d['max_worker_rss_mb']:.0f}"),
        ("load average (1 min) at the end", f"{d['load_avg_1min']:.1f}"),
    ]
    head = f"| {d['workload']}, space {d['space']} | value |\n|---|---:|\n"
    return head + "\n".join(f"| {a} | {b} |" for a, b in rows)


def memory(args) -> dict:
    workload = ps.workloads.get(args.workload)
    candidates = sample(workload, space_named(args.space), args.n, args.seed)
    with LocalMeasurer(
        workers=1, max_compiles_per_worker=10**6, max_worker_rss_mb=1e9, compile_timeout=args.compile_timeout,
        run_timeout=args.run_timeout, repeat=1, min_repeat_ms=1.0,
    ) as m:
        results = m.measure(workload, [c[0] for c in candidates])
        samples = m.stats.memory
    per_pid = collections.defaultdict(list)
    for pid, compiles, rss in samples:
        per_pid[pid].append((compiles, rss))
    runs = [v for v in per_pid.values() if len(v) >= 2]
    longest = max(runs, key=len) if runs else []
    growth = (longest[-1][1] - longest[0][1]) / max(1, longest[-1][0] - longest[0][0]) if longest else 0.0
    return {
        "workload": args.workload,
        "candidates": len(results),
        "failures": dict(collections.Counter(r.error_kind for r in results if not r.ok)),
        "samples": samples,
        "mib_per_compile": growth,
        "first": longest[0] if longest else None,
        "last": longest[-1] if longest else None,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="GMM:2")
    p.add_argument("--space", default="default")
    p.add_argument("-n", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--compile-timeout", type=float, default=30.0)
    p.add_argument("--run-timeout", type=float, default=10.0)
    p.add_argument("--overlap", action="store_true", help="keep compiling while a kernel is timed (noisier)")
    p.add_argument("--memory", action="store_true", help="measure worker RSS against compiles instead")
    p.add_argument("--json", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per result on stderr")
    args = p.parse_args(argv)
    if args.memory:
        d = memory(args)
        if args.json:
            print(json.dumps(d))
            return
        print("| compiles | RSS MiB |\n|---:|---:|")
        for _, compiles, rss in d["samples"]:
            print(f"| {compiles} | {rss:.0f} |")
        print(f"\nfailures: {d['failures']}; growth {d['mib_per_compile']:.2f} MiB per compile "
              f"({d['first']} -> {d['last']})")
        return
    d = throughput(args)
    print(json.dumps(d) if args.json else table(d))


if __name__ == "__main__":
    main()
