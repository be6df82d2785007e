"""Loop primitives: split, fuse, reorder, loop kinds (parallel/vectorize/unroll), annotations.

Each function takes the function and names, and returns the new function and the names of
the loops it produced; it raises :class:`ScheduleError` (and changes nothing, the IR being
immutable) when a precondition fails.

>>> import probsched as ps
>>> f = ps.workloads.small("GMM").func  # for b, i, j, k: Z[b, i, j] += X[b, i, k] * Y[b, k, j]
>>> f, names = split(f, "i", [None, 2])
>>> names
['i_0', 'i_1']
>>> f = reorder(f, ["j", "i_1"])
>>> [loop.name for loop in f.loops()]
['b', 'i_0', 'j', 'i_1', 'k']
>>> fuse(f, ["b", "i_0"])[1]
'b_i_0_fused'
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from ..errors import ScheduleError
from ..ir.expr import Const, Expr, Var, all_of, free_vars
from ..ir.stmt import Block, Loop, PrimFunc
from .analysis import simplify
from .tree import (
    TreeIndex,
    all_names,
    fresh_name,
    iter_outer_blocks,
    replace_at,
    require,
    substitute_loop_vars,
)


def lookup_loop(idx: TreeIndex, name: str, primitive: str) -> Tuple[tuple, Loop]:
    """Path and node of a loop, or a ScheduleError naming it."""
    path = idx.loops.get(name)
    require(path is not None, primitive, f"loop {name} does not exist (it may have been split, fused or moved)")
    return path, idx.at(path)


def lookup_block(idx: TreeIndex, name: str, primitive: str) -> Tuple[tuple, Block]:
    """Path and node of a block, or a ScheduleError naming it."""
    path = idx.blocks.get(name)
    require(path is not None, primitive, f"block {name} does not exist (known: {sorted(idx.blocks)})")
    return path, idx.at(path)


def _with_guard(stmts: tuple, cond: Expr) -> tuple:
    """Add ``cond`` to the predicate of every block in ``stmts``."""
    from .tree import map_blocks

    return map_blocks(stmts, lambda b: b.replace(predicate=all_of(b.predicate, cond)))


def split(func: PrimFunc, loop: str, factors: Sequence[Optional[int]]) -> Tuple[PrimFunc, List[str]]:
    """Split a loop into ``len(factors)`` nested loops, outer to inner.

    One factor may be None (inferred as the ceiling quotient). When the product exceeds the
    extent, every block under the loop gets the guard ``fused index < extent``.
    """
    prim = "split"
    idx = TreeIndex.of(func)
    path, node = lookup_loop(idx, loop, prim)
    factors = list(factors)
    require(len(factors) >= 2, prim, f"loop {loop}: needs at least two factors, got {factors}")
    nones = [i for i, f in enumerate(factors) if f is None]
    require(len(nones) <= 1, prim, f"loop {loop}: at most one factor may be None, got {factors}")
    for f in factors:
        require(
            f is None or (isinstance(f, int) and not isinstance(f, bool) and f > 0),
            prim,
            f"loop {loop}: factor {f!r} is not a positive integer",
        )
    known = 1
    for f in factors:
        if f is not None:
            known *= f
    if nones:
        factors[nones[0]] = -(-node.extent // known)
    product = 1
    for f in factors:
        product *= f
    require(
        product >= node.extent,
        prim,
        f"loop {loop}: the factors {factors} multiply to {product}, less than the extent {node.extent}",
    )
    taken = all_names(func)
    names = []
    for k in range(len(factors)):
        n = fresh_name(taken, f"{loop}_{k}")
        taken.add(n)
        names.append(n)
    fused: Expr = Const(0, "int64")
    for n, f in zip(names, factors):
        fused = fused * f + Var(n)
    fused = simplify(fused)
    body = substitute_loop_vars(node.body, {loop: fused})
    if product != node.extent:
        body = _with_guard(body, fused < node.extent)
    stmt = None
    for n, f in reversed(list(zip(names, factors))):
        stmt = Loop(Var(n), f, "serial", body if stmt is None else (stmt,))
    return replace_at(func, path, (stmt,)), names


def fuse(func: PrimFunc, loops: Sequence[str]) -> Tuple[PrimFunc, str]:
    """Fuse directly nested loops (each the only child of the previous) into one."""
    prim = "fuse"
    require(len(loops) >= 2, prim, f"needs at least two loops, got {list(loops)}")
    idx = TreeIndex.of(func)
    nodes = [lookup_loop(idx, n, prim) for n in loops]
    for (p_out, outer), (p_in, inner) in zip(nodes, nodes[1:]):
        require(
            p_in[:-1] == p_out and len(outer.body) == 1,
            prim,
            f"loops {outer.name} and {inner.name} are not directly nested "
            f"({inner.name} must be the only statement in the body of {outer.name})",
        )
    extents = [n.extent for _, n in nodes]
    total = 1
    for e in extents:
        total *= e
    taken = all_names(func)
    name = fresh_name(taken, "_".join(loops) + "_fused")
    v = Var(name)
    mapping = {}
    stride = total
    for i, (n, e) in enumerate(zip(loops, extents)):
        stride //= e
        x: Expr = v
        if stride != 1:
            x = x // stride
        if i != 0:
            x = x % e
        mapping[n] = x
    inner_body = nodes[-1][1].body
    body = substitute_loop_vars(inner_body, mapping)
    return replace_at(func, nodes[0][0], (Loop(v, total, "serial", body),)), name


def reorder(func: PrimFunc, loops: Sequence[str]) -> PrimFunc:
    """Reorder loops of one perfectly nested chain into the given order.

    Loops of the chain that are not listed keep their place; the listed ones take the
    listed order at the positions the listed loops occupy.
    """
    prim = "reorder"
    require(len(set(loops)) == len(loops), prim, f"a loop is listed twice in {list(loops)}")
    if len(loops) < 2:
        idx = TreeIndex.of(func)
        for n in loops:
            lookup_loop(idx, n, prim)
        return func
    idx = TreeIndex.of(func)
    found = {n: lookup_loop(idx, n, prim) for n in loops}
    by_depth = sorted(loops, key=lambda n: len(found[n][0]))
    for a, b in zip(by_depth, by_depth[1:]):
        pa, pb = found[a][0], found[b][0]
        require(
            idx.is_ancestor(pa, pb),
            prim,
            f"loops {a} and {b} are not in one loop nest",
        )
    top_path = found[by_depth[0]][0]
    bottom_path = found[by_depth[-1]][0]
    chain = [idx.at(bottom_path[:k]) for k in range(len(top_path), len(bottom_path) + 1)]
    for outer, inner in zip(chain, chain[1:]):
        require(
            isinstance(outer, Loop) and len(outer.body) == 1,
            prim,
            f"loop {outer.name if isinstance(outer, Loop) else outer} has more than one statement in its body "
            f"between {by_depth[0]} and {by_depth[-1]}: the loops are not perfectly nested",
        )
    chain_names = [c.name for c in chain]
    listed = set(loops)
    slots = [i for i, n in enumerate(chain_names) if n in listed]
    new_order = list(chain)
    by_name = {c.name: c for c in chain}
    for slot, n in zip(slots, loops):
        new_order[slot] = by_name[n]
    if [c.name for c in new_order] == chain_names:
        return func
    _check_reduction_order(chain, new_order, prim)
    stmt = None
    for c in reversed(new_order):
        body = chain[-1].body if stmt is None else (stmt,)
        stmt = Loop(c.var, c.extent, c.kind, body, c.annotations)
    return replace_at(func, top_path, (stmt,))


def _bound_iter_kinds(blk: Block, var: str) -> set:
    return {it.kind for it, b in zip(blk.iters, blk.bindings) if var in free_vars(b)}


def _check_reduction_order(chain: List[Loop], new_order: List[Loop], prim: str) -> None:
    """Refuse a reorder after which a reduction could run its ``init`` late.

    A block's ``init`` runs when all its reduction iterators are 0, so that point must
    come first among the points of each output element. Loops bound to one kind of
    iterator keep it so in any order (their first iteration is all zeros). A loop bound
    to a spatial and a reduction iterator at once (a fused ``i, k`` split in pieces) does
    not: swapping its pieces can visit ``k = 1`` of an element before ``k = 0``, whose
    ``init`` then discards the sum so far.
    """
    position = {c.name: i for i, c in enumerate(new_order)}
    flipped = [(a.name, b.name) for i, a in enumerate(chain) for b in chain[i + 1:] if position[a.name] > position[b.name]]
    for blk in iter_outer_blocks(chain[-1].body):
        if blk.init is None:
            continue
        # per loop of the chain: the iterators it drives, and whether they are of both kinds
        drives = {c.name: set() for c in chain}
        kinds = {c.name: set() for c in chain}
        for it, e in zip(blk.iters, blk.bindings):
            for v in free_vars(e) & drives.keys():
                drives[v].add(it.var.name)
                kinds[v].add(it.kind)
        for a, b in flipped:
            mixed = [n for n in (a, b) if len(kinds[n]) == 2]
            shared = drives[a] & drives[b]
            if mixed and shared:  # the message is built only for a refusal: reorder runs in every replay
                raise ScheduleError(
                    f"{prim}: loops {a} and {b} both drive iterator {min(shared)} of block {blk.name} and {mixed[0]} "
                    "is bound to spatial and reduction iterators at once: swapping them could run the block's init "
                    "after part of its reduction"
                )


def _check_data_parallel(idx: TreeIndex, path: tuple, node: Loop, prim: str) -> None:
    for blk in iter_outer_blocks(node):
        kinds = _bound_iter_kinds(blk, node.name)
        require(
            "R" not in kinds,
            prim,
            f"loop {node.name} is bound to a reduction iterator of block {blk.name}; iterations "
            "would race on the accumulation (use rfactor first)",
        )
        require(
            # one iteration races with nothing: compute_at folds an extent-1 binding to a
            # constant, and the loop above it must still fuse into the parallel loop below
            kinds or not blk.is_reduction or node.extent == 1,
            prim,
            f"block {blk.name} is a reduction that does not depend on loop {node.name}: every "
            "iteration would accumulate into the same elements",
        )


def set_kind(func: PrimFunc, loop: str, kind: str, *, check_only: bool = False) -> PrimFunc:
    """Mark a loop parallel, vectorized, unrolled or serial (with the checks each needs).

    ``check_only=True`` runs the checks and returns ``func`` unchanged.
    """
    prim = {"parallel": "parallel", "vectorized": "vectorize", "unrolled": "unroll", "serial": "serial"}[kind]
    idx = TreeIndex.of(func)
    path, node = lookup_loop(idx, loop, prim)
    if kind in ("parallel", "vectorized"):
        _check_data_parallel(idx, path, node, prim)
    if kind == "vectorized":
        require(
            all(not isinstance(c, Loop) for c in node.body),
            prim,
            f"loop {loop} is not innermost (it contains loop(s) "
            f"{[c.name for c in node.body if isinstance(c, Loop)]})",
        )
    if check_only:
        return func
    return replace_at(func, path, (node.replace(kind=kind),))


def _set_annotation(func: PrimFunc, kind: str, name: str, key: str, value, remove: bool) -> PrimFunc:
    """Set (or, with ``remove``, delete) annotation ``key`` of the loop or block ``name``."""
    prim = "unannotate" if remove else "annotate"
    idx = TreeIndex.of(func)
    lookup = lookup_loop if kind == "loop" else lookup_block
    path, node = lookup(idx, name, prim)
    ann = dict(node.annotations)
    if remove:
        require(key in ann, prim, f"{kind} {name} has no annotation {key!r}")
        del ann[key]
    else:
        ann[key] = value
    return replace_at(func, path, (node.replace(annotations=ann),))


def annotate_loop(func: PrimFunc, loop: str, key: str, value: Any) -> PrimFunc:
    """Set annotation ``key`` of a loop."""
    return _set_annotation(func, "loop", loop, key, value, remove=False)


def unannotate_loop(func: PrimFunc, loop: str, key: str) -> PrimFunc:
    """Remove annotation ``key`` of a loop."""
    return _set_annotation(func, "loop", loop, key, None, remove=True)


def annotate_block(func: PrimFunc, block: str, key: str, value: Any) -> PrimFunc:
    """Set annotation ``key`` of a block."""
    return _set_annotation(func, "block", block, key, value, remove=False)


def unannotate_block(func: PrimFunc, block: str, key: str) -> PrimFunc:
    """Remove annotation ``key`` of a block."""
    return _set_annotation(func, "block", block, key, None, remove=True)
