"""Anytime tuning: a network's measured latency against wall-clock tuning time (issue #66).

For each network and seed, ``tune_model`` runs for ``--trials`` (every record is committed
with its time stamp); then, for each checkpoint (minutes since the start), the network is
compiled from a copy of the database holding only the records committed by then and timed.
All compiled models of a network (every checkpoint of every seed, and the full budget) are
timed together, interleaved, so they compare. The figure of merit: the minutes until the
compiled latency comes within 5% of the full budget's, per seed.

Prints a Markdown table and writes ``--out`` (JSON) and, with matplotlib, ``--plot`` (PNG).

Usage: ``python benchmarks/bench_anytime.py --models resnet50 --trials 800 --seeds 0,1,2 --work D``
(``--models bert_tiny --trials 32 --checkpoints 0.2,0.5`` runs in minutes.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import time

import numpy as np

import probsched as ps

CHECKPOINTS = (0.5, 1, 2, 3, 5, 10, 20)


def copy_until(src: str, dst: str, until: float) -> int:
    """``src`` copied to ``dst`` with only the records committed before ``until`` (a time
    stamp) and no re-timing session; returns the records kept."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    with con:
        con.execute("DELETE FROM records WHERE timestamp > ?", (until,))
        con.execute("DELETE FROM retimings")
        (kept,) = con.execute("SELECT COUNT(*) FROM records").fetchone()
    con.close()
    return kept


def first_start(db: str) -> float:
    con = sqlite3.connect(db)
    (t,) = con.execute("SELECT MIN(timestamp) FROM records").fetchone()
    con.close()
    return float(t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    p.add_argument("--trials", type=int, default=800)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--checkpoints", default=",".join(map(str, CHECKPOINTS)), help="minutes since the start")
    p.add_argument("--work", default="anytime_work", help="folder for the databases")
    p.add_argument("--out", default="anytime.json")
    p.add_argument("--plot", default=None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--similar-tasks", action="store_true", help="start tasks from similar tasks' decisions")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    checkpoints = [float(c) for c in args.checkpoints.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    report = {"cpu": str(ps.Target.host()), "trials": args.trials, "models": {}}
    for name in args.models.split(","):
        fn, example = ps.models.get(name)
        runs = {}
        for seed in seeds:
            db = os.path.join(args.work, f"{name}_s{seed}.db")
            if not os.path.exists(db):
                t0 = time.time()
                ps.tune_model(fn, *example, trials=args.trials, database=db, seed=seed, compile=False,
                              similar_tasks=args.similar_tasks)
                print(f"{name} seed {seed}: {args.trials} trials in {(time.time() - t0) / 60:.1f} min", flush=True)
            start = first_start(db)
            models = {"full": ps.compile(fn, *example, database=db, progress=None)}
            for minutes in checkpoints:
                cut = os.path.join(args.work, f"{name}_s{seed}_{minutes}m.db")
                kept = copy_until(db, cut, start + 60 * minutes)
                models[minutes] = ps.compile(fn, *example, database=cut, progress=None)
                print(f"{name} seed {seed}: {minutes} min, {kept} records", flush=True)
            runs[seed] = models
        fns = {f"{seed}/{label}": (lambda m=m: m(*example)) for seed, models in runs.items() for label, m in models.items()}
        from probsched.measure.timer import time_interleaved

        timings = time_interleaved(fns, rounds=args.rounds, min_repeat_ms=200)
        table = {k: t.median for k, t in timings.items()}
        per_seed = {}
        for seed in seeds:
            full = table[f"{seed}/full"]
            curve = [(m, table[f"{seed}/{m}"]) for m in checkpoints]
            within = next((m for m, t in curve if t <= 1.05 * full), None)
            per_seed[seed] = {"full_ms": full * 1e3, "curve_ms": [[m, t * 1e3] for m, t in curve], "minutes_to_5pct": within}
        report["models"][name] = per_seed
        print(f"\n{name} ({args.trials} trials, {report['cpu']})\n")
        print("| seed | full ms | " + " | ".join(f"{m:g} min ms" for m in checkpoints) + " | minutes to within 5% |")
        print("|---|---:|" + "---:|" * len(checkpoints) + "---:|")
        for seed, r in per_seed.items():
            cells = " | ".join(f"{t:.2f}" for _, t in r["curve_ms"])
            print(f"| {seed} | {r['full_ms']:.2f} | {cells} | {r['minutes_to_5pct'] if r['minutes_to_5pct'] is not None else '-'} |")
    with open(args.out, "w") as fh:
        json.dump(report, fh, indent=2)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(report["models"]), figsize=(5 * len(report["models"]), 4), squeeze=False)
        for ax, (name, per_seed) in zip(axes[0], report["models"].items()):
            for seed, r in per_seed.items():
                ms = np.array(r["curve_ms"])
                ax.plot(ms[:, 0], ms[:, 1], marker="o", label=f"seed {seed}")
                ax.axhline(r["full_ms"] * 1.05, ls=":", lw=0.8)
            ax.set_xscale("log")
            ax.set_xlabel("minutes of tuning")
            ax.set_ylabel("compiled latency (ms)")
            ax.set_title(name)
            ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
