"""Compute-location primitives: compute_at, reverse_compute_at, compute_inline, reverse_compute_inline.

``compute_at`` moves a producer under a loop of its consumers and shrinks its iteration to the
region those consumers read in one iteration of that loop; ``reverse_compute_at`` moves a
consumer under a loop of its producers over the region they write. Regions come from
:func:`~probsched.schedule.analysis.region` (exact for affine indices, over-approximated and
then clipped with a predicate otherwise), so the moved block never computes less than needed.

>>> import probsched as ps
>>> f = ps.workloads.small("C2D").func  # a padding block, then the convolution reading it
>>> [b.name for b in f.blocks()], [b.name for b in compute_inline(f, "padded").blocks()]
(['padded', 'conv2d'], ['conv2d'])
>>> legal_compute_at_loops(f, "padded", ["n1", "h1"])  # under a loop of its consumer
['n1', 'h1']
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..errors import ScheduleError
from ..ir.expr import BinOp, Const, Expr, Load, Var, all_of, free_vars, substitute
from ..ir.stmt import Block, Loop, PrimFunc, Store
from .analysis import always_true, bound, conjuncts, dense_box, region, simplify, union
from .dataflow import (
    binding_map,
    consumers,
    load_indices,
    map_block_exprs,
    map_loads,
    producers,
    read_buffers,
    readers_of,
    single_store,
    written_buffers,
    writers_of,
)
from .loops import lookup_block, lookup_loop
from .tree import TreeIndex, all_names, fresh_name, insert_at, remove_at, require

Region = Tuple[Expr, int]


def _plain_iter_indices(indices: tuple, blk: Block) -> Optional[List[str]]:
    """Iterator names when every index is a distinct spatial iterator of ``blk``, else None."""
    spatial = {it.var.name for it in blk.iters if it.kind == "S"}
    names = []
    for ix in indices:
        if not isinstance(ix, Var) or ix.name not in spatial or ix.name in names:
            return None
        names.append(ix.name)
    return names


def _loop_ranges(idx: TreeIndex, path: tuple) -> Dict[str, Tuple[int, int]]:
    return {s.name: (0, s.extent - 1) for s in idx.ancestors(path) if isinstance(s, Loop)}


def _as_stmts(body) -> tuple:
    return body if isinstance(body, tuple) else (body,)


def _nested_scope(blk: Block) -> Tuple[List[Dict[str, Expr]], Dict[str, Tuple[int, int]]]:
    """The binding maps of the blocks nested in ``blk``, innermost first, and the ranges of
    the loops inside it: what turns an access of an inner block (a blockized or tensorized
    consumer reads in its inner block's iterators) into ``blk``'s iterators and loops.
    Returns no maps when an inner iterator's name is also an iterator further out (a
    substitution would confuse the two): the access then stays unbounded, which is safe."""
    maps: List[Tuple[int, Dict[str, Expr]]] = []
    ranges: Dict[str, Tuple[int, int]] = {}
    seen = {it.var.name for it in blk.iters}

    def visit(s, depth: int) -> bool:
        if isinstance(s, Loop):
            ranges[s.name] = (0, s.extent - 1)
            return all(visit(x, depth) for x in s.body)
        if isinstance(s, Block):
            names = {it.var.name for it in s.iters}
            if names & seen:
                return False
            seen.update(names)
            maps.append((depth, binding_map(s)))
            return all(visit(x, depth + 1) for x in _as_stmts(s.body))
        return True

    if not all(visit(x, 1) for x in _as_stmts(blk.body)):
        return [], ranges
    return [m for _, m in sorted(maps, key=lambda dm: -dm[0])], ranges


def _indices_in_loop(idx: TreeIndex, blk: Block, indices: tuple, loop_path: tuple):
    """An access of ``blk`` seen from one iteration of the loop at ``loop_path``: its indices
    in loop variables (simplified), the loops held fixed, and the ranges of the others.
    Blockized and tensorized blocks nest: an access in a block nested in ``blk`` is in
    that block's iterators and ``blk``'s inner loops, and ``blk``'s own bindings may be in
    the iterators of the block it is nested in; both are substituted down to loops."""
    bpath = idx.block_path(blk.name)
    above = idx.ancestors(bpath)
    fixed = {s.name for s in idx.ancestors(loop_path) if isinstance(s, Loop)} | {idx.at(loop_path).name}
    ranges = {s.name: (0, s.extent - 1) for s in above if isinstance(s, Loop) and s.name not in fixed}
    maps = [binding_map(blk)] + [binding_map(s) for s in reversed(above) if isinstance(s, Block)]
    if not isinstance(blk.body, Store):
        inner, inner_ranges = _nested_scope(blk)
        maps = inner + maps
        ranges.update(inner_ranges)
    exprs = []
    for ix in indices:
        for m in maps:
            ix = substitute(ix, m)
        exprs.append(simplify(ix))
    return exprs, fixed, ranges


def _access_region(idx: TreeIndex, blk: Block, indices: tuple, loop_path: tuple) -> List[Optional[Region]]:
    """Region per dimension of an access of ``blk`` when the loops down to ``loop_path`` are fixed."""
    exprs, fixed, ranges = _indices_in_loop(idx, blk, indices, loop_path)
    return [region(e, fixed, ranges) for e in exprs]


def _writes_fill_box(idx: TreeIndex, blk: Block, indices: tuple, loop_path: tuple) -> bool:
    """Whether one iteration of the loop at ``loop_path`` writes every point of the box
    :func:`_access_region` gives for this store (a strided tile leaves holes)."""
    exprs, _, ranges = _indices_in_loop(idx, blk, indices, loop_path)
    return dense_box(exprs, ranges)


def _merge(
    regions: List[List[Optional[Region]]], shape: tuple, moving: Optional[Dict[str, Tuple[int, int]]] = None
) -> List[Optional[Region]]:
    """The union of access regions per dimension; a region as long as the dimension becomes
    all of it, and so does one that cannot be bounded (computing the whole dimension is
    redundant but right for compute_at).

    With ``moving`` (reverse_compute_at: the ranges of the loops down to the target) the
    regions are what the producers wrote in one iteration, and the whole dimension would
    consume what this iteration did not compute. So a full-length region becomes the whole
    dimension only when its start is 0 throughout them (a start that moves with them, n =
    3 * n0 + n1 of an extent-1 n where only n0 = n1 = 0 computes anything, is kept, and the
    rebuilt nest guards the bounds), and a dimension that cannot be bounded is None: the
    caller refuses.
    """
    merged: List[Optional[Region]] = []
    for d, dim in enumerate(shape):
        acc: Optional[Region] = None
        for r in regions:
            acc = r[d] if acc is None else (None if r[d] is None else union(acc, r[d]))
            if acc is None:
                break
        if acc is None:
            merged.append(None if moving is not None else (Const(0, "int64"), dim))
        elif acc[1] >= dim and (moving is None or _zero_on(acc[0], moving)):
            merged.append((Const(0, "int64"), dim))
        else:
            merged.append(acc)
    return merged


def _zero_on(e: Expr, ranges: Dict[str, Tuple[int, int]]) -> bool:
    return bound(e, ranges) == (0, 0)


def _rebuild_block_nest(
    func: PrimFunc,
    blk: Block,
    iter_regions: Dict[str, Region],
    outer_ranges: Dict[str, Tuple[int, int]],
) -> Tuple[Loop, set]:
    """A fresh loop nest running ``blk`` over ``iter_regions`` (full domain for other iterators)."""
    taken = all_names(func)
    loops = []
    bindings = []
    preds = []
    k = 0
    for it in blk.iters:
        start, extent = iter_regions.get(it.var.name, (Const(0, "int64"), it.extent))
        if extent > it.extent and _zero_on(start, outer_ranges):
            start, extent = Const(0, "int64"), it.extent
        if extent == 1:
            value = start
        else:
            name = fresh_name(taken, f"ax{k}")
            taken.add(name)
            k += 1
            v = Var(name)
            loops.append((v, extent))
            value = simplify(start + v)
        bindings.append(value)
        ranges = dict(outer_ranges)
        ranges.update({v.name: (0, e - 1) for v, e in loops})
        if not always_true(value >= 0, ranges):
            preds.append(value >= 0)
        if not always_true(value < it.extent, ranges):
            preds.append(value < it.extent)
    new_blk = blk.replace(bindings=tuple(bindings), predicate=all_of(*preds))
    stmt = new_blk
    for v, e in reversed(loops):
        stmt = Loop(v, e, "serial", (stmt,))
    return stmt, {v.name for v, _ in loops}


def _require_idempotent(blk: Block, prim: str) -> None:
    """A block that updates its output without an init must run exactly once per point."""
    own = set(written_buffers(blk))
    require(
        blk.init is not None or not (own & set(read_buffers(blk))),
        prim,
        f"block {blk.name} updates {sorted(own & set(read_buffers(blk)))} without an init (after "
        "decompose_reduction); moving it could run an update twice",
    )


def _require_domain_only_predicate(blk: Block, prim: str) -> None:
    """The moved block's predicate is rebuilt from its iterator domains: refuse anything else."""
    bindings = {simplify(b): it for it, b in zip(blk.iters, blk.bindings)}
    for c in conjuncts(blk.predicate):
        ok = False
        if isinstance(c, BinOp) and c.op in ("lt", "ge"):
            it = bindings.get(simplify(c.a))
            if it is not None and isinstance(c.b, Const):
                ok = (c.op == "lt" and c.b.value == it.extent) or (c.op == "ge" and c.b.value == 0)
        require(
            ok,
            prim,
            f"block {blk.name} is guarded by {c}, which is not an iterator's domain; moving the block "
            "would lose it",
        )


