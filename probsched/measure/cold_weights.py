"""Timing a network's kernel with its weights cold, as the network runs it.

A kernel timed alone, call after call on the same arrays, reads its weights from the
nearest cache; in a network the other layers' weights have evicted them by the time it runs
again, and it reads them from the last-level cache or memory. Layers whose weights exceed
the core's L2 cache then run up to twice as slow in the network as alone, and a candidate
that reads its weights in a streaming order (or laid out contiguously) gains there what a
hot timing cannot see. TVM's CPU runner flushes the cache before each repeat for the same
reason (``enable_cpu_cache_flush``); here only the weights go cold (the input activations
stay warm, as the producing layer left them): the kernel is bound to several copies of its
weights, together larger than :data:`COLD_BYTES`, and each call runs the next binding.

The weights are the function's layout-free buffers (:data:`~probsched.ir.layout.LAYOUT_FREE`:
a network task's constant inputs); a function without any is timed as it is.

>>> import numpy as np, probsched as ps
>>> A = ps.placeholder((64,), name="x")
>>> W = ps.placeholder((64,), name="w")
>>> B = ps.compute((64,), lambda i: A[i] * W[i], name="y")
>>> func = ps.create_func([A, W, B], name="scale")
>>> func = func.replace(attrs=func.attrs + (("layout_free_buffers", ("w",)),))
>>> kern = ps.build(func)
>>> x, w, y = np.ones(64, "float32"), np.full(64, 2.0, "float32"), np.zeros(64, "float32")
>>> call = cold_weights_call(kern, (x, w, y), budget_bytes=1024)
>>> call.copies, weight_positions(func)
(4, [1])
>>> call(); call(); float(y.sum())
128.0
"""

from __future__ import annotations

import math
from typing import Any, Callable, List, Sequence

from ..aligned import aligned_copy
from ..ir.layout import LAYOUT_FREE

#: Bytes the copies of a kernel's weights add up to at least: several times a core's L2
#: cache (1-2 MiB on the CPUs this runs on), so that a copy is evicted from it before its
#: next turn.
COLD_BYTES = 32 << 20
#: At most this many copies (a kernel with tiny weights is dominated by its activations).
MAX_COPIES = 64


def weight_positions(func: Any) -> List[int]:
    """Positions of ``func``'s parameters that are a network's weights."""
    names = set(func.attr(LAYOUT_FREE) or ())
    return [i for i, p in enumerate(func.params) if p.name in names]


class RotatingCall:
    """A no-argument callable running the next of ``calls`` each time."""

    def __init__(self, calls: List[Callable[[], object]]) -> None:
        self.calls, self.copies, self._next = calls, len(calls), 0

    def __call__(self) -> None:
        self.calls[self._next]()
        self._next = (self._next + 1) % self.copies


def cold_weights_call(kernel: Any, args: Sequence[Any], budget_bytes: int = COLD_BYTES) -> Callable[[], object]:
    """``kernel`` bound to ``args`` (as :meth:`~probsched.codegen.Kernel.bind`), its weight
    arguments copied so that each call reads a copy not read for ``budget_bytes`` (see the
    module docstring); a plain binding when the kernel has no weights."""
    positions = weight_positions(kernel.func)
    size = sum(getattr(args[i], "nbytes", 0) for i in positions)
    if not positions or not size:
        return kernel.bind(*args)
    copies = max(2, min(MAX_COPIES, math.ceil(budget_bytes / size)))
    calls = [kernel.bind(*args)]
    for _ in range(copies - 1):
        again = list(args)
        for i in positions:
            again[i] = aligned_copy(args[i])
        calls.append(kernel.bind(*again, scratch=kernel.new_scratch()))
    return RotatingCall(calls)


__all__ = ["cold_weights_call", "weight_positions", "RotatingCall", "COLD_BYTES", "MAX_COPIES"]
