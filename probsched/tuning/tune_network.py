"""``ps.tune_model``: tune every task of a network under one trial budget.

The network is imported and fused into tasks (:mod:`probsched.graph`), and the tuning loop
(:mod:`.loop`) spends the budget over them: a task scheduler (:mod:`.task_scheduler`,
MetaSchedule's gradient-based one by default) picks the task of each round, so the budget
goes where the network's estimated latency (the sum of each task's weight times its best
time) drops most. A database that holds records of the tasks already resumes: none is
measured twice, and the model learns from them first. At the end the best few candidates
of the tasks that weigh most are re-timed together, and the network is compiled from the
best record of each task (:func:`probsched.compile`; a task that got no trial uses a
predicted schedule). The search options are :class:`~.options.TuningOptions`, the same as
``ps.tune``'s.

>>> import probsched as ps
>>> result = ps.tune_model(*ps.models.get("bert_tiny"), trials=16)  # doctest: +SKIP
>>> print(result.summary())  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..database import Database
from ..graph import Graph, Task
from ..ir.dtypes import BF16
from ..precision import canonical
from .compile_network import DEFAULT_CANDIDATES, as_graph, narrow_mode, network_tasks
from .compile_network import compile as compile_model
from .loop import LoopTask, TrialEvent, TuningLoop, check_budget, grouped_total
from .options import TuningOptions, default_batch_size
from .resources import TuningResources
from .selection import best_schedule

if TYPE_CHECKING:
    from ..measure import Measurer
    from ..runtime import CompiledModel

log = logging.getLogger("probsched.tune")

#: One measured trial of a network's run, as ``tune_model``'s callbacks receive it.
ModelTrial = TrialEvent


@dataclass(frozen=True)
class TaskRow:
    """A task's line of the result table."""

    name: str
    weight: int
    flops: float
    trials: int
    best_seconds: float
    share: float  # of the estimated latency (0 for an alternative the network does not run)
    group: str = ""  # tasks of one non-empty group are versions of one network task (precisions, narrowed)


@dataclass
class ModelTuneResult:
    """What ``ps.tune_model`` did: per-task ``tasks`` rows, every trial in ``history``, the
    compiled network ``model`` and the scheduler used."""

    graph: Graph
    tasks: List[TaskRow]
    history: List[ModelTrial]
    model: Optional["CompiledModel"]
    scheduler: str
    wall_seconds: float = 0.0
    phase_seconds: dict = field(default_factory=dict)  # propose, measure, learn, retime, compile
    example_args: tuple = field(default=(), repr=False)
    fn: Optional[Callable] = field(default=None, repr=False)

    @property
    def estimated_seconds(self) -> float:
        """Sum over tasks of weight x best time (inf if a task has no successful record);
        of a group of alternatives (one task in two precisions, or narrowed), the fastest
        only: the network runs that one."""
        return grouped_total([(t.weight * t.best_seconds, t.group) for t in self.tasks])

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
            share = "slower alternative" if t.group and math.isfinite(t.best_seconds) and not t.share else f"{t.share:.1%}"
            lines.append(f"| {t.name} | {t.weight} | {t.trials} | {best} | {share} |")
        return "\n".join(lines)

    def compare(self, rounds: int = 7, min_repeat_ms: float = 200.0, extra: Optional[dict] = None) -> List[tuple]:
        """(implementation, median seconds) for the compiled network and ``jax.jit`` of the
        function, timed here in one run on the same inputs, interleaved; ``extra``: more
        no-argument callables to time with them (e.g. ONNX Runtime)."""
        from ..measure.timer import time_interleaved

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


def alternatives(tasks: Sequence[Task], precision: str) -> Tuple[List[Task], List[str]]:
    """The tasks to tune for ``precision``, each with its group (:class:`~.loop.LoopTask`):
    a task with products in another precision than float32, tuned in that precision and in
    float32 too, as its alternative (a depthwise or stem convolution can run faster in
    float32; the loop races the two and ``ps.compile`` runs the faster:
    :func:`~.compile_network.compile`). The float32 version is an alternative even when a
    database holds its records already: it is the one the network runs wherever it won an
    earlier race, and a later run must be able to tune it (the loop retires at its start
    an alternative its records show clearly slower: :meth:`~.loop.TuningLoop.race`).

    >>> import numpy as np, probsched as ps
    >>> graph = ps.from_jax(lambda x: x @ np.ones((8, 16), np.float32), np.ones((4, 8), np.float32))
    >>> tasks, groups = alternatives(graph.tasks(), "bf16")
    >>> [t.precision for t in tasks], len(set(groups))
    (['bfloat16', 'float32'], 1)
    """
    out: List[Task] = []
    groups: List[str] = []
    for t in tasks:
        low = t.in_precision(precision)
        out.append(low)
        if low is t:
            groups.append("")
            continue
        groups.append(t.key)
        out.append(t)
        groups.append(t.key)
    return out, groups