def _movable_block(idx: TreeIndex, block: str, prim: str) -> Tuple[tuple, Block]:
    """The block-level checks shared by compute_at and reverse_compute_at."""
    bpath, blk = lookup_block(idx, block, prim)
    require(
        not any(isinstance(s, Block) for s in idx.ancestors(bpath)),
        prim,
        f"block {block} is nested in another block",
    )
    _require_idempotent(blk, prim)
    _require_domain_only_predicate(blk, prim)
    return bpath, blk


def _movable(func: PrimFunc, block: str, loop: str, prim: str):
    """Checks shared by compute_at and reverse_compute_at; returns the index, paths and nodes."""
    idx = TreeIndex.of(func)
    bpath, blk = _movable_block(idx, block, prim)
    lpath, lnode = _movable_to(idx, block, bpath, loop, prim)
    return idx, bpath, blk, lpath, lnode


def _movable_to(idx: TreeIndex, block: str, bpath: tuple, loop: str, prim: str) -> Tuple[tuple, Loop]:
    lpath, lnode = lookup_loop(idx, loop, prim)
    require(not idx.is_ancestor(lpath, bpath), prim, f"block {block} is already under loop {loop}")
    return lpath, lnode


def _producer_checks(func: PrimFunc, idx: TreeIndex, block: str, prim: str):
    """compute_at's checks that do not depend on the loop: (path, block, consumers, store, dims)."""
    bpath, blk = _movable_block(idx, block, prim)
    cons = consumers(func, block)
    require(cons, prim, f"block {block} has no consumer to compute it at")
    for b in written_buffers(blk):
        others = [w.name for w in writers_of(func, b) if w.name != block]
        require(not others, prim, f"buffer {b} of block {block} is also written by {others}")
    st = single_store(blk)
    require(st is not None, prim, f"block {block} is not a single store (blockized?)")
    dims = _plain_iter_indices(st.indices, blk)
    require(
        dims is not None,
        prim,
        f"block {block} stores {st.buffer.name}[{', '.join(map(str, st.indices))}]: each index must be a "
        "distinct spatial iterator",
    )
    return bpath, blk, cons, st, dims


