"""tensorize: check that a blockized tile computes an intrinsic's description, and mark it.

The tile keeps its loop nest in the IR (so the interpreter, the analyses and buffer
compaction still see exact semantics); the block is annotated with the intrinsic and the
tile loops in the order of the description's iterators, and code generation emits a call
to the micro-kernel instead of the nest, with offsets and strides taken from the lowered
indices.

Matching is structural: a bijection between the description's iterators and the tile's
loops with equal kinds and extents (the description's *panel* axis, the K of a
register-blocked matmul, takes any extent), the same expression tree, the same buffer
dtypes, each operand depending on exactly the mapped loops, affinely, and contiguous
(stride 1: the last dimension, coefficient 1) where the intrinsic requires it. A tile may keep
its reduction's zero init when the intrinsic has a zero-start variant (``meta
["zero_start_variant"]``): the call where the reduction begins uses that variant, so no pass
zeroes the output beforehand.

>>> import probsched as ps
>>> tensorize(ps.workloads.small("GMM").func, "Z", ps.intrinsics.get("matmul_4x8"))
Traceback (most recent call last):
  ...
probsched.errors.ScheduleError: tensorize: block Z is not blockized (use a loop or sch.blockize)
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple

from ..ir.dtypes import holds
from ..ir.expr import BinOp, Call, Cast, Const, Expr, Load, Not, Select, Var, free_vars, substitute
from ..ir.stmt import Block, Loop, PrimFunc, Store
from .analysis import affine_in, conjuncts, simplify
from .loops import lookup_block
from .tree import ScheduleError, TreeIndex, make_room, replace_at, require

if TYPE_CHECKING:
    from ..ir.intrinsic import Intrinsic

TENSORIZE_KEY = "tensorize"
AXES_KEY = "tensorize_axes"


def tile_nest(blk: Block, prim: str) -> Tuple[List[Loop], Block]:
    """The perfect loop nest inside a blockized block and its inner block."""
    require(isinstance(blk.body, tuple), prim, f"block {blk.name} is not blockized (use a loop or sch.blockize)")
    loops: List[Loop] = []
    body = blk.body
    while True:
        require(len(body) == 1, prim, f"the tile of block {blk.name} is not a perfect loop nest")
        s = body[0]
        if isinstance(s, Loop):
            loops.append(s)
            body = s.body
            continue
        require(isinstance(s, Block) and isinstance(s.body, Store), prim, f"the tile of block {blk.name} must end in one block")
        return loops, s


class _Mismatch(Exception):
    pass


def tile_env(blk: Block, inner: Block) -> Dict[str, Expr]:
    """The inner block's iterators in terms of the tile loops and the loops around the
    outer block (whose iterators are tile *offsets*, multiples of the tile: substituting
    their bindings keeps that visible to :func:`~.analysis.simplify`)."""
    outer = {it.var.name: b for it, b in zip(blk.iters, blk.bindings)}
    return {it.var.name: substitute(b, outer) for it, b in zip(inner.iters, inner.bindings)}


def tile_ranges(loops: Sequence[Loop], outer: Sequence[Tuple[str, int]] = ()) -> Dict[str, Tuple[int, int]]:
    """Bounds of the tile loops and of the loops around the block (``(name, extent)``):
    what lets a laid-out weight's ``(ko * kc + ki) // kc`` simplify to ``ko`` (see
    :mod:`.layout`)."""
    ranges = {name: (0, extent - 1) for name, extent in outer}
    ranges.update({l.name: (0, l.extent - 1) for l in loops})
    return ranges


def _deps(indices: tuple, env: Dict[str, Expr], loop_names: set, ranges=None) -> Tuple[set, bool]:
    """Tile loops an access depends on, and whether every index is affine in them."""
    deps: set = set()
    ok = True
    for e in indices:
        e = simplify(substitute(e, env), ranges)
        used = free_vars(e) & loop_names
        deps |= used
        if used:
            ok = ok and affine_in(e, loop_names) is not None
    return deps, ok


def _match(d: Expr, c: Expr, ctx: dict) -> None:
    if type(d) is not type(c):
        raise _Mismatch(f"expression {d} vs {c}")
    if isinstance(d, BinOp):
        if d.op != c.op:
            raise _Mismatch(f"operator {d.op} vs {c.op} in {c}")
        _match(d.a, c.a, ctx)
        _match(d.b, c.b, ctx)
    elif isinstance(d, (Not, Cast)):
        if isinstance(d, Cast) and d.dtype != c.dtype:
            raise _Mismatch(f"cast to {d.dtype} vs {c.dtype}")
        _match(d.a if isinstance(d, Not) else d.value, c.a if isinstance(c, Not) else c.value, ctx)
    elif isinstance(d, Call):
        if d.name != c.name or len(d.args) != len(c.args):
            raise _Mismatch(f"call {d.name} vs {c.name}")
        for x, y in zip(d.args, c.args):
            _match(x, y, ctx)
    elif isinstance(d, Select):
        _match(d.cond, c.cond, ctx)
        _match(d.t, c.t, ctx)
        _match(d.f, c.f, ctx)
    elif isinstance(d, Const):
        if d != c:
            raise _Mismatch(f"constant {d} vs {c}")
    elif isinstance(d, Load):
        _match_access(d.buffer, d.indices, c.buffer, c.indices, ctx, read=True)
    elif isinstance(d, Var):
        raise _Mismatch(f"iterator {d} used as a value")


def _match_access(dbuf, didx, cbuf, cidx, ctx, read: bool = False) -> None:
    bufmap = ctx["bufmap"]
    # a kernel reading a type reads the narrower types stored alike (int8 kernels, int8r weights)
    if not (holds(dbuf.dtype, cbuf.dtype) if read else dbuf.dtype == cbuf.dtype):
        raise _Mismatch(f"{cbuf.name} is {cbuf.dtype}, the description's {dbuf.name} is {dbuf.dtype}")
    if bufmap.setdefault(dbuf.name, cbuf.name) != cbuf.name:
        raise _Mismatch(f"description buffer {dbuf.name} maps to both {bufmap[dbuf.name]} and {cbuf.name}")
    ddeps = {ctx["sigma"][v] for v in free_vars_of(didx)}
    cdeps, affine_ok = _deps(cidx, ctx["env"], ctx["loop_names"], ctx.get("ranges"))
    if ddeps != cdeps:
        raise _Mismatch(
            f"{cbuf.name}[{', '.join(map(str, cidx))}] depends on loops {sorted(cdeps)}, the description's "
            f"{dbuf.name} on {sorted(ddeps)} (transposed or different operand?)"
        )
    if not affine_ok:
        raise _Mismatch(f"{cbuf.name}[{', '.join(map(str, cidx))}] is not affine in the tile loops")
    for axis, stride in ctx["strides"].get(dbuf.name, {}).items():
        loop = ctx["sigma"][axis]
        flat = flat_index(cbuf, tuple(simplify(substitute(e, ctx["env"]), ctx.get("ranges")) for e in cidx))
        coefs = affine_in(flat, ctx["loop_names"])
        if coefs is None or coefs.get(loop, 0) != stride:
            got = "a non-affine step" if coefs is None else f"a step of {coefs.get(loop, 0)}"
            raise _Mismatch(
                f"{cbuf.name} has {got} along loop {loop}; intrinsic needs {stride} (is the operand laid out or packed "
                "as it reads it?)"
            )
    for axis in ctx["unit"].get(dbuf.name, ()):
        loop = ctx["sigma"][axis]
        last = simplify(substitute(cidx[-1], ctx["env"]), ctx.get("ranges"))
        coefs = affine_in(last, ctx["loop_names"])
        others = [simplify(substitute(e, ctx["env"]), ctx.get("ranges")) for e in cidx[:-1]]
        if coefs is None or coefs.get(loop) != 1 or any(loop in free_vars(o) for o in others):
            raise _Mismatch(f"{cbuf.name} is not contiguous along loop {loop} (stride must be 1)")


def flat_index(buffer, indices: tuple) -> Expr:
    """The element offset of ``buffer[indices]`` in its C-order storage."""
    flat: Expr = Const(0, "int64")
    stride = 1
    for dim, ix in reversed(list(zip(buffer.shape, indices))):
        flat = flat + ix * stride
        stride *= dim
    return simplify(flat)


def free_vars_of(indices: tuple) -> set:
    out: set = set()
    for e in indices:
        out |= free_vars(e)
    return out


def _check_guard(inner: Block, sigma: Dict[str, str], intrin) -> None:
    """Only the intrinsic's remainder axis may be partial (``binding < extent`` guards)."""
    axis = intrin.meta.get("remainder_axis")
    allowed = sigma.get(axis) if axis else None
    for c in conjuncts(inner.predicate):
        used = free_vars(c) & set(sigma.values())
        if allowed is None or used != {allowed}:
            raise _Mismatch(
                f"the tile is partial ({c}) along loop(s) {sorted(used)}; intrinsic {intrin.name} takes "
                + (f"partial tiles only along {allowed}" if allowed else "whole tiles only")
            )


