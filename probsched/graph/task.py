"""Tasks: fused groups lowered to ``PrimFunc`` s, de-duplicated, with weights and references.

Each :class:`~.fusion.Group` lowers to one multi-stage :class:`~probsched.ir.stmt.PrimFunc`
(:func:`lower_group`): its nodes become compute stages (views substituted into the stages
that read them), the values it reads from outside become parameters (``x0, x1, ...`` for
activations, ``w0, w1, ...`` for constants of the graph, so a task knows which of its
operands are weights), the values it hands on become output parameters. Constants with one
element are folded into the expressions. Groups that lower to structurally equal functions
are one :class:`Task` with several :class:`TaskCall` s (its *weight*): ResNet-50's 16
bottleneck blocks share a handful of shapes.

A task's :attr:`Task.workload` is an ordinary :class:`~probsched.workloads.Workload`, so
everything below the graph (design space, search, measurer, database, cost model) tunes it
as it tunes a suite operator. Its reference runs the group's JAX primitives (what
``jax.jit`` of the model computes) on random inputs; the tolerance scales with the longest
reduction in the task and with the size of the outputs (softmax's are of order ``1/n``).

>>> import numpy as np, jax
>>> import probsched as ps
>>> w = np.ones((8, 8), np.float32)
>>> g = ps.from_jax(lambda x: jax.nn.relu(x @ w) @ w, np.ones((4, 8), np.float32))
>>> [(t.func.name, t.weight) for t in extract_tasks(g)]
[('fused_matmul_maximum', 1), ('fused_matmul', 1)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import FrontEndError
from ..ir.dtypes import BF16, narrowest, numpy_dtype
from ..ir.stmt import PrimFunc
from ..ir.layout import LAYOUT_FREE
from ..precision import precision_of
from ..schedule.flat_window import flatten_window
from ..te import create_func, placeholder
from ..workloads import Workload
from ..workloads.workload import INTEGER_SAMPLERS, RTOL, tolerance, widening
from .fusion import COPY, Group, fuse
from .ir import Graph, Node
from .operands import Operand, ScalarOperand, Stages, TensorOperand
from .ops import OPS, VIEW, reduction_length

#: Operators whose operands a task in bfloat16 reads rounded (:mod:`.precision`), and the
#: non-view operators that only move data on the way to them.
PRODUCTS = ("dot_general", "conv_general_dilated")
DATA_MOVES = ("pad", "concatenate")

#: Longest function name (TVM's style: ``fused_`` and the operators of the group).
_MAX_NAME = 64


@dataclass(frozen=True)
class LoweredGroup:
    """A group as a function: the graph values bound to its inputs and outputs, in parameter
    order, the nodes its reference evaluates, and which inputs are constants."""

    func: PrimFunc
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    nodes: Tuple[Node, ...]
    scalars: Tuple[int, ...]  # one-element constants folded into the expressions
    reduction_length: int


def _needed_nodes(graph: Graph, group: Group, producer: Dict[int, Node], kinds: Dict[int, str]) -> List[Node]:
    """The group's nodes and the view nodes between them and their sources, graph order."""
    members = {id(n) for n in group.nodes}
    needed: Dict[int, Node] = {id(n): n for n in group.nodes}
    stack = [v for n in group.nodes for v in n.inputs] + list(group.outputs if group.kind == COPY else [])
    while stack:
        v = stack.pop()
        p = producer.get(v)
        if p is None or id(p) in needed or (id(p) not in members and kinds[id(p)] != VIEW):
            continue
        needed[id(p)] = p
        stack.extend(p.inputs)
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    return sorted(needed.values(), key=lambda n: order[id(n)])


def _func_name(stages: Stages) -> str:
    """``fused_`` and the group's stage names, TVM style (``fused_conv2d_add_maximum``)."""
    parts: List[str] = []
    for t in stages.tensors:
        stem = t.name.rstrip("0123456789")
        if stem not in parts and stem not in ("pad", "cast", "copy"):
            parts.append(stem)
    name = "fused_" + "_".join(parts or ["copy"])
    return name[:_MAX_NAME].rstrip("_")


