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

import platform
from typing import Any, Callable, List, Sequence

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from ..ir.layout import LAYOUT_FREE

#: Bytes of a cache line (the step of the flush; a smaller line is flushed by the same address)
LINE = 64
_X86 = platform.machine().lower() in ("x86_64", "amd64")


def _has_clflushopt() -> bool:
    import llvmlite.binding as llvm

    return bool(llvm.get_host_cpu_features().get("clflushopt", False))


#: ``clflushopt`` where the CPU has it (Skylake, Zen and later): unlike ``clflush`` the
#: flushes of one array overlap, about 15 times faster over megabytes of weights
_FLUSH_INTRINSIC = "llvm.x86.clflushopt" if _X86 and _has_clflushopt() else "llvm.x86.sse2.clflush"


@intrinsic
def _flush_line(typingctx, address):
    """Flush the cache line holding byte ``address`` (:data:`_FLUSH_INTRINSIC`)."""
    sig = types.void(types.uintp)

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        fn = builder.module.globals.get(_FLUSH_INTRINSIC)
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), [i8p]), _FLUSH_INTRINSIC)
        builder.call(fn, [builder.inttoptr(args[0], i8p)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _store_fence(typingctx):
    """``sfence``: the flushes above are done before what follows (``clflushopt`` is weakly ordered)."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        fn = builder.module.globals.get("llvm.x86.sse.sfence")
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
        builder.call(fn, [])
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, cache=True)  # compiled at its first call, not when the tuner imports this module
def _flush_lines(address, nbytes):
    a = address - address % LINE
    while a < address + nbytes:
        _flush_line(a)
        a += LINE
    _store_fence()


def flush(array: np.ndarray) -> None:
    """Evict ``array``'s bytes from every cache level (written back first where dirty).

    >>> flush(np.arange(1000.0))
    """
    if not _X86:
        raise NotImplementedError(f"flushing an array's cache lines needs x86-64 (clflush), not {platform.machine()}")
    if array.nbytes:
        _flush_lines(np.uintp(array.ctypes.data), np.uintp(array.nbytes))


def weight_positions(func: Any) -> List[int]:
    """Positions of ``func``'s parameters that are a network's weights."""
    names = set(func.attr(LAYOUT_FREE) or ())
    return [i for i, p in enumerate(func.params) if p.name in names]


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
