"""``probsched tune WORKLOAD --trials 128 --db tuning.db``: search, measure, record, compare.

A live tqdm bar on stderr (trials done / total, best GFLOP/s, ETA) while the search runs,
then on stdout the best kernel beside numpy and jax.jit timed in this run, the database
path and the command that shows the best schedule. Every trial is committed to the
database as it is measured, so Ctrl-C (exit code 130) keeps all of them and the next run
resumes. ``--json`` also writes the numbers and the per-trial history.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any, Dict, List, Tuple

from ..tuning import TuneResult
from .common import (
    DB_HELP,
    WORKLOAD_HELP,
    add_search_options,
    budget,
    budget_label,
    check_writable,
    comparison,
    finite_or_none,
    format_speed,
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
    workload_name,
    write_json,
)
from .progress import tune_with_progress
from .signals import stop_words


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="tune a workload: progress bar, then the best kernel vs numpy and jax.jit",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    p.add_argument("workload", help=WORKLOAD_HELP)
    p.add_argument("--db", default=None, help=DB_HELP)
    add_search_options(p, trials=128, trials_help="new candidates to measure (0: report the database's best)", minutes=True)
    p.add_argument("--no-compare", action="store_true", help="do not time numpy and jax.jit after tuning")
    p.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    p.set_defaults(run=run)


def markdown_table(result: TuneResult, rows: List[Dict[str, Any]]) -> str:
    """The comparison as Markdown, headed by what was tuned (like ``TuneResult.summary``)."""
    trials = len(result.history)
    lines = [
        f"{result.name}: best after {trials} new trials ({result.strategy})",
        "",
        "| implementation | median µs | GFLOP/s | its time / ours |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['implementation']} | {num(r['median_us'])} | {num(r['gflops'])} | {r['speedup']:.2f}x |")
    return "\n".join(lines)


def timed_rows(result: TuneResult, compare: bool) -> List[Tuple[str, float]]:
    """(implementation, seconds): our best kernel and, with ``compare``, numpy and jax.jit
    timed now in this process on the same inputs; else the database's median alone."""
    if compare and is_suite_workload(result.workload):
        rows = result.compare()
        if rows:
            return rows
    return [("probsched", result.best.seconds)]


def run(args: argparse.Namespace) -> int:
    from ..database import default_path

    workload = resolve_workload(args.workload)
    space = resolve_space(args.space)
    strategy_options(args)  # a bad combination of options fails before anything is opened
    where = measure_label(args)
    if args.json:
        check_writable(args.json, "--json")
    name = workload_name(workload)
    db_path = args.db or default_path()
    db = open_database(db_path)
    flops = getattr(workload, "flops", None)
    if not args.quiet:
        print(f"tuning {name}: {budget_label(*budget(args))}, {search_label(args)} search, {args.cost_model} cost model, {where}, "
              f"db {db_path}", file=sys.stderr)
    if args.trials == 0 and not db.best(workload, k=1):  # nothing to report, and nothing to measure
        db.close()
        print(f"probsched tune: --trials 0 measures nothing new, and {db_path} holds no successful record of {name}",
              file=sys.stderr)
        return 1
    measurer = None
    try:
        measurer = make_measurer(args)
        result = tune_with_progress(workload, args, db, measurer, space, f"{name}")
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM
        word, code = stop_words(exc)
        best = db.best(workload, k=1)
        kept = len(db.records(workload))
        line = f"best so far {format_speed(best[0].median, flops)}" if best else "no successful trial yet"
        print(f"\n{word}: {kept} records of {name} are in {db_path} ({line}); run again to resume", file=sys.stderr)
        return code
    finally:
        if measurer is not None:
            measurer.close()
        db.close()
    lost = lost_trials("tune", [t.error for t in result.history])
    if result.best is None:
        print(result.summary(compare=False))
        return 1
    if not args.no_compare and not is_suite_workload(workload):
        print("(numpy and jax.jit baselines exist for suite workloads only: showing ours alone)", file=sys.stderr)
    rows = comparison(timed_rows(result, not args.no_compare), flops)
    print(markdown_table(result, rows))
    print()
    print(f"database: {db_path}")
    print(f"show the best: probsched show {shlex.quote(args.workload)} --db {shlex.quote(db_path)}")
    if args.json:
        _write_json(args.json, result, rows, db_path)
    return 1 if lost else 0


def _write_json(path: str, result, rows: List[Dict[str, Any]], db_path: str) -> None:
    best = result.best
    data = {
        "workload": result.name,
        "strategy": result.strategy,
        "trials": len(result.history),
        "failed": sum(t.error is not None for t in result.history),
        "database": db_path,
        "best": {
            "median_us": best.seconds * 1e6,  # re-timed with the other top candidates when it was
            "search_median_us": best.search_seconds * 1e6,
            "retimed": bool(best.retimed),
            "gflops": best.gflops,
            "candidate_hash": best.record.candidate_hash,
            "strategy": best.record.strategy,
        },
        "compare": rows,
        "history": [
            {
                "index": t.index,
                "seconds": finite_or_none(t.seconds),
                "error": t.error,
                "best_seconds": finite_or_none(t.best_seconds),
                "compile_seconds": t.compile_seconds,
                "wall_seconds": t.wall_seconds,
            }
            for t in result.history
        ],
    }
    write_json(path, data)