def _loop_checks(idx: TreeIndex, block: str, bpath: tuple, cons: List[Block], loop: str, prim: str):
    """compute_at's checks of one loop: every consumer under it, the producer before it."""
    lpath, lnode = _movable_to(idx, block, bpath, loop, prim)
    for c in cons:
        require(
            idx.is_ancestor(lpath, idx.block_path(c.name)),
            prim,
            f"consumer {c.name} of block {block} is not under loop {loop}; every consumer must be",
        )
    require(
        idx.block_order(block) < idx.order["loop:" + loop],
        prim,
        f"block {block} comes after loop {loop}; a producer must precede its consumers",
    )
    return lpath, lnode


def legal_compute_at_loops(func: PrimFunc, block: str, loops: List[str]) -> List[str]:
    """The loops of ``loops`` where ``compute_at(func, block, loop)`` would succeed (in order),
    checking what does not depend on the loop once (a design space asks this of every loop
    of the consumers, for every candidate)."""
    idx = TreeIndex.of(func)
    prim = "compute_at"
    try:
        bpath, _, cons, _, _ = _producer_checks(func, idx, block, prim)
    except ScheduleError:
        return []
    out = []
    for loop in loops:
        try:
            _loop_checks(idx, block, bpath, cons, loop, prim)
            out.append(loop)
        except ScheduleError:
            pass
    return out


