"""Caching primitives: cache_read and cache_write.

Both add a copy block over the whole buffer at the root; moving that block with
``compute_at`` / ``reverse_compute_at`` shrinks it to a tile, and the lowering step
(:mod:`probsched.lowering.compact`) shrinks a ``local`` cache buffer to the tile it holds.

>>> import probsched as ps
>>> from probsched.schedule.compute_location import compute_at
>>> f, local = cache_read(ps.workloads.small("GMM").func, "Z", 1, "local")  # Z's read 1 is Y
>>> local, [b.name for b in f.blocks()]
('Y_local', ['Y_local', 'Z'])
>>> print(compute_at(f, local, "k").body[0])  # the copy shrinks to what one k iteration reads
for b in range(2):
    for i in range(4):
        for j in range(6):
            for k in range(5):
                with block("Y_local", v0=S(2, b), v1=S(5, k), v2=S(6, j)):
                    Y_local[v0, v1, v2] = Y[v0, v1, v2]
                with block("Z", v_b=S(2, b), v_i=S(4, i), v_j=S(6, j), v_k=R(5, k)):
                    init: Z[v_b, v_i, v_j] = 0.0
                    Z[v_b, v_i, v_j] = Z[v_b, v_i, v_j] + X[v_b, v_i, v_k] * Y_local[v_b, v_k, v_j]
"""

from __future__ import annotations

from typing import Tuple

from ..ir.expr import Load, Var
from ..ir.stmt import Block, Buffer, IterVar, Loop, PrimFunc, Store
from .dataflow import map_block_exprs, map_loads, read_buffers, readers_of, writers_of, written_buffers
from .loops import lookup_block
from .tree import TreeIndex, all_names, fresh_name, insert_at, replace_at, require

SCOPES = ("local", "global")


def _copy_nest(func: PrimFunc, name: str, src: Buffer, dst: Buffer) -> Loop:
    taken = all_names(func) | {name}
    loops = []
    iters = []
    for d, extent in enumerate(src.shape):
        ln = fresh_name(taken, f"ax{d}")
        taken.add(ln)
        loops.append(Var(ln))
        iters.append(IterVar(Var(f"v{d}"), extent, "S"))
    ivars = tuple(it.var for it in iters)
    blk = Block(name, tuple(iters), tuple(loops), Store(dst, ivars, Load(src, ivars)))
    stmt = blk
    for v, extent in reversed(list(zip(loops, src.shape))):
        stmt = Loop(v, extent, "serial", (stmt,))
    return stmt


def cache_read(func: PrimFunc, block: str, read_index: int, scope: str) -> Tuple[PrimFunc, str]:
    """Make ``block`` read its ``read_index``-th input from a copy in ``scope``; returns the copy block."""
    prim = "cache_read"
    require(scope in SCOPES, prim, f"scope {scope!r} is not one of {SCOPES}")
    idx = TreeIndex.of(func)
    bpath, blk = lookup_block(idx, block, prim)
    own = set(written_buffers(blk))
    reads = [b for b in read_buffers(blk) if b not in own]
    require(
        isinstance(read_index, int) and 0 <= read_index < len(reads),
        prim,
        f"block {block} reads {len(reads)} buffer(s) {reads}; read_index {read_index} is out of range",
    )
    src = func.buffer(reads[read_index])
    root = bpath[0]
    for w in writers_of(func, src.name):
        require(
            idx.block_path(w.name)[0] != root,
            prim,
            f"buffer {src.name} is produced by {w.name} inside the loop nest of block {block}; "
            "cache it before moving the producer there",
        )
    taken = all_names(func)
    cname = fresh_name(taken, f"{src.name}_{scope}")
    cbuf = Buffer(cname, src.shape, src.dtype, scope)
    bname = cname  # fresh among buffer, block and loop names alike

    def redirect(ld: Load) -> Load:
        return Load(cbuf, ld.indices) if ld.buffer.name == src.name else ld

    new_blk = map_block_exprs(blk, lambda e: map_loads(e, redirect))
    new_func = replace_at(func, bpath, (new_blk,))
    new_func = new_func.replace(allocs=new_func.allocs + (cbuf,))
    nest = _copy_nest(new_func, bname, src, cbuf)
    return insert_at(new_func, None, root, (nest,)), bname


def cache_write(func: PrimFunc, block: str, write_index: int, scope: str) -> Tuple[PrimFunc, str]:
    """Make ``block`` write into a copy in ``scope`` and copy it back after; returns the copy-back block."""
    prim = "cache_write"
    require(scope in SCOPES, prim, f"scope {scope!r} is not one of {SCOPES}")
    idx = TreeIndex.of(func)
    bpath, blk = lookup_block(idx, block, prim)
    writes = written_buffers(blk)
    require(
        isinstance(write_index, int) and 0 <= write_index < len(writes),
        prim,
        f"block {block} writes {len(writes)} buffer(s) {writes}; write_index {write_index} is out of range",
    )
    dst = func.buffer(writes[write_index])
    others = [w.name for w in writers_of(func, dst.name) if w.name != block]
    require(not others, prim, f"buffer {dst.name} is also written by {others}")
    root = bpath[0]
    for r in readers_of(func, dst.name):
        require(
            r.name == block or idx.block_path(r.name)[0] != root,
            prim,
            f"block {r.name} reads {dst.name} inside the loop nest of block {block}",
        )
    taken = all_names(func)
    cname = fresh_name(taken, f"{dst.name}_{scope}")
    cbuf = Buffer(cname, dst.shape, dst.dtype, scope)

    def redirect(ld: Load) -> Load:
        return Load(cbuf, ld.indices) if ld.buffer.name == dst.name else ld

    def restore(st: Store) -> Store:
        return Store(cbuf, st.indices, st.value) if st.buffer.name == dst.name else st

    new_blk = map_block_exprs(blk, lambda e: map_loads(e, redirect), stores=restore)
    new_func = replace_at(func, bpath, (new_blk,))
    new_func = new_func.replace(allocs=new_func.allocs + (cbuf,))
    nest = _copy_nest(new_func, cname, cbuf, dst)
    return insert_at(new_func, None, root + 1, (nest,)), cname