def has_zero_init(inner: Block) -> bool:
    """Whether ``inner``'s init stores zero to exactly the element its update accumulates
    into: the init a zero-start micro-kernel performs itself."""
    init, body = inner.init, inner.body
    return (
        isinstance(init, Store)
        and isinstance(body, Store)
        and isinstance(init.value, Const)
        and init.value.value == 0
        and init.buffer == body.buffer
        and tuple(init.indices) == tuple(body.indices)
    )


def _check_init(inner: Block, intrin) -> None:
    """A tile may keep its reduction's init only when the intrinsic starts from zero itself:
    code generation then calls that variant where the reduction begins."""
    if inner.init is None:
        return
    require(
        "zero_start_variant" in intrin.meta and has_zero_init(inner),
        "tensorize",
        f"block {inner.name} has an init that intrinsic {intrin.name} cannot perform (it needs a zero "
        "init and a zero-start variant); decompose the reduction (sch.decompose_reduction) before tensorizing",
    )


#: (block, intrinsic name, id) -> (intrinsic, (axes, bufmap) or None, error message or None).
#: The search replays the same tiles thousands of times per round (every mutation re-runs
#: the space and re-checks each rebuilt tensorized block); IR nodes are immutable and hash
#: structurally, so a match is a pure function of the block and the intrinsic. The entry
#: holds the intrinsic so that its id cannot be reused by another object while cached.
_MATCHES: Dict[tuple, tuple] = {}
_MATCHES_MAX = 8192


