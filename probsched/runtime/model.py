"""``CompiledModel``: a network's kernels called in order over one planned arena.

The runtime knows nothing of tuning: it is handed the network's interface (inputs,
outputs, their types, the constants: :class:`~.interface.ModelInterface`) and the kernel
calls in run order, each a compiled :class:`~probsched.codegen.Kernel` with the graph
values bound to its parameters (:class:`KernelStep`). It plans one arena for every
non-constant value by liveness (:mod:`.memory`), copies the constants once (cache-line
aligned; a kernel that reads a weight in another layout lays it out once, when it is
bound, unless the step brings it laid out already, as a loaded model's do), and runs the
steps. :meth:`CompiledModel.save` writes it to one file and :func:`.artifact.load` reads
it back (:mod:`.artifact`).

**Threads.** Each thread that calls a model gets its own arena and one scratch buffer for
its kernels' intermediates (the kernels run one after another and their intermediates are
dead when they return, so they all reuse it, and it stays in cache), made on its first
call (the constants and their laid-out copies are shared, read only), so calls from
several threads run at the same time and never see each other's values. A thread's first
call pays for binding its copy; the memory is :attr:`CompiledModel.peak_bytes` and the
largest kernel's scratch per calling thread, freed with the thread.

>>> import numpy as np
>>> import probsched as ps
>>> A = ps.placeholder((4,), name="x0")
>>> B = ps.compute((4,), lambda i: A[i] * 2.0, name="y")
>>> double = ps.build(ps.create_func([A, B], name="double"))
>>> spec = TensorSpec((4,), "float32")          # value 0 in, value 1 out
>>> iface = ModelInterface("twice", (0,), (1,), {0: spec, 1: spec}, {})
>>> model = CompiledModel(iface, [KernelStep("double", double, (0,), (1,))])
>>> model(np.arange(4, dtype=np.float32)).tolist()
[0.0, 2.0, 4.0, 6.0]
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..aligned import aligned_copy, aligned_empty
from ..arguments import check_arrays
from ..errors import KernelArgumentError
from ..ir.dtypes import numpy_dtype
from ..ir.layout import layouts_of
from .interface import ModelInterface, TensorSpec  # noqa: F401 - TensorSpec: the docstring example
from .memory import MemoryPlan, plan_memory, round_up


#: The kernels of a call write their intermediates into one buffer they all reuse (each
#: kernel's own was cold in every inference: ResNet-50 float32 ran 3-5% slower so, bf16 1%,
#: Zen 4); False gives each kernel its own (what a test compares with).
SHARED_SCRATCH = True


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
    #: parameter position -> a constant already in the layout the kernel reads (a loaded
    #: model's); other constants are the interface's, laid out when bound
    laid_out: Mapping[int, np.ndarray] = field(default_factory=dict, repr=False)


class _Context:
    """One thread's arena, the value arrays over it, the kernels bound to them, and the
    arguments of the thread's last call (profiling sets them again: the arena reuses their
    memory once they are read)."""

    __slots__ = ("arena", "arrays", "runs", "last_args")

    def __init__(self, arena: np.ndarray, arrays: Dict[int, np.ndarray], runs: list) -> None:
        self.arena, self.arrays, self.runs = arena, arrays, runs
        self.last_args: Sequence[np.ndarray] = ()


class CompiledModel:
    """A network compiled task by task; call it like the function it was imported from
    (numpy in, numpy out). See the module docstring (threads, memory).

    ``interface``: what the network takes and gives (:class:`~.interface.ModelInterface`);
    ``steps``: the kernel calls in run order; ``choices``: what the compiler chose per task
    (shown by :meth:`summary`; the runtime only reads ``task.name``, ``task.weight``,
    ``task.flops``, ``source`` and ``seconds`` of each); ``graph``: the front end's graph
    the model was compiled from (None for a loaded model).
    """

    def __init__(
        self, interface: ModelInterface, steps: Sequence[KernelStep], choices: Sequence[Any] = (), graph: Any = None
    ) -> None:
        self.interface = interface
        self.graph = graph
        self.steps: Tuple[KernelStep, ...] = tuple(steps)
        self.choices = list(choices)
        self.kernels = {s.key or s.name: s.kernel for s in self.steps}  # one per task
        self.plan = plan_arena(interface, self.steps)
        # the constants as given; a kernel that reads one as it is reads an aligned copy
        # (:meth:`_constant_as`), one that reads it in another layout lays out its own
        self._constants: Dict[int, np.ndarray] = {v: c.reshape(c.shape or (1,)) for v, c in interface.constants.items()}
        self._converted: Dict[Tuple[int, str], np.ndarray] = {}
        self._local = threading.local()
        self._first = self._bind_first()
        self._local.context = self._first

    # ------------------------------------------------------------------ binding
    @property
    def name(self) -> str:
        return self.interface.name

    def _new_arena(self) -> Tuple[np.ndarray, Dict[int, np.ndarray]]:
        arena = aligned_empty((max(self.plan.peak_bytes, 1),), np.uint8)
        arrays = dict(self._constants)
        for v, off in self.plan.offsets.items():
            t = self.interface.types[v]
            arrays[v] = arena[off : off + t.nbytes].view(numpy_dtype(t.dtype)).reshape(t.shape or (1,))
        return arena, arrays

    def _shared_scratch(self) -> List[List[np.ndarray]]:
        """Each step's kernel intermediates as views of one buffer that every step reuses: the
        steps run one after another, and a kernel's intermediates are dead once it returns
        (it writes them before it reads them), so the next kernel writes lines still in cache
        where each kernel's own scratch would be cold in every inference."""
        layouts, size = [], 1
        for step in self.steps:
            at, views = 0, []
            for shape, dtype in step.kernel.scratch_specs:
                views.append((at, shape, dtype))
                at += round_up(int(np.prod(shape)) * dtype.itemsize)
            layouts.append(views)
            size = max(size, at)
        buffer = aligned_empty((size,), np.uint8)
        return [[buffer[at : at + int(np.prod(shape)) * dtype.itemsize].view(dtype).reshape(shape)
                 for at, shape, dtype in views] for views in layouts]

    def _bind_first(self) -> _Context:
        arena, arrays = self._new_arena()
        runs = []
        scratch = self._shared_scratch() if SHARED_SCRATCH else [None] * len(self.steps)
        for s, mine in zip(self.steps, scratch):
            args = []
            layouts = layouts_of(s.kernel.func)
            for pos, v in enumerate(s.inputs + s.outputs):
                if pos in s.laid_out:
                    args.append(s.laid_out[pos])
                elif v in self._constants:
                    laid = s.kernel.func.params[pos].name in layouts
                    args.append(self._constant_as(v, numpy_dtype(s.kernel.params[pos].dtype), laid))
                else:
                    args.append(arrays[v])
            runs.append(s.kernel.bind(*args, laid_out=tuple(s.laid_out), scratch=mine))
        return _Context(arena, arrays, runs)

    def _constant_as(self, value: int, dtype: np.dtype, laid_out: bool = False) -> np.ndarray:
        """Constant ``value`` in ``dtype``, cache-line aligned, made once and shared by every
        kernel that reads it so (a kernel in bfloat16 reads its weights converted); as
        given when the kernel lays it out into its own copy (``laid_out``)."""
        array = self._constants[value]
        if laid_out and array.dtype == dtype:
            return array
        key = (value, dtype.str)
        if key not in self._converted:
            self._converted[key] = aligned_copy(array if array.dtype == dtype else array.astype(dtype))
        return self._converted[key]

    def _is_fixed(self, step: KernelStep, pos: int, value: int) -> bool:
        """Whether parameter ``pos`` of ``step`` reads a constant (the same array in every
        thread's copy) rather than the arena."""
        return pos in step.laid_out or value in self._constants

    def _new_context(self, replace: Optional[Dict[int, np.ndarray]] = None) -> _Context:
        """A new arena, and the first binding's kernels rebound to it (with their own
        scratch), the constants as the first binding checked and laid them out;
        ``replace``: values bound to the caller's arrays instead of the arena."""
        arena, arrays = self._new_arena()
        arrays.update(replace or {})
        runs = []
        scratch = self._shared_scratch() if SHARED_SCRATCH else [s.kernel.new_scratch() for s in self.steps]
        for step, first, mine in zip(self.steps, self._first.runs, scratch):
            values = step.inputs + step.outputs
            moved = {pos: arrays[v] for pos, v in enumerate(values) if not self._is_fixed(step, pos, v)}
            runs.append(first.rebound(moved, mine))
        return _Context(arena, arrays, runs)

    def _context(self) -> _Context:
        ctx = getattr(self._local, "context", None)
        if ctx is None:  # another thread: its own arena and scratch
            ctx = self._local.context = self._new_context()
        return ctx

    # ------------------------------------------------------------------ running
    @property
    def peak_bytes(self) -> int:
        """Bytes of the arena holding the inputs, intermediates and outputs of one call
        (one arena per calling thread)."""
        return self.plan.peak_bytes

    def __call__(self, *args: Any) -> Any:
        iface = self.interface
        arrays = iface.check_arguments(args, who=f"compiled model {iface.name}")
        ctx = self._context()
        self._set_inputs(ctx, arrays)
        for run in ctx.runs:
            run()
        return iface.pack([ctx.arrays[v].reshape(iface.types[v].shape).copy() for v in iface.outputs])

    def batch(self, requests: Sequence[Sequence[Any]]) -> List[Any]:
        """Run the model on each request (the arguments of one call, of the tuned shapes),
        one after the other in this thread; the outputs in order. What a server does with a
        queue of requests: each call already uses every core.

        >>> import numpy as np, probsched as ps
        >>> A = ps.placeholder((2,), name="x0")
        >>> B = ps.compute((2,), lambda i: A[i] + 1.0, name="y")
        >>> spec = ps.runtime.TensorSpec((2,), "float32")
        >>> model = CompiledModel(ModelInterface("inc", (0,), (1,), {0: spec, 1: spec}, {}),
        ...                       [KernelStep("inc", ps.build(ps.create_func([A, B])), (0,), (1,))])
        >>> [y.tolist() for y in model.batch([(np.zeros(2, np.float32),), (np.ones(2, np.float32),)])]
        [[1.0, 1.0], [2.0, 2.0]]
        """
        return [self(*args) for args in requests]

    def bind(self, *inputs: np.ndarray, outputs: Optional[Sequence[np.ndarray]] = None) -> "BoundModel":
        """The model bound to the caller's arrays: the kernels read ``inputs`` and write
        ``outputs`` themselves (allocated when not given), so a call copies nothing in or out
        and checks nothing; see :class:`BoundModel`. Write new values into the input arrays
        and call the bound model again. Inputs and outputs must be C-contiguous numpy arrays
        of the model's shapes and dtypes (checked here, once)."""
        return BoundModel(self, inputs, outputs)

    def _set_inputs(self, ctx: _Context, arrays: Sequence[np.ndarray]) -> None:
        """Copy a call's (checked) arguments into the arena, and keep them as the last call's."""
        for v, a in zip(self.interface.inputs, arrays):
            if v in self.plan.offsets:
                np.copyto(ctx.arrays[v], a.reshape(ctx.arrays[v].shape))
        ctx.last_args = arrays

    def profile(self, repeat: int = 5) -> List[tuple]:
        """(task name, calls per inference, median µs per inference) for every task, slowest
        first: each kernel call of one inference timed alone, the median of ``repeat``
        inferences on the inputs of this thread's last call (call the model once before)."""
        total: Dict[str, float] = {}
        calls: Dict[str, int] = {}
        for step, seconds in zip(self.steps, self.profile_calls(repeat)):
            total[step.name] = total.get(step.name, 0.0) + seconds
            calls[step.name] = calls.get(step.name, 0) + 1
        return sorted(((n, calls[n], total[n] * 1e6) for n in total), key=lambda r: -r[2])

    def profile_calls(self, repeat: int = 5, hot: bool = False, cold_weights: bool = False) -> List[float]:
        """Median seconds of each kernel call (one per :attr:`steps`, in run order), each
        call timed alone over ``repeat`` inferences on the inputs of this thread's last call
        (set again before each: the arena reuses their memory); :meth:`profile` sums them per
        task. ``hot``: each call runs once more just before it is timed, so its weights and
        inputs are in cache, as when its task was timed alone (a call reads its inputs and
        writes its outputs, which never share memory: running it twice changes nothing).
        ``cold_weights`` (with ``hot``): then its weights (as it reads them, laid out) are
        flushed from every cache before it is timed: what reading them from memory costs it
        (:mod:`probsched.measure.cold_weights`), apart from the rest of network order.

        >>> import numpy as np, probsched as ps
        >>> A = ps.placeholder((2,), name="x0")
        >>> B = ps.compute((2,), lambda i: A[i] + 1.0, name="y")
        >>> spec = ps.runtime.TensorSpec((2,), "float32")
        >>> k = ps.build(ps.create_func([A, B]))
        >>> model = CompiledModel(ModelInterface("inc2", (0,), (2,), {v: spec for v in range(3)}, {}),
        ...                       [KernelStep("inc", k, (0,), (1,)), KernelStep("inc", k, (1,), (2,))])
        >>> model(np.zeros(2, np.float32)).tolist()
        [2.0, 2.0]
        >>> times = model.profile_calls(repeat=3)
        >>> len(times), all(t > 0 for t in times), len(model.profile_calls(repeat=2, hot=True))
        (2, True, 2)
        >>> len(model.profile_calls(repeat=2, hot=True, cold_weights=True))
        2
        >>> [(name, calls) for name, calls, _ in model.profile(repeat=3)]
        [('inc', 2)]
        """
        ctx = self._context()
        runs = ctx.runs
        per_step: List[List[float]] = [[] for _ in runs]
        weights: List[list] = [[] for _ in runs]
        if cold_weights:
            from ..codegen.cache_flush import flush, weight_positions

            weights = [[run.array(p) for p in weight_positions(step.kernel.func)] for step, run in zip(self.steps, runs)]
        for _ in range(repeat):
            self._set_inputs(ctx, ctx.last_args)
            for k, run in enumerate(runs):
                if hot:
                    run()
                for array in weights[k]:
                    flush(array)
                t0 = time.perf_counter()
                run()
                per_step[k].append(time.perf_counter() - t0)
        return [float(np.median(times)) for times in per_step]

    def save(self, path: str) -> None:
        """Write the model to ``path`` as one file that :func:`probsched.load` runs without the
        tuner (:mod:`.artifact`)."""
        from .artifact import save

        save(self, path)

    def summary(self) -> str:
        """A Markdown table: each task, its weight, FLOPs, schedule source and measured time."""
        lines = [
            f"{self.name}: {len(self.choices)} tasks, {len(self.steps)} kernel calls, "
            f"arena {self.peak_bytes / 2**20:.1f} MiB",
            "",
            "| task | weight | MFLOP | schedule | measured µs |",
            "|---|---:|---:|---|---:|",
        ]
        for c in self.choices:
            us = f"{c.seconds * 1e6:.1f}" if c.seconds is not None else "-"
            lines.append(f"| {c.task.name} | {c.task.weight} | {c.task.flops / 1e6:.1f} | {c.source} | {us} |")
        return "\n".join(lines)


