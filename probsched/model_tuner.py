"""``ps.tune_model``: tune every task of a network under one trial budget.

The network is imported and fused into tasks (:mod:`probsched.graph`); each task gets a
:class:`~probsched.task_search.TaskSearch` (its own strategy state) and all of them share
one measurer, one database and one cost model, trained on the records of every task (its
features are per store, so one model ranks them all; its ranking loss pairs programs of
one task only). A task scheduler (:mod:`probsched.task_scheduler`, MetaSchedule's
gradient-based one by default) picks the task of each round, so the budget goes where the
network's estimated latency (the sum of each task's weight times its best time) drops most.
The budget is exact: ``trials`` candidates are measured in all (fewer only when every task
runs out of new candidates or keeps failing). A database that holds records of the tasks
already resumes: none is measured twice, and the model learns from them first.

At the end the best few candidates of the tasks that weigh most are re-timed together
(:func:`probsched.selection.retime`), and the network is compiled from the best record of
each task (:func:`probsched.compile`; a task that got no trial uses a predicted schedule).

>>> import probsched as ps
>>> result = ps.tune_model(*ps.models.get("bert_tiny"), trials=16)  # doctest: +SKIP
>>> print(result.summary())  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Union

import numpy as np

from .database import Database
from .graph import Graph
from .graph.compiler import DEFAULT_CANDIDATES, CompiledModel, _as_graph
from .graph.compiler import compile as compile_model
from .search import SearchStrategy
from .search import get as get_strategy
from .selection import DEFAULT_RETIME_ROUNDS, best_schedule, retime
from .task_scheduler import MAX_FAILED_ROUNDS, TaskState
from .task_scheduler import get as get_scheduler
from .task_search import TaskSearch, Trial, TuningResources, fit_on_past, run_rounds, start_model_from_transfer
from .tuner import DEFAULT_COST_MODEL, _resolve_model

if TYPE_CHECKING:
    from .cost_model import CostModel
    from .measure import Measurer
    from .target import Target

log = logging.getLogger("probsched.tune")

#: Candidates re-timed together per task at the end, for tasks of at least
#: :data:`RETIME_MIN_SHARE` of the estimated latency.
DEFAULT_MODEL_RETIME_TOP = 3
RETIME_MIN_SHARE = 0.01


def default_batch_size(trials: int, tasks: int) -> int:
    """Candidates per round: about three rounds per task within the budget, 8 to 32.

    >>> default_batch_size(1500, 31), default_batch_size(1500, 8), default_batch_size(20, 12)
    (16, 32, 8)
    """
    return int(min(32, max(8, trials // max(1, 3 * tasks))))


@dataclass(frozen=True)
class ModelTrial:
    """One measured candidate of a network's tuning: which task, the trial, the budget
    spent so far and the network's estimated latency after it (inf until every task ran)."""

    task: int
    task_name: str
    trial: Trial
    spent: int
    estimated_seconds: float


@dataclass(frozen=True)
class TaskRow:
    """A task's line of the result table."""

    name: str
    weight: int
    flops: float
    trials: int
    best_seconds: float
    share: float  # of the estimated latency


