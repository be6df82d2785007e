"""Flushing an array's cache lines, for timing code as it runs with its data in memory.

:func:`flush` evicts an array's bytes from every cache level (``clflushopt`` where the CPU
has it, else ``clflush``); :func:`weight_positions` names the parameters of a function that
are a network's weights (its layout-free buffers). The measurer times a network task with
its weights cold (:mod:`probsched.measure.cold_weights`), and a compiled network profiles its
calls so (:meth:`probsched.runtime.CompiledModel.profile_calls`): both read them here.

>>> import numpy as np
>>> a = np.arange(1000.0)
>>> flush(a); float(a.sum())
499500.0
"""

from __future__ import annotations

import platform
from typing import Any, List

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


__all__ = ["flush", "weight_positions", "LINE"]
