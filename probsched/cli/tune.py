"""``probsched tune WORKLOAD --trials 128 --db tuning.db``: search, measure, record, compare.

A live tqdm bar on stderr (trials done / total, best GFLOP/s, ETA) while the search runs,
then on stdout the best kernel beside numpy and jax.jit timed in this run, the database
path and the command that shows the best schedule. Every trial is committed to the
database as it is measured, so Ctrl-C (exit code 130) keeps all of them and the next run
resumes. ``--json`` also writes the numbers and the per-trial history.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

from ..database import Database
from ..ir.stmt import PrimFunc
from ..search import STRATEGIES, EvolutionarySearch, SearchStrategy, get as get_strategy
from ..selection import DEFAULT_RETIME_TOP
from ..tuner import COST_MODELS, DEFAULT_COST_MODEL, TuneResult
from ..workloads import Workload
from .common import (
    DB_HELP,
    WORKLOAD_HELP,
    CLIError,
    comparison,
    finite_or_none,
    format_speed,
    gflops,
    is_suite_workload,
    lost_trials,
    non_negative_int,
    num,
    positive_float,
    open_database,
    positive_int,
    resolve_space,
    resolve_workload,
    write_json,
    share,
    workload_name,
)
from .signals import stop_words

if TYPE_CHECKING:  # the measurer is imported where used: it loads numba
    from ..measure import Measurer
    from ..space import Space


def add_measure_options(p: argparse.ArgumentParser) -> None:
    """Where candidates are measured: ``--workers`` here, or ``--cluster`` (:func:`make_measurer`)."""
    p.add_argument("--workers", type=positive_int, default=None, help="measuring worker processes on this machine (default 2)")
    p.add_argument("--cluster", metavar="ADDRESS", default=None,
                   help="measure on a Dask cluster instead: its scheduler's address, e.g. tcp://HOST:8786 (needs "
                        "`pip install 'probsched[dask]'` here and on the workers; README: 'Tuning on a cluster')")
    p.add_argument("--cluster-timeout", metavar="SECONDS", type=positive_float, default=None,
                   help="with --cluster: seconds to reach its scheduler (default 30)")
    p.add_argument("--no-worker-timeout", metavar="SECONDS", type=positive_float, default=None,
                   help="with --cluster: seconds to wait for a worker while none can measure (at the start, and when "
                        "all were lost) before the waiting candidates fail as lost (default 120)")


def add_search_options(p: argparse.ArgumentParser, trials: int) -> None:
    """The options ``tune`` and ``bench`` share (how to search and measure)."""
    p.add_argument("--trials", type=non_negative_int, default=trials, help=f"new candidates to measure (default {trials}; 0: report the database's best)")
    p.add_argument("--strategy", choices=sorted(STRATEGIES), default="evolutionary", help="search strategy (default evolutionary)")
    p.add_argument("--cost-model", choices=COST_MODELS, default=DEFAULT_COST_MODEL,
                   help=f"model ranking candidates (default {DEFAULT_COST_MODEL}: it also trains on the shipped "
                        "records of the other workloads, so it ranks the first batch too; mlp: the workload's own "
                        "records only)")
    p.add_argument("--space", default="default", metavar="SPACE",
                   help="design space: 'default', or file.py:name / module:name of a ps.space.Space "
                        "(or of a function returning one)")
    p.add_argument("--max-family-share", type=share, default=None, metavar="F",
                   help="evolutionary search: no algorithm family (write cache and rfactor decisions) takes more "
                        "than this fraction of a batch's model-ranked candidates (default 0.5; 1: MetaSchedule's "
                        "plain top-k)")
    p.add_argument("--seed", type=int, default=None, help="random seed of the search and the model")
    p.add_argument("--batch-size", type=positive_int, default=32, help="candidates per measured batch (default 32)")
    add_measure_options(p)
    p.add_argument("--retime-top", type=non_negative_int, default=DEFAULT_RETIME_TOP, metavar="K",
                   help=f"after the search, time the K fastest candidates again together and name the best by that "
                        f"(default {DEFAULT_RETIME_TOP}; 0: the search's fastest)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="tune a workload: progress bar, then the best kernel vs numpy and jax.jit",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    p.add_argument("workload", help=WORKLOAD_HELP)
    p.add_argument("--db", default=None, help=DB_HELP)
    add_search_options(p, trials=128)
    p.add_argument("--no-compare", action="store_true", help="do not time numpy and jax.jit after tuning")
    p.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    p.set_defaults(run=run)


class Progress:
    """A tuning callback driving a tqdm bar on stderr (off when stderr is not a terminal)."""

    def __init__(self, total: int, desc: str, flops: Optional[float], quiet: bool, retime_top: int = 0) -> None:
        from tqdm import tqdm

        self.flops = flops
        self.failed = 0
        self.total, self.desc, self.retime_top = total, desc, retime_top
        self.bar = tqdm(
            total=total, desc=desc, unit="trial", file=sys.stderr, dynamic_ncols=True,
            disable=quiet or not sys.stderr.isatty(),
        )

    def __call__(self, trial, result) -> None:
        self.failed += trial.error is not None
        if trial.best_seconds < float("inf"):
            best = gflops(self.flops, trial.best_seconds)
            text = f"best {num(best)} GFLOP/s" if best is not None else f"best {num(trial.best_seconds * 1e6)} µs"
        else:
            text = "no success yet"
        if self.failed:
            text += f", {self.failed} failed"
        self.bar.set_postfix_str(text, refresh=False)
        if self.retime_top and self.bar.n + 1 >= self.total:  # what the pause after the last trial is
            self.bar.set_description_str(f"{self.desc} (now re-timing the {self.retime_top} best together)", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def measure_label(args: argparse.Namespace) -> str:
    """Where candidates are measured, as a run's header says it; a CLIError for options that
    contradict each other or a malformed cluster address (checked before anything is opened)."""
    for option in ("cluster_timeout", "no_worker_timeout"):
        if getattr(args, option) is not None and args.cluster is None:
            raise CLIError(f"--{option.replace('_', '-')} applies with --cluster")
    if args.cluster is not None:  # "" too: an empty address is a mistake, not "no cluster"
        from ..measure.address import cluster_address

        try:
            args.cluster = cluster_address(args.cluster)
        except ValueError as exc:
            raise CLIError(f"--cluster: {exc}") from None
        if args.workers is not None:
            raise CLIError("--workers counts measuring processes on this machine; with --cluster the cluster's Dask "
                           "workers measure (`dask worker ... --nthreads N` sets theirs)")
        return f"Dask cluster {args.cluster}"
    workers = args.workers or 2
    return f"{workers} worker{'s' if workers != 1 else ''}"


def make_measurer(args: argparse.Namespace) -> "Measurer":
    """The measurer the options ask for: ``--cluster``'s Dask cluster, else local worker processes."""
    if args.cluster is not None:
        import logging

        from ..measure import DaskMeasurer

        # distributed logs its connections' ups and downs (with tracebacks, at INFO); the
        # measurer's warnings say what a run waits for and what it lost. After its import,
        # which sets its loggers' levels (without it, DaskMeasurer says how to install it)
        with contextlib.suppress(ImportError):
            import distributed  # noqa: F401
        logging.getLogger("distributed").setLevel(logging.ERROR)
        return DaskMeasurer(args.cluster, timeout=args.cluster_timeout or 30.0,
                            no_worker_timeout=args.no_worker_timeout or 120.0)
    from ..measure import LocalMeasurer

    return LocalMeasurer(workers=args.workers or 2)


