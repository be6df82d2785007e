"""The tuning loop: one budget of trials spent over tasks, round by round.

Every tuning run is this loop. ``ps.tune_model`` runs it over a network's tasks and
``ps.tune`` over one task of weight 1. Each task gets a
:class:`~probsched.tuning.task_search.TaskSearch` (its strategy's state); all share one
measurer, one database and one cost model (trained on the records of every task: its
features are per store, and its ranking loss pairs programs of one task only). Before each
round a task scheduler (:mod:`.task_scheduler`) picks the task; its search proposes a batch
of new candidates, the measurer measures them, each result is committed to the database as
it arrives (a run killed mid-round loses nothing measured), and when the round is complete
the cost model and the strategy learn from it. The budget is trials, minutes, or both (no
round starts after the minutes are up, but a task without a round yet, whose first rounds
shrank too little to fit, still gets one of :data:`MIN_FIRST_ROUND` trials; as the minutes
run short, first rounds shrink so that every task gets one). A task leaves the rotation when its
strategy finds no new candidate or after :data:`~.task_scheduler.MAX_FAILED_ROUNDS` rounds
without one success. The budget is exact: ``trials`` candidates are measured in all (fewer
only when every task leaves the rotation). At the end the fastest few candidates of each
task that weighs at least :data:`RETIME_MIN_SHARE` of the estimated latency are re-timed
together (:func:`~.selection.retime`).

>>> import probsched as ps
>>> from probsched.measure import MeasureResult
>>> class Instant:   # a measurer stand-in: every candidate runs in 1 µs
...     def measure(self, workload, schedules, on_result=None):
...         results = [MeasureResult((1e-6,))] * len(schedules)
...         for i, r in enumerate(results):
...             on_result(i, r)
...         return results
...     def measure_together(self, workload, schedules, rounds=15): return [MeasureResult((1e-6,))] * len(schedules)
...     def settle(self): pass
...     def close(self): pass
>>> tasks = [LoopTask(ps.workloads.small("GMM"), weight=2)]
>>> run = TuningLoop(tasks, trials=6, options=TuningOptions(strategy="replay", cost_model=None, batch_size=4),
...                  resources=TuningResources(None, Instant()))
>>> run.run()
>>> [len(batch) for batch in run.rounds], run.states[0].trials, run.estimated_seconds
([4, 2], 6, 2e-06)
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..database import Database, TuningRecord
from ..database.record import workload_key
from ..measure.cold_weights import weight_positions
from ..measure.protocol import takes_keyword
from ..search import Candidate, SearchStrategy
from ..search import get as get_strategy
from ..workloads import Workload, as_workload
from .options import TuningOptions
from .resources import TuningResources
from .selection import retime
from .task_scheduler import MAX_FAILED_ROUNDS, TaskState
from .task_scheduler import get as get_scheduler
from .task_search import TaskSearch, Trial
from .warm_start import warm_start

if TYPE_CHECKING:
    from ..cost_model import CostModel
    from ..ir.stmt import PrimFunc
    from ..measure import MeasureResult, Measurer

log = logging.getLogger("probsched.tune")

#: A task is re-timed at the end only when it weighs at least this share of the estimated
#: latency (re-timing costs a compile per candidate; a task of 0.1% cannot pay it back).
RETIME_MIN_SHARE = 0.01

#: An alternative (:class:`LoopTask` ``group``) this many times slower than its group's
#: fastest, each having a success, gets no more rounds: a first round's best is rarely beaten
#: by that much later (the margin is for the drift of a shared machine and for searches that
#: improve at different speeds).
RACE_MARGIN = 1.25

Round = Tuple[TaskSearch, List[Candidate]]


def grouped_total(weighted: Sequence[Tuple[float, str]]) -> float:
    """Sum of ``(seconds, group)`` pairs' seconds, each non-empty group of alternatives
    (:class:`LoopTask` ``group``) counted once, by its fastest: what the network runs.

    >>> grouped_total([(1.0, ""), (3.0, "conv"), (2.0, "conv")])
    3.0
    """
    groups: Dict[str, float] = {}
    total = 0.0
    for seconds, group in weighted:
        if group:
            groups[group] = min(groups.get(group, math.inf), seconds)
        else:
            total += seconds
    return total + sum(groups.values())


#: The round size of a run bounded by time alone is chosen as for this many trials.
DEFAULT_TIMED_TRIALS = 1500


#: Trials of a task's first round when a time budget runs short (:meth:`TuningLoop._fit_first_rounds`).
MIN_FIRST_ROUND = 4


def check_budget(trials: Optional[int], minutes: Optional[float]) -> Tuple[float, Optional[float]]:
    """A run's budget: ``trials`` measurements, or ``minutes`` of tuning, or whichever ends
    first (at least one of them); returns ``(trials or inf, minutes)``.

    >>> check_budget(None, 2.5), check_budget(64, None)
    ((inf, 2.5), (64, None))
    >>> check_budget(None, None)
    Traceback (most recent call last):
    ...
    ValueError: give a budget: trials, minutes, or both
    """
    if trials is None and minutes is None:
        raise ValueError("give a budget: trials, minutes, or both")
    if trials is not None and trials < 0:
        raise ValueError(f"trials must be >= 0, got {trials}")
    if minutes is not None and not minutes > 0:
        raise ValueError(f"minutes must be > 0, got {minutes}")
    return (math.inf if trials is None else trials), minutes


@dataclass(frozen=True)
class LoopTask:
    """What the loop tunes: a workload, how many times a network calls it, and its name.

    ``group``: tasks of one non-empty group are alternatives (one network task in two
    precisions): the network runs the fastest, so the estimate counts the group once, and
    once each has a success, one slower than :data:`RACE_MARGIN` times the group's best
    leaves the rotation. ``seeds_from``: a workload with the same blocks and loops whose best
    records the search proposes first, replayed, when it has none of its own (a narrowed
    task's base: :class:`~.task_search.TaskSearch` ``seed_records``)."""

    workload: Union[Workload, "PrimFunc"]
    weight: int = 1
    name: str = ""
    group: str = ""
    seeds_from: Optional[Union[Workload, "PrimFunc"]] = None

    @property
    def label(self) -> str:
        """The name it is shown under."""
        w = as_workload(self.workload)
        return self.name or w.name or w.func.name

    @property
    def flops(self) -> float:
        return float(getattr(self.workload, "flops", None) or 0.0)


@dataclass(frozen=True)
class TrialEvent:
    """One measured candidate of a run: which task, the trial, the budget spent so far and
    the network's estimated latency after it (inf until every task has a success)."""

    task: int
    task_name: str
    trial: Trial
    spent: int
    estimated_seconds: float


def run_rounds(
    measurer: "Measurer",
    next_round: Callable[[], Optional[Round]],
    on_result: Callable[[TaskSearch, List[Candidate], int, "MeasureResult"], None],
    on_done: Callable[[TaskSearch, List[Candidate], list], None],
) -> None:
    """Measure rounds until ``next_round()`` returns None: ``on_result(search, batch, i,
    result)`` as each result arrives, ``on_done(search, batch, results)`` when a round is
    complete (where the model and the strategy learn).

    A :class:`~probsched.measure.PipelinedMeasurer` (one that takes a batch without waiting
    for it, as :class:`~probsched.measure.DaskMeasurer` does) is fed one round ahead: the
    next round is proposed and sent while the current one is measured, so a cluster's
    workers do not wait for the search; that round's proposal has not seen the current
    round's results. A local measurer is not: the search would take a core from the kernel
    being timed.

    >>> calls = []
    >>> class Now:
    ...     def measure(self, w, schedules, on_result=None):
    ...         return [None] * len(schedules)
    >>> rounds = iter([(None, []), None])
    >>> run_rounds(Now(), lambda: next(rounds), None, lambda s, b, r: calls.append(len(r)))
    >>> calls
    [0]
    """
    submit = getattr(measurer, "submit", None)  # the PipelinedMeasurer method
    if not callable(submit):
        bounded = takes_keyword(measurer.measure, "best_seconds")
        while True:
            nxt = next_round()
            if nxt is None:
                return
            search, batch = nxt
            results = measurer.measure(
                search.workload if search is not None else None, [c.schedule for c in batch],
                on_result=lambda i, r, s=search, b=batch: on_result(s, b, i, r), **_bound(search, bounded),
            )
            on_done(search, batch, results)
    bounded = takes_keyword(submit, "best_seconds")
    inflight = None
    while True:
        nxt = next_round()
        sent = None
        if nxt is not None:
            search, batch = nxt
            sent = (search, batch, submit(search.workload, [c.schedule for c in batch], **_bound(search, bounded)))
        if inflight is not None:
            search, batch, handle = inflight
            results = handle.wait(lambda i, r, s=search, b=batch: on_result(s, b, i, r))
            on_done(search, batch, results)
        if sent is None:
            return
        inflight = sent


def _bound(search: Optional[TaskSearch], bounded: bool) -> dict:
    """The keyword that gives a measurer the task's best median in the run's database (what a
    clearly slower candidate's timing stops early against), where the measurer takes it."""
    best = getattr(search, "best_seconds", math.inf)
    return {"best_seconds": best} if bounded and math.isfinite(best) else {}


def _seed_records(db: Database, workload: Optional[Union[Workload, "PrimFunc"]]) -> List[TuningRecord]:
    """The best records of ``workload`` (a :class:`LoopTask`'s ``seeds_from``) a search starts
    from: the database's, else the shipped ones; none without a workload."""
    if workload is None:
        return []
    from .shipped import DEFAULT_TOP, shipped_records

    return db.best(workload, k=DEFAULT_TOP) or shipped_records(workload_key(workload), DEFAULT_TOP)


def make_cost_model(options: TuningOptions, trials: int, strategy: SearchStrategy) -> Optional["CostModel"]:
    """The run's cost model: None when nothing would ask it (no trials, or a strategy that
    never scores), else ``options.cost_model`` by name or as given."""
    from .. import cost_model as cm

    if options.cost_model is None or trials == 0 or not getattr(strategy, "uses_cost_model", True):
        return None
    return cm.get(options.cost_model, seed=options.seed)


class TuningLoop:
    """One tuning run over ``tasks`` (see the module docstring).

    ``scheduler``: a name of :data:`~.task_scheduler.SCHEDULERS` or a scheduler object;
    ``on_trial(event)`` is called after each measured trial. :meth:`run` spends the budget;
    the loop then holds each task's ``searches`` and ``states``, every ``events`` and the
    time of each phase (``phase_seconds``: propose, learn, measure, retime).
    """

    def __init__(
        self,
        tasks: Sequence[LoopTask],
        *,
        trials: Optional[int],
        options: TuningOptions,
        resources: TuningResources,
        scheduler: Union[str, object] = "gradient",
        on_trial: Optional[Callable[[TrialEvent], None]] = None,
        start: Optional[float] = None,
        minutes: Optional[float] = None,
    ) -> None:
        trials, minutes = check_budget(trials, minutes)
        if not tasks:
            raise ValueError("a tuning run needs at least one task")
        self.tasks = list(tasks)
        self.trials = trials
        self.options = options
        self.resources = resources
        self.scheduler = get_scheduler(scheduler)
        self.on_trial = on_trial
        self.start = time.perf_counter() if start is None else start
        #: no round is proposed after this moment (``minutes`` after the start)
        self.deadline = math.inf if minutes is None else self.start + 60.0 * minutes
        self.batch = options.batch_for(trials if math.isfinite(trials) else DEFAULT_TIMED_TRIALS, len(tasks))
        self.space = options.resolved_space()
        self.events: List[TrialEvent] = []
        self.rounds: List[List[Candidate]] = []
        self.phase_seconds: Dict[str, float] = {}
        self.rng = np.random.default_rng(options.seed)
        strategies = self._strategies()
        self.model = make_cost_model(options, trials, strategies[0])
        seeds = [None if options.seed is None else options.seed + i for i in range(len(tasks))]
        self.searches = [
            TaskSearch(t.workload, resources.db, space=self.space, strategy=s, model=self.model, seed=seed, start=self.start,
                       similar_tasks=options.similar_tasks, shipped=options.shipped,
                       seed_records=_seed_records(resources.db, t.seeds_from))
            for t, s, seed in zip(self.tasks, strategies, seeds)
        ]
        self.states = [
            TaskState(i, t.label, t.weight, t.flops, 0, s.best_seconds, past_trials=len(s.past))
            for i, (t, s) in enumerate(zip(self.tasks, self.searches))
        ]
        self._index_of = {id(s): i for i, s in enumerate(self.searches)}
        for group in dict.fromkeys(t.group for t in self.tasks if t.group):
            self.race(group)
        self._spent = 0
        self._proposed: set = set()  # tasks that had a round proposed
        self._rounds_from = 0.0  # when the rounds began (run), and the phases' seconds then
        self._phases_before_rounds: Dict[str, float] = {}

    def _strategies(self) -> List[SearchStrategy]:
        """A strategy per task: a name made per task (sized to the round); an object used as
        given for one task, copied for each of several (each task's search state is its own)."""
        strategy = self.options.strategy
        if isinstance(strategy, str):
            return [get_strategy(strategy, batch=self.batch, **self.options.strategy_options) for _ in self.tasks]
        get_strategy(strategy)  # the TypeError for an object that is no strategy
        if len(self.tasks) == 1:
            return [strategy]
        return [copy.deepcopy(strategy) for _ in self.tasks]

    @property
    def strategy_name(self) -> str:
        return self.searches[0].strategy_name

    @property
    def scheduler_name(self) -> str:
        return getattr(self.scheduler, "name", type(self.scheduler).__name__)

    @property
    def estimated_seconds(self) -> float:
        """Sum over tasks of weight x best time (inf while a task has no success); of a
        group of alternatives, the fastest."""
        return grouped_total([(state.weighted_seconds, task.group) for task, state in zip(self.tasks, self.states)])

    def race(self, group: str) -> None:
        """Retire the alternatives of ``group`` that are clearly slower than its fastest
        (:data:`RACE_MARGIN`), once every one of them has a success: after each of their
        rounds, and at the start, from the database's records (a later run does not spend a
        first round on an alternative an earlier one already left behind)."""
        if not group:
            return
        members = [j for j, t in enumerate(self.tasks) if t.group == group]
        bests = [self.states[j].best_seconds for j in members]
        if len(members) < 2 or not all(math.isfinite(b) for b in bests):
            return
        for j, best in zip(members, bests):
            if self.states[j].alive and best > RACE_MARGIN * min(bests):
                log.info("%s: %.1fx slower than its alternative; it leaves the rotation", self.states[j].name,
                         best / min(bests))
                self.states[j].alive = False

    @contextlib.contextmanager
    def phase(self, name: str):
        """Add the time of the block to ``phase_seconds[name]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phase_seconds[name] = self.phase_seconds.get(name, 0.0) + time.perf_counter() - t0

    # ------------------------------------------------------------------ the rounds
    def _next_round(self) -> Optional[Round]:
        while self._spent < self.trials:
            n = int(min(self.batch, self.trials - self._spent))
            if time.perf_counter() < self.deadline:
                i = self.scheduler.next_task(self.states, self.rng)
                if i is None or not self.states[i].alive:
                    return None
                n = self._fit_first_rounds(i, n)
            else:
                # past the deadline only the first rounds the estimate could not fit (a round
                # costing more than the rounds before it said), each at its smallest: without
                # one a task runs a predicted schedule
                i = next((j for j in range(len(self.states)) if self._waits_for_first_round(j)), None)
                if i is None:
                    return None
                n = min(n, MIN_FIRST_ROUND)
            with self.phase("propose"):
                cands = self.searches[i].propose(n)
            self._proposed.add(i)
            if cands:
                self._spent += len(cands)
                self.rounds.append(cands)
                return self.searches[i], cands
            self.states[i].alive = False
        return None

    def _waits_for_first_round(self, j: int) -> bool:
        """Whether task ``j`` is live and has neither had a round in this run nor a success in
        an earlier one (what a compile would run for it is a predicted schedule)."""
        return self.states[j].alive and j not in self._proposed and not math.isfinite(self.states[j].best_seconds)

    def _fit_first_rounds(self, i: int, n: int) -> int:
        """``n`` trials for task ``i``'s round, cut under a time budget so that every live
        task with neither a record nor a round yet (:meth:`_waits_for_first_round`) can still
        have one of :data:`MIN_FIRST_ROUND` trials before the deadline (without any of its
        own a task runs a predicted schedule; MobileNet-V2 tuned for 6 minutes left two so).
        The rounds so far say what a round costs besides its trials (proposing, learning) and
        what a trial costs."""
        now = time.perf_counter()
        if not math.isfinite(self.deadline) or not self.events or not self.rounds:
            return n
        waiting = sum(1 for j in range(len(self.states)) if j != i and self._waits_for_first_round(j))
        if not waiting:
            return n
        overhead = sum(self.phase_seconds.get(k, 0.0) - self._phases_before_rounds.get(k, 0.0) for k in ("propose", "learn"))
        per_round = overhead / len(self.rounds)
        per_trial = max(now - self._rounds_from - overhead, 0.0) / len(self.events)
        left = self.deadline - now - per_round - waiting * (per_round + MIN_FIRST_ROUND * per_trial)
        affordable = int(left / per_trial) if per_trial > 0 else n
        return max(min(n, MIN_FIRST_ROUND), min(n, affordable))

    def _record(self, search: TaskSearch, cands: List[Candidate], index: int, result: "MeasureResult") -> None:
        i = self._index_of[id(search)]
        trial = search.record(cands, index, result)
        state = self.states[i]
        state.best_seconds = search.best_seconds
        state.trials += 1
        event = TrialEvent(i, state.name, trial, len(self.events) + 1, self.estimated_seconds)
        self.events.append(event)
        if self.on_trial is not None:
            self.on_trial(event)

    def _round_done(self, search: TaskSearch, cands: List[Candidate], results: list) -> None:
        i = self._index_of[id(search)]
        state = self.states[i]
        with self.phase("learn"):
            search.observe(cands, results)
        state.round_bests.append(search.best_seconds)
        state.failed_rounds = 0 if any(r.ok for r in results) else state.failed_rounds + 1
        if state.failed_rounds >= MAX_FAILED_ROUNDS:
            log.warning("%s: %d rounds without a successful trial; it leaves the rotation", state.name, MAX_FAILED_ROUNDS)
            state.alive = False
        self.race(self.tasks[i].group)

    def run(self) -> None:
        """Warm the model up, spend the budget, re-time the weighty tasks."""
        with self.phase("learn"):
            warm_start(self.model, self.searches)
        before = self._phases_before_rounds = dict(self.phase_seconds)
        t0 = self._rounds_from = time.perf_counter()
        run_rounds(self.resources.measurer, self._next_round, self._record, self._round_done)
        inner = sum(self.phase_seconds.get(k, 0.0) - before.get(k, 0.0) for k in ("propose", "learn"))
        self.phase_seconds["measure"] = time.perf_counter() - t0 - inner  # what the rounds waited for
        top = self.options.retime_for(len(self.tasks))
        if top and self.events:
            with self.phase("retime"):
                self._retime_weighty(top)

    def _retime_weighty(self, top: int) -> None:
        """Re-time the best ``top`` candidates of each task measured in this run that weighs
        at least :data:`RETIME_MIN_SHARE` of the estimated latency.

        A network task (one with weights) is re-timed as the network runs it: its weights cold
        (:mod:`probsched.measure.cold_weights`), with the fastest candidate of each algorithm
        family beside its ``top`` (:func:`.selection.retime`). Hot, a Winograd program reading
        four times the weight bytes, or a float32 one reading twice bfloat16's, can lead where
        it runs slower in the network. Of a group of alternatives (one task in two
        precisions) only the fastest runs, so only it is re-timed hot; cold, each is, since
        the weights' bytes may reorder them."""
        total = sum(s.weighted_seconds for s in self.states if math.isfinite(s.best_seconds)) or 1.0
        fastest: Dict[str, float] = {}  # of each group of alternatives: only that one runs
        for task, state in zip(self.tasks, self.states):
            if task.group:
                fastest[task.group] = min(fastest.get(task.group, math.inf), state.best_seconds)
        for task, search, state in zip(self.tasks, self.searches, self.states):
            cold = bool(weight_positions(as_workload(search.workload).func))
            if task.group and state.best_seconds > fastest[task.group] and not cold:
                continue
            if state.trials and math.isfinite(state.best_seconds) and state.weighted_seconds / total >= RETIME_MIN_SHARE:
                retime(search.workload, self.resources.db, self.resources.measurer, top=top, rounds=self.options.retime_rounds,
                       cold_weights=cold, families=cold)


__all__ = ["TuningLoop", "LoopTask", "TrialEvent", "run_rounds", "make_cost_model", "check_budget", "RETIME_MIN_SHARE"]
