"""blockize: wrap the loop nest under a loop into one block (the unit that tensorize replaces).

The inner block's iterators are split into an outer part (loops above the blockized loop,
which become iterators of the new outer block) and an inner part (loops inside it):
``v = o(outer loops) + i(inner loops)`` becomes outer iterator ``vo = o(...)`` and inner
binding ``v = vo + i(...)``.

>>> import probsched as ps
>>> f, outer = blockize(ps.workloads.small("GMM").func, "j")  # the j, k nest becomes block Z_o
>>> outer, [b.name for b in f.blocks()]
('Z_o', ['Z_o', 'Z'])
"""

from __future__ import annotations

from typing import Tuple

from ..ir.expr import BinOp, Const, Var, all_of, free_vars
from ..ir.stmt import Block, IterVar, Loop, PrimFunc
from .analysis import affine, bound, conjuncts, from_affine, simplify
from .loops import lookup_loop
from .tree import TreeIndex, all_names, fresh_name, iter_blocks, replace_at, require


def blockize(func: PrimFunc, loop: str) -> Tuple[PrimFunc, str]:
    """Turn the subtree rooted at ``loop`` into a block; returns the new block's name."""
    prim = "blockize"
    idx = TreeIndex.of(func)
    lpath, lnode = lookup_loop(idx, loop, prim)
    blocks = list(iter_blocks(lnode))
    require(len(blocks) == 1, prim, f"loop {loop} must contain exactly one block, has {[b.name for b in blocks]}")
    inner = blocks[0]
    require(not isinstance(inner.body, tuple), prim, f"block {inner.name} is already blockized")
    inner_loops = {s.name: s.extent for s in idx.ancestors(idx.block_path(inner.name)) if isinstance(s, Loop)}
    outer_ranges = {s.name: (0, s.extent - 1) for s in idx.ancestors(lpath) if isinstance(s, Loop)}
    for name in list(inner_loops):
        if name in outer_ranges:
            del inner_loops[name]
    iter_names = {it.var.name for it in inner.iters}
    outer_iters = []
    outer_bind = []
    inner_bind = []
    for it, b in zip(inner.iters, inner.bindings):
        form = affine(b)
        require(form is not None, prim, f"binding {it.var.name} = {b} of block {inner.name} is not affine")
        coefs, c = form
        o_part = ({v: k for v, k in coefs.items() if v not in inner_loops}, c)
        i_part = ({v: k for v, k in coefs.items() if v in inner_loops}, 0)
        o_expr = from_affine(o_part)
        i_expr = from_affine(i_part)
        if not o_part[0] and c == 0:
            inner_bind.append(i_expr)
            continue
        hi = bound(o_expr, outer_ranges)
        require(hi is not None and hi[0] >= 0, prim, f"outer part {o_expr} of {it.var.name} is not bounded")
        vo = Var(fresh_name(iter_names, f"{it.var.name}_o"))
        iter_names.add(vo.name)
        outer_iters.append(IterVar(vo, hi[1] + 1, it.kind))
        outer_bind.append(o_expr)
        inner_bind.append(vo + i_expr if i_part[0] else vo)
    # A guard inside the tile (a non-divisible split) must be an iterator's domain bound,
    # ``binding < extent``: it is restated on the inner block in terms of the new bindings.
    by_binding = {simplify(b): k for k, b in enumerate(inner.bindings)}
    inner_preds = []
    outer_preds = []
    for c in conjuncts(inner.predicate):
        if not (free_vars(c) & set(inner_loops)):
            outer_preds.append(c)
            continue
        k = by_binding.get(simplify(c.a)) if isinstance(c, BinOp) and c.op == "lt" else None
        require(
            k is not None and isinstance(c.b, Const) and c.b.value == inner.iters[k].extent,
            prim,
            f"block {inner.name} is guarded inside loop {loop} by {c}, which is not an iterator's domain",
        )
        inner_preds.append(inner_bind[k] < inner.iters[k].extent)
    new_inner = inner.replace(bindings=tuple(inner_bind), predicate=all_of(*inner_preds))

    def swap(b: Block) -> Block:
        return new_inner if b.name == inner.name else b

    from .tree import map_blocks

    body = map_blocks((lnode,), swap)
    name = fresh_name(all_names(func), f"{inner.name}_o")
    outer = Block(name, tuple(outer_iters), tuple(outer_bind), body, predicate=all_of(*outer_preds))
    return replace_at(func, lpath, (outer,)), name
