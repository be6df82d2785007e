"""``probsched tune-model MODEL --trials 1500 --db model.db``: tune a whole network.

One tqdm bar on stderr over the whole budget, with the network's estimated latency (the sum
over tasks of weight x best time, once every task ran) and the task being tuned; then on
stdout the task table (weight, trials, best µs, share of the latency) and the compiled
network timed beside ``jax.jit`` of the same function on the same inputs, interleaved in this
process. Every trial is committed as it is measured: Ctrl-C keeps them and the next run
resumes. ``MODEL`` is a shipped model or ``file.py:name`` / ``module:name`` (see
``probsched import --help``).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING, Optional

from ..tuning import SCHEDULERS
from .common import (
    DB_HELP,
    add_precision_option,
    add_search_options,
    budget,
    budget_label,
    check_writable,
    float_precision,
    lost_trials,
    make_measurer,
    measure_label,
    open_database,
    options_from_args,
    resolve_space,
    search_label,
    write_json,
)
from .calibration import int8_graph
from .model_import import MODEL_HELP, add_onnx_options, load_model_of
from .progress import NetworkBar, logs_above
from .signals import stop_words

if TYPE_CHECKING:
    from ..measure import Measurer


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune-model", help="tune every task of a network under one budget, then time it beside jax.jit",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    p.add_argument("model", help=MODEL_HELP)
    add_onnx_options(p)
    p.add_argument("--db", default=None, help=DB_HELP)
    p.add_argument("--scheduler", choices=list(SCHEDULERS), default=next(iter(SCHEDULERS)),
                   help=f"task scheduler (default {next(iter(SCHEDULERS))})")
    add_search_options(p, trials=1500, trials_help="trials for the whole network (0: compile it from the database, measuring nothing)",
                       minutes=True)
    add_precision_option(p, int8=True, narrow=True)
    p.add_argument("--no-compare", action="store_true", help="do not time the network beside jax.jit")
    p.add_argument("--json", metavar="PATH", help="also write the task table and timings as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..database import default_path
    from ..tuning import tune_model

    where = measure_label(args)  # contradicting options fail before anything is opened
    space = resolve_space(args.space)
    options = options_from_args(args, space)
    fn, example, graph = load_model_of(args)
    graph = int8_graph(args, graph)
    if args.json:
        check_writable(args.json, "--json")
    db_path = args.db or default_path()
    db = open_database(db_path)
    tasks = graph.tasks()
    trials, minutes = budget(args)
    if not args.quiet:
        print(f"tuning {graph.name}: {len(tasks)} tasks, {budget_label(trials, minutes)}, {args.scheduler} scheduler, "
              f"{search_label(args)} search, {args.cost_model} cost model, {where}, db {db_path}", file=sys.stderr)
    bar = NetworkBar(trials, graph.name, args.quiet)
    measurer: Optional["Measurer"] = None
    try:
        measurer = make_measurer(args)
        with logs_above(bar):
            result = tune_model(
                graph, trials=trials, minutes=minutes, database=db, measurer=measurer, scheduler=args.scheduler, callbacks=[bar],
                precision=float_precision(args.precision), narrow=args.narrow,
                options=options,
            )
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM
        word, code = stop_words(exc)
        print(f"\n{word}: the records so far are in {db_path}; run again to resume", file=sys.stderr)
        return code
    finally:
        bar.close()
        if measurer is not None:
            measurer.close()
        db.close()
    result.fn, result.example_args = fn, example
    print(result.summary())
    rows = []
    if not args.no_compare and fn is not None:
        rows = result.compare()
        ours = rows[0][1]
        print()
        print("| implementation | median ms | its time / ours |")
        print("|---|---:|---:|")
        for name, sec in rows:
            print(f"| {name} | {sec * 1e3:.2f} | {sec / ours:.2f}x |")
    print()
    source = f"ps.from_onnx({args.model!r})" if args.model.lower().endswith(".onnx") else "fn, *args"
    print(f"database: {db_path}  (ps.compile({source}, database={db_path!r}) rebuilds the network)")
    if args.json:
        _write_json(args.json, result, rows, db_path)
    return 1 if lost_trials("tune-model", [t.trial.error for t in result.history]) else 0


def _write_json(path: str, result, rows, db_path: str) -> None:
    data = {
        "model": result.graph.name,
        "trials": len(result.history),
        "scheduler": result.scheduler,
        "wall_seconds": result.wall_seconds,
        "seconds_per_trial": result.seconds_per_trial if result.history else None,
        "phase_seconds": result.phase_seconds,
        "estimated_ms": result.estimated_seconds * 1e3 if math.isfinite(result.estimated_seconds) else None,
        "database": db_path,
        "tasks": [
            {"name": t.name, "weight": t.weight, "trials": t.trials, "flops": t.flops,
             "best_us": t.best_seconds * 1e6 if math.isfinite(t.best_seconds) else None, "share": t.share}
            for t in result.tasks
        ],
        "compare_ms": {name: sec * 1e3 for name, sec in rows},
    }
    write_json(path, data)
