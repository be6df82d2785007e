"""``ps.tune``: tune one operator (a network of one task), and return its best kernel.

The run is the tuning loop (:mod:`.loop`) over one task: rounds of new candidates proposed
by the strategy (:mod:`probsched.search`), compiled, checked and timed by the measurer
(:mod:`probsched.measure`), each committed to the database as it arrives
(:mod:`probsched.database`), the cost model learning from each round
(:mod:`probsched.cost_model`). A run on a database that already holds records of the
workload resumes: those candidates are never measured again, the model is trained on them
first and the strategy starts from the best of them. At the end, the fastest few
candidates are measured again together and the best is named by that re-timing
(:mod:`.selection`). The options (strategy, cost model, seed, round size, re-timing, space)
are :class:`~.options.TuningOptions`, the same as ``ps.tune_model``'s.

>>> import probsched as ps
>>> from probsched.measure import LocalMeasurer
>>> with LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1) as m:  # doctest: +SKIP
...     result = ps.tune("GMM:small", trials=4, measurer=m, seed=0)
>>> result.best.gflops > 0  # doctest: +SKIP
True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from ..database import Database
from ..ir.dtypes import numpy_dtype
from ..ir.stmt import PrimFunc
from ..workloads import Workload, as_workload
from .loop import LoopTask, TrialEvent, TuningLoop, check_budget
from .options import TuningOptions
from .resources import TuningResources
from .selection import BestSchedule, best_schedule
from .task_search import Trial

if TYPE_CHECKING:  # imported where used: the measurer and kernels load numba
    from ..codegen.kernel import Kernel
    from ..measure import Measurer

log = logging.getLogger("probsched.tune")


@dataclass
class TuneResult:
    """What ``ps.tune`` found: ``best``, the compiled ``kernel``, the ``history`` of trials."""

    workload: Union[Workload, PrimFunc]
    best: Optional[BestSchedule]
    history: List[Trial] = field(default_factory=list)
    strategy: str = ""
    _kernel: object = None

    @property
    def func(self) -> PrimFunc:
        return as_workload(self.workload).func

    @property
    def kernel(self) -> Optional["Kernel"]:
        """The best schedule compiled (built on first access)."""
        if self._kernel is None and self.best is not None:
            from ..codegen import build

            self._kernel = build(self.best.schedule(self.func))
        return self._kernel

    @property
    def name(self) -> str:
        return as_workload(self.workload).name or self.func.name

    def compare(
        self, rounds: int = 7, min_repeat_ms: float = 30.0, extra: Optional[Dict[str, Callable[[], object]]] = None
    ) -> List[tuple]:
        """(implementation, median seconds) for the best kernel, and numpy and jax.jit for a
        workload of the suite, timed here in one run with the same inputs, interleaved
        (:func:`~probsched.measure.timer.time_interleaved`: ``rounds`` repeats of each).
        ``extra``: more implementations to time with them, as no-argument callables that
        bring their own inputs (e.g. another tuner's kernel)."""
        from ..aligned import aligned_copy, aligned_empty
        from ..measure.timer import time_interleaved

        if self.best is None:
            return []
        # cache-line aligned, as in the tuner's measurements; numpy and jax.jit get the same arrays
        workload = as_workload(self.workload)
        if workload.has_reference:
            inputs = [aligned_copy(a) for a in workload.random_inputs(np.random.default_rng(0))]
        else:
            rng = np.random.default_rng(0)
            inputs = [aligned_copy(rng.uniform(0.5, 1.0, b.shape).astype(numpy_dtype(b.dtype))) for b in self.kernel.inputs]
        outputs = [aligned_empty(b.shape, numpy_dtype(b.dtype)) for b in self.kernel.outputs]
        kernel = self.kernel
        fns = {"probsched": kernel.bind(*inputs, *outputs)}
        if workload.has_reference:
            from ..baselines import baselines

            try:
                fns.update(baselines(workload, inputs))
            except ValueError:  # not a workload of the suite: no baseline to compare with
                pass
        fns.update(extra or {})
        timings = time_interleaved(fns, rounds=rounds, min_repeat_ms=min_repeat_ms)
        return [(name, t.median) for name, t in timings.items()]

    def summary(self, compare: bool = True, rows: Optional[List[tuple]] = None) -> str:
        """A Markdown table: the best kernel beside numpy and jax.jit (``rows`` from
        :meth:`compare`, timed now unless given or ``compare=False``), and the trials."""
        if self.best is None:
            fails = sum(1 for t in self.history if t.error)
            return f"{self.name}: no successful trial ({len(self.history)} trials, {fails} failed)"
        if rows is None:
            rows = self.compare() if compare else []
        rows = rows or [("probsched", self.best.seconds)]
        flops = self.best.flops
        lines = [
            f"{self.name}: best of {len(self.history)} trials ({self.strategy})",
            "",
            "| implementation | median µs | GFLOP/s | its time / ours |",
            "|---|---|---|---|",
        ]
        ours = rows[0][1]
        for name, sec in rows:
            gf = f"{flops / sec / 1e9:.1f}" if flops else "-"
            lines.append(f"| {name} | {sec * 1e6:.1f} | {gf} | {sec / ours:.2f}x |")
        return "\n".join(lines)


def _resolve_workload(workload, precision: Optional[str] = None) -> Union[Workload, PrimFunc]:
    if isinstance(workload, str):
        from .. import workloads

        name, _, rest = workload.partition(":")
        index, _, suffix = rest.partition(":")  # GMM:small:bf16
        workload = workloads.small(name, suffix or "float32") if index == "small" else workloads.get(workload)
    else:
        as_workload(workload)  # the TypeError for anything else; the result keeps what was given
    return workload if precision is None else as_workload(workload).with_precision(precision)


def tune(
    workload: Union[Workload, PrimFunc, str],
    *,
    trials: Optional[int] = None,
    minutes: Optional[float] = None,
    database: Union[Database, str, None] = None,
    measurer: Optional["Measurer"] = None,
    callbacks: Sequence[Callable[[Trial, "TuneResult"], None]] = (),
    options: Optional[TuningOptions] = None,
    precision: Optional[str] = None,
    **option_values: Any,
) -> TuneResult:
    """Tune ``workload`` (a Workload, a PrimFunc, or a suite name like ``"GMM:2"``) for
    ``trials`` new measurements, or ``minutes`` of tuning, or whichever ends first; see the
    module docstring.

    ``precision``: ``"bf16"`` tunes the workload with its products in bfloat16
    (:meth:`~probsched.workloads.Workload.with_precision`; a suite name may say it too,
    ``"GMM:2:bf16"``), a program of its own with records of its own; None or ``"float32"``
    as given.

    ``database``: a :class:`~probsched.database.Database`, a path, or None (in memory).
    ``measurer``: a :class:`~probsched.measure.LocalMeasurer` (default: one made and closed
    here), a :class:`~probsched.measure.DaskMeasurer` to measure on a cluster, or any
    :class:`~probsched.measure.Measurer`. ``callbacks``: called as ``cb(trial,
    result_so_far)`` after each measured trial. The search options (``space``,
    ``strategy``, ``cost_model``, ``seed``, ``batch_size``, ``retime_top``,
    ``retime_rounds``, ``target``) are keywords, or an ``options=``
    :class:`~probsched.tuning.options.TuningOptions` they replace fields of; their
    defaults are documented there once.
    """
    opts = TuningOptions.from_keywords(option_values, who="tune", base=options)
    try:
        check_budget(trials, minutes)
    except ValueError as exc:
        raise ValueError(f"tune: {exc}") from None
    workload = _resolve_workload(workload, precision)
    flops = getattr(workload, "flops", None)
    resources = TuningResources(database, measurer)
    try:
        result = TuneResult(workload, None)

        def on_trial(event: TrialEvent) -> None:
            for cb in callbacks:
                cb(event.trial, result)

        loop = TuningLoop([LoopTask(workload)], trials=trials, minutes=minutes, options=opts, resources=resources,
                          on_trial=on_trial)
        result.history = loop.searches[0].history
        result.strategy = loop.strategy_name
        loop.run()
        resources.settle_borrowed()  # the caller may time result.kernel next
        result.best = best_schedule(resources.db, workload, flops)
    finally:
        resources.close()
    return result


__all__ = ["tune", "TuneResult", "Trial", "BestSchedule"]
