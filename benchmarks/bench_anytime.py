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

``--onnx-dir D`` tunes the canonical exports ``D/<model>.onnx`` instead of the shipped JAX
models; ``--minutes M`` budgets each seed's run in minutes instead of trials; with
``--reference-db-dir R`` the latency to come within 5% of is that of the network compiled
from ``R/<model>.db`` (an earlier long run: 800 trials), timed in this run beside the
checkpoints, instead of each seed's own full run; ``--no-shipped`` tunes without the
records shipped for this CPU family (search alone)::

    python benchmarks/bench_anytime.py --onnx-dir /tmp/ot/full --reference-db-dir /tmp/eng \
        --minutes 3 --checkpoints 0.5,1,2,3 --seeds 0,1,2 --work D
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import time
from typing import Optional

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


def load_network(name: str, onnx_dir: Optional[str]):
    """(network, example arguments): the canonical export ``onnx_dir/<name>.onnx`` as a graph
    with bench_models' inputs, or the shipped JAX model."""
    if onnx_dir is None:
        return ps.models.get(name)
    from bench_models import _feeds

    path = os.path.join(onnx_dir, f"{name}.onnx")
    graph = ps.from_onnx(path)
    feeds = _feeds(path, name)
    return graph, [feeds[n] for n in graph.input_names]


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
    p.add_argument("--onnx-dir", default=None, help="tune the canonical exports <dir>/<model>.onnx")
    p.add_argument("--minutes", type=float, default=None, help="each seed's budget in minutes (instead of --trials)")
    p.add_argument("--reference-db-dir", default=None, help="<dir>/<model>.db: the long run to come within 5% of")
    p.add_argument("--no-shipped", action="store_true", help="do not start from the records shipped for this CPU")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    checkpoints = [float(c) for c in args.checkpoints.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    budget = f"{args.minutes:g} min" if args.minutes else f"{args.trials} trials"
    report = {"cpu": str(ps.Target.host()), "trials": args.trials, "minutes": args.minutes, "models": {},
              "shipped": not args.no_shipped}
    for name in args.models.split(","):
        network, example = load_network(name, args.onnx_dir)
        runs = {}
        for seed in seeds:
            db = os.path.join(args.work, f"{name}_s{seed}.db")
            if not os.path.exists(db):
                t0 = time.time()
                ps.tune_model(network, *example, trials=None if args.minutes else args.trials, minutes=args.minutes,
                              database=db, seed=seed, compile=False, similar_tasks=args.similar_tasks,
                              shipped=not args.no_shipped)
                print(f"{name} seed {seed}: {budget} tuned in {(time.time() - t0) / 60:.1f} min", flush=True)
            start = first_start(db)
            models = {"full": ps.compile(network, *example, database=db, progress=None)}
            for minutes in checkpoints:
                cut = os.path.join(args.work, f"{name}_s{seed}_{minutes}m.db")
                kept = copy_until(db, cut, start + 60 * minutes)
                models[minutes] = ps.compile(network, *example, database=cut, progress=None)
                print(f"{name} seed {seed}: {minutes} min, {kept} records", flush=True)
            runs[seed] = models
        reference = os.path.join(args.reference_db_dir, f"{name}.db") if args.reference_db_dir else None
        if reference is not None:
            runs["reference"] = {"full": ps.compile(network, *example, database=reference, progress=None)}
        inputs = [np.asarray(e) for e in example]
        fns = {f"{seed}/{label}": (lambda m=m: m(*inputs)) for seed, models in runs.items() for label, m in models.items()}
        from probsched.measure.timer import time_interleaved

        timings = time_interleaved(fns, rounds=args.rounds, min_repeat_ms=200)
        table = {k: t.median for k, t in timings.items()}
        per_seed = {}
        for seed in seeds:
            full = table["reference/full" if reference is not None else f"{seed}/full"]
            curve = [(m, table[f"{seed}/{m}"]) for m in checkpoints]
            within = next((m for m, t in curve if t <= 1.05 * full), None)
            per_seed[seed] = {"full_ms": full * 1e3, "own_full_ms": table[f"{seed}/full"] * 1e3,
                              "curve_ms": [[m, t * 1e3] for m, t in curve], "minutes_to_5pct": within}
        report["models"][name] = per_seed
        against = f"the reference {reference}" if reference is not None else f"each seed's {budget}"
        print(f"\n{name} ({budget} per seed, within 5% of {against}, shipped records {'off' if args.no_shipped else 'on'}, "
              f"{report['cpu']})\n")
        print("| seed | reference ms | end of run ms | " + " | ".join(f"{m:g} min ms" for m in checkpoints) + " | minutes to within 5% |")
        print("|---|---:|---:|" + "---:|" * len(checkpoints) + "---:|")
        for seed, r in per_seed.items():
            cells = " | ".join(f"{t:.2f}" for _, t in r["curve_ms"])
            print(f"| {seed} | {r['full_ms']:.2f} | {r['own_full_ms']:.2f} | {cells} | "
                  f"{r['minutes_to_5pct'] if r['minutes_to_5pct'] is not None else '-'} |")
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