def plan_arena(interface: ModelInterface, steps: Sequence[KernelStep]) -> MemoryPlan:
    """Where each non-constant value of one call lives: alive from the step that writes it
    (the network's inputs: from the start) to the last step that reads it (its outputs: to
    the end). Constants (the interface's, and those a step brings laid out) are not in it."""
    fixed = set(interface.constants)
    for step in steps:
        fixed.update((step.inputs + step.outputs)[pos] for pos in step.laid_out)
    end = len(steps)
    first: Dict[int, int] = {v: 0 for v in interface.inputs if v not in fixed}
    last: Dict[int, int] = {v: 0 for v in first}
    for i, step in enumerate(steps):
        for v in step.inputs:
            if v not in fixed:
                last[v] = max(last.get(v, i), i)
        for v in step.outputs:
            first.setdefault(v, i)
            last[v] = max(last.get(v, i), i)
    for v in interface.outputs:
        if v in first:
            last[v] = end
    sizes = {v: interface.types[v].nbytes for v in first}
    return plan_memory(sizes, {v: (first[v], last[v]) for v in first})




class BoundModel:
    """A :class:`CompiledModel` bound to the caller's input and output arrays
    (:meth:`CompiledModel.bind`): calling it runs the kernels on them, nothing else. It has
    its own arena and kernel scratch: one bound model serves one thread at a time (bind
    one per thread to run in parallel).

    >>> import numpy as np, probsched as ps
    >>> A = ps.placeholder((2,), name="x0")
    >>> B = ps.compute((2,), lambda i: A[i] * 3.0, name="y")
    >>> spec = ps.runtime.TensorSpec((2,), "float32")
    >>> model = CompiledModel(ModelInterface("triple", (0,), (1,), {0: spec, 1: spec}, {}),
    ...                       [KernelStep("triple", ps.build(ps.create_func([A, B])), (0,), (1,))])
    >>> x, y = np.ones(2, np.float32), np.empty(2, np.float32)
    >>> run = model.bind(x, outputs=[y])
    >>> run(); y.tolist()
    [3.0, 3.0]
    >>> x[:] = 2.0; run(); y.tolist()
    [6.0, 6.0]
    """

    def __init__(self, model: CompiledModel, inputs: Sequence[np.ndarray], outputs: Optional[Sequence[np.ndarray]]) -> None:
        iface = model.interface
        who = f"compiled model {iface.name}"
        self.inputs = iface.check_arguments(inputs, who=who)
        for name, a in zip(iface.input_names, self.inputs):
            if not (a.flags.c_contiguous and a.flags.writeable):
                raise KernelArgumentError(f"{who}: input {name} must be a C-contiguous, writable array to be bound")
        if outputs is None:
            outputs = [aligned_empty(iface.types[v].shape, iface.types[v].dtype) for v in iface.outputs]
        specs = [(iface.types[v].shape, iface.types[v].dtype) for v in iface.outputs]
        self.outputs = check_arrays(outputs, specs, who + " (outputs)", iface.output_names, KernelArgumentError)
        for i, out in enumerate(self.outputs):
            others = [(iface.input_names[k], a) for k, a in enumerate(self.inputs)]
            others += [(iface.output_names[k], a) for k, a in enumerate(self.outputs) if k != i]
            for name, a in others:
                if np.may_share_memory(out, a):
                    raise KernelArgumentError(f"{who}: output {iface.output_names[i]} shares memory with {name}; pass separate arrays")
        written = {v for step in model.steps for v in step.outputs}
        replace: Dict[int, np.ndarray] = {}
        for v, a in zip(iface.inputs, self.inputs):
            if v in model.plan.offsets:
                replace[v] = a.reshape(iface.types[v].shape or (1,))
        self._copies = []  # (source value, output index): outputs no kernel writes in place
        for i, (v, a) in enumerate(zip(iface.outputs, self.outputs)):
            if not a.flags.c_contiguous or not a.flags.writeable:
                raise KernelArgumentError(f"{who}: output {iface.output_names[i]} must be a C-contiguous, writable array")
            if v in written and v not in replace and v not in iface.inputs:
                replace[v] = a.reshape(iface.types[v].shape or (1,))
            else:
                self._copies.append((v, i))
        self.model = model
        self._ctx = model._new_context(replace)
        self._runs = self._ctx.runs

    def __call__(self) -> None:
        for run in self._runs:
            run()
        arrays = self._ctx.arrays
        for v, i in self._copies:
            np.copyto(self.outputs[i], arrays[v].reshape(self.outputs[i].shape))

    def result(self) -> Any:
        """The output arrays nested as the model returns them (the bound arrays themselves)."""
        return self.model.interface.pack(self.outputs)


__all__ = ["CompiledModel", "BoundModel", "KernelStep", "plan_arena"]
