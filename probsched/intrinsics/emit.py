"""Code generation of tensorized blocks: a call to the micro-kernel instead of the tile's loops.

Registered for blocks annotated ``tensorize``. The operands, offsets and strides come from
the lowered tile (after buffer compaction), paired with the description by walking both
expression trees in step; tensorize already checked that they match.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from ..errors import BuildError
from ..ir.expr import Const, Expr, Load, all_of, children, eq, substitute
from ..ir.stmt import Block, Buffer
from ..schedule.analysis import affine_in, conjuncts, is_multiple, simplify
from ..ir.intrinsic import get
from ..schedule.tensorize import AXES_KEY, TENSORIZE_KEY, flat_index, tile_env, tile_nest, tile_ranges


def _pair(d: Expr, c: Expr, out: Dict[str, Tuple[Buffer, tuple]]) -> None:
    if isinstance(d, Load):
        out.setdefault(d.buffer.name, (c.buffer, c.indices))
        return
    for x, y in zip(children(d), children(c)):
        _pair(x, y, out)


def emit_tensorized(block: Block, ctx) -> None:
    """Write ``kernel(out, offset, strides..., in0, ..., panel)`` for a tensorized block."""
    intrin = get(block.annotation(TENSORIZE_KEY))
    axes = block.annotation(AXES_KEY)
    loops, inner = tile_nest(block, "tensorize")
    extents = {l.name: l.extent for l in loops}
    (dblk,) = intrin.description.blocks()
    desc_axes = [it.var.name for it in dblk.iters]
    loop_of = dict(zip(desc_axes, axes))
    pairs: Dict[str, Tuple[Buffer, tuple]] = {}
    dst, cst = dblk.body, inner.body
    pairs[dst.buffer.name] = (cst.buffer, cst.indices)
    _pair(dst.value, cst.value, pairs)
    env = {it.var.name: b for it, b in zip(inner.iters, inner.bindings)}
    # strides come from the indices over the loops themselves, simplified with their bounds
    # (a laid-out weight's (ko * kc + ki) // kc is ko); offsets from the indices as the block
    # states them, evaluated where the call is made
    env_loops = tile_env(block, inner)
    ranges = tile_ranges(loops, getattr(ctx, "ir_loops", ()))
    zero = {name: Const(0, "int64") for name in axes}
    args: List[str] = []
    for dname, dep_axes in intrin.operands():
        buf, indices = pairs[dname]
        flat = flat_index(buf, tuple(simplify(substitute(i, env_loops), ranges) for i in indices))
        coefs = affine_in(flat, set(axes))
        if coefs is None:
            raise BuildError(f"tensorized block {block.name}: index of {buf.name} is not affine in the tile loops")
        indices = tuple(simplify(substitute(i, env)) for i in indices)
        args.append(ctx.array(buf))
        args.append(ctx.index(buf, tuple(substitute(i, zero) for i in indices)))
        for a in dep_axes:
            args.append(str(coefs.get(loop_of[a], 0)))
    if intrin.panel_axis is not None:
        args.append(str(extents[loop_of[intrin.panel_axis]]))
    ctx.comment(f"block {block.name}: {intrin.name} micro-kernel")
    # A tile that kept its reduction's (zero) init: where the reduction begins (every
    # reduction iterator at its start when the tile loops are), the zero-start variant.
    starts = _reduction_starts(ctx, inner, zero)
    full = extents[loop_of[intrin.meta["remainder_axis"]]] if "remainder_axis" in intrin.meta else None

    def call(m: Optional[int]) -> None:
        """The call for a tile of ``m`` rows (None: no partial tiles)."""

        def kernel(zero_start: bool) -> str:
            if zero_start:  # meta contract: the loader of the zero-start kernel of m rows (None: full)
                fn = intrin.meta["zero_start_variant"](None if m == full else m)()
            elif m is None or m == full:
                fn = intrin.kernel()
            else:
                fn = intrin.meta["variant"](m)()
            rows = "" if m is None else f"_{m}"
            return ctx.add_global(f"mk_{intrin.name}{rows}{'_zero' if zero_start else ''}", fn)

        if isinstance(starts, Const):
            ctx.line(f"{kernel(bool(starts.value))}({', '.join(args)})")
            return
        ctx.line(f"if {ctx.writer.src(starts)}:")
        with ctx.indented():
            ctx.line(f"{kernel(True)}({', '.join(args)})")
        ctx.line("else:")
        with ctx.indented():
            ctx.line(f"{kernel(False)}({', '.join(args)})")

    guards = conjuncts(inner.predicate)
    if not guards:
        call(None)
        return
    # A partial tile along the remainder axis: as many rows as are left, by a smaller kernel.
    (guard,) = guards
    start_expr = simplify(substitute(substitute(guard.a, env), zero))
    start = ctx.expr(start_expr)
    rows = ctx.fresh("rows")
    ctx.line(f"{rows} = min({full}, {guard.b.value} - ({start}))")
    # Tiles aligned to the kernel's height leave one remainder size: compile only that one.
    outer = {it.var.name: b for it, b in zip(block.iters, block.bindings)}
    sizes = range(full, 0, -1)
    if is_multiple(simplify(substitute(start_expr, outer)), full):
        sizes = [full] + ([guard.b.value % full] if guard.b.value % full else [])
    for m in sizes:
        ctx.line(f"{'if' if m == full else 'elif'} {rows} == {m}:")
        with ctx.indented():
            call(m)


def _reduction_starts(ctx, inner: Block, zero: Dict[str, Expr]) -> Expr:
    """Whether this call begins ``inner``'s reduction (``Const(False)`` when it has no init)."""
    if inner.init is None:
        return Const(False, "bool")
    firsts = [eq(simplify(substitute(b, zero)), 0) for it, b in zip(inner.iters, inner.bindings) if it.kind == "R"]
    return ctx.folded(all_of(*firsts))
