"""Reduction primitives: rfactor and decompose_reduction.

>>> import probsched as ps
>>> f = ps.workloads.small("GMM").func
>>> f2, init = decompose_reduction(f, "Z", "k")  # the init becomes its own block before k
>>> init, [b.name for b in f2.blocks()]
('Z_init', ['Z_init', 'Z'])
>>> f3, partial = rfactor(f, "k", 0)  # partial sums over k into Z_rf, then Z sums them
>>> partial, [b.name for b in f3.blocks()]
('Z_rf', ['Z_rf', 'Z'])
"""

from __future__ import annotations

from typing import Tuple

from ..ir.expr import BinOp, Const, Expr, Load, Var, all_of, binary, free_vars, substitute
from ..ir.stmt import Block, Buffer, IterVar, Loop, PrimFunc, Store
from .analysis import conjuncts
from .dataflow import readers_of, single_store
from .loops import lookup_block, lookup_loop
from .tree import TreeIndex, all_names, fresh_name, insert_at, replace_at, require


def _combiner(blk: Block, prim: str) -> Tuple[str, Expr, Store]:
    """(op, source, store) of a block whose body is ``W[i] = op(W[i], source)``."""
    st = single_store(blk)
    require(st is not None and blk.init is not None, prim, f"block {blk.name} is not a reduction with an init")
    acc = Load(st.buffer, st.indices)
    v = st.value
    if isinstance(v, BinOp) and v.op in ("add", "max", "min"):
        if v.a == acc and acc not in _loads(v.b):
            return v.op, v.b, st
        if v.b == acc and acc not in _loads(v.a):
            return v.op, v.a, st
    raise_msg = f"block {blk.name}: body {st.buffer.name}[...] = {v} is not a recognised sum/max/min update"
    require(False, prim, raise_msg)
    raise AssertionError  # unreachable


def _reduction_bindings(blk: Block) -> dict:
    """Each reduction iterator of ``blk`` -> its binding (for blocks that drop the iterator)."""
    return {it.var.name: b for it, b in zip(blk.iters, blk.bindings) if it.kind == "R"}


def _loads(e: Expr) -> list:
    from ..ir.expr import loads

    return loads(e)


