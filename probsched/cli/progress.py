"""Progress bars of the tuning commands: one tqdm bar on stderr over the trial budget.

:class:`TrialBar` follows ``ps.tune`` (``tune``, ``bench``) and :class:`NetworkBar`
``ps.tune_model`` (``tune-model``); both are off when stderr is not a terminal or with
``--quiet``. :func:`logs_above` sends log lines (e.g. "the strategy found no new candidate")
above the bar instead of through it.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from typing import TYPE_CHECKING, Iterator, Optional, Union

from .common import budget, gflops, num, options_from_args

if TYPE_CHECKING:
    from ..database import Database
    from ..ir.stmt import PrimFunc
    from ..measure import Measurer
    from ..space import Space
    from ..tuning import TuneResult
    from ..workloads import Workload


class _Bar:
    def __init__(self, total: Optional[int], desc: str, quiet: bool) -> None:
        from tqdm import tqdm

        self.failed = 0
        self.total, self.desc = total, desc
        self.bar = tqdm(total=total, desc=desc, unit="trial", file=sys.stderr, dynamic_ncols=True,
                        disable=quiet or not sys.stderr.isatty())

    def close(self) -> None:
        self.bar.close()


class TrialBar(_Bar):
    """A ``ps.tune`` callback: trials done, the best GFLOP/s (µs for a bare function), failures."""

    def __init__(self, total: Optional[int], desc: str, flops: Optional[float], quiet: bool, retime_top: int = 0) -> None:
        super().__init__(total, desc, quiet)
        self.flops = flops
        self.retime_top = retime_top

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
        if self.retime_top and self.total is not None and self.bar.n + 1 >= self.total:  # the pause after the last trial
            self.bar.set_description_str(f"{self.desc} (now re-timing the {self.retime_top} best together)", refresh=False)
        self.bar.update(1)


class NetworkBar(_Bar):
    """A ``ps.tune_model`` callback: the network's estimated latency and the task being tuned."""

    def __call__(self, event, result) -> None:
        self.failed += event.trial.error is not None
        est = event.estimated_seconds
        text = f"est. {est * 1e3:.1f} ms" if math.isfinite(est) else "est. -"
        text += f", {event.task_name.split('/')[-1][:40]}"
        if self.failed:
            text += f", {self.failed} failed"
        self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(1)


class CompileBar(_Bar):
    """A ``ps.compile`` progress callback: one step per task built (its message the postfix)."""

    def __init__(self, total: int, desc: str, quiet: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="task", file=sys.stderr, dynamic_ncols=True,
                        disable=quiet or not sys.stderr.isatty())

    def __call__(self, message: str) -> None:
        self.bar.set_postfix_str(message.split("] ", 1)[-1][:60], refresh=False)
        self.bar.update(1)


@contextlib.contextmanager
def logs_above(bar: _Bar) -> Iterator[None]:
    """Log lines go above ``bar`` while the block runs (as they are when it is off)."""
    if bar.bar.disable:
        yield
        return
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm():
        yield


def tune_with_progress(
    workload: Union["Workload", "PrimFunc"], args: argparse.Namespace, db: "Database", measurer: Optional["Measurer"],
    space: Optional["Space"], desc: str,
) -> "TuneResult":
    """``ps.tune`` with the search options of ``args`` and a progress bar."""
    from ..tuning import tune

    options = options_from_args(args, space)
    trials, minutes = budget(args)
    bar = TrialBar(trials, desc, getattr(workload, "flops", None), args.quiet, options.retime_for(1))
    try:
        with logs_above(bar):
            return tune(workload, trials=trials, minutes=minutes, database=db, measurer=measurer, callbacks=[bar],
                        options=options)
    finally:
        bar.close()


__all__ = ["TrialBar", "NetworkBar", "CompileBar", "logs_above", "tune_with_progress"]
