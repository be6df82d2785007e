"""A convolution over few input channels, its window rows read flat: one reduction the dot-product kernels can take.

The bf16 and int8 micro-kernels read the reduction in groups (pairs for ``vdpbf16ps``, quads
for ``vpdpbusd``: :mod:`probsched.space.intrin_tiling`), so a convolution whose input has
fewer channels than a group, or a count the group does not divide (an RGB image's 3: every
network's first convolution), gets none of them: its products run one by one, slower in
bf16 and int8 than in float32.

In a channels-last input the ``KW x C`` values one row of the window reads are adjacent:
``X[n, s h + kh, s w + kw, c]`` is element ``(s w + kw) C + c`` of row ``s h + kh`` with
the last two dimensions flattened, that is ``s C w + j`` for ``j = kw C + c``. So
:func:`flatten_window` rewrites

    ``C[n, h, w, o] += X[n, s h + kh + c0, s w + kw + c1, c] * W[kh, kw, c, o]``

(``X`` an intermediate its own stage writes, the padding and conversion stage of a network's
convolution) as

    ``C[n, h, w, o] += X'[n, s h + kh + c0, s C w + C c1 + j] * W'[kh, j, o]``,  ``j < J``

with ``J`` the multiple of the group at or above ``KW C``: ``X'`` is ``X`` with its last two
dimensions flattened (its stage writes it so, and zeros past its end), ``W'[kh, j, o]`` is
``W[kh, j // C, j % C, o]`` for ``j < KW C`` and zero beyond (a stage of its own: a few
thousand elements per call). The products ``j >= KW C`` read the next values of the row
times a zero weight: the sums are the same (a non-finite input beside the window would
make one NaN; a network's image has none). The reduction ``j`` is contiguous in ``X'``
and a multiple of the group: the micro-kernel rule tiles it like any other. For ResNet-50's
7x7 stem that is 21 values padded to 22 (bf16) or 24 (int8), against 3 channels padded to
4 for a third more products.

A network's tasks are rewritten so: a task in bfloat16 (:meth:`Task.in_precision
<probsched.graph.task.Task.in_precision>`) and the int8 tasks of a quantized graph. A
suite workload in a reduced precision stays as it is (``C2D:small:bf16``'s three channels
are left to the other rules).

>>> import numpy as np, ml_dtypes, probsched as ps
>>> from probsched.precision import convert
>>> w = ps.workloads.conv2d_nhwc(1, 9, 9, 3, 16, kernel=3, stride=2, pad=1)
>>> half = convert(w.func, "bf16")
>>> f = flatten_window(half)
>>> [(b.name, b.shape) for b in f.allocs]
[('padded', (1, 11, 34)), ('conv2d_window', (3, 10, 16))]
>>> from probsched.ir.interpreter import evaluate
>>> x, wt = (a.astype(ml_dtypes.bfloat16) for a in w.random_inputs(np.random.default_rng(0)))
>>> bool(np.allclose(evaluate(f, x, wt)[0], evaluate(half, x, wt)[0], rtol=1e-6, atol=1e-6))
True
>>> flatten_window(w.func, 2) is w.func        # float32 products: nothing to do
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..ir.dtypes import is_float
from ..ir.expr import BinOp, Cast, Const, Expr, Load, Var, cast, free_vars, if_then_else, substitute
from ..ir.stmt import Block, Buffer, IterVar, Loop, PrimFunc, Store
from .analysis import affine
from .tree import TreeIndex, all_names, fresh_name, unscheduled

#: (A's, B's) dtypes of the products the grouped kernels read, and their group
GROUPS = {("bfloat16", "bfloat16"): 2, ("uint8", "int8"): 4, ("uint8", "int8r"): 4}


def flatten_window(func: PrimFunc, group: Optional[int] = None) -> PrimFunc:
    """``func`` with every convolution that fits the module docstring's form, and whose
    input channels ``group`` does not divide, reading its window rows flat (the reduction
    padded to a multiple of ``group``); ``func`` itself when none does. ``group``: the
    product's (2 for bfloat16, 4 for uint8 x int8, :data:`GROUPS`) when None."""
    out = func
    for blk in func.blocks():
        form = _match(out, blk.name, group)
        if form is not None:
            out = _rewrite(out, form)
    return out