def lower_group(graph: Graph, group: Group, producer: Optional[Dict[int, Node]] = None) -> LoweredGroup:
    """Lower one fused group to a ``PrimFunc`` (see the module docstring)."""
    producer = producer if producer is not None else graph.producer()
    kinds = {id(n): OPS[n.op].kind_of([graph.types[v] for v in n.outputs]) for n in graph.nodes}
    nodes = _needed_nodes(graph, group, producer, kinds)
    stages = Stages()
    operands: Dict[int, Operand] = {}
    inputs: List[int] = []
    scalars: List[int] = []
    placeholders = []
    counters = {"x": 0, "w": 0}

    def operand(v: int) -> Operand:
        if v in operands:
            return operands[v]
        t = graph.types[v]
        if v in graph.constants and t.size == 1:
            operands[v] = ScalarOperand(graph.constants[v])
            scalars.append(v)
        else:
            role = "w" if v in graph.constants else "x"
            name = f"{role}{counters[role]}"
            counters[role] += 1
            # a weight's type says what its values allow (int8 in [-64, 64]: int8r, whose kernels are faster)
            dtype = narrowest(t.dtype, np.asarray(graph.constants[v])) if role == "w" else t.dtype
            ph = placeholder(t.shape or (1,), dtype, name=name)
            placeholders.append(ph)
            inputs.append(v)
            operands[v] = TensorOperand(ph, scalar=not t.shape)
        return operands[v]

    length = 1
    for n in nodes:
        ins = [operands[v] if v in operands else operand(v) for v in n.inputs]
        out_types = [graph.types[v] for v in n.outputs]
        try:
            outs = OPS[n.op].lower(n, ins, stages, out_types)
        except FrontEndError as exc:
            raise FrontEndError(f"{exc} (JAX primitive '{n.op}'{' at ' + n.source if n.source else ''})") from None
        for v, o in zip(n.outputs, outs):
            operands[v] = o
        length = max(length, reduction_length(n, [graph.types[v] for v in n.inputs]))
    results = []
    for v in group.outputs:
        o = operands[v]
        if not isinstance(o, TensorOperand) or o.tensor in placeholders or any(r is o.tensor for r in results):
            src = o
            o = stages.compute("copy", graph.types[v].shape, lambda i, src=src: src.at(i), dtype=graph.types[v].dtype)
        results.append(o.tensor)
    name = _func_name(stages)
    func = create_func(placeholders + results, name=name)
    weights = tuple(ph.name for ph, v in zip(placeholders, inputs) if v in graph.constants)
    if weights:  # the design space may store these in the order the schedule reads them
        func = func.replace(attrs=func.attrs + ((LAYOUT_FREE, weights),))
    return LoweredGroup(func, tuple(inputs), tuple(group.outputs), tuple(nodes), tuple(scalars), length)


@dataclass(frozen=True)
class TaskCall:
    """One use of a task in the network: the graph values bound to its parameters, and its
    place among the network's kernel calls (``index``, in run order)."""

    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    index: int = -1


