"""``ps.tune``: the front door. Search a design space, measure, record, return the best.

A tuning run is rounds of: the strategy proposes a batch of new candidates
(:mod:`probsched.search`), the measurer compiles, checks and times them in worker processes
(:mod:`probsched.measure`), every result is committed to the database as it arrives
(:mod:`probsched.database`) and the cost model learns from the batch
(:mod:`probsched.cost_model`). A run on a database that already holds records of the
workload resumes: those candidates are never measured again, the model is trained on them
first and the strategy starts from the best of them. At the end, the fastest few
candidates are measured again together and the best is named by that re-timing
(:mod:`probsched.selection`).

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
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from .database import Database
from .ir.stmt import PrimFunc
from .schedule import Schedule
from .search import SearchStrategy
from .search import get as get_strategy
from .selection import DEFAULT_RETIME_ROUNDS, DEFAULT_RETIME_TOP, BestSchedule, best_schedule, retime
from .task_search import TaskSearch, Trial, TuningResources, fit_on_past, run_rounds, start_model_from_transfer
from .workloads import Workload, as_workload

if TYPE_CHECKING:  # imported where used: the cost models load JAX, the measurer and kernels numba
    from .target import Target
    from .codegen.kernel import Kernel
    from .cost_model import CostModel
    from .measure import Measurer

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
            from .codegen import build

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
        from .codegen.aligned import aligned_copy, aligned_empty
        from .measure.timer import time_interleaved

        if self.best is None:
            return []
        # cache-line aligned, as in the tuner's measurements; numpy and jax.jit get the same arrays
        workload = as_workload(self.workload)
        if workload.has_reference:
            inputs = [aligned_copy(a) for a in workload.random_inputs(np.random.default_rng(0))]
        else:
            inputs = [aligned_copy(np.random.default_rng(0).uniform(0.5, 1.0, b.shape).astype(b.dtype)) for b in self.kernel.inputs]
        outputs = [aligned_empty(b.shape, b.dtype) for b in self.kernel.outputs]
        kernel = self.kernel
        fns = {"probsched": kernel.bind(*inputs, *outputs)}
        if workload.has_reference:
            from .baselines import baselines

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


def _resolve_workload(workload) -> Union[Workload, PrimFunc]:
    if isinstance(workload, str):
        from . import workloads

        name, _, index = workload.partition(":")
        if index == "small":
            return workloads.small(name)
        return workloads.get(workload)
    as_workload(workload)  # the TypeError for anything else; the result keeps what was given
    return workload


#: Cost models by name, the default first: "mlp-transfer" is the MLP that starts from the
#: shipped records of the other workloads (:mod:`probsched.cost_model.transfer`), so it ranks
#: the first batch too; "mlp" starts from nothing.
COST_MODELS = ("mlp-transfer", "mlp", "ridge", "random")
DEFAULT_COST_MODEL = COST_MODELS[0]


def _resolve_model(cost_model, seed):
    """(model, whether it starts from the shipped transfer records)."""
    from . import cost_model as cm

    if cost_model is None:
        return None, False
    if isinstance(cost_model, str):
        if cost_model not in COST_MODELS:
            raise ValueError(f"unknown cost model {cost_model!r}; known: {', '.join(COST_MODELS)}")
        if cost_model == "ridge":
            return cm.RidgeModel(), False
        if cost_model == "random":
            return cm.RandomModel(seed=seed or 0), False
        return cm.MLPModel(seed=seed or 0), cost_model == "mlp-transfer"
    return cost_model, False


def tune(
    workload: Union[Workload, PrimFunc, str],
    *,
    trials: int,
    space: Optional[Callable[[Schedule], None]] = None,
    strategy: Union[str, SearchStrategy] = "evolutionary",
    cost_model: Union[str, "CostModel", None] = DEFAULT_COST_MODEL,
    database: Union[Database, str, None] = None,
    measurer: Optional["Measurer"] = None,
    seed: Optional[int] = None,
    callbacks: Sequence[Callable[[Trial, "TuneResult"], None]] = (),
    batch_size: int = 32,
    retime_top: int = DEFAULT_RETIME_TOP,
    retime_rounds: int = DEFAULT_RETIME_ROUNDS,
    target: Optional["Target"] = None,
) -> TuneResult:
    """Tune ``workload`` (a Workload, a PrimFunc, or a suite name like ``"GMM:2"``) for
    ``trials`` new measurements; see the module docstring.

    ``space``: a design space (default ``ps.space.default(target=target)``; ``target``: the
    :class:`~probsched.target.Target` the default space schedules for, this machine unless
    given). ``strategy``: ``"replay"``,
    ``"evolutionary"``, ``"mcmc"`` or a strategy object. ``cost_model``:
    ``"mlp-transfer"`` (the default: the MLP trained on the shipped records of the other
    workloads beside the workload's own, so the first batch is ranked too:
    :mod:`probsched.cost_model.transfer`), ``"mlp"`` (the workload's own records only),
    ``"ridge"``, ``"random"``, a model object or None. ``database``: a
    :class:`~probsched.database.Database`, a path, or None (in memory). ``measurer``: a
    :class:`~probsched.measure.LocalMeasurer` (default: one made and closed here), a
    :class:`~probsched.measure.DaskMeasurer` to measure on a cluster, or any
    :class:`~probsched.measure.Measurer`.
    ``callbacks``: called as ``cb(trial, result_so_far)`` after each measured trial.
    ``retime_top``: after the search, the fastest ``retime_top`` candidates are measured
    again together, ``retime_rounds`` interleaved rounds, and the best is named by that
    (:mod:`probsched.selection`: the search's own minimum is biased low); 0 skips it.
    """
    from . import space as space_mod

    if trials < 0:
        raise ValueError(f"tune: trials must be >= 0, got {trials}")
    if retime_top < 0 or retime_rounds < 1:
        raise ValueError(f"tune: retime_top must be >= 0 and retime_rounds >= 1, got {retime_top} and {retime_rounds}")
    workload = _resolve_workload(workload)
    flops = getattr(workload, "flops", None)
    strat = get_strategy(strategy, batch=batch_size)  # a named search sized to the round
    model, use_transfer = _resolve_model(cost_model, seed)
    if trials == 0 or not getattr(strat, "uses_cost_model", True):
        model, use_transfer = None, False  # nothing would ask it: spare the training
    resources = TuningResources(database, measurer)
    db, measurer = resources.db, resources.measurer
    try:
        space = space or space_mod.default(target=target)
        search = TaskSearch(workload, db, space=space, strategy=strat, model=model, seed=seed)
        result = TuneResult(workload, None, search.history, search.strategy_name)
        if use_transfer:
            start_model_from_transfer(model, [search.key])
        fit_on_past(model, [search])
        proposed = 0

        def next_round():
            nonlocal proposed
            if proposed >= trials:
                return None
            batch = search.propose(min(batch_size, trials - proposed))
            proposed += len(batch)
            return (search, batch) if batch else None

        def record(s: TaskSearch, batch, index: int, res) -> None:
            trial = s.record(batch, index, res)
            for cb in callbacks:
                cb(trial, result)

        run_rounds(measurer, next_round, record, lambda s, batch, results: s.observe(batch, results))
        if retime_top and result.history:  # nothing new measured: the last naming stands
            retime(workload, db, measurer, top=retime_top, rounds=retime_rounds)
        resources.settle_borrowed()  # the caller may time result.kernel next
        result.best = best_schedule(db, workload, flops)
    finally:
        resources.close()
    return result


__all__ = ["tune", "TuneResult", "Trial", "BestSchedule"]