#: The share of a bf16 run's budget (trials or minutes) that tunes the tasks storing values
#: in bfloat16 between them (:func:`narrowed_mode`), after the tasks themselves.
NARROWED_SHARE = 0.2


def narrowed_mode(precision: str, narrow: Union[bool, str]) -> Optional[str]:
    """The ``narrow`` mode whose narrowed tasks a run in ``precision`` tunes: ``"all"``,
    where the compile may run it (``"all"``, ``"auto"``), else None. With ``"exact"`` a
    narrowed task reads or writes in bfloat16 only values its base rounds anyway, and its
    base's records run it as fast: tuning them as themselves gained nothing measurable
    (ResNet-50 1.018x, MobileNet-V2 0.992x the time, paired; ``benchmarks/data/zen4_1207d.md``),
    while ``"all"``'s, which write bfloat16 where their bases wrote float32, gained 3%
    (MobileNet-V2).

    >>> narrowed_mode("bf16", "auto"), narrowed_mode("bf16", True), narrowed_mode("float32", "all")
    ('all', None, None)
    """
    return "all" if canonical(precision) == BF16 and narrow_mode(narrow) in ("all", "auto") else None


def narrowed_tasks(graph: Graph, db: Database, precision: str, mode: str) -> List[Task]:
    """The narrowed tasks the compile of ``graph`` runs with the records of ``db`` in ``mode``
    (:func:`~.compile_network.network_tasks`): a task that stores values in bfloat16 between
    tasks is another program than the one tuned (it reads or writes bfloat16), and a
    schedule tuned to write float32 can write bfloat16 slowly (MobileNet-V2's depthwise
    convolutions, 1.3-2x their float32 time in network order)."""
    from .shipped import shipped_database

    return [t for t in network_tasks(graph, db, precision, mode, shipped_database())[0] if t.base is not None]


def _tune_narrowed(graph: Graph, precision: str, mode: str, rows: list, trials: Optional[int],
                   minutes: Optional[float], start: float, opts: TuningOptions, resources: TuningResources, scheduler,
                   on_trial, result: "ModelTuneResult") -> list:
    """Tune the narrowed tasks of the network (:func:`narrowed_tasks`, as the tasks' race
    left it) with what is left of the budget, each starting from its base's best records;
    ``rows`` gains theirs, each in the group of its network task (the network runs one)."""
    narrowed = narrowed_tasks(graph, resources.db, precision, mode)
    left_trials = None if trials is None else trials - len(result.history)
    left_minutes = None if minutes is None else minutes - (time.perf_counter() - start) / 60.0
    if not narrowed or (left_trials is not None and left_trials <= 0) or (left_minutes is not None and left_minutes <= 0):
        return rows
    network_task = {t.name: t.key for t in graph.tasks()}
    rows = [(n, w, f, tr, b, g or network_task.get(n.split(":bf16")[0], "")) for n, w, f, tr, b, g in rows]
    groups = [network_task[t.name.split(":bf16")[0]] for t in narrowed]
    tuned = [(w * b, g) for _, w, _, _, b, g in rows]
    first = len(rows)

    def on_narrowed_trial(event: TrialEvent) -> None:
        # the event as the whole run sees it: the network's estimate, the task's row
        estimate = grouped_total(tuned + [(s.weighted_seconds, g) for s, g in zip(loop.states, groups)])
        event = replace(event, task=first + event.task, estimated_seconds=estimate)
        result.history.append(event)
        on_trial(event)

    loop = TuningLoop(
        [LoopTask(t.workload, t.weight, narrowed_label(t), seeds_from=t.base.workload) for t in narrowed],
        trials=left_trials, minutes=left_minutes, options=opts, resources=resources, scheduler=scheduler,
        on_trial=on_narrowed_trial,
    )
    result.history = list(result.history)
    loop.run()
    for phase, seconds in loop.phase_seconds.items():
        result.phase_seconds[phase] = result.phase_seconds.get(phase, 0.0) + seconds
    for task, state, group in zip(narrowed, loop.states, groups):
        best = best_schedule(resources.db, task.workload)
        rows.append((narrowed_label(task), task.weight, task.flops, state.trials, best.seconds if best else math.inf, group))
    return rows


def narrowed_label(task: Task) -> str:
    """How a narrowed task is named in a run's table: its name and the values it stores in
    bfloat16."""
    return f"{task.name} [bfloat16: {', '.join(task.narrowed)}]"