@dataclass(eq=False)
class Task:
    """A distinct fused sub-program of a network: its ``func``, its ``calls`` (how many
    times and on which values the network runs it: :attr:`weight`), FLOPs per call, and
    the :attr:`workload` the tuner measures it as."""

    name: str
    func: PrimFunc
    flops: int
    calls: List[TaskCall]
    lowered: LoweredGroup = field(repr=False)
    graph: Graph = field(repr=False)
    #: what its products read: ``"float32"``, or ``"bfloat16"`` (:meth:`in_precision`)
    precision: str = "float32"
    #: float32 inputs the function rounds to its precision where a product reads them
    rounded: Tuple[str, ...] = ()
    #: parameters stored in bfloat16 between tasks (:meth:`with_narrowed`): inputs its
    #: producers rounded already, outputs it rounds as it writes them
    narrowed: Tuple[str, ...] = ()
    #: the task this one narrows (whose records it replays), if it narrows one
    base: Optional["Task"] = field(default=None, repr=False)

    def in_precision(self, precision: str) -> "Task":
        """This task with its products in ``precision`` (see :mod:`.precision`): the same
        calls and values, another function (so other records), a tolerance of that format;
        a task without products is returned as it is.

        >>> import numpy as np, jax, probsched as ps
        >>> w = np.ones((8, 16), np.float32)
        >>> (task,) = ps.from_jax(lambda x: jax.nn.relu(x @ w), np.ones((4, 8), np.float32)).tasks()
        >>> half = task.in_precision("bf16")
        >>> half.name, [(b.name, b.dtype) for b in half.func.input_buffers()], half.key != task.key
        ('lambda/00_fused_matmul_maximum:bf16', [('x0', 'float32'), ('w0', 'bfloat16')], True)
        """
        from .precision import task_function

        func, target, rounded = task_function(self, precision)
        if target == self.precision or func == self.func:  # no products: nothing to change
            return self
        suffix = "" if target == "float32" else ":bf16"
        return Task(self.name.split(":bf16")[0] + suffix, func, self.flops, self.calls, self.lowered, self.graph, target,
                    rounded)

    def with_narrowed(self, names: Sequence[str]) -> "Task":
        """This task with parameters ``names`` stored in bfloat16 (see
        :func:`~.precision.narrow_between_tasks`): an input among them is read as its
        producer rounded it (where this task rounded it itself), an output is rounded as it
        is written. The same calls, another function (another key); its records are its
        :attr:`base` 's, replayed.

        >>> import numpy as np, jax, probsched as ps
        >>> w = np.ones((8, 16), np.float32)
        >>> (task,) = ps.from_jax(lambda x: jax.nn.relu(x @ w), np.ones((4, 8), np.float32)).tasks()
        >>> narrow = task.in_precision("bf16").with_narrowed(["x0", "maximum"])
        >>> [(b.name, b.dtype) for b in narrow.func.params], narrow.rounded, narrow.base.name
        ([('x0', 'bfloat16'), ('w0', 'bfloat16'), ('maximum', 'bfloat16')], (), 'lambda/00_fused_matmul_maximum:bf16')
        """
        from .precision import narrowed_function

        names = tuple(sorted(set(names)))
        if not names:
            return self
        base = self.base or self
        func = narrowed_function(base.func, names)
        return Task(base.name, func, self.flops, self.calls, self.lowered, self.graph, self.precision,
                    tuple(r for r in base.rounded if r not in names), names, base)

    @property
    def weight(self) -> int:
        """Times the network runs this task per call."""
        return len(self.calls)

    @property
    def key(self) -> str:
        """The function's structural hash (the database's workload key)."""
        return self.func.structural_hash()

    @property
    def constant_inputs(self) -> Tuple[int, ...]:
        """Positions of the input parameters bound to graph constants (the weights)."""
        return tuple(i for i, v in enumerate(self.lowered.inputs) if v in self.graph.constants)

    def reference(self, *inputs: np.ndarray) -> Tuple[np.ndarray, ...]:
        """The outputs JAX computes for these inputs (one array per input parameter)."""
        return self._evaluate(inputs, ())

    def _rounded_at_products(self, *inputs: np.ndarray) -> Tuple[np.ndarray, ...]:
        """:meth:`reference` with the :attr:`rounded` inputs rounded to the task's precision
        where a product reads them (through data moves: views, padding), as the task's own
        copy of them rounds them, and nowhere else (an epilogue adding the same value, a
        residual, reads it unrounded in the kernel too)."""
        names = [b.name for b in self.func.input_buffers()]
        return self._evaluate(inputs, [v for v, name in zip(self.lowered.inputs, names) if name in self.rounded])

    def _evaluate(self, inputs: Sequence[np.ndarray], rounded: Sequence[int]) -> Tuple[np.ndarray, ...]:
        env: Dict[int, np.ndarray] = {v: self.graph.constants[v] for v in self.lowered.scalars}
        for v, a in zip(self.lowered.inputs, inputs):
            t = self.graph.types[v]
            env[v] = np.asarray(a).reshape(t.shape)
        moved = set(rounded)  # values that are rounded inputs, moved
        for n in self.lowered.nodes:
            args = [env[v] for v in n.inputs]
            if n.op in PRODUCTS:
                args = [np.asarray(a).astype(numpy_dtype(self.precision)).astype(np.float32) if v in moved else a
                        for v, a in zip(n.inputs, args)]
            elif n.inputs and n.inputs[0] in moved and (OPS[n.op].kind == VIEW or n.op in DATA_MOVES):
                moved.update(n.outputs)
            env.update(zip(n.outputs, n.evaluate(*args)))
        return tuple(np.asarray(env[v]).reshape(self.graph.types[v].shape or (1,)) for v in self.lowered.outputs)

    @cached_property
    def workload(self) -> Workload:
        """The task as a :class:`~probsched.workloads.Workload` (random inputs, the JAX
        reference, a tolerance scaled to its reduction length and its outputs' size)."""
        # integer inputs are indices and masks (token ids, an attention mask): 0 and 1 read
        # two rows of any table and set both sides of any mask (float samples cast to 0);
        # 8-bit ones are quantized data, drawn over their whole range
        samplers = {b.name: INTEGER_SAMPLERS.get(b.dtype, _small_ints) for b in self.func.input_buffers()
                    if b.dtype.startswith(("int", "uint"))}
        base = Workload(self.name, self.func, self.flops, (self.name,), reference_fn=widening(self.reference), samplers=samplers)
        expected = base.reference(*base.random_inputs(np.random.default_rng(0)))
        _, atol = tolerance(self.lowered.reduction_length)
        # outputs of order 1/n (softmax) need an atol of their own size: scale it down by
        # their root mean square when that is below 1
        rms = max((float(np.sqrt(np.mean(np.square(e.astype(np.float64))))) for e in expected if e.size), default=1.0)
        if math.isfinite(rms) and 0 < rms < 1:
            atol *= rms
        reference, rtol = widening(self.reference), RTOL  # a float32 task may read a value stored in bfloat16
        if self.precision != "float32":  # bfloat16 weights widened, rounded activations rounded alike
            reference, rtol = widening(self._rounded_at_products), max(RTOL, tolerance(1, self.precision)[0])
        stored = [i for i, b in enumerate(self.func.output_buffers()) if b.name in self.narrowed]
        if stored:  # rounded as written: the reference's alike, and a value near a tie may round the other way
            reference, rtol = rounding_outputs(widening(reference), stored, BF16), max(rtol, tolerance(1, BF16)[0])
        return Workload(self.name, self.func, self.flops, (self.name,), reference_fn=reference, rtol=rtol, atol=atol,
                        samplers=samplers)

    def describe(self) -> str:
        """``name: input shapes -> output shapes``."""
        ins = ", ".join(f"{b.dtype}{list(b.shape)}" for b in self.func.input_buffers())
        outs = ", ".join(f"{b.dtype}{list(b.shape)}" for b in self.func.output_buffers())
        return f"{self.func.name}({ins}) -> {outs}"


