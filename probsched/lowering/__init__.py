"""Lowering: passes between a scheduled program and code generation.

:func:`lower` runs them in order: a whole copy of an input that changes nothing is not made
(:mod:`.forward_copies`), unroll pragmas become unrolled loops, then local buffers
shrink to the tile they hold (recording the loop each one lives in, see
:data:`~probsched.ir.stmt.LOCAL_ALLOC_LOOPS`). Both preserve what the program computes, which
``evaluate(lower(func), *inputs, lowered=True)`` (:mod:`probsched.ir.interpreter`) checks.

>>> import probsched as ps
>>> w = ps.workloads.small("GMM")
>>> lower(w.func) == w.func
True
"""

from ..ir.stmt import PrimFunc
from .compact import compact_local_buffers
from .forward_copies import forward_identity_copies
from .unroll import apply_unroll_pragmas


def lower(func: PrimFunc) -> PrimFunc:
    """The function code generation compiles (``func`` itself when no pass changes it)."""
    out = compact_local_buffers(apply_unroll_pragmas(forward_identity_copies(func)))
    return func if out == func else out


__all__ = ["lower", "compact_local_buffers", "apply_unroll_pragmas", "forward_identity_copies"]