def compute_at(
    func: PrimFunc, block: str, loop: str, *, check_only: bool = False
) -> Optional[PrimFunc]:
    """Move producer ``block`` under ``loop``, computing only what the consumers there read.

    ``check_only=True`` runs every check (raising ScheduleError as the move would) and
    returns None without building the moved program.
    """
    prim = "compute_at"
    idx = TreeIndex.of(func)
    bpath, blk, cons, st, dims = _producer_checks(func, idx, block, prim)
    lpath, lnode = _loop_checks(idx, block, bpath, cons, loop, prim)
    if check_only:  # the region below never refuses: it is what the move computes
        return None
    buf = st.buffer
    regions = []
    for c in cons:
        for ix in load_indices(c, buf.name):
            regions.append(_access_region(idx, c, ix, lpath))
    merged = _merge(regions, buf.shape)
    iter_regions = {dims[d]: merged[d] for d in range(len(dims))}
    outer = _loop_ranges(idx, lpath)
    outer[lnode.name] = (0, lnode.extent - 1)
    new_func = remove_at(func, bpath)
    nest, _ = _rebuild_block_nest(new_func, blk, iter_regions, outer)
    lpath2 = TreeIndex.of(new_func).loop_path(loop)
    return insert_at(new_func, lpath2, 0, (nest,))


