"""A network's tasks in reduced precision: bfloat16 products, bfloat16 where tasks round anyway.

A task in bfloat16 (:meth:`Task.in_precision <probsched.graph.task.Task.in_precision>`)
reads its weights in bfloat16 (converted once, when the network is compiled) and rounds its
activations to bfloat16 as it reads them, inside the task: through its padding stage
(a convolution's), or through a copy stage added in front of a product that read the
activation directly (a matmul's). Its products accumulate in float32 and everything else
(epilogues, softmax, norms) stays float32, and so do the network's inputs and outputs.

Between tasks (:func:`narrow_between_tasks`), a value is stored in bfloat16 where that
changes no result: where every task reading it only rounds it to bfloat16 for its
products, its producer (a task in bfloat16 itself) rounds it as it writes it instead (the
same rounding, once), and the readers take it as it is. Every other value stays float32: a residual connection's
input, which an epilogue adds in float32, a softmax's, a norm's. So a network's error is
that of its products alone, as with float32 between tasks, while the traffic between
kernels halves where it can (ResNet-50: two of the three activations of each block).
With ``every``, the others are stored in bfloat16 too and read widened (what OpenVINO's
and PyTorch's bfloat16 do): the residual stream is rounded once more per block, and a
1x1 convolution reading it has nothing left to convert.

>>> import numpy as np, jax, probsched as ps
>>> w = np.ones((8, 16), np.float32)
>>> (task,) = ps.from_jax(lambda x: x @ w, np.ones((4, 8), np.float32)).tasks()
>>> func, target, rounded = task_function(task, "bf16")
>>> target, [(b.name, b.dtype) for b in func.allocs], rounded
('bfloat16', [('x0_global', 'bfloat16')], ('x0',))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, FrozenSet, List, Sequence, Tuple

from ..errors import ProbschedError
from ..ir.stmt import PrimFunc
from ..ir.dtypes import BF16
from ..ir.stmt import Store
from ..precision import _moves_data, _retype, canonical, convert, lowered_buffers, product_operands
from ..schedule.cache import cache_read
from ..schedule.flat_window import flatten_window
from ..schedule.dataflow import read_buffers, written_buffers

if TYPE_CHECKING:
    from .task import Task


def task_function(task: "Task", precision: str) -> Tuple[PrimFunc, str, Tuple[str, ...]]:
    """The function of ``task`` with its products in ``precision`` (from its float32 one),
    the canonical precision name, and the float32 inputs the function rounds to it (its
    reference must read them rounded alike: the kernel check compares with the format's
    tolerance on equal inputs)."""
    target = canonical(precision)
    if target in ("int8", "int8r"):
        raise ProbschedError("a network in int8 needs its activations' ranges: quantize it with "
                             "ps.quantize(fn, calibration_inputs) (or import a QDQ ONNX model) and compile the graph it returns")
    func = task.func if task.precision == "float32" else convert(task.func, "float32")
    if target == "float32":
        return func, target, ()
    constants = {func.input_buffers()[i].name for i in task.constant_inputs}
    activations = {b.name for b in func.input_buffers()} - constants
    for blk in func.blocks():
        own = set(written_buffers(blk))
        reads = [b for b in read_buffers(blk) if b not in own]
        # in the product's operand order: a set's order changes from process to process (string
        # hashing), and with it the copy stages' names, the function's structural hash and the
        # database key of a task whose product reads two activations (attention's Q @ K)
        for name in dict.fromkeys(n for n in product_operands(blk) if n in activations):
            func, _ = cache_read(func, blk.name, reads.index(name), "global")
    rounded = tuple(sorted(lowered_buffers(func) & activations))
    return flatten_window(convert(func, target, keep=activations)), target, rounded


def narrowed_function(func: PrimFunc, names: Sequence[str]) -> PrimFunc:
    """``func`` with parameters ``names`` (float32) stored in bfloat16: reads of an input
    widen it, writes of an output round to it."""
    params = {b.name: b for b in func.params}
    for name in names:
        if name not in params or params[name].dtype != "float32":
            raise ProbschedError(f"{func.name}: cannot store {name!r} in bfloat16: not a float32 parameter "
                                 f"(parameters: {', '.join(f'{b.name}:{b.dtype}' for b in func.params)})")
    return _retype(func, {name: BF16 for name in names})


def _rounds_only(func: PrimFunc, name: str) -> bool:
    """Whether every block of ``func`` reading parameter ``name`` only moves it into a
    bfloat16 buffer (a product's copy or padding stage): then reading it rounded changes
    nothing."""
    readers = [blk for blk in func.blocks() if any(b.name == name for b, _ in blk.reads())]
    return bool(readers) and all(isinstance(blk.body, Store) and blk.init is None and blk.body.buffer.dtype == BF16
                                 and _moves_data(blk.body.value) for blk in readers)


def _rounds_on_write(func: PrimFunc, name: str) -> bool:
    """Whether output ``name`` of ``func`` is float32, written by elementwise stores only (no
    reduction accumulates into it, nothing reads it back): then rounding as it is written
    rounds the final value only."""
    param = next((b for b in func.params if b.name == name), None)
    if param is None or param.dtype != "float32":
        return False
    writers = [blk for blk in func.blocks() if any(b.name == name for b, _ in blk.writes())]
    readers = [blk for blk in func.blocks() if any(b.name == name for b, _ in blk.reads())]
    return bool(writers) and not readers and all(blk.init is None and not blk.is_reduction for blk in writers)


def narrow_between_tasks(tasks: Sequence["Task"], keep: Sequence[int] = (), exclude: Sequence[int] = (),
                         every: bool = False) -> Tuple[List["Task"], FrozenSet[int]]:
    """``tasks`` with the values between them that every reader rounds stored in bfloat16
    (module docstring), and those values. A value qualifies when it is a float32 output of
    one task in bfloat16, every parameter reading it is :func:`_rounds_only`, and its
    producer :func:`_rounds_on_write` it; since a task is one function for all its calls, a
    parameter narrows only where every call's value qualifies, and a value only where its
    producer's and all its readers' parameters do. ``keep``: values stored in float32
    regardless (the network's outputs); ``exclude``: positions in ``tasks`` of tasks to
    leave as they are (say, one whose records do not replay narrowed). ``every``: a value
    qualifies whatever its readers do with it (a float32 add, a norm: they read it widened)
    and whichever float task writes it: the values' error is then one more rounding, as in
    other engines' bfloat16, and a reader needs no copy stage of its own
    (:mod:`probsched.lowering.forward_copies`).

    >>> import numpy as np, jax, probsched as ps
    >>> w = np.ones((8, 8), np.float32)
    >>> g = ps.from_jax(lambda x: jax.nn.relu(x @ w) @ w, np.ones((4, 8), np.float32))
    >>> tasks, values = narrow_between_tasks([t.in_precision("bf16") for t in g.tasks()], keep=g.outputs)
    >>> [t.narrowed for t in tasks], len(values)
    ([('maximum',), ('x0',)], 1)
    """
    keep, exclude = set(keep), set(exclude)
    # each parameter (task index, position) and the values its calls bind to it
    bound: Dict[Tuple[int, int], List[int]] = {}
    writer: Dict[int, Tuple[int, int]] = {}
    readers: Dict[int, List[Tuple[int, int]]] = {}
    for i, t in enumerate(tasks):
        n_in = len(t.func.input_buffers())
        for call in t.calls:
            for k, v in enumerate(call.inputs + call.outputs):
                bound.setdefault((i, k), []).append(v)
                if k < n_in:
                    readers.setdefault(v, []).append((i, k))
                else:
                    writer[v] = (i, k)
    names = [[b.name for b in t.func.params] for t in tasks]

    def able(i: int, pos: int) -> bool:
        t = tasks[i]
        if every and i not in exclude and t.precision in ("float32", BF16):
            if pos >= len(t.func.input_buffers()):
                return _rounds_on_write(t.func, names[i][pos])
            return t.func.params[pos].dtype == "float32"  # read widened
        if i in exclude or t.precision != BF16:  # a float32 task rounding its output measured slower (MobileNet-V2's depthwise: +4%)
            return False
        name = names[i][pos]
        if pos >= len(t.func.input_buffers()):
            return _rounds_on_write(t.func, name)
        return name in t.rounded and _rounds_only(t.func, name)

    values = {v for v in writer if v not in keep and v in readers}
    params = {p for v in values for p in [writer[v], *readers[v]] if able(*p)}
    while True:  # a value needs all its parameters; a parameter all its calls' values
        values = {v for v in values if writer[v] in params and all(r in params for r in readers[v])}
        narrowed = {p for p in params if all(v in values for v in bound[p])}
        if narrowed == params:
            break
        params = narrowed
    out = []
    for i, t in enumerate(tasks):
        mine = [names[i][k] for (j, k) in sorted(params) if j == i]
        out.append(t.with_narrowed(mine) if mine else t)
    return out, frozenset(values)


__all__ = ["task_function", "narrowed_function", "narrow_between_tasks"]
