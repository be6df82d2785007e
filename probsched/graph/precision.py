"""A network's tasks in reduced precision: bfloat16 products, float32 between tasks.

A task in bfloat16 (:meth:`Task.in_precision <probsched.graph.task.Task.in_precision>`)
reads its weights in bfloat16 (converted once, when the network is compiled) and rounds its
activations to bfloat16 as it reads them, inside the task: through its padding stage
(a convolution's), or through a copy stage added in front of a product that read the
activation directly (a matmul's). Its products accumulate in float32 and everything else
(epilogues, softmax, norms) stays float32, and so do the values between tasks and the
network's inputs and outputs. Why float32 between tasks: each activation is rounded once,
where a product reads it, so a network's error is that of its products alone; the price is
float32 traffic between kernels, where storing bfloat16 would halve it.

>>> import numpy as np, jax, probsched as ps
>>> w = np.ones((8, 16), np.float32)
>>> (task,) = ps.from_jax(lambda x: x @ w, np.ones((4, 8), np.float32)).tasks()
>>> func, target, rounded = task_function(task, "bf16")
>>> target, [(b.name, b.dtype) for b in func.allocs], rounded
('bfloat16', [('x0_global', 'bfloat16')], ('x0',))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

from ..errors import ProbschedError
from ..ir.stmt import PrimFunc
from ..precision import canonical, convert, lowered_buffers, product_operands
from ..schedule.cache import cache_read
from ..schedule.dataflow import read_buffers, written_buffers

if TYPE_CHECKING:
    from .task import Task


def task_function(task: "Task", precision: str) -> Tuple[PrimFunc, str, Tuple[str, ...]]:
    """The function of ``task`` with its products in ``precision`` (from its float32 one),
    the canonical precision name, and the float32 inputs the function rounds to it (its
    reference must read them rounded alike: the kernel check compares with the format's
    tolerance on equal inputs)."""
    target = canonical(precision)
    if target == "int8":
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
        for name in set(product_operands(blk)) & activations:
            func, _ = cache_read(func, blk.name, reads.index(name), "global")
    rounded = tuple(sorted(lowered_buffers(func) & activations))
    return convert(func, target, keep=activations), target, rounded


__all__ = ["task_function"]