def rfactor(func: PrimFunc, loop: str, factor_axis: int) -> Tuple[PrimFunc, str]:
    """Factor the reduction over ``loop`` into a new buffer dimension; returns the rf block.

    The rf block accumulates partial results ``W_rf[..., r, ...]`` with ``loop`` now a
    spatial loop (so it can be parallelised or vectorised); a write-back block named like the
    original reduces them into ``W``.
    """
    prim = "rfactor"
    idx = TreeIndex.of(func)
    lpath, lnode = lookup_loop(idx, loop, prim)
    blocks = [b for b in idx.blocks_under(lpath)]
    require(len(blocks) == 1, prim, f"loop {loop} must contain exactly one block, has {[b.name for b in blocks]}")
    blk = blocks[0]
    op, source, st = _combiner(blk, prim)
    bound_iters = [it for it, b in zip(blk.iters, blk.bindings) if loop in free_vars(b)]
    require(
        len(bound_iters) == 1 and bound_iters[0].kind == "R",
        prim,
        f"loop {loop} must drive exactly one reduction iterator of block {blk.name}, drives "
        f"{[it.var.name for it in bound_iters]}",
    )
    root = idx.block_path(blk.name)[0]
    for r in readers_of(func, st.buffer.name):
        require(
            r.name == blk.name or idx.block_path(r.name)[0] != root,
            prim,
            f"block {r.name} reads {st.buffer.name} inside the loop nest of block {blk.name}; the "
            "write-back of the factored reduction would come after it",
        )
    ndim = len(st.buffer.shape)
    if factor_axis < 0:
        factor_axis += ndim + 1
    require(0 <= factor_axis <= ndim, prim, f"factor_axis {factor_axis} is out of range for {ndim} dimensions")
    # Every loop that drives a reduction iterator becomes an iterator of the rf block: ``loop``
    # a spatial one, the others reduction ones; the old reduction iterators are rewritten
    # through their bindings. The init then runs once per rf slot, as it must.
    loops_above = {l.name: l for l in idx.loops_above(blk.name)}
    spatial_loops = set()
    reduce_loops: list = []
    for it, b in zip(blk.iters, blk.bindings):
        for v in sorted(free_vars(b)):
            if it.kind == "S":
                spatial_loops.add(v)
            elif v not in reduce_loops:
                reduce_loops.append(v)
    mixed = spatial_loops & set(reduce_loops)
    require(not mixed, prim, f"loop(s) {sorted(mixed)} drive both spatial and reduction iterators of block {blk.name}")
    taken = all_names(func)
    rf_name = fresh_name(taken, f"{st.buffer.name}_rf")
    shape = list(st.buffer.shape)
    shape.insert(factor_axis, lnode.extent)
    rf_buf = Buffer(rf_name, tuple(shape), st.buffer.dtype)
    iter_names = {it.var.name for it in blk.iters}
    vrf = Var(fresh_name(iter_names, "v_rf"))
    iter_names.add(vrf.name)
    loop_to_iter = {loop: vrf}
    new_reduce = []
    for l in reduce_loops:
        if l == loop:
            continue
        v = Var(fresh_name(iter_names, f"v_{l}"))
        iter_names.add(v.name)
        loop_to_iter[l] = v
        new_reduce.append((IterVar(v, loops_above[l].extent, "R"), Var(l)))
    old_reduce = {it.var.name: substitute(b, loop_to_iter) for it, b in zip(blk.iters, blk.bindings) if it.kind == "R"}
    source = substitute(source, old_reduce)
    rf_idx = list(st.indices)
    rf_idx.insert(factor_axis, vrf)
    rf_idx = tuple(rf_idx)
    spatial = [(it, b) for it, b in zip(blk.iters, blk.bindings) if it.kind == "S"]
    rf_iters = tuple(it for it, _ in spatial) + (IterVar(vrf, lnode.extent, "S"),) + tuple(it for it, _ in new_reduce)
    rf_bind = tuple(b for _, b in spatial) + (lnode.var,) + tuple(b for _, b in new_reduce)
    rf_store = Store(rf_buf, rf_idx, binary(op, Load(rf_buf, rf_idx), source))
    rf_init = Store(rf_buf, rf_idx, blk.init.value)
    # The old reduction iterators are gone from the rf block: a guard on one reads its binding.
    rf_pred = substitute(blk.predicate, old_reduce)
    rf_block = Block(rf_name, rf_iters, rf_bind, rf_store, init=rf_init, predicate=rf_pred)
    bpath = idx.block_path(blk.name)
    new_func = replace_at(func, bpath, (rf_block,))
    new_func = new_func.replace(allocs=new_func.allocs + (rf_buf,))
    # write-back: W[s] = op(W[s], W_rf[..., r, ...]) over spatial loops then r
    taken = all_names(new_func)
    loops = []
    wb_iters = []
    wb_bind = []
    for it in blk.iters:
        if it.kind != "S":
            continue
        ln = fresh_name(taken, f"ax{len(loops)}")
        taken.add(ln)
        loops.append((Var(ln), it.extent))
        wb_iters.append(it)
        wb_bind.append(Var(ln))
    rl = fresh_name(taken, f"{loop}_rf")
    loops.append((Var(rl), lnode.extent))
    wb_iters.append(IterVar(vrf, lnode.extent, "R"))
    wb_bind.append(Var(rl))
    wb_store = Store(st.buffer, st.indices, binary(op, Load(st.buffer, st.indices), Load(rf_buf, rf_idx)))
    live = _write_back_guards(blk, loop, reduce_loops, wb_bind, Var(rl))
    wb = Block(blk.name, tuple(wb_iters), tuple(wb_bind), wb_store, init=blk.init, predicate=all_of(*live))
    stmt = wb
    for v, e in reversed(loops):
        stmt = Loop(v, e, "serial", (stmt,))
    return insert_at(new_func, None, bpath[0] + 1, (stmt,)), rf_name


