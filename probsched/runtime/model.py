"""``CompiledModel``: a network's kernels called in order over one planned arena.

The runtime knows nothing of tuning: it is handed the graph's interface (inputs, outputs,
their types, the constants) and the kernel calls in run order, each a compiled
:class:`~probsched.codegen.Kernel` with the graph values bound to its parameters
(:class:`KernelStep`). It plans one arena for every non-constant value by liveness
(:mod:`.memory`), copies the constants once (cache-line aligned; a kernel that reads a
weight in another layout lays it out once, when it is bound), and runs the steps.

**Threads.** Each thread that calls a model gets its own arena and kernel scratch buffers,
made on its first call (the constants and their laid-out copies are shared, read only), so
calls from several threads run at the same time and never see each other's values. A
thread's first call pays for binding its copy; the memory is :attr:`CompiledModel.peak_bytes`
and the kernels' scratch per calling thread, freed with the thread.

>>> import numpy as np
>>> import probsched as ps
>>> A = ps.placeholder((4,), name="x0")
>>> B = ps.compute((4,), lambda i: A[i] * 2.0, name="y")
>>> double = ps.build(ps.create_func([A, B], name="double"))
>>> class Interface:   # what a graph offers the runtime: value 0 in, value 1 out
...     name, inputs, outputs, constants, out_tree = "twice", (0,), (1,), {}, None
...     types = {0: TensorSpec((4,), "float32"), 1: TensorSpec((4,), "float32")}
...     def check_arguments(self, args, who=""):
...         return [np.asarray(a, np.float32) for a in args]
>>> model = CompiledModel(Interface(), [KernelStep("double", double, (0,), (1,))])
>>> model(np.arange(4)).tolist()
[0.0, 2.0, 4.0, 6.0]
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, NamedTuple, Sequence, Tuple

import numpy as np

from ..aligned import aligned_copy, aligned_empty
from .memory import MemoryPlan, plan_memory


class TensorSpec(NamedTuple):
    """A value's shape and dtype (what the runtime needs of a graph's ``types``)."""

    shape: Tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class KernelStep:
    """One kernel call of a network: the task's ``name``, its compiled ``kernel``, the graph
    values bound to the kernel's inputs and outputs, in parameter order, and the ``key`` the
    kernel is known by (calls of one task share it; default: the name)."""

    name: str
    kernel: Any
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    key: str = ""


class _Context:
    """One thread's arena, the value arrays over it, and the kernels bound to them."""

    __slots__ = ("arena", "arrays", "runs")

    def __init__(self, arena: np.ndarray, arrays: Dict[int, np.ndarray], runs: list) -> None:
        self.arena, self.arrays, self.runs = arena, arrays, runs


