"""Evolutionary search against random search (ReplayTrace), issue #9's strategy target.

``run``
    For each seed, each workload: ``ps.tune`` with each strategy (default: the
    evolutionary search with its default cost model, and ``replay``, random search with no
    model), the same trial count, a fresh in-memory database, no re-timing (both curves are
    the search's own worker medians, biased alike). The two strategies alternate which goes
    first from one workload to the next, so a drift of the machine does not favour one. Each
    run's best-so-far curve is written to ``--out`` as soon as it ends; running again with
    the same file skips the runs it holds (an interrupted sweep resumes).
``table``
    From such a file: per workload and strategy the best of each seed, the median over
    seeds, evolutionary / replay, and the first trial where the median over seeds of the
    evolutionary best-so-far reaches replay's median best (issue #9: "beats ReplayTrace at
    the same trial count on at least 7 of the 9 workloads, median of 3 seeds, and reaches
    ReplayTrace's 128-trial best in at most half the trials"). Times nothing.

    python benchmarks/bench_strategies.py run --seeds 0,1,2 --out strategies.json
    python benchmarks/bench_strategies.py run --workloads NRM:2 --trials 16 --out s.json
    python benchmarks/bench_strategies.py table strategies.json [--out strategies.md]

A sweep of the nine workloads costs about 4 minutes per (workload, strategy, seed) at 128
trials on 2 cores: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any, Dict, List, Optional

import probsched as ps
from probsched.cli.bench import DEFAULT_WORKLOADS
from probsched.cli.common import num
from probsched.target import Target

STRATEGIES = ("evolutionary", "replay")
SUITE = DEFAULT_WORKLOADS.split(",")


def best_so_far_us(result: "ps.TuneResult") -> List[Optional[float]]:
    """The best worker median after each trial of ``result``, in µs (None before a success)."""
    return [t.best_seconds * 1e6 if t.best_seconds < float("inf") else None for t in result.history]


def one_run(spec: str, strategy: str, seed: int, trials: int) -> Dict[str, Any]:
    """Tune ``spec`` with ``strategy`` from an empty database; its curve and what it cost."""
    start = time.perf_counter()
    cost_model = None if strategy == "replay" else ps.cost_model.DEFAULT_COST_MODEL
    result = ps.tune(spec, trials=trials, strategy=strategy, cost_model=cost_model, seed=seed, retime_top=0)
    return {
        "workload": spec,
        "strategy": strategy,
        "seed": seed,
        "curve_us": best_so_far_us(result),
        "failed": sum(1 for t in result.history if t.error),
        "wall_s": round(time.perf_counter() - start, 1),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def run(args: argparse.Namespace) -> int:
    data: Dict[str, Any] = {"trials": args.trials, "host": str(Target.host()), "runs": []}
    if os.path.exists(args.out):
        with open(args.out) as f:
            data = json.load(f)
        if data["trials"] != args.trials:
            raise SystemExit(f"bench_strategies: {args.out} holds {data['trials']}-trial runs, not {args.trials}")
    done = {(r["workload"], r["strategy"], r["seed"]) for r in data["runs"]}
    specs = [s for s in args.workloads.split(",") if s]
    for seed in (int(s) for s in args.seeds.split(",")):
        for i, spec in enumerate(specs):
            order = STRATEGIES if (i + seed) % 2 == 0 else STRATEGIES[::-1]
            for strategy in order:
                if (spec, strategy, seed) in done:
                    continue
                r = one_run(spec, strategy, seed, args.trials)
                data["runs"].append(r)
                with open(args.out + ".tmp", "w") as f:
                    json.dump(data, f, indent=1)
                os.replace(args.out + ".tmp", args.out)
                best = min((c for c in r["curve_us"] if c is not None), default=None)
                print(f"{r['finished']} {spec} {strategy} seed {seed}: best {best} µs, {r['wall_s']} s", flush=True)
    return 0


def median_curve(curves: List[List[Optional[float]]]) -> List[Optional[float]]:
    """The median over seeds of the best-so-far at each trial (None while any seed has none).

    >>> median_curve([[3.0, 2.0, 1.0], [None, 4.0, 4.0], [5.0, 5.0, 2.0]])
    [None, 4.0, 2.0]
    """
    n = min(len(c) for c in curves)
    out: List[Optional[float]] = []
    for i in range(n):
        at = [c[i] for c in curves]
        out.append(None if None in at else statistics.median(at))
    return out


def summarise(data: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Per workload (in the suite's order): each strategy's bests by seed and their median,
    evolutionary / replay, and ``hit_trial`` (1-based; None: never)."""
    by: Dict[str, Dict[str, Dict[int, List[Optional[float]]]]] = {}
    for r in data["runs"]:
        by.setdefault(r["workload"], {}).setdefault(r["strategy"], {})[r["seed"]] = r["curve_us"]
    out: Dict[str, Dict[str, Any]] = {}
    for spec in sorted(by, key=lambda s: SUITE.index(s) if s in SUITE else len(SUITE)):
        runs = by[spec]
        if not all(s in runs for s in STRATEGIES):
            continue
        seeds = sorted(set(runs["evolutionary"]) & set(runs["replay"]))
        row: Dict[str, Any] = {"seeds": seeds}
        for s in STRATEGIES:
            bests = [min(c for c in runs[s][k] if c is not None) for k in seeds]
            row[s] = {"best": bests, "median": statistics.median(bests)}
        row["evo_over_replay"] = row["evolutionary"]["median"] / row["replay"]["median"]
        target = row["replay"]["median"]
        curve = median_curve([runs["evolutionary"][k] for k in seeds])
        row["hit_trial"] = next((i + 1 for i, v in enumerate(curve) if v is not None and v <= target), None)
        out[spec] = row
    return out


def table(data: Dict[str, Any]) -> str:
    """The summary as Markdown, with the counts issue #9 asks for."""
    rows = summarise(data)
    trials = data["trials"]
    lines = [
        f"Evolutionary ({ps.cost_model.DEFAULT_COST_MODEL}) against replay, {trials} trials, worker medians µs; {data.get('host', '')}",
        "",
        "| workload | evolutionary by seed | replay by seed | median evo | median replay | evo / replay | trial where evo's median curve reaches replay's median best |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for spec, r in rows.items():
        e, p = r["evolutionary"], r["replay"]
        lines.append(
            f"| {spec} | {' / '.join(map(num, e['best']))} | {' / '.join(map(num, p['best']))} | {num(e['median'])} | {num(p['median'])} "
            f"| {r['evo_over_replay']:.2f} | {r['hit_trial'] if r['hit_trial'] else 'never'} |"
        )
    wins = sum(1 for r in rows.values() if r["evo_over_replay"] < 1)
    half = sum(1 for r in rows.values() if r["hit_trial"] is not None and r["hit_trial"] <= trials // 2)
    lines += ["", f"Evolutionary ahead on {wins} of {len(rows)}; reaches replay's best within {trials // 2} trials on {half} of {len(rows)}."]
    return "\n".join(lines)


def table_cmd(args: argparse.Namespace) -> int:
    with open(args.file) as f:
        text = table(json.load(f))
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="tune each workload with each strategy and seed")
    r.add_argument("--workloads", default=DEFAULT_WORKLOADS)
    r.add_argument("--seeds", default="0,1,2")
    r.add_argument("--trials", type=int, default=128)
    r.add_argument("--out", required=True, help="JSON of the runs (resumed if it exists)")
    r.set_defaults(fn=run)
    t = sub.add_parser("table", help="the Markdown summary of a run file")
    t.add_argument("file")
    t.add_argument("--out")
    t.set_defaults(fn=table_cmd)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