def reverse_compute_at(func: PrimFunc, block: str, loop: str) -> PrimFunc:
    """Move consumer ``block`` under ``loop``, consuming the region its producers write there."""
    prim = "reverse_compute_at"
    idx, bpath, blk, lpath, lnode = _movable(func, block, loop, prim)
    require(
        idx.block_order(block) > idx.order["loop:" + loop],
        prim,
        f"block {block} comes before loop {loop}; a consumer must follow its producers",
    )
    prods = producers(func, block)
    under = [p for p in prods if idx.is_ancestor(lpath, idx.block_path(p.name))]
    require(under, prim, f"no producer of block {block} is under loop {loop}")
    lorder = idx.order["loop:" + loop]
    for p in prods:
        if p not in under:
            require(
                idx.block_order(p.name) < lorder,
                prim,
                f"producer {p.name} of block {block} runs after loop {loop}",
            )
    enclosing = [s for s in idx.ancestors(lpath) if isinstance(s, Loop)] + [lnode]
    # a loop of extent 1 runs once: it drives nothing (tiling leaves many of them, e.g. the
    # outer reduction tile of a 3x3 kernel split as (1, 3))
    enclosing_names = {s.name for s in enclosing if s.extent > 1}
    for p in under:
        for it, b in zip(p.iters, p.bindings):
            require(
                not (it.kind == "R" and free_vars(b) & enclosing_names),
                prim,
                f"loop {loop} or a loop around it drives reduction iterator {it.var.name} of producer "
                f"{p.name}: its result is not final inside the loop",
            )
    st = single_store(blk)
    require(st is not None, prim, f"block {block} is not a single store (blockized?)")
    iter_regions: Dict[str, Region] = {}
    moving = _loop_ranges(idx, lpath)
    moving[lnode.name] = (0, lnode.extent - 1)
    for p in under:
        for bname in written_buffers(p):
            loads = load_indices(blk, bname)
            if not loads:
                continue
            buf = func.buffer(bname)
            stores = [s_idx for b_, s_idx in p.writes() if b_.name == bname]
            for s_idx in stores:
                # the consumer is rebuilt over the box: a point of it the producer does not
                # write in this iteration would be read before it is computed (or never)
                require(
                    _writes_fill_box(idx, p, s_idx, lpath),
                    prim,
                    f"producer {p.name} writes a strided tile of {bname} in one iteration of loop "
                    f"{loop} ({bname}[{', '.join(map(str, s_idx))}]): the region has holes",
                )
            wregions = [_access_region(idx, p, s_idx, lpath) for s_idx in stores]
            merged = _merge(wregions, buf.shape, moving)
            if None in merged:  # messages are built only on refusal: replay runs this per trace
                require(
                    False,
                    prim,
                    f"the region of {bname} that producer {p.name} writes in one iteration of loop {loop} "
                    f"cannot be bounded in dimension {merged.index(None)}",
                )
            for ix in loads:
                names = _plain_iter_indices(ix, blk)
                require(
                    names is not None,
                    prim,
                    f"block {block} reads {bname}[{', '.join(map(str, ix))}]: each index must be a "
                    "distinct spatial iterator",
                )
                for d, n in enumerate(names):
                    prev = iter_regions.get(n)
                    if prev is None:
                        iter_regions[n] = merged[d]
                    else:
                        u = union(prev, merged[d])
                        # the whole of n would read what this iteration did not compute
                        if u is None:
                            require(
                                False,
                                prim,
                                f"block {block} reads {bname}[{', '.join(map(str, ix))}]: iterator {n} would "
                                f"need {bname}'s region at {merged[d][0]} and, for another read, at {prev[0]}; "
                                f"they cannot be covered by one range moving with loop {loop}",
                            )
                        iter_regions[n] = u
    new_func = remove_at(func, bpath)
    nest, _ = _rebuild_block_nest(new_func, blk, iter_regions, moving)
    idx2 = TreeIndex.of(new_func)
    lpath2 = idx2.loop_path(loop)
    return insert_at(new_func, lpath2, len(idx2.at(lpath2).body), (nest,))


def _check_inlinable(func: PrimFunc, blk: Block, prim: str) -> Tuple[Store, List[str]]:
    st = single_store(blk)
    require(st is not None, prim, f"block {blk.name} is not a single store")
    require(not blk.is_reduction and blk.init is None, prim, f"block {blk.name} is a reduction")
    require(
        st.buffer.name not in {b.name for b in func.params},
        prim,
        f"block {blk.name} writes the function output {st.buffer.name}",
    )
    dims = _plain_iter_indices(st.indices, blk)
    require(
        dims is not None and len(dims) == len(blk.iters),
        prim,
        f"block {blk.name} stores {st.buffer.name}[{', '.join(map(str, st.indices))}]: the indices must be "
        "its iterators, each once",
    )
    require(
        not any(ld.buffer.name == st.buffer.name for ld in _loads_of(st.value)),
        prim,
        f"block {blk.name} reads its own output",
    )
    others = [w.name for w in writers_of(func, st.buffer.name) if w.name != blk.name]
    require(not others, prim, f"buffer {st.buffer.name} is also written by {others}")
    return st, dims