@dataclass(frozen=True)
class _Form:
    """What the rewrite reads off one convolution block: the block, its store, its data and
    weight loads (and the casts around them), the data's producer, the group, the names of
    the iterators (taps ``kh``, ``kw``, channel ``c``, output channel ``o``, output column
    ``w_spatial``), the column stride and offset, and the channel and tap counts."""

    block: Block
    store: Store
    x: Load
    w: Load
    x_cast: Optional[str]
    w_cast: Optional[str]
    producer: Block
    group: int
    kh: str
    kw: str
    c: str
    o: str
    w_spatial: str
    stride: int
    offset: int
    channels: int
    taps: int


def _unwrap(e: Expr) -> Tuple[Expr, Optional[str]]:
    return (e.value, e.dtype) if isinstance(e, Cast) else (e, None)


def _match(func: PrimFunc, name: str, group: Optional[int]) -> Optional[_Form]:
    idx = TreeIndex.of(func)
    blk = idx.block(name)
    st = blk.body
    if not (isinstance(st, Store) and blk.is_reduction and isinstance(blk.init, Store) and unscheduled(idx, blk) and not blk.annotations):
        return None
    v = st.value
    if not (isinstance(v, BinOp) and v.op == "add" and isinstance(v.b, BinOp) and v.b.op == "mul"):
        return None
    if not (isinstance(v.a, Load) and v.a.buffer.name == st.buffer.name and v.a.indices == st.indices):
        return None
    (x, x_cast), (w, w_cast) = _unwrap(v.b.a), _unwrap(v.b.b)
    if not (isinstance(x, Load) and isinstance(w, Load)) or len(x.indices) != 4 or len(w.indices) != 4:
        return None
    products = GROUPS.get((x.buffer.dtype, w.buffer.dtype))
    if products is None:
        return None
    group = group or products
    kinds = {it.var.name: it for it in blk.iters}
    wv = [ix.name if isinstance(ix, Var) else None for ix in w.indices]
    if None in wv or len(set(wv)) != 4 or any(kinds[n].kind != "R" for n in wv[:3]) or kinds[wv[3]].kind != "S":
        return None
    kh, kw, c, o = wv
    channels = kinds[c].extent
    if channels % group == 0 or not (isinstance(x.indices[3], Var) and x.indices[3].name == c):
        return None
    # rows s h + kh + c0, columns s w + kw + c1 (a stride, no dilation), the batch free of taps
    rows, cols = affine(x.indices[1]), affine(x.indices[2])
    if rows is None or cols is None or rows[0].get(kh) != 1 or kw in rows[0] or cols[0].get(kw) != 1 or kh in cols[0]:
        return None
    others = [n for n in cols[0] if n != kw]
    if len(others) != 1 or kinds[others[0]].kind != "S" or cols[1] < 0 or free_vars(x.indices[0]) & {kh, kw, c}:
        return None
    wspatial = others[0]
    producers = [b for b in func.blocks() if isinstance(b.body, Store) and b.body.buffer.name == x.buffer.name]
    if x.buffer not in func.allocs or len(producers) != 1:
        return None
    prod = producers[0]
    readers = [b for b in func.blocks() if any(buf.name == x.buffer.name for buf, _ in b.reads())]
    pst = prod.body
    if (readers != [blk] or prod.init is not None or not unscheduled(idx, prod) or len(prod.iters) != 4
            or any(it.kind != "S" for it in prod.iters)
            or tuple(pst.indices) != tuple(it.var for it in prod.iters)):
        return None
    return _Form(
        block=blk, store=st, x=x, w=w, x_cast=x_cast, w_cast=w_cast, producer=prod, group=group,
        kh=kh, kw=kw, c=c, o=o, w_spatial=wspatial, stride=cols[0][wspatial], offset=cols[1],
        channels=channels, taps=kinds[kw].extent,
    )