def strategy_from_args(args: argparse.Namespace) -> Union[str, SearchStrategy]:
    """The ``strategy=`` for ``ps.tune``: the name, or an object when an option configures it."""
    if args.max_family_share is None:
        return args.strategy
    if args.strategy != "evolutionary":
        raise CLIError(f"--max-family-share applies to --strategy evolutionary, not {args.strategy}")
    # sized to the rounds as ps.tune sizes the named search
    return EvolutionarySearch.for_batch(args.batch_size, max_family_share=args.max_family_share)


def family_share(args: argparse.Namespace) -> Optional[float]:
    """The family cap the search will run with (its default when the option is not given);
    None for a strategy that has none."""
    return getattr(get_strategy(strategy_from_args(args)), "max_family_share", None)


def search_label(args: argparse.Namespace) -> str:
    """The strategy as a run's header names it (with its family cap, when it has one)."""
    share = family_share(args)
    return args.strategy if share is None else f"{args.strategy} (max family share {share:g})"


def tune_with_progress(
    workload: Union[Workload, PrimFunc], args: argparse.Namespace, db: Database, measurer: Optional["Measurer"],
    space: Optional["Space"], desc: str,
) -> TuneResult:
    """``ps.tune`` with the search options of ``args`` and a progress bar; returns the TuneResult."""
    from ..tuner import tune

    progress = Progress(args.trials, desc, getattr(workload, "flops", None), args.quiet, args.retime_top)
    # Log lines (e.g. "the strategy found no new candidate") go above the bar, not through it.
    if progress.bar.disable:
        redirect = contextlib.nullcontext()
    else:
        from tqdm.contrib.logging import logging_redirect_tqdm

        redirect = logging_redirect_tqdm()
    try:
        with redirect:
            return tune(
                workload, trials=args.trials, space=space, strategy=strategy_from_args(args), cost_model=args.cost_model,
                database=db, measurer=measurer, seed=args.seed, callbacks=[progress], batch_size=args.batch_size,
                retime_top=args.retime_top,
            )
    finally:
        progress.close()


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
    strategy_from_args(args)  # a bad combination of options fails before anything is opened
    where = measure_label(args)
    if args.json:
        check_writable(args.json, "--json")
    name = workload_name(workload)
    db_path = args.db or default_path()
    db = open_database(db_path)
    flops = getattr(workload, "flops", None)
    if not args.quiet:
        print(f"tuning {name}: {args.trials} trials, {search_label(args)} search, {args.cost_model} cost model, {where}, "
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


def check_writable(path: str, option: str) -> None:
    """Fail before a long run, not after it, when ``path`` cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"{option} {path}: no such directory {folder}")