def _loads_of(e: Expr) -> List[Load]:
    from ..ir.expr import loads

    return loads(e)


def compute_inline(func: PrimFunc, block: str, *, check_only: bool = False) -> PrimFunc:
    """Inline an elementwise producer into every consumer and remove it.

    ``check_only=True`` runs the checks (raising ScheduleError as the inlining would) and
    returns ``func`` unchanged: the rewrite itself never refuses.
    """
    prim = "compute_inline"
    idx = TreeIndex.of(func)
    bpath, blk = lookup_block(idx, block, prim)
    st, dims = _check_inlinable(func, blk, prim)
    if check_only:
        return func
    bname = st.buffer.name

    def inline(ld: Load) -> Expr:
        if ld.buffer.name != bname:
            return ld
        return substitute(st.value, dict(zip(dims, ld.indices)))

    readers = {r.name for r in readers_of(func, bname)}
    from .tree import map_blocks

    # rewrite the blocks as map_blocks rebuilds them (inner first), so a reader nested in a
    # blockized reader keeps its rewrite
    body = map_blocks(
        func.body, lambda b: map_block_exprs(b, lambda e: map_loads(e, inline)) if b.name in readers else b
    )
    new_func = func.replace(body=body)
    new_func = remove_at(new_func, TreeIndex.of(new_func).block_path(block))
    allocs = tuple(b for b in new_func.allocs if b.name != bname)
    return new_func.replace(allocs=allocs)


def reverse_compute_inline(func: PrimFunc, block: str) -> PrimFunc:
    """Inline an elementwise consumer into its (elementwise) producer and remove it."""
    prim = "reverse_compute_inline"
    idx = TreeIndex.of(func)
    bpath, blk = lookup_block(idx, block, prim)
    cst = single_store(blk)
    require(cst is not None, prim, f"block {block} is not a single store")
    require(not blk.is_reduction and blk.init is None, prim, f"block {block} is a reduction")
    params = {b.name for b in func.params}
    inter = [b for b in read_buffers(blk) if b not in params and writers_of(func, b)]
    require(len(inter) == 1, prim, f"block {block} must read exactly one intermediate buffer, reads {inter}")
    bname = inter[0]
    prods = writers_of(func, bname)
    require(len(prods) == 1, prim, f"buffer {bname} has {len(prods)} writers")
    prod = prods[0]
    pst, _ = _check_inlinable(func, prod, prim)
    others = [r.name for r in readers_of(func, bname) if r.name not in (block, prod.name)]
    require(not others, prim, f"buffer {bname} is also read by {others}")
    loads = load_indices(blk, bname)
    first = loads[0]
    names = _plain_iter_indices(first, blk)
    require(
        names is not None and len(names) == len(blk.iters) and all(ix == first for ix in loads),
        prim,
        f"block {block} must read {bname} at its own iterators, each once, in every access",
    )
    # consumer iterator at B's dimension d  ->  producer's store index d
    mapping = {n: pst.indices[d] for d, n in enumerate(names)}

    def fold(ld: Load) -> Expr:
        return pst.value if ld.buffer.name == bname else ld

    value = map_loads(substitute(cst.value, mapping), fold)
    indices = tuple(substitute(i, mapping) for i in cst.indices)
    new_prod = prod.replace(body=Store(cst.buffer, indices, value))
    from .tree import replace_at

    new_func = replace_at(func, TreeIndex.of(func).block_path(prod.name), (new_prod,))
    new_func = remove_at(new_func, TreeIndex.of(new_func).block_path(block))
    return new_func.replace(allocs=tuple(b for b in new_func.allocs if b.name != bname))