class CompiledModel:
    """A network compiled task by task; call it like the function it was imported from
    (numpy in, numpy out). See the module docstring (threads, memory).

    ``graph``: the network's interface (:class:`probsched.graph.Graph`: ``inputs``,
    ``outputs``, ``types``, ``constants``, ``check_arguments``, ``out_tree``, ``name``);
    ``steps``: the kernel calls in run order; ``choices``: what the compiler chose per task
    (shown by :meth:`summary`; the runtime only reads ``task.name``, ``task.weight``,
    ``task.flops``, ``source`` and ``seconds`` of each).
    """

    def __init__(self, graph: Any, steps: Sequence[KernelStep], choices: Sequence[Any] = ()) -> None:
        self.graph = graph
        self.steps: Tuple[KernelStep, ...] = tuple(steps)
        self.choices = list(choices)
        self.kernels = {s.key or s.name: s.kernel for s in self.steps}  # one per task
        self.plan = plan_arena(graph, self.steps)
        self._constants: Dict[int, np.ndarray] = {
            v: aligned_copy(c.reshape(c.shape or (1,))) for v, c in graph.constants.items()
        }
        self._local = threading.local()
        self._first = self._bind_first()
        self._local.context = self._first

    # ------------------------------------------------------------------ binding
    def _new_arena(self) -> Tuple[np.ndarray, Dict[int, np.ndarray]]:
        arena = aligned_empty((max(self.plan.peak_bytes, 1),), np.uint8)
        arrays = dict(self._constants)
        for v, off in self.plan.offsets.items():
            t = self.graph.types[v]
            arrays[v] = arena[off : off + t.nbytes].view(t.dtype).reshape(t.shape or (1,))
        return arena, arrays

    def _bind_first(self) -> _Context:
        arena, arrays = self._new_arena()
        runs = [s.kernel.bind(*(arrays[v] for v in s.inputs + s.outputs)) for s in self.steps]
        return _Context(arena, arrays, runs)

    def _context(self) -> _Context:
        ctx = getattr(self._local, "context", None)
        if ctx is None:
            # another thread: its own arena and scratch; the constants as the first binding
            # checked and laid them out
            arena, arrays = self._new_arena()
            runs = []
            for step, first in zip(self.steps, self._first.runs):
                values = step.inputs + step.outputs
                moved = {pos: arrays[v] for pos, v in enumerate(values) if v not in self._constants}
                runs.append(first.rebound(moved, step.kernel.new_scratch()))
            ctx = self._local.context = _Context(arena, arrays, runs)
        return ctx

    # ------------------------------------------------------------------ running
    @property
    def peak_bytes(self) -> int:
        """Bytes of the arena holding the inputs, intermediates and outputs of one call
        (one arena per calling thread)."""
        return self.plan.peak_bytes

    def __call__(self, *args: Any) -> Any:
        g = self.graph
        arrays = g.check_arguments(args, who=f"compiled model {g.name}")
        ctx = self._context()
        for v, a in zip(g.inputs, arrays):
            if v in self.plan.offsets:
                np.copyto(ctx.arrays[v], a.reshape(ctx.arrays[v].shape))
        for run in ctx.runs:
            run()
        outs = [ctx.arrays[v].reshape(g.types[v].shape).copy() for v in g.outputs]
        if g.out_tree is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        import jax

        return jax.tree_util.tree_unflatten(g.out_tree, outs)

    def profile(self, repeat: int = 5) -> List[tuple]:
        """(task name, calls per inference, median µs per inference) for every task, slowest
        first: each kernel call of one inference timed alone, the median of ``repeat``
        inferences (run :meth:`__call__` once before, so the inputs are set)."""
        runs = self._context().runs
        per_step: List[List[float]] = [[] for _ in runs]
        for _ in range(repeat):
            for k, run in enumerate(runs):
                t0 = time.perf_counter()
                run()
                per_step[k].append(time.perf_counter() - t0)
        total: Dict[str, float] = {}
        calls: Dict[str, int] = {}
        for step, times in zip(self.steps, per_step):
            total[step.name] = total.get(step.name, 0.0) + float(np.median(times))
            calls[step.name] = calls.get(step.name, 0) + 1
        return sorted(((n, calls[n], total[n] * 1e6) for n in total), key=lambda r: -r[2])

    def summary(self) -> str:
        """A Markdown table: each task, its weight, FLOPs, schedule source and measured time."""
        lines = [
            f"{self.graph.name}: {len(self.choices)} tasks, {len(self.steps)} kernel calls, "
            f"arena {self.peak_bytes / 2**20:.1f} MiB",
            "",
            "| task | weight | MFLOP | schedule | measured µs |",
            "|---|---:|---:|---|---:|",
        ]
        for c in self.choices:
            us = f"{c.seconds * 1e6:.1f}" if c.seconds is not None else "-"
            lines.append(f"| {c.task.name} | {c.task.weight} | {c.task.flops / 1e6:.1f} | {c.source} | {us} |")
        return "\n".join(lines)


def plan_arena(graph: Any, steps: Sequence[KernelStep]) -> MemoryPlan:
    """Where each non-constant value of one call lives: alive from the step that writes it
    (the graph's inputs: from the start) to the last step that reads it (its outputs: to
    the end)."""
    constants: Mapping[int, Any] = graph.constants
    end = len(steps)
    first: Dict[int, int] = {v: 0 for v in graph.inputs if v not in constants}
    last: Dict[int, int] = {v: 0 for v in first}
    for i, step in enumerate(steps):
        for v in step.inputs:
            if v not in constants:
                last[v] = max(last.get(v, i), i)
        for v in step.outputs:
            first.setdefault(v, i)
            last[v] = max(last.get(v, i), i)
    for v in graph.outputs:
        if v in first:
            last[v] = end
    sizes = {v: graph.types[v].nbytes for v in first}
    return plan_memory(sizes, {v: (first[v], last[v]) for v in first})


__all__ = ["CompiledModel", "KernelStep", "TensorSpec", "plan_arena"]