def _zero(dtype: str) -> Const:
    return Const(0.0 if is_float(dtype) else 0, dtype)


def _nest(block: Block, loops: List[Var]) -> Loop:
    stmt = block
    for var, it in reversed(list(zip(loops, block.iters))):
        stmt = Loop(var, it.extent, body=(stmt,))
    return stmt


def _rewrite(func: PrimFunc, f: _Form) -> PrimFunc:
    taken = all_names(func)

    def take(base: str) -> str:
        name = fresh_name(taken, base)
        taken.add(name)
        return name

    x, w, blk, prod = f.x.buffer, f.w.buffer, f.block, f.producer
    ch, taps, s = f.channels, f.taps, f.stride
    flat = -(-taps * ch // f.group) * f.group  # J
    out_w = {it.var.name: it.extent for it in blk.iters}[f.w_spatial]
    length = max(x.shape[2] * ch, s * ch * (out_w - 1) + ch * f.offset + flat)
    x2 = Buffer(x.name, (x.shape[0], x.shape[1], length), x.dtype, x.scope)
    w2 = Buffer(take(f"{blk.name}_window"), (w.shape[0], flat, w.shape[3]), w.dtype, "global")

    # the input's stage, writing the flat rows (zero past the end of the image's)
    i0, i1, i2, i3 = (it.var for it in prod.iters)
    j = Var(fresh_name({i0.name, i1.name}, "v_j"))
    old = substitute(prod.body.value, {i2.name: j // ch, i3.name: j % ch})
    value = if_then_else(j < x.shape[2] * ch, old, _zero(x.dtype)) if length > x.shape[2] * ch else old
    iters = [IterVar(i0, x.shape[0]), IterVar(i1, x.shape[1]), IterVar(j, length)]
    loops = [Var(take("flat_i0")), Var(take("flat_i1")), Var(take("flat_j"))]
    x_nest = _nest(Block(prod.name, iters, loops, Store(x2, (i0, i1, j), value)), loops)

    # the weight, its (kw, c) flattened and padded with zeros
    a, q, n = Var("v_kh"), Var("v_j"), Var("v_o")
    wval = if_then_else(q < taps * ch, Load(w, (a, q // ch, q % ch, n)), _zero(w.dtype))
    loops = [Var(take("window_kh")), Var(take("window_j")), Var(take("window_o"))]
    w_iters = [IterVar(a, w.shape[0]), IterVar(q, flat), IterVar(n, w.shape[3])]
    w_nest = _nest(Block(w2.name, w_iters, loops, Store(w2, (a, q, n), wval)), loops)

    # the convolution: (kw, c) become one reduction j of the flat rows
    jr = Var(fresh_name({it.var.name for it in blk.iters}, "v_rj"))
    xcol = Var(f.w_spatial) * (s * ch) + jr + ch * f.offset
    xl: Expr = Load(x2, (f.x.indices[0], f.x.indices[1], xcol))
    wl: Expr = Load(w2, (Var(f.kh), jr, Var(f.o)))
    xl = cast(f.x_cast, xl) if f.x_cast else xl
    wl = cast(f.w_cast, wl) if f.w_cast else wl
    st = f.store
    iters = [it for it in blk.iters if it.var.name not in (f.kw, f.c)] + [IterVar(jr, flat, "R")]
    loops = [Var(take(it.var.name.removeprefix("v_"))) for it in iters]
    conv = Block(blk.name, iters, loops, Store(st.buffer, st.indices, st.value.a + xl * wl), init=blk.init,
                 predicate=blk.predicate)
    conv_nest = _nest(conv, loops)

    idx = TreeIndex.of(func)
    at_x, at_conv = idx.block_path(prod.name)[0], idx.block_path(blk.name)[0]
    body = list(func.body)
    body[at_x] = x_nest
    body[at_conv] = conv_nest
    body.insert(at_conv, w_nest)
    allocs = tuple(x2 if b.name == x.name else b for b in func.allocs) + (w2,)
    return func.replace(body=tuple(body), allocs=allocs)


__all__ = ["GROUPS", "flatten_window"]
