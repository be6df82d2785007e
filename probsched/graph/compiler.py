"""``ps.compile``: a network's tasks built from their best schedules, run as one callable.

For each task (:mod:`.task`) the schedule is, in order of preference:

1. ``"database"``: the best record of the task in the tuning database for this machine
   (what ``ps.tune_model`` measured), as :func:`probsched.selection.best_schedule` names it;
2. ``"predicted"``: without a record, ``candidates`` programs drawn from the design space and
   ranked by the shipped transfer cost model (:mod:`probsched.cost_model.transfer`), the
   first that builds and passes the check. Nothing is measured. TVM builds the unscheduled
   loop nest in this case; a predicted schedule is usually several times faster.

Every kernel is checked once against its task's JAX reference before the model is returned
(``check=True``), so a compiled model computes what ``jax.jit(fn)`` computes. Constants are
copied once, cache-line aligned. Intermediate tensors live in one arena planned by liveness
(:mod:`.memory`): :attr:`CompiledModel.peak_bytes` is its size.

>>> import numpy as np, jax
>>> import probsched as ps
>>> w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
>>> fn = lambda x: jax.nn.relu(x @ w)
>>> x = np.ones((2, 8), np.float32)
>>> model = ps.compile(fn, x, candidates=4)
>>> bool(np.allclose(model(x), jax.jit(fn)(x), rtol=1e-5, atol=1e-5))
True
>>> [c.source for c in model.choices]
['predicted']
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from ..codegen.aligned import aligned_copy, aligned_empty
from ..errors import BuildError, FrontEndError
from ..schedule import Schedule
from .fusion import fuse
from .ir import Graph
from .memory import MemoryPlan, plan_memory
from .task import Task, TaskCall, extract_tasks, lower_group

log = logging.getLogger("probsched.compile")

#: Programs drawn from the design space for a task without records (about 12 ms each for a
#: ResNet-50 convolution: drawing and featurising is the cost, ranking is cheap).
DEFAULT_CANDIDATES = 128


@dataclass
class TaskChoice:
    """The schedule a compiled model uses for one task, and where it came from."""

    task: Task
    schedule: Schedule
    source: str  # "database" or "predicted"
    seconds: Optional[float] = None  # its measured median (from the database)


@functools.lru_cache(maxsize=4)
def _transfer_model(seed: int):
    """An MLP trained on the shipped transfer records (None when they are unavailable);
    trained once per process and seed (about 6 s), only ever asked to predict."""
    from ..cost_model import MLPModel
    from ..cost_model.transfer import load_transfer

    records = load_transfer()
    if records is None or not len(records):
        return None
    model = MLPModel(seed=seed)
    model.set_transfer(records.features, records.seconds, records.groups, train=True)
    return model


def predicted_schedules(task: Task, model, space, candidates: int, seed: int) -> List[Schedule]:
    """Distinct programs drawn from ``space`` for ``task``, best predicted first."""
    from ..search import SearchContext

    ctx = SearchContext(task.workload, space, model, seed=seed)
    seen, drawn = set(), []
    for _ in range(max(1, candidates)):
        c = ctx.draw()
        if c is not None and c.hash not in seen:
            seen.add(c.hash)
            drawn.append(c)
    if not drawn:
        return [Schedule(task.func)]
    scores = ctx.score(drawn)
    order = np.argsort(-scores, kind="stable")
    return [drawn[i].schedule for i in order]


class CompiledModel:
    """A network compiled task by task; call it like the JAX function (numpy in, numpy out).

    Not thread-safe: calls share the arena and the kernels' scratch buffers.
    """

    def __init__(self, graph: Graph, choices: List[TaskChoice], kernels: Dict[str, Any], steps: List[tuple]) -> None:
        self.graph = graph
        self.choices = choices
        self.kernels = kernels  # task key -> Kernel
        self._steps = steps  # (task, call) in run order
        self.plan = self._plan()
        self._arena = aligned_empty((max(self.plan.peak_bytes, 1),), np.uint8)
        self._arrays: Dict[int, np.ndarray] = {}
        for v, c in graph.constants.items():
            self._arrays[v] = aligned_copy(c.reshape(c.shape or (1,)))
        for v, off in self.plan.offsets.items():
            t = graph.types[v]
            self._arrays[v] = self._arena[off : off + t.nbytes].view(t.dtype).reshape(t.shape or (1,))
        self._runs = []
        for task, call in steps:
            kern = kernels[task.key]
            arrays = [self._arrays[v] for v in call.inputs + call.outputs]
            self._runs.append(kern.bind(*arrays))

    def _plan(self) -> MemoryPlan:
        g = self.graph
        end = len(self._steps)
        first: Dict[int, int] = {v: 0 for v in g.inputs if v not in g.constants}
        last: Dict[int, int] = {v: 0 for v in first}
        for i, (_, call) in enumerate(self._steps):
            for v in call.inputs:
                if v not in g.constants:
                    last[v] = max(last.get(v, i), i)
            for v in call.outputs:
                first.setdefault(v, i)
                last[v] = max(last.get(v, i), i)
        for v in g.outputs:
            if v in first:
                last[v] = end
        sizes = {v: g.types[v].nbytes for v in first}
        return plan_memory(sizes, {v: (first[v], last[v]) for v in first})

    @property
    def peak_bytes(self) -> int:
        """Bytes of the arena holding the inputs, intermediates and outputs of one call."""
        return self.plan.peak_bytes

    def __call__(self, *args: Any) -> Any:
        g = self.graph
        arrays = g.check_arguments(args, who=f"compiled model {g.name}")
        for v, a in zip(g.inputs, arrays):
            if v in self.plan.offsets:
                np.copyto(self._arrays[v], a.reshape(self._arrays[v].shape))
        for run in self._runs:
            run()
        outs = [self._arrays[v].reshape(g.types[v].shape).copy() for v in g.outputs]
        if g.out_tree is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        import jax

        return jax.tree_util.tree_unflatten(g.out_tree, outs)

    def profile(self, repeat: int = 5) -> List[tuple]:
        """(task name, calls per inference, median µs per inference) for every task, slowest
        first: each kernel call of one inference timed alone, the median of ``repeat``
        inferences (run :meth:`__call__` once before, so the inputs are set)."""
        per_step = [[] for _ in self._runs]
        for _ in range(repeat):
            for k, run in enumerate(self._runs):
                t0 = time.perf_counter()
                run()
                per_step[k].append(time.perf_counter() - t0)
        total: Dict[str, float] = {}
        calls: Dict[str, int] = {}
        for (task, _), times in zip(self._steps, per_step):
            total[task.name] = total.get(task.name, 0.0) + float(np.median(times))
            calls[task.name] = calls.get(task.name, 0) + 1
        return sorted(((n, calls[n], total[n] * 1e6) for n in total), key=lambda r: -r[2])

    def summary(self) -> str:
        """A Markdown table: each task, its weight, FLOPs, schedule source and measured time."""
        lines = [
            f"{self.graph.name}: {len(self.choices)} tasks, {len(self._steps)} kernel calls, "
            f"arena {self.peak_bytes / 2**20:.1f} MiB",
            "",
            "| task | weight | MFLOP | schedule | measured µs |",
            "|---|---:|---:|---|---:|",
        ]
        for c in self.choices:
            us = f"{c.seconds * 1e6:.1f}" if c.seconds is not None else "-"
            lines.append(f"| {c.task.name} | {c.task.weight} | {c.task.flops / 1e6:.1f} | {c.source} | {us} |")
        return "\n".join(lines)


def _check_kernel(task: Task, kernel) -> Optional[str]:
    """None if ``kernel`` computes the task's reference, else why not."""
    w = task.workload
    inputs = w.random_inputs(np.random.default_rng(1))
    try:
        outs = kernel.run(*inputs)
        w.check(outs, w.reference(*inputs))
    except (AssertionError, Exception) as exc:  # a failed check or a crash of the run
        return f"{type(exc).__name__}: {exc}"
    return None


