"""Lowering step: honour ``pragma_auto_unroll_max_step`` (MetaSchedule's explicit unrolling).

Under a loop annotated ``pragma_auto_unroll_max_step=S`` (``S > 0``), every serial loop
whose body executes at most ``S`` leaf statements in total (its extent times its body's
count, inner loops counted the same way) becomes ``unrolled``; code generation then copies
its body. Innermost loops go first, so the budget unrolls from the inside out, like TVM's
UnrollLoop pass. Parallel and vectorized loops keep their kind.

>>> import probsched as ps
>>> A = ps.placeholder((64, 4), name="A")
>>> B = ps.compute((64, 4), lambda i, j: A[i, j] * 2.0, name="B")
>>> sch = ps.Schedule(ps.create_func([A, B]))
>>> i, j = sch.get_loops(sch.get_block("B"))
>>> sch.annotate(i, "pragma_auto_unroll_max_step", 16)
>>> [l.kind for l in apply_unroll_pragmas(sch.mod).loops()]
['serial', 'unrolled']
"""

from __future__ import annotations

from typing import Tuple

from ..ir.stmt import Block, Loop, PrimFunc

PRAGMA = "pragma_auto_unroll_max_step"


# Unrolled copies of a block with a conditional (a padding select, a partial-tile guard)
# each add basic blocks, and numba's SSA and type inference are super-linear in basic
# blocks: hundreds of unrolled padding stores compile about a hundred times slower than
# the loop. Such bodies are unrolled only up to this many copies (straight-line bodies keep
# the pragma's).
BRANCHY_BUDGET = 16

# Copies of a body that still holds a loop (a vectorized row, a kernel's inner loop) are
# separate loops for numba and LLVM to compile and vectorize one by one: dozens of copies
# of a vectorized packing loop compile several times slower than the loop. Such loops are
# unrolled only when this short.
LOOP_COPIES = 4


def _has_branch(blk: Block) -> bool:
    from ..ir.expr import Const, Select, walk

    if not (isinstance(blk.predicate, Const) and bool(blk.predicate.value)):
        return True
    stores = [st for st in (blk.body, blk.init) if st is not None and not isinstance(st, tuple)]
    return any(isinstance(x, Select) for st in stores for x in walk(st.value))


def _unroll(s, budget: int) -> Tuple[object, int, bool, bool]:
    """(rewritten statement, leaf statements it executes, whether a leaf branches,
    whether a loop is left inside)."""
    if isinstance(s, tuple):
        out, total, branchy, loopy = [], 0, False, False
        for x in s:
            y, n, b, l = _unroll(x, budget)
            out.append(y)
            total += n
            branchy, loopy = branchy or b, loopy or l
        return tuple(out), total, branchy, loopy
    if isinstance(s, Loop):
        body, n, branchy, loopy = _unroll(s.body, budget)
        steps = n * s.extent
        limit = min(budget, BRANCHY_BUDGET) if branchy else budget
        kind = s.kind
        if kind == "serial" and steps <= limit and (not loopy or s.extent <= LOOP_COPIES):
            kind = "unrolled"
        return s.replace(body=body, kind=kind), steps, branchy, loopy or kind != "unrolled"
    if isinstance(s, Block) and isinstance(s.body, tuple) and s.annotation("tensorize") is None:
        body, n, branchy, loopy = _unroll(s.body, budget)
        return s.replace(body=body), n, branchy or _has_branch(s), loopy
    if isinstance(s, Block) and s.annotation("tensorize") is not None:
        # a micro-kernel call: copying it gains nothing and each copy is another call site
        return s, budget + 1, False, True
    if isinstance(s, Block):
        return s, 1, _has_branch(s), False
    return s, 1, False, False


def _apply(s):
    if isinstance(s, tuple):
        return tuple(_apply(x) for x in s)
    if isinstance(s, Loop):
        budget = s.annotation(PRAGMA)
        if isinstance(budget, int) and budget > 0:
            return _unroll(s, budget)[0]
        return s.replace(body=_apply(s.body))
    return s


def apply_unroll_pragmas(func: PrimFunc) -> PrimFunc:
    """Unroll small loops under ``pragma_auto_unroll_max_step`` annotations (see module doc)."""
    return func.replace(body=_apply(func.body))