@dataclass
class ModelTuneResult:
    """What ``ps.tune_model`` did: per-task ``tasks`` rows, every trial in ``history``, the
    compiled network ``model`` and the scheduler used."""

    graph: Graph
    tasks: List[TaskRow]
    history: List[ModelTrial]
    model: Optional[CompiledModel]
    scheduler: str
    wall_seconds: float = 0.0
    phase_seconds: dict = field(default_factory=dict)  # propose, measure, learn, retime, compile
    example_args: tuple = field(default=(), repr=False)
    fn: Optional[Callable] = field(default=None, repr=False)

    @property
    def estimated_seconds(self) -> float:
        """Sum over tasks of weight x best time (inf if a task has no successful record)."""
        return sum(t.weight * t.best_seconds for t in self.tasks)

    @property
    def seconds_per_trial(self) -> float:
        """Wall seconds of the run per measured trial."""
        return self.wall_seconds / max(1, len(self.history))

    def summary(self) -> str:
        """A Markdown table of the tasks: weight, trials, best µs, share of the latency."""
        est = self.estimated_seconds
        head = f"{self.graph.name}: {len(self.history)} trials over {len(self.tasks)} tasks ({self.scheduler})"
        if self.wall_seconds and self.history:
            head += f" in {self.wall_seconds / 60:.1f} min ({self.seconds_per_trial:.2f} s per trial)"
        elif not self.history:
            head += ": nothing measured, every task's schedule is from the database or predicted"
        lines = [
            head,
            f"estimated latency {est * 1e3:.2f} ms" if math.isfinite(est) else "estimated latency: not every task ran",
            "",
            "| task | weight | trials | best µs | share of latency |",
            "|---|---:|---:|---:|---:|",
        ]
        for t in self.tasks:
            best = f"{t.best_seconds * 1e6:.1f}" if math.isfinite(t.best_seconds) else "-"
            lines.append(f"| {t.name} | {t.weight} | {t.trials} | {best} | {t.share:.1%} |")
        return "\n".join(lines)

    def compare(self, rounds: int = 7, min_repeat_ms: float = 200.0, extra: Optional[dict] = None) -> List[tuple]:
        """(implementation, median seconds) for the compiled network and ``jax.jit`` of the
        function, timed here in one run on the same inputs, interleaved; ``extra``: more
        no-argument callables to time with them (e.g. ONNX Runtime)."""
        from .measure.timer import time_interleaved

        if self.model is None:
            return []
        args = self.example_args
        fns = {"probsched": lambda: self.model(*args)}
        if self.fn is not None:
            import jax

            jitted = jax.jit(self.fn)
            jitted(*args)  # compiled before the timing
            fns["jax.jit"] = lambda: jax.block_until_ready(jitted(*args))
        fns.update(extra or {})
        timings = time_interleaved(fns, rounds=rounds, min_repeat_ms=min_repeat_ms)
        return [(name, t.median) for name, t in timings.items()]