def rounding_outputs(reference, positions: Sequence[int], precision: str):
    """``reference`` with its outputs at ``positions`` rounded to ``precision`` (as a task
    storing them so rounds them) and widened back."""
    if not positions:
        return reference

    def rounded(*inputs: np.ndarray):
        outs = list(reference(*inputs))
        for i in positions:
            outs[i] = np.asarray(outs[i]).astype(numpy_dtype(precision)).astype(np.float32)
        return tuple(outs)

    return rounded


def _small_ints(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.integers(0, 2, size=shape).astype(np.int32)


def _flops(graph: Graph, nodes: Sequence[Node]) -> int:
    total = 0
    for n in nodes:
        ins = [graph.types[v] for v in n.inputs]
        outs = [graph.types[v] for v in n.outputs]
        total += int(OPS[n.op].flops(n, ins, outs))
    return total


def extract_tasks(graph: Graph, groups: Optional[List[Group]] = None) -> List["Task"]:
    """The graph's distinct tasks, in the order the network first runs them."""
    groups = fuse(graph) if groups is None else groups
    producer = graph.producer()
    by_key: Dict[str, Task] = {}
    tasks: List[Task] = []
    for index, grp in enumerate(groups):
        low = lower_group(graph, grp, producer)
        key = low.func.structural_hash()
        call = TaskCall(low.inputs, low.outputs, index)
        if key in by_key:
            by_key[key].calls.append(call)
            continue
        name = f"{graph.name}/{len(tasks):02d}_{low.func.name}"
        # an int8 convolution over fewer channels than a quad (an image's 3) reads its window rows
        # flat, in quads (:mod:`~probsched.schedule.flat_window`); a bf16 task does so in in_precision
        func = flatten_window(low.func) if precision_of(low.func) == "int8" else low.func
        task = Task(name, func, _flops(graph, [n for n in grp.nodes]), [call], low, graph)
        by_key[key] = task
        tasks.append(task)
    return tasks


__all__ = ["Task", "TaskCall", "LoweredGroup", "lower_group", "extract_tasks"]
