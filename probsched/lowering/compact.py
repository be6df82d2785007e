"""Lowering step: shrink each ``local`` buffer (and each ``global`` intermediate computed under
a loop) to the region used under its allocation point.

``cache_read``/``cache_write`` create full-size local buffers; after ``compute_at`` moves the
copy block under a tile loop, only a tile of the buffer is live per iteration of that loop.
This pass (MetaSchedule's CompactBufferAllocation) finds the innermost loop enclosing every
access, the region accessed per iteration of it, and rewrites the buffer to that region's
shape with indices relative to its start. The rewritten indices are expressed with the
enclosing loop variables, which code generation keeps in scope: this is a post-scheduling
form, not one that schedule primitives accept.

A ``global`` intermediate whose producer ``compute_at`` put under a loop of its consumers
(a convolution's padding computed per tile) is the same situation: the pass makes it a
compacted ``local`` buffer of that loop, so that each thread fills its own tile, which stays
in cache, rather than a part of a whole-size buffer. One computed at the root, whose
accesses no loop encloses, stays a whole buffer that the kernel wrapper allocates.

The same element of a compacted buffer stands for another element of the full buffer in
each iteration of that loop, so nothing written in one iteration may be read in the next.
The pass records each compacted buffer's loop in the function attribute
:data:`~probsched.ir.stmt.LOCAL_ALLOC_LOOPS`, from which the interpreter
(``lowered=True``) gives the buffer that one-iteration lifetime; code generation ignores it.

>>> import probsched as ps
>>> A = ps.placeholder((64,), name="A")
>>> B = ps.compute((64,), lambda i: A[i] * 2.0, name="B")
>>> sch = ps.Schedule(ps.create_func([A, B]))
>>> i0, i1 = sch.split(sch.get_loops(sch.get_block("B"))[0], [None, 8])
>>> cr = sch.cache_read(sch.get_block("B"), 0, "local")
>>> sch.compute_at(cr, i0)
>>> lowered = compact_local_buffers(sch.mod)
>>> print(lowered.buffer("A_local"))
A_local: float32[8]
>>> lowered.attr(LOCAL_ALLOC_LOOPS)
(('A_local', 'i_0'),)
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..ir.expr import Const, Expr, Load, substitute
from ..ir.stmt import LOCAL_ALLOC_LOOPS, Block, Buffer, Loop, PrimFunc, Store
from ..schedule.analysis import region, simplify, union
from ..schedule.dataflow import binding_map, map_loads
from ..schedule.tree import TreeIndex, map_blocks


def _accesses(blk: Block, name: str) -> List[tuple]:
    if isinstance(blk.body, tuple):  # a blockized block: its inner blocks are visited themselves
        return []
    out = [idx for b, idx in blk.reads() if b.name == name]
    out += [idx for b, idx in blk.writes() if b.name == name]
    return out


def loop_bindings(idx: TreeIndex, blk: Block) -> dict:
    """Iterator -> binding in loop variables, through the bindings of enclosing blocks."""
    env = binding_map(blk)
    for outer in reversed(idx.ancestors(idx.block_path(blk.name))):
        if isinstance(outer, Block):
            oenv = binding_map(outer)
            env = {k: substitute(v, oenv) for k, v in env.items()}
    return env


def _plan(func: PrimFunc, idx: TreeIndex, buf: Buffer) -> Optional[Tuple[Buffer, List[Expr], Optional[str]]]:
    """The compacted (``local``) buffer, the tile start per dimension, and the allocation
    loop's name (None: the function root); None when the buffer cannot shrink."""
    users = [b for b in func.blocks() if _accesses(b, buf.name)]
    if not users:
        return None
    paths = [idx.block_path(b.name) for b in users]
    common = paths[0]
    for p in paths[1:]:
        n = 0
        while n < min(len(common), len(p)) and common[n] == p[n]:
            n += 1
        common = common[:n]
    while common and not isinstance(idx.at(common), Loop):
        common = common[:-1]
    fixed = {s.name for s in idx.ancestors(common + (0,)) if isinstance(s, Loop)} if common else set()
    regions: List[List[Optional[Tuple[Expr, int]]]] = []
    for b, p in zip(users, paths):
        ranges = {s.name: (0, s.extent - 1) for s in idx.ancestors(p) if isinstance(s, Loop) and s.name not in fixed}
        bmap = loop_bindings(idx, b)
        for ix in _accesses(b, buf.name):
            regions.append([region(simplify(substitute(e, bmap)), fixed, ranges) for e in ix])
    starts: List[Expr] = []
    shape: List[int] = []
    for d, dim in enumerate(buf.shape):
        acc = None
        for r in regions:
            if r[d] is None:
                acc = None
                break
            acc = r[d] if acc is None else union(acc, r[d])
            if acc is None:
                break
        if acc is None or acc[1] >= dim:
            starts.append(Const(0, "int64"))
            shape.append(dim)
        else:
            starts.append(acc[0])
            shape.append(acc[1])
    if tuple(shape) == buf.shape:
        return None
    return Buffer(buf.name, shape, buf.dtype, "local"), starts, (idx.at(common).name if common else None)