def match_intrinsic(
    blk: Block, intrin: "Intrinsic", outer: Sequence[Tuple[str, int]] = ()
) -> Tuple[List[str], Dict[str, str]]:
    """Tile loop names in description-iterator order and the buffer mapping, or ScheduleError.
    ``outer``: ``(name, extent)`` of the loops around the block.

    Memoized on the block's structure and ``outer`` (see ``_MATCHES``); the result is a fresh copy.
    """
    key = (blk, intrin.name, id(intrin), tuple(outer))
    hit = _MATCHES.get(key)
    if hit is None:
        try:
            hit = (intrin, _match_intrinsic(blk, intrin, tuple(outer)), None)
        except ScheduleError as exc:
            hit = (intrin, None, str(exc))
        make_room(_MATCHES, _MATCHES_MAX)
        _MATCHES[key] = hit
    if hit[2] is not None:
        raise ScheduleError(hit[2])
    axes, bufmap = hit[1]
    return list(axes), dict(bufmap)


def _outer_loops(idx: TreeIndex, block: str) -> Tuple[Tuple[str, int], ...]:
    return tuple((l.name, l.extent) for l in idx.loops_above(block))


def _match_intrinsic(blk: Block, intrin, outer: Tuple[Tuple[str, int], ...] = ()) -> Tuple[List[str], Dict[str, str]]:
    prim = "tensorize"
    loops, inner = tile_nest(blk, prim)
    _check_init(inner, intrin)
    desc = intrin.description
    (dblk,) = desc.blocks()
    require(
        len(loops) == len(dblk.iters),
        prim,
        f"intrinsic {intrin.name} has {len(dblk.iters)} axes but the tile of block {blk.name} has {len(loops)} loops",
    )
    loop_names = {l.name for l in loops}
    env = tile_env(blk, inner)
    kind_of_loop = {}
    for it, b in zip(inner.iters, inner.bindings):
        for v in free_vars(b) & loop_names:
            kind_of_loop[v] = it.kind
    errors: List[str] = []  # structural mismatches of well-shaped mappings: the useful ones
    shape_errors: List[str] = []
    for perm in itertools.permutations(loops):
        sigma = {it.var.name: l.name for it, l in zip(dblk.iters, perm)}
        bad = None
        for it, l in zip(dblk.iters, perm):
            if kind_of_loop.get(l.name) != it.kind:
                bad = f"loop {l.name} ({kind_of_loop.get(l.name)}) for axis {it.var.name} ({it.kind})"
            elif it.var.name != intrin.panel_axis and l.extent != it.extent:
                bad = f"loop {l.name} has extent {l.extent}, axis {it.var.name} needs {it.extent}"
            if bad:
                break
        if bad:
            shape_errors.append(bad)
            continue
        ctx = {
            "bufmap": {}, "sigma": sigma, "env": env, "loop_names": loop_names, "unit": intrin.unit_stride,
            "strides": intrin.strides,
            "ranges": tile_ranges(loops, outer),
        }
        try:
            _check_guard(inner, sigma, intrin)
            dst, cst = dblk.body, inner.body
            _match_access(dst.buffer, dst.indices, cst.buffer, cst.indices, ctx)
            _match(dst.value, cst.value, ctx)
        except _Mismatch as exc:
            errors.append(str(exc))
            continue
        return [sigma[it.var.name] for it in dblk.iters], ctx["bufmap"]
    detail = "; ".join(dict.fromkeys(errors or shape_errors))
    require(False, prim, f"block {blk.name} does not compute intrinsic {intrin.name}: {detail}")
    raise AssertionError  # unreachable