@contextlib.contextmanager
def _phase(result: ModelTuneResult, name: str):
    """Add the time of the block to ``result.phase_seconds[name]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        result.phase_seconds[name] = result.phase_seconds.get(name, 0.0) + time.perf_counter() - t0


def _estimate(states: Sequence[TaskState]) -> float:
    return sum(s.weighted_seconds for s in states)


def tune_model(
    model: Union[Graph, Callable],
    *example_args: Any,
    trials: int,
    database: Union[Database, str, None] = None,
    scheduler: Union[str, object] = "gradient",
    strategy: Union[str, SearchStrategy] = "evolutionary",
    cost_model: Union[str, "CostModel", None] = DEFAULT_COST_MODEL,
    space: Optional[Callable] = None,
    measurer: Optional["Measurer"] = None,
    seed: int = 0,
    batch_size: Optional[int] = None,
    retime_top: int = DEFAULT_MODEL_RETIME_TOP,
    retime_rounds: int = DEFAULT_RETIME_ROUNDS,
    compile: bool = True,  # noqa: A002 - the verb the result's model comes from
    candidates: int = DEFAULT_CANDIDATES,
    callbacks: Sequence[Callable[[ModelTrial, "ModelTuneResult"], None]] = (),
    target: Optional["Target"] = None,
) -> ModelTuneResult:
    """Tune a network (a :class:`~probsched.graph.Graph`, or a JAX function with example
    arguments) for ``trials`` measurements in all; see the module docstring.

    ``scheduler``: ``"gradient"``, ``"round-robin"`` or an object with ``next_task``
    (:mod:`probsched.task_scheduler`). ``strategy``, ``cost_model``, ``space``: as for
    :func:`probsched.tune` (a strategy object is copied for each task). ``database``: a
    path, a :class:`~probsched.database.Database` or None (in memory). ``measurer``: shared
    by every task (default: a :class:`~probsched.measure.LocalMeasurer` made here; a
    :class:`~probsched.measure.DaskMeasurer` measures on a cluster).
    ``batch_size``: candidates per round (default :func:`default_batch_size`).
    ``retime_top``: candidates re-timed per weighty task at the end (0: none). ``compile``:
    build ``result.model``. ``callbacks``: called as ``cb(model_trial, result_so_far)``.
    ``target``: what the default space schedules for (this machine unless given).
    """
    from . import space as space_mod

    if trials < 0:
        raise ValueError(f"tune_model: trials must be >= 0, got {trials}")
    graph = _as_graph(model, example_args)
    fn = model if not isinstance(model, Graph) else None
    tasks = graph.tasks()
    sched = get_scheduler(scheduler)
    batch = batch_size or default_batch_size(trials, len(tasks))
    space = space or space_mod.default(target=target)
    probe = get_strategy(copy.deepcopy(strategy) if isinstance(strategy, SearchStrategy) else strategy)
    shared, use_transfer = _resolve_model(cost_model, seed)
    if trials == 0 or not getattr(probe, "uses_cost_model", True):
        shared, use_transfer = None, False
    resources = TuningResources(database, measurer)
    db, measurer = resources.db, resources.measurer
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    result = ModelTuneResult(
        graph, [], [], None, getattr(sched, "name", type(sched).__name__), example_args=tuple(example_args), fn=fn
    )
    try:
        searches = []
        for i, task in enumerate(tasks):
            strat = copy.deepcopy(strategy) if isinstance(strategy, SearchStrategy) else get_strategy(strategy, batch=batch)
            searches.append(
                TaskSearch(task.workload, db, space=space, strategy=strat, model=shared, seed=seed + i, start=start)
            )
        states = [TaskState(i, t.name, t.weight, t.flops, 0, s.best_seconds) for i, (t, s) in enumerate(zip(tasks, searches))]
        with _phase(result, "learn"):
            if use_transfer:
                start_model_from_transfer(shared, [s.key for s in searches])
            fit_on_past(shared, searches)
        spent = 0
        index_of = {id(s): i for i, s in enumerate(searches)}

        def next_round():
            nonlocal spent
            while spent < trials:
                i = sched.next_task(states, rng)
                if i is None or not states[i].alive:
                    return None
                with _phase(result, "propose"):
                    cands = searches[i].propose(min(batch, trials - spent))
                if cands:
                    spent += len(cands)
                    return searches[i], cands
                states[i].alive = False
            return None

        def record(search: TaskSearch, cands, index: int, res) -> None:
            i = index_of[id(search)]
            trial = search.record(cands, index, res)
            states[i].best_seconds = search.best_seconds
            states[i].trials += 1
            event = ModelTrial(i, tasks[i].name, trial, len(result.history) + 1, _estimate(states))
            result.history.append(event)
            for cb in callbacks:
                cb(event, result)

        def round_done(search: TaskSearch, cands, results) -> None:
            i = index_of[id(search)]
            state = states[i]
            with _phase(result, "learn"):
                search.observe(cands, results)
            state.round_bests.append(search.best_seconds)
            state.failed_rounds = 0 if any(r.ok for r in results) else state.failed_rounds + 1
            if state.failed_rounds >= MAX_FAILED_ROUNDS:
                log.warning("%s: %d rounds without a successful trial; it leaves the rotation", tasks[i].name, MAX_FAILED_ROUNDS)
                state.alive = False

        before = dict(result.phase_seconds)
        t0 = time.perf_counter()
        run_rounds(measurer, next_round, record, round_done)
        inner = sum(result.phase_seconds.get(k, 0.0) - before.get(k, 0.0) for k in ("propose", "learn"))
        result.phase_seconds["measure"] = time.perf_counter() - t0 - inner  # what the rounds waited for
        if retime_top and result.history:
            with _phase(result, "retime"):
                _retime_weighty(tasks, searches, states, db, measurer, retime_top, retime_rounds)
        rows = []
        for task, search, state in zip(tasks, searches, states):
            best = best_schedule(db, task.workload)
            rows.append([task.name, task.weight, task.flops, state.trials, best.seconds if best else math.inf])
        total = sum(r[1] * r[4] for r in rows if math.isfinite(r[4])) or 1.0
        result.tasks = [TaskRow(n, w, f, tr, b, (w * b / total) if math.isfinite(b) else 0.0) for n, w, f, tr, b in rows]
        result.wall_seconds = time.perf_counter() - start
        if compile:
            resources.settle_borrowed()
            with _phase(result, "compile"):
                result.model = compile_model(graph, database=db, space=space, candidates=candidates, seed=seed)
    finally:
        resources.close()
    return result


def _retime_weighty(tasks, searches, states, db, measurer, top, rounds) -> None:
    """Re-time the best ``top`` candidates of each task that weighs at least
    :data:`RETIME_MIN_SHARE` of the estimated latency and was measured in this run."""
    total = sum(s.weighted_seconds for s in states if math.isfinite(s.best_seconds)) or 1.0
    for task, search, state in zip(tasks, searches, states):
        if state.trials and math.isfinite(state.best_seconds) and state.weighted_seconds / total >= RETIME_MIN_SHARE:
            retime(search.workload, db, measurer, top=top, rounds=rounds)


__all__ = ["tune_model", "ModelTuneResult", "ModelTrial", "TaskRow", "default_batch_size"]