def tune_model(
    model: Union[Graph, Callable],
    *example_args: Any,
    trials: Optional[int] = None,
    minutes: Optional[float] = None,
    database: Union[Database, str, None] = None,
    measurer: Optional["Measurer"] = None,
    scheduler: Union[str, object] = "gradient",
    callbacks: Sequence[Callable[[ModelTrial, "ModelTuneResult"], None]] = (),
    compile: bool = True,  # noqa: A002 - the verb the result's model comes from
    candidates: int = DEFAULT_CANDIDATES,
    precision: str = "float32",
    narrow: Union[bool, str] = True,
    options: Optional[TuningOptions] = None,
    **option_values: Any,
) -> ModelTuneResult:
    """Tune a network (a :class:`~probsched.graph.Graph`, or a JAX function with example
    arguments) for ``trials`` measurements in all, or ``minutes`` of tuning, or whichever
    ends first (no round starts after the minutes, but a task without one yet still gets
    a smallest first round; the re-timing and the compile follow);
    see the module docstring.

    ``database``: a path, a :class:`~probsched.database.Database` or None (in memory).
    ``measurer``: shared by every task (default: a :class:`~probsched.measure.LocalMeasurer`
    made here; a :class:`~probsched.measure.DaskMeasurer` measures on a cluster).
    ``scheduler``: a name of :data:`~.task_scheduler.SCHEDULERS` (``"gradient"``,
    ``"round-robin"``) or an object with ``next_task``. ``callbacks``: called as
    ``cb(model_trial, result_so_far)``. ``compile``: build ``result.model``
    (``candidates``: programs ranked for a task without a record). ``precision``: ``"bf16"``
    tunes every task with its products in bfloat16 (:mod:`probsched.graph.precision`), each
    raced against its float32 version (:func:`alternatives`);
    ``narrow``: which values the compiled bf16 network stores in bfloat16 between tasks
    (:func:`~.compile_network.compile`'s); with ``"all"`` or ``"auto"`` the tasks that store
    every value in bfloat16 (:func:`narrowed_tasks`) are tuned too, with the last
    :data:`NARROWED_SHARE` of the budget, each starting from its base's best records. The search options
    (``space``, ``strategy``, ``cost_model``, ``seed``, ``batch_size``, ``retime_top``,
    ``retime_rounds``, ``target``) are keywords, or an ``options=``
    :class:`~probsched.tuning.options.TuningOptions` they replace fields of; their defaults
    are documented there once.
    """
    opts = TuningOptions.from_keywords(option_values, who="tune_model", base=options)
    try:
        check_budget(trials, minutes)
    except ValueError as exc:
        raise ValueError(f"tune_model: {exc}") from None
    graph = as_graph(model, example_args)
    fn = model if not isinstance(model, Graph) else None
    resources = TuningResources(database, measurer)
    tasks, groups = alternatives(graph.tasks(), precision)
    narrowed = narrowed_mode(precision, narrow)
    start = time.perf_counter()
    try:
        result = ModelTuneResult(graph, [], [], None, "", example_args=tuple(example_args), fn=fn)

        def on_trial(event: TrialEvent) -> None:
            for cb in callbacks:
                cb(event, result)

        first_trials, first_minutes = trials, minutes  # the tasks, then their narrowed versions
        if narrowed:
            first_trials = None if trials is None else trials - int(round(NARROWED_SHARE * trials))
            first_minutes = None if minutes is None else minutes * (1.0 - NARROWED_SHARE)
        loop = TuningLoop(
            [LoopTask(t.workload, t.weight, t.name, g) for t, g in zip(tasks, groups)], trials=first_trials,
            minutes=first_minutes, options=opts, resources=resources, scheduler=scheduler, on_trial=on_trial, start=start,
        )
        result.scheduler = loop.scheduler_name
        result.history = loop.events
        result.phase_seconds = loop.phase_seconds
        loop.run()
        rows = []
        for task, state, group in zip(tasks, loop.states, groups):
            best = best_schedule(resources.db, task.workload)
            rows.append((task.name, task.weight, task.flops, state.trials, best.seconds if best else math.inf, group))
        if narrowed:
            rows = _tune_narrowed(graph, precision, narrowed, rows, trials, minutes, start, opts, resources, scheduler, on_trial,
                                  result)
        fastest: Dict[str, float] = {}
        for _, w, _, _, b, group in rows:
            if group:
                fastest[group] = min(fastest.get(group, math.inf), w * b)
        runs = [not g or (math.isfinite(b) and w * b == fastest[g]) for _, w, _, _, b, g in rows]
        # the rows' own times (a narrowed version may be its network task's fastest): shares sum to 1
        total = sum(r[1] * r[4] for r, ran in zip(rows, runs) if ran and math.isfinite(r[4])) or 1.0
        result.tasks = [TaskRow(n, w, f, tr, b, (w * b / total) if ran and math.isfinite(b) else 0.0, g)
                        for (n, w, f, tr, b, g), ran in zip(rows, runs)]
        result.wall_seconds = time.perf_counter() - start
        if compile:
            resources.settle_borrowed()
            with loop.phase("compile"):
                result.model = compile_model(graph, database=resources.db, space=loop.space, candidates=candidates,
                                             seed=opts.seed or 0, precision=precision, narrow=narrow, progress=None)
    finally:
        resources.close()
    return result


__all__ = ["tune_model", "ModelTuneResult", "ModelTrial", "TaskRow", "default_batch_size"]
