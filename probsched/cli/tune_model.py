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
import contextlib
import math
import sys
from typing import TYPE_CHECKING, Optional

from ..search import STRATEGIES
from ..task_scheduler import SCHEDULERS
from ..tuner import COST_MODELS, DEFAULT_COST_MODEL
from .common import DB_HELP, CLIError, non_negative_int, open_database, positive_int, write_json
from .model_import import MODEL_HELP, add_input_shape_option, load_model, parse_input_shapes

if TYPE_CHECKING:
    from ..measure import Measurer
from .tune import add_measure_options, check_writable, make_measurer, measure_label


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune-model", help="tune every task of a network under one budget, then time it beside jax.jit",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    p.add_argument("model", help=MODEL_HELP)
    add_input_shape_option(p)
    p.add_argument("--trials", type=non_negative_int, default=1500, help="trials for the whole network (default 1500)")
    p.add_argument("--db", default=None, help=DB_HELP)
    p.add_argument("--scheduler", choices=sorted(SCHEDULERS), default="gradient", help="task scheduler (default gradient)")
    p.add_argument("--strategy", choices=sorted(STRATEGIES), default="evolutionary", help="search strategy per task")
    p.add_argument("--cost-model", choices=COST_MODELS, default=DEFAULT_COST_MODEL, help=f"default {DEFAULT_COST_MODEL}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=positive_int, default=None, help="candidates per round (default: about three rounds per task)")
    add_measure_options(p)
    p.add_argument("--retime-top", type=non_negative_int, default=0, metavar="K",
                   help="re-time the K best candidates of each weighty task together at the end (default 0)")
    p.add_argument("--no-compare", action="store_true", help="do not time the network beside jax.jit")
    p.add_argument("--json", metavar="PATH", help="also write the task table and timings as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


class ModelProgress:
    """A ``tune_model`` callback driving one tqdm bar over the budget."""

    def __init__(self, total: int, desc: str, quiet: bool) -> None:
        from tqdm import tqdm

        self.failed = 0
        self.bar = tqdm(total=total, desc=desc, unit="trial", file=sys.stderr, dynamic_ncols=True,
                        disable=quiet or not sys.stderr.isatty())

    def __call__(self, event, result) -> None:
        self.failed += event.trial.error is not None
        est = event.estimated_seconds
        text = f"est. {est * 1e3:.1f} ms" if math.isfinite(est) else "est. -"
        text += f", {event.task_name.split('/')[-1][:40]}"
        if self.failed:
            text += f", {self.failed} failed"
        self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def run(args: argparse.Namespace) -> int:
    from ..database import default_path
    from ..model_tuner import tune_model

    where = measure_label(args)  # contradicting options fail before anything is opened
    fn, example, graph = load_model(args.model, parse_input_shapes(args.input_shape))
    if args.json:
        check_writable(args.json, "--json")
    db_path = args.db or default_path()
    db = open_database(db_path)
    tasks = graph.tasks()
    if not args.quiet:
        print(f"tuning {graph.name}: {len(tasks)} tasks, {args.trials} trials, {args.scheduler} scheduler, "
              f"{args.strategy} search, {where}, db {db_path}", file=sys.stderr)
    progress = ModelProgress(args.trials, graph.name, args.quiet)
    measurer: Optional["Measurer"] = None
    try:
        if progress.bar.disable:
            redirect = contextlib.nullcontext()
        else:
            from tqdm.contrib.logging import logging_redirect_tqdm

            redirect = logging_redirect_tqdm()
        measurer = make_measurer(args)
        with redirect:
            result = tune_model(
                graph, trials=args.trials, database=db, scheduler=args.scheduler, strategy=args.strategy,
                cost_model=args.cost_model, measurer=measurer, seed=args.seed, batch_size=args.batch_size,
                retime_top=args.retime_top, callbacks=[progress],
            )
    except KeyboardInterrupt:
        print(f"\ninterrupted: the records so far are in {db_path}; run again to resume", file=sys.stderr)
        return 130
    finally:
        progress.close()
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
    return 0


def _write_json(path: str, result, rows, db_path: str) -> None:
    data = {
        "model": result.graph.name,
        "trials": len(result.history),
        "scheduler": result.scheduler,
        "wall_seconds": result.wall_seconds,
        "seconds_per_trial": result.seconds_per_trial,
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
