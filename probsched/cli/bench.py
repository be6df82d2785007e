"""``probsched bench``: tune suite workloads, then time the best kernels beside numpy and jax.jit.

For each workload (default: the nine of the issue's TVM comparison) it tunes ``--trials``
new candidates into ``--db`` (``--trials 0`` reuses the database's best), then times the
best kernel, numpy and jax.jit in this process on the same inputs, interleaved in rounds
(:func:`probsched.measure.timer.time_interleaved`).
The Markdown table and the JSON are rewritten after each workload, so an interrupted
bench keeps what it finished.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from typing import Any, Dict, List, Optional

from ..target import Target
from ..tuning import TuneResult
from ..tuning.selection import best_schedule
from .common import (
    CLIError,
    add_search_options,
    check_writable,
    comparison,
    family_share,
    host_records,
    is_suite_workload,
    lost_trials,
    make_measurer,
    measure_label,
    num,
    open_database,
    resolve_space,
    resolve_workload,
    search_label,
    strategy_options,
)
from .progress import tune_with_progress

#: The workloads of the issue's comparison with TVM MetaSchedule.
DEFAULT_WORKLOADS = "GMM:2,GMM:3,C1D:0,C2D:2,DEP:0,T2D:0,CBR:1,SFM:2,NRM:2"

#: Named workload lists for ``--suite``: ``all`` is one configuration of each of the paper's
#: 13 operators (the configuration the first comparison used where there was one, else a
#: mid-sized one: a 1x1x1 3-D convolution, 14x14x256 grouped and dilated 3x3 convolutions).
SUITES = {
    "default": DEFAULT_WORKLOADS,
    "all": "GMM:2,C1D:0,C2D:2,C3D:1,GRP:2,DIL:2,DEP:0,T2D:0,CAP:0,NRM:2,SFM:2,CBR:1,TBG:0",
}

def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="tune suite workloads and write a Markdown table and JSON (ours vs numpy vs jax.jit)",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    p.add_argument("--workloads", default=None, help=f"comma-separated suite entries (default {DEFAULT_WORKLOADS})")
    p.add_argument(
        "--suite", choices=sorted(SUITES), default=None,
        help="a named list instead of --workloads: 'all' is one configuration of each of the 13 operators",
    )
    p.add_argument("--db", default="bench.db", help="SQLite database of tuning records (default bench.db)")
    p.add_argument("--out-md", default="bench.md", metavar="PATH", help="Markdown table (default bench.md)")
    p.add_argument("--out-json", default="bench.json", metavar="PATH", help="JSON results (default bench.json)")
    p.add_argument(
        "--tvm", metavar="SUMMARY.json",
        help="TVM MetaSchedule's best medians on this machine, as `python benchmarks/bench_tvm.py tune --work W` "
        "writes them to W/summary.json (without it the table has no TVM column: figures from another run or "
        "machine would not compare)",
    )
    add_search_options(p, trials=128)
    p.set_defaults(run=run)


def geomean(values: List[Optional[float]]) -> Optional[float]:
    """Geometric mean of the known values (None when there are none).

    >>> geomean([2.0, 8.0, None])
    4.0
    """
    known = [v for v in values if v is not None and v > 0]
    return math.exp(sum(map(math.log, known)) / len(known)) if known else None


def _ratio(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}x"


def markdown(rows: List[Dict[str, Any]], header: str) -> str:
    """The bench table; ``vs numpy`` is numpy's time over ours (> 1: ours is faster).

    ``ours µs``, numpy and jax.jit are timed in this run; ``ours µs (worker)`` is the best
    median the tuner's search measured (the JSON's ``ours_retimed_us`` is the named best's
    median when re-timed with the other top candidates). ``TVM µs`` (with ``--tvm``) is
    MetaSchedule's best on this machine as *its* tuner measured it, so ``vs TVM`` is TVM's
    time over ours (worker): like for like.

    >>> print(markdown([{"workload": "GMM:small", "ours_us": 2.0, "ours_worker_us": 1.8, "numpy_us": 4.0,
    ...                  "jax_us": None, "gflops": 1.5, "vs_numpy": 2.0, "vs_jax": None, "tvm_us": 3.0,
    ...                  "vs_tvm": 3.0 / 1.8, "trials": 3}], "h"))
    h
    <BLANKLINE>
    | workload | ours µs | ours µs (worker) | numpy µs | jax.jit µs | TVM µs | ours GFLOP/s | vs numpy | vs jax.jit | vs TVM | trials |
    |---|---|---|---|---|---|---|---|---|---|---|
    | GMM:small | 2.0 | 1.8 | 4.0 | - | 3.0 | 1.5 | 2.00x | - | 1.67x | 3 |
    | geomean | | | | | | | 2.00x | - | 1.67x | |
    >>> print(markdown([{"workload": "GMM:small", "ours_us": 2.0, "numpy_us": 4.0, "jax_us": None, "gflops": 1.5,
    ...                  "vs_numpy": 2.0, "vs_jax": None, "trials": 3}], "no TVM times").splitlines()[2])
    | workload | ours µs | ours µs (worker) | numpy µs | jax.jit µs | ours GFLOP/s | vs numpy | vs jax.jit | trials |
    """
    tvm = any(r.get("tvm_us") for r in rows)  # a TVM column only with times measured here
    cols = ["workload", "ours µs", "ours µs (worker)", "numpy µs", "jax.jit µs"] + (["TVM µs"] if tvm else [])
    cols += ["ours GFLOP/s", "vs numpy", "vs jax.jit"] + (["vs TVM"] if tvm else []) + ["trials"]
    lines = [header, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [r["workload"], num(r["ours_us"]), num(r.get("ours_worker_us")), num(r["numpy_us"]), num(r["jax_us"])]
        cells += [num(r.get("tvm_us"))] if tvm else []
        cells += [num(r["gflops"]), _ratio(r["vs_numpy"]), _ratio(r["vs_jax"])] + ([_ratio(r.get("vs_tvm"))] if tvm else [])
        lines.append("| " + " | ".join(cells + [str(r["trials"])]) + " |")
    gm = {k: geomean([r.get(k) for r in rows]) for k in ("vs_numpy", "vs_jax", "vs_tvm")}
    ratios = [_ratio(gm["vs_numpy"]), _ratio(gm["vs_jax"])] + ([_ratio(gm["vs_tvm"])] if tvm else [])
    blanks = len(cols) - len(ratios) - 2
    lines.append("| geomean | " + "| " * blanks + " | ".join(ratios) + " | |")
    return "\n".join(lines)


def load_tvm_times(path: Optional[str]) -> Dict[str, float]:
    """Median µs of TVM's best kernel per workload: the ``tvm_worker_us`` entries of
    ``benchmarks/bench_tvm.py``'s summary at ``path`` (None: no TVM times, ``{}``).

    >>> load_tvm_times(None)
    {}
    """
    if path is None:
        return {}
    try:
        with open(path) as fh:
            data = json.load(fh)
        times = {  # other keys (a note such as "_about") are not workloads
            spec: float(entry["tvm_worker_us"]) for spec, entry in data.items()
            if isinstance(entry, dict) and entry.get("tvm_worker_us")
        }
    except (OSError, ValueError, AttributeError, TypeError, KeyError) as exc:
        raise CLIError(f"--tvm {path}: not a bench_tvm.py summary ({exc})") from None
    if not times:
        raise CLIError(f"--tvm {path}: no workload with a tvm_worker_us (is it a bench_tvm.py summary?)")
    return times


def bench_row(
    result: TuneResult, trials: int, tvm_us: Optional[Dict[str, float]] = None, search_best_seconds: Optional[float] = None
) -> Dict[str, Any]:
    """Time ``result``'s best kernel, numpy and jax.jit now; one row of the table
    (``tvm_us``: TVM's times per workload measured on this machine, if any).
    ``search_best_seconds``: the fastest median the search measured (the worker column,
    like TVM's; default: the best's own), which the re-timed best may not be."""
    from ..codegen.spin_pool import counting_launches

    with counting_launches() as launches:  # only our kernel uses the pool: how its parallel loops ran here
        times = {name: row for name, row in ((r["implementation"], r) for r in comparison(result.compare(), result.best.flops))}
    ours, np_row, jax_row = times["probsched"], times.get("numpy"), times.get("jax")
    tvm = (tvm_us or {}).get(result.name)
    worker_us = (search_best_seconds or result.best.search_seconds) * 1e6
    return {
        "workload": result.name,
        "ours_us": ours["median_us"],
        "ours_worker_us": worker_us,
        "ours_retimed_us": result.best.seconds * 1e6 if result.best.retimed else None,
        "numpy_us": np_row and np_row["median_us"],
        "jax_us": jax_row and jax_row["median_us"],
        "gflops": ours["gflops"],
        "vs_numpy": np_row and np_row["speedup"],
        "vs_jax": jax_row and jax_row["speedup"],
        "tvm_us": tvm,
        "vs_tvm": tvm / worker_us if tvm and worker_us else None,  # both tuners' own measurements
        "trials": trials,
        "strategy": result.best.record.strategy,
        "candidate_hash": result.best.record.candidate_hash,
        "launch_counts": launches,
    }


def _write(args: argparse.Namespace, rows: List[Dict[str, Any]], header: str) -> None:
    with open(args.out_md, "w") as fh:
        fh.write(markdown(rows, header) + "\n")
    data = {
        "header": header,
        "target": json.loads(Target.host().to_json()),
        "strategy": args.strategy,
        "max_family_share": family_share(args),
        "trials_per_run": args.trials,
        "database": args.db,
        "workloads": rows,
        "geomean": {k: geomean([r.get(k) for r in rows]) for k in ("vs_numpy", "vs_jax", "vs_tvm")},
    }
    with open(args.out_json, "w") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")


def run(args: argparse.Namespace) -> int:
    if args.suite is not None and args.workloads is not None:
        raise CLIError("give --suite or --workloads, not both")
    chosen = SUITES[args.suite] if args.suite is not None else (args.workloads or DEFAULT_WORKLOADS)
    specs = [s.strip() for s in chosen.split(",") if s.strip()]
    if not specs:
        raise CLIError("--workloads: give at least one suite entry, e.g. GMM:2,C2D:2")
    workloads = [resolve_workload(s) for s in specs]
    for spec, w in zip(specs, workloads):
        if not is_suite_workload(w):
            raise CLIError(f"--workloads {spec}: bench compares with numpy and jax.jit, which exist for suite workloads only")
    space = resolve_space(args.space)
    strategy_options(args)  # a bad combination of options fails before any tuning
    measure_label(args)
    tvm_us = load_tvm_times(args.tvm)
    check_writable(args.out_md, "--out-md")
    check_writable(args.out_json, "--out-json")
    db = open_database(args.db)
    if args.trials == 0:  # nothing to tune: every workload needs a best already (fail before timing any)
        for w in workloads:
            host_records(db, w, w.func.structural_hash())
    header = (
        f"probsched bench, {datetime.date.today()}: {Target.host()}; "
        f"{search_label(args)} search, {args.trials} new trials per workload; numpy and jax.jit timed in the same run; "
        + (f"TVM: MetaSchedule on this machine ({args.tvm})" if args.tvm else "no TVM column (--tvm gives this machine's)")
    )
    rows: List[Dict[str, Any]] = []
    errors: List[Optional[str]] = []  # every trial's error kind: lost ones are said at the end
    measurer = make_measurer(args) if args.trials else None
    try:
        for w in workloads:
            key = w.func.structural_hash()
            if args.trials:
                result = tune_with_progress(w, args, db, measurer, space, w.name)
                errors += [t.error for t in result.history]
            else:
                best = best_schedule(db, w)
                result = TuneResult(w, best, [], best.record.strategy)
            if result.best is None:
                print(f"{w.name}: no successful trial", file=sys.stderr)
                continue
            (search_best,) = db.best(key, k=1)
            rows.append(bench_row(result, len(db.records(key)), tvm_us, search_best.median))
            _write(args, rows, header)
            if not args.quiet:
                print(f"{w.name}: done ({rows[-1]['ours_us']:.1f} µs)", file=sys.stderr)
    finally:
        if measurer is not None:
            measurer.close()
        db.close()
    print(markdown(rows, header))
    print(f"\nwrote {args.out_md} and {args.out_json}; records in {args.db}")
    lost = lost_trials("bench", errors)
    return 0 if len(rows) == len(workloads) and not lost else 1