def _as_graph(model: Union[Graph, Callable], example_args: Sequence[Any]) -> Graph:
    if isinstance(model, Graph):
        return model
    if not callable(model):
        raise TypeError(f"compile: expected a ps.Graph or a JAX function, got {type(model).__name__}")
    if not example_args:
        raise FrontEndError("compile: a function needs example arguments to be traced (ps.compile(fn, *args))")
    from .from_jax import from_jax

    return from_jax(model, *example_args)


def compile(  # noqa: A001 - the library's verb, as ps.build
    model: Union[Graph, Callable],
    *example_args: Any,
    database: Union[str, Any, None] = None,
    space: Optional[Callable] = None,
    candidates: int = DEFAULT_CANDIDATES,
    check: bool = True,
    seed: int = 0,
    progress: Optional[Callable[[str], None]] = None,
) -> CompiledModel:
    """Compile a network (a :class:`Graph`, or a JAX function with example arguments);
    see the module docstring. ``database``: a path or :class:`~probsched.database.Database`
    whose best records to use. ``space``: the design space (default
    ``ps.space.default()``); ``candidates``: programs drawn per task without a record.
    ``progress(message)`` is called as each task is built."""
    from .. import space as space_mod
    from ..codegen import build
    from ..database import Database
    from ..selection import best_schedule

    graph = _as_graph(model, example_args)
    space = space or space_mod.default()
    own_db = database is not None and not isinstance(database, Database)
    db = Database(database) if own_db else database
    groups = fuse(graph)
    tasks = extract_tasks(graph, groups)
    by_key = {t.key: t for t in tasks}
    producer = graph.producer()
    steps = []
    for grp in groups:
        low = lower_group(graph, grp, producer)
        steps.append((by_key[low.func.structural_hash()], TaskCall(low.inputs, low.outputs)))
    choices: List[TaskChoice] = []
    kernels: Dict[str, Any] = {}
    model_cache: List[Any] = []
    try:
        for n, task in enumerate(tasks):
            start = time.perf_counter()
            ranked: List[tuple] = []
            best = best_schedule(db, task.workload) if db is not None else None
            if best is not None:
                ranked.append((best.schedule(task.func), "database", best.seconds))
            else:
                if not model_cache:
                    model_cache.append(_transfer_model(seed))
                for sch in predicted_schedules(task, model_cache[0], space, candidates, seed + n):
                    ranked.append((sch, "predicted", None))
            failures = []
            for sch, source, seconds in ranked:
                try:
                    kernel = build(sch)
                except BuildError as exc:
                    failures.append(f"build: {exc}")
                    continue
                why = _check_kernel(task, kernel) if check else None
                if why is None:
                    kernels[task.key] = kernel
                    choices.append(TaskChoice(task, sch, source, seconds))
                    break
                failures.append(why)
            else:
                raise BuildError(f"compile: no schedule of task {task.name} builds and computes its reference:\n" + "\n".join(failures[:3]))
            msg = f"[{n + 1}/{len(tasks)}] {task.name}: {choices[-1].source} ({time.perf_counter() - start:.1f} s)"
            log.info(msg)
            if progress is not None:
                progress(msg)
    finally:
        if own_db:
            db.close()
    return CompiledModel(graph, choices, kernels, steps)


__all__ = ["compile", "CompiledModel", "TaskChoice", "predicted_schedules", "DEFAULT_CANDIDATES"]