def compact_local_buffers(func: PrimFunc, intermediates: bool = True) -> PrimFunc:
    """Shrink every ``local`` buffer to its per-iteration region (see module doc).

    With ``intermediates``, a ``global`` intermediate whose accesses a loop encloses (a
    producer computed at a loop of its consumers: a convolution's padding per tile) becomes
    such a ``local`` tile too, instead of a whole-size buffer that each iteration fills a
    part of: the tile stays in L1 (or on the stack), and each thread gets its own.
    """
    candidates = [b for b in func.allocs if b.scope == "local" or (intermediates and b.scope == "global")]
    if not candidates:
        return func
    idx = TreeIndex.of(func)
    plans: Dict[str, Tuple[Buffer, List[Expr], Optional[str]]] = {}
    for b in candidates:
        p = _plan(func, idx, b)
        # an intermediate computed at the root stays one buffer that the wrapper allocates
        if p is not None and (b.scope == "local" or p[2] is not None):
            plans[b.name] = p
    if not plans:
        return func

    def fix_block(blk: Block) -> Block:
        if isinstance(blk.body, tuple):
            return blk
        bmap = loop_bindings(idx, blk)

        def rel(indices: tuple, name: str) -> tuple:
            _, starts, _ = plans[name]
            return tuple(simplify(substitute(e, bmap) - s) for e, s in zip(indices, starts))

        def fix_load(ld: Load) -> Expr:
            if ld.buffer.name in plans:
                return Load(plans[ld.buffer.name][0], rel(ld.indices, ld.buffer.name))
            return ld

        def fix_stmt(s):
            if isinstance(s, tuple):
                return tuple(fix_stmt(x) for x in s)
            if isinstance(s, Store):
                value = map_loads(s.value, fix_load)
                indices = tuple(map_loads(i, fix_load) for i in s.indices)
                if s.buffer.name in plans:
                    return Store(plans[s.buffer.name][0], rel(indices, s.buffer.name), value)
                return Store(s.buffer, indices, value)
            return s

        if not any(_accesses(blk, n) for n in plans):
            return blk
        return blk.replace(body=fix_stmt(blk.body), init=None if blk.init is None else fix_stmt(blk.init))

    body = map_blocks(func.body, fix_block)
    allocs = tuple(plans[b.name][0] if b.name in plans else b for b in func.allocs)
    # Where each compacted buffer lives: a tile's indices are relative to its start, so the
    # same element holds another tile in the next iteration of the loop and nothing may be
    # carried over. The interpreter reads this to model that (code generation does not).
    alloc_loops = dict(func.attr(LOCAL_ALLOC_LOOPS, ()))  # kept from an earlier compaction
    alloc_loops.update((name, p[2]) for name, p in plans.items())
    attrs = dict(func.attrs)
    attrs[LOCAL_ALLOC_LOOPS] = tuple(sorted(alloc_loops.items()))
    return func.replace(body=body, allocs=allocs, attrs=attrs)