def tensorize(func: PrimFunc, block: str, intrin: "Intrinsic") -> PrimFunc:
    """Mark a blockized block as computed by ``intrin`` after checking it matches."""
    prim = "tensorize"
    idx = TreeIndex.of(func)
    bpath, blk = lookup_block(idx, block, prim)
    require(blk.annotation(TENSORIZE_KEY) is None, prim, f"block {block} is already tensorized")
    axes, _ = match_intrinsic(blk, intrin, _outer_loops(idx, block))
    ann = dict(blk.annotations)
    ann[TENSORIZE_KEY] = intrin.name
    ann[AXES_KEY] = tuple(axes)
    return replace_at(func, bpath, (blk.replace(annotations=ann),))


def check_tensorized(old: PrimFunc, new: PrimFunc) -> None:
    """Raise ScheduleError when a change leaves a tensorized block that no longer matches its
    intrinsic (e.g. an operand inlined as an expression, a block moved into the tile).

    Blocks the change did not rebuild (the same node object as before) are not re-checked.
    """
    from ..ir import intrinsic as intrinsic_registry

    # the indexes are shared (TreeIndex.of): the schedule asks for the new one next anyway
    before = {id(b) for b in TreeIndex.of(old).block_nodes if b.annotation(TENSORIZE_KEY) is not None}
    idx = TreeIndex.of(new)
    for blk in idx.block_nodes:
        name = blk.annotation(TENSORIZE_KEY)
        if name is None or id(blk) in before:
            continue
        try:
            axes, _ = match_intrinsic(blk, intrinsic_registry.get(name), _outer_loops(idx, blk.name))
        except Exception as exc:  # ScheduleError from the matcher, named below
            msg = str(exc).split(": ", 1)[-1]
            require(False, "tensorize", f"the change breaks tensorized block {blk.name} ({name}): {msg}")
        require(
            tuple(axes) == tuple(blk.annotation(AXES_KEY)),
            "tensorize",
            f"the change reorders the tile of tensorized block {blk.name} ({name})",
        )
