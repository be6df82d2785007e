"""Fault injection for testing the measurer (private: tests only).

A kernel that segfaults, hangs or raises cannot come from a correct schedule (every
primitive preserves what the program computes), so tests ask the worker to plant one:
``LocalMeasurer.measure(..., _faults={index: kind})`` makes the worker add a
:class:`Fault` statement to candidate ``index``'s scheduled function after replaying its
instruction log. The statement has a registered code emitter, so the fault is real kernel code
compiled by numba (a wild store, an endless loop, a ``raise``) or a real failure of code
generation, and the measurer sees exactly what a faulty candidate would produce.

Kinds (:data:`KINDS`): ``"segfault"`` (store 64 TiB past an output), ``"hang"`` (endless
loop in the kernel), ``"raise"`` (the kernel raises RuntimeError), ``"wrong"`` (the kernel
adds 1 to an output element after computing it), ``"compile_error"`` (the generated code
does not type-check), ``"compile_hang"`` (code generation sleeps for an hour), ``"slow"``
(the kernel sleeps 0.2 ms first, through libc's ``usleep``: right, only slow).

>>> import probsched as ps
>>> func = inject(ps.workloads.small("GMM").func, "raise")
>>> type(func.body[0]).__name__, func.body[0].kind
('Fault', 'raise')
"""

from __future__ import annotations

import time

from ..codegen import register_stmt_emitter
from ..ir.stmt import PrimFunc, Stmt

KINDS = ("segfault", "hang", "raise", "wrong", "compile_error", "compile_hang", "slow")


class Fault(Stmt):
    """A planted fault of ``kind`` touching ``buffer`` (an output, so the kernel writes it)."""

    __slots__ = ("kind", "buffer")
    _fields = ("kind", "buffer")

    def __init__(self, kind: str, buffer) -> None:
        if kind not in KINDS:
            raise ValueError(f"fault kind {kind!r} is not one of {KINDS}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "buffer", buffer)

    def writes(self):
        return [self.buffer]


def _emit(stmt: Fault, ctx) -> None:
    out = ctx.array(stmt.buffer)
    if stmt.kind == "segfault":
        ctx.line(f"{out}[{1 << 44}] = np.float32(1.0)")  # far past any mapping: SIGSEGV
    elif stmt.kind == "hang":
        n = ctx.fresh("fault_n")
        ctx.line(f"{n} = 0")
        ctx.line(f"while {n} >= 0:")  # stores inside keep LLVM from deleting the loop
        with ctx.indented():
            ctx.line(f"{n} = ({n} + 1) % 1000")
            ctx.line(f"{out}[0] = np.float32({n})")
    elif stmt.kind == "raise":
        ctx.line('raise RuntimeError("injected fault: the kernel raised")')
    elif stmt.kind == "wrong":
        ctx.line(f"{out}[0] += np.float32(1.0)")
    elif stmt.kind == "compile_error":
        ctx.line("undefined_name_planted_by_fault_injection(1)")
    elif stmt.kind == "compile_hang":
        time.sleep(3600.0)
    elif stmt.kind == "slow":
        ctx.line(f"{ctx.add_global('fault_usleep', _usleep())}(200)")  # a call LLVM cannot drop


def _usleep():
    import ctypes

    fn = ctypes.CDLL(None).usleep
    fn.argtypes, fn.restype = [ctypes.c_uint], ctypes.c_int
    return fn


register_stmt_emitter(Fault, _emit)


def inject(func: PrimFunc, kind: str) -> PrimFunc:
    """``func`` with a :class:`Fault` first in its body (last for ``"wrong"``)."""
    fault = Fault(kind, func.output_buffers()[0])
    body = func.body + (fault,) if kind == "wrong" else (fault,) + func.body
    return func.replace(body=body)