def _write_back_guards(blk: Block, loop: str, reduce_loops: list, wb_bind: list, slot: Var) -> list:
    """The guards of the write-back of ``blk`` factored over ``loop``: its loops are
    ``wb_bind`` (one per spatial iterator, which it keeps) and ``slot`` (over ``loop``).

    The write-back must run at a spatial point and a slot iff the rf block initialised that
    slot there: iff ``blk``'s guard holds there with ``loop`` at the slot and the other
    reduction loops at 0, where the rf block runs its init. So a guard on the spatial
    iterators (the partial tile of a Winograd output transform, ``v_th * 2 + v_p < 5``,
    outside which the write-back would store out of bounds) is kept as it is, and a guard on
    ``loop`` tells the slots no iteration reaches (a padded split of it). A guard on spatial
    loops alone that the write-back does not have (bound through a split or fuse: a padded
    split's ``fused index < extent``) restores those loops' own domain and excludes no
    iterator point, so the write-back over the full domain drops it; any other guard it cannot
    restate is refused.
    """
    spatial = [(it, b) for it, b in zip(blk.iters, blk.bindings) if it.kind == "S"]
    in_scope = {it.var.name for it, _ in spatial} | {w.name for w in wb_bind} | {slot.name}
    mapping = {b.name: Var(w.name) for (_, b), w in zip(spatial, wb_bind) if isinstance(b, Var)}
    mapping.update({l: Const(0, "int64") for l in reduce_loops if l != loop})
    mapping[loop] = slot
    keep = []
    # the write-back has no reduction iterator of ``blk``: a guard on one reads its binding
    for c in conjuncts(substitute(blk.predicate, _reduction_bindings(blk))):
        names = free_vars(c)
        restated = substitute(c, mapping)
        stray = free_vars(restated) - in_scope
        if not stray:
            if not (isinstance(restated, Const) and restated.value is True):
                keep.append(restated)
            continue
        require(
            not names & (set(reduce_loops) | in_scope),
            "rfactor",
            f"the guard {c} of block {blk.name} ties its iterators or reduction loops to loop(s) "
            f"{sorted(stray)}; the write-back could not tell which partial results exist",
        )
    return keep


def decompose_reduction(func: PrimFunc, block: str, loop: str) -> Tuple[PrimFunc, str]:
    """Move a reduction's init into its own block placed just before ``loop``; returns it."""
    prim = "decompose_reduction"
    idx = TreeIndex.of(func)
    bpath, blk = lookup_block(idx, block, prim)
    lpath, lnode = lookup_loop(idx, loop, prim)
    require(blk.init is not None, prim, f"block {block} has no init to decompose")
    require(idx.is_ancestor(lpath, bpath), prim, f"loop {loop} is not around block {block}")
    reduce_vars: set = set()
    spatial_vars: set = set()
    for it, b in zip(blk.iters, blk.bindings):
        (reduce_vars if it.kind == "R" else spatial_vars).update(free_vars(b))
    above = [s for s in idx.ancestors(lpath) if isinstance(s, Loop)]
    for s in above:
        require(
            s.name not in reduce_vars or s.extent == 1,  # a loop of extent 1 runs the init once
            prim,
            f"loop {s.name} above {loop} drives a reduction iterator of block {block}; the init would "
            "run more than once",
        )
    chain = [s for s in idx.ancestors(bpath) if isinstance(s, Loop)][len(above):]
    taken = all_names(func)
    copied = []
    rename = {}
    for s in chain:
        require(
            s.name in reduce_vars or s.name in spatial_vars,
            prim,
            f"loop {s.name} repeats block {block} without driving any of its iterators; with the init "
            f"before {loop} the repeated updates would accumulate",
        )
        if s.name in reduce_vars:
            require(
                s.name not in spatial_vars,
                prim,
                f"loop {s.name} drives both spatial and reduction iterators of block {block}",
            )
            continue
        if s.name in spatial_vars:
            n = fresh_name(taken, f"{s.name}_init")
            taken.add(n)
            rename[s.name] = Var(n)
            copied.append((Var(n), s.extent))
    spatial = [(it, b) for it, b in zip(blk.iters, blk.bindings) if it.kind == "S"]
    # a guard on a reduction iterator, which the init block lacks, reads its binding
    conj = conjuncts(substitute(blk.predicate, _reduction_bindings(blk)))
    keep = [substitute(c, rename) for c in conj if not (free_vars(c) & reduce_vars)]
    init_name = fresh_name(taken, f"{block}_init")
    init_blk = Block(
        init_name,
        tuple(it for it, _ in spatial),
        tuple(substitute(b, rename) for _, b in spatial),
        blk.init,
        predicate=all_of(*keep),
    )
    stmt = init_blk
    for v, e in reversed(copied):
        stmt = Loop(v, e, "serial", (stmt,))
    new_func = replace_at(func, bpath, (blk.replace(init=None),))
    return insert_at(new_func, lpath[:-1] or None, lpath[-1], (stmt,)), init_name
