"""Timing a network's kernel with its weights cold, as the network runs it.

A kernel timed alone, call after call on the same arrays, reads its weights from a cache; in
a network the other layers' weights (and, on a shared machine, other tenants) have evicted
them by the time it runs again, and it reads them from memory. A candidate that reads more
weight bytes (Winograd's transformed weight is 16/9 or 36/9 of the kernel's) or reads them
in float32 where bfloat16 would halve them pays that only in the network, so a hot timing
can prefer it where the network runs slower. TVM's CPU runner flushes the caches for the
same reason (``enable_cpu_cache_flush``: every argument but the first). Here only the
weights go cold (the input activations stay warm, as the producing layer left them): before
each timed call, untimed, every cache line of the weights as the kernel reads them (laid
out) is flushed (``clflushopt``), and each call is timed alone (:mod:`.timer` calls a
callable's ``before`` first, outside the timed span).

Flushing, not fresh copies of the weights: copies adding up to several times a core's L2
stay in a large last-level cache (hundreds of MiB on a server CPU), which a network's
weights and the machine's other work do not leave to them.

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
>>> call = cold_weights_call(kern, (x, w, y))
>>> call.weight_bytes, weight_positions(func)
(256, [1])
>>> call.before(); call(); float(y.sum())
128.0
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..codegen.cache_flush import _X86, LINE, flush, weight_positions


class ColdWeightsCall:
    """A bound kernel (``call()``) whose weights ``before()`` flushes; the timer calls
    ``before`` ahead of each timed call, outside the timed span."""

    def __init__(self, bound: Callable[[], object], weights: Sequence[np.ndarray]) -> None:
        self._bound, self._weights = bound, list(weights)
        self.weight_bytes = sum(a.nbytes for a in self._weights)

    def before(self) -> None:
        for a in self._weights:
            flush(a)

    def __call__(self) -> None:
        self._bound()


def cold_weights_call(kernel: Any, args: Sequence[Any]) -> Callable[[], object]:
    """``kernel`` bound to ``args`` (as :meth:`~probsched.codegen.Kernel.bind`), as a
    :class:`ColdWeightsCall` flushing its weights (laid out as the kernel reads them) before
    each timed call; a plain binding when the kernel has no weights or the CPU cannot flush."""
    bound = kernel.bind(*args)
    positions = weight_positions(kernel.func)
    if not positions or not _X86:
        return bound
    return ColdWeightsCall(bound, [bound.array(p) for p in positions])


__all__ = ["cold_weights_call", "weight_positions", "flush", "ColdWeightsCall", "LINE"]
