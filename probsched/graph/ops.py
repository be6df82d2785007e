"""The JAX primitives a graph may hold: their fusion kind, lowering, FLOPs and checks.

Every primitive has an :class:`OpDef`:

- ``kind`` (TVM's operator patterns, simplified) decides fusion
  (:mod:`probsched.graph.fusion`): ``"anchor"`` (matmul, convolution, pooling: a reduction
  with data reuse that starts a task and takes the elementwise operators after it),
  ``"reduce"`` (sums and maxima over axes: softmax, norms), ``"elemwise"`` (float
  arithmetic: one compute stage, fused into its producer's task), ``"view"`` (broadcasts,
  reshapes, transposes, slices, comparisons, casts: an index map substituted into whatever
  reads it, never a stage or a task of its own), except a conversion to an 8-bit integer
  (a quantization): a stage, stored by the group that computes it;
- ``lower(node, operands, stages)`` returns the node's outputs as
  :class:`~.operands.Operand` objects, making compute stages through ``stages``;
- ``flops(node, in_types, out_types)``: 2 per multiply-add of a matmul or convolution, 1 per
  element of other arithmetic and per reduced element, 0 for views;
- ``check(node, in_types, out_types, where)`` raises a :class:`FrontEndError` for parameters
  outside what the lowering supports (``where()`` names the primitive, shapes and line).

>>> sorted(k for k, d in OPS.items() if d.kind == "anchor")
['conv_general_dilated', 'dot_general', 'reduce_window_max', 'reduce_window_min', 'reduce_window_sum']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import FrontEndError
from ..ir.dtypes import INT_RANGE
from ..ir.expr import (
    Const,
    Expr,
    Var,
    all_of,
    any_of,
    binary,
    cast,
    erf,
    exp,
    if_then_else,
    loads,
    log,
    logical_not,
    maximum,
    minimum,
    power,
    rint,
    sigmoid,
    sqrt,
    tanh,
)
from ..ir.expr import abs as ir_abs
from ..schedule.analysis import affine_in
from ..te import max as te_max
from ..te import min as te_min
from ..te import reduce_axis, reduction_identity
from ..te import sum as te_sum
from .operands import Index, LazyOperand, Operand, Stages
from . import ops_indexing as ix

#: dtypes a graph value may have: float32 data, booleans from comparisons, int32 indices
#: (and accumulators of quantized products), 8-bit integers (quantized data).
ALLOWED_DTYPES = ("float32", "bool", "int32", "uint8", "int8")
#: the 8-bit types: a conversion to them is stored, not substituted where read
QUANTIZED = ("uint8", "int8")

ANCHOR, REDUCE, ELEMWISE, VIEW = "anchor", "reduce", "elemwise", "view"

Lowering = Callable[[object, List[Operand], Stages, list], List[Operand]]


def _no_check(node, in_types, out_types, where) -> None:
    return None


@dataclass(frozen=True)
class OpDef:
    """How the graph handles one primitive (see the module docstring)."""

    kind: str
    lower: Lowering
    flops: Callable[[object, list, list], int]
    check: Callable = _no_check

    def kind_of(self, out_types: Sequence) -> str:
        """The node's kind: elementwise operators that make booleans or integers are views
        (substituted into their float consumers, never stored), except conversions to 8-bit
        integers (quantizations), which are stored."""
        if self.lower is _lower_convert and out_types[0].dtype in QUANTIZED:
            return ELEMWISE
        if self.kind == ELEMWISE and out_types[0].dtype != "float32":
            return VIEW
        return self.kind


def _at(o: Operand, i: Index) -> Expr:
    """``o``'s element at ``i`` (a 0-d operand broadcasts: JAX's scalar literals)."""
    return o.at(i if o.shape else ())


def _at_broadcast(o: Operand, i: Index, shape: Sequence[int]) -> Expr:
    """``o``'s element at ``i`` of a result of ``shape``: a jaxpr's elementwise operators
    broadcast 0-d operands and, between operands of equal rank, dimensions of size 1."""
    if not o.shape:
        return o.at(())
    if tuple(o.shape) == tuple(shape):
        return o.at(i)
    return o.at(tuple(Const(0, "int64") if s == 1 and n != 1 else e for e, s, n in zip(i, o.shape, shape)))


def _f32(x: float) -> Const:
    return Const(float(x), "float32")


def _size(t) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) if t.shape else 1


# ----------------------------------------------------------------------------- elementwise


def _ew(base: str, fn: Callable[..., Expr]) -> Lowering:
    """An elementwise operator: a float stage, or a lazy expression for a bool/int result."""

    def lower(node, ins: List[Operand], stages: Stages, out_types: list) -> List[Operand]:
        t = out_types[0]

        def body(i: Index) -> Expr:
            e = fn(*(_at_broadcast(o, i, t.shape) for o in ins))
            return cast(t.dtype, e) if e.dtype != t.dtype else e

        if t.dtype != "float32":
            return [LazyOperand(t.shape, t.dtype, body)]
        return [stages.compute(base, t.shape, body)]

    return lower


def _integer_pow(x: Expr, y: int) -> Expr:
    if y == 0:
        return _f32(1.0)
    out, base, n = None, x, abs(y)
    while n:  # square-and-multiply: x**3 is x * (x * x), two multiplications
        if n & 1:
            out = base if out is None else out * base
        n >>= 1
        if n:
            base = base * base
    return _f32(1.0) / out if y < 0 else out


def _select_n(pred: Expr, *cases: Expr) -> Expr:
    if len(cases) == 1:
        return cases[0]
    if pred.dtype == "bool":
        return if_then_else(pred, cases[1], cases[0])
    out = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        out = if_then_else(binary("eq", pred, Const(k, pred.dtype)), cases[k], out)
    return out


def _sign(x: Expr) -> Expr:
    zero = Const(0, x.dtype) if x.dtype != "float32" else _f32(0.0)
    one = Const(1, x.dtype) if x.dtype != "float32" else _f32(1.0)
    return if_then_else(binary("gt", x, zero), one, if_then_else(binary("lt", x, zero), -one, zero))


def _ew_flops(node, in_types, out_types) -> int:
    return _size(out_types[0]) if out_types[0].dtype == "float32" else 0


def _binary_fn(op: str) -> Callable[[Expr, Expr], Expr]:
    return lambda a, b: binary(op, a, b)


_ELEMENTWISE: Dict[str, Tuple[str, Callable[..., Expr]]] = {
    "add": ("add", _binary_fn("add")),
    "sub": ("subtract", _binary_fn("sub")),
    "mul": ("multiply", _binary_fn("mul")),
    "div": ("divide", _binary_fn("div")),
    "max": ("maximum", maximum),
    "min": ("minimum", minimum),
    "pow": ("power", power),
    "neg": ("negative", lambda a: -a),
    "exp": ("exp", exp),
    "log": ("log", log),
    "log1p": ("log1p", lambda a: log(a + _f32(1.0))),
    "expm1": ("expm1", lambda a: exp(a) - _f32(1.0)),
    "tanh": ("tanh", tanh),
    "logistic": ("sigmoid", sigmoid),
    "erf": ("erf", erf),
    "erfc": ("erfc", lambda a: _f32(1.0) - erf(a)),
    "sqrt": ("sqrt", sqrt),
    "floor": ("floor", ix.floor),
    "ceil": ("ceil", ix.ceil),
    "rsqrt": ("rsqrt", lambda a: _f32(1.0) / sqrt(a)),
    "square": ("square", lambda a: a * a),
    "abs": ("abs", ir_abs),
    "sign": ("sign", _sign),
    "select_n": ("where", _select_n),
    "clamp": ("clip", lambda lo, x, hi: minimum(maximum(x, lo), hi)),
    "lt": ("less", _binary_fn("lt")),
    "le": ("less_equal", _binary_fn("le")),
    "gt": ("greater", _binary_fn("gt")),
    "ge": ("greater_equal", _binary_fn("ge")),
    "eq": ("equal", _binary_fn("eq")),
    "ne": ("not_equal", _binary_fn("ne")),
    "and": ("logical_and", lambda a, b: all_of(a, b)),
    "or": ("logical_or", lambda a, b: any_of(a, b)),
    "not": ("logical_not", logical_not),
}


def _lower_integer_pow(node, ins, stages, out_types):
    y = int(node.params["y"])
    return _ew("power", lambda a: _integer_pow(a, y))(node, ins, stages, out_types)


def _lower_convert(node, ins, stages, out_types):
    t = out_types[0]
    (x,) = ins
    if t.dtype in QUANTIZED:  # a quantization: stored in 8 bits (OpDef.kind_of)
        return [stages.compute("quantize", t.shape, lambda i: _to_8_bits(_at(x, i), t.dtype), dtype=t.dtype)]
    return [LazyOperand(t.shape, t.dtype, lambda i: cast(t.dtype, _at(x, i)))]


def _to_8_bits(x: Expr, dtype: str) -> Expr:
    """JAX's conversion to an 8-bit integer: a float truncated toward zero (within the range:
    the quantization clipped it before; outside it is saturated here), an integer wrapped
    modulo 256. The IR's own conversion rounds and saturates (:mod:`probsched.ir.dtypes`):
    equal on what it is given here."""
    lo, hi = INT_RANGE[dtype]
    if x.dtype == "bool":
        return cast(dtype, x)
    if x.dtype == "float32":
        return cast(dtype, cast("int32", minimum(maximum(x, _f32(lo)), _f32(hi))))
    if x.dtype in QUANTIZED:
        x = cast("int32", x)
    return cast(dtype, binary("mod", x - lo, Const(256, x.dtype)) + lo)


def _round(node) -> Callable[[Expr], Expr]:
    """``lax.round``: to nearest even (``jnp.round``) or half away from zero."""
    if int(node.params.get("rounding_method", 0)) == 1:  # RoundingMethod.TO_NEAREST_EVEN
        return rint
    return lambda x: if_then_else(binary("ge", x, _f32(0.0)), ix.floor(x + _f32(0.5)), -ix.floor(_f32(0.5) - x))


def _lower_round(node, ins, stages, out_types):
    return _ew("round", _round(node))(node, ins, stages, out_types)


def _check_bitwise(node, in_types, out_types, where) -> None:
    if node.op in ("and", "or", "not") and any(t.dtype != "bool" for t in in_types):
        raise FrontEndError(f"{where()}: bitwise operations on integers are not supported")


def _check_int_arith(node, in_types, out_types, where) -> None:
    if node.op in ("div", "pow", "exp", "log", "sqrt", "floor", "ceil", "rsqrt", "tanh", "logistic", "erf", "erfc", "log1p", "expm1") and (
        out_types[0].dtype != "float32"
    ):
        raise FrontEndError(f"{where()}: {node.op} of {out_types[0].dtype} values is not supported")


# ----------------------------------------------------------------------------- views


def _lower_broadcast(node, ins, stages, out_types):
    (x,) = ins
    t = out_types[0]
    dims = tuple(node.params["broadcast_dimensions"])

    def fn(i: Index) -> Expr:
        src = tuple(0 if x.shape[d] == 1 and t.shape[o] != 1 else i[o] for d, o in enumerate(dims))
        return _at(x, src)

    return [LazyOperand(t.shape, t.dtype, fn)]


def _unflatten(flat: Expr, shape: Sequence[int]) -> List[Expr]:
    """Multi-index of a row-major offset ``flat`` (less than the product of ``shape``)."""
    out: List[Expr] = []
    stride = _size_of(shape)
    outermost = True
    for s in shape:
        stride //= s
        if s == 1:
            out.append(Const(0, "int64"))
            continue
        q = flat // stride if stride > 1 else flat
        out.append(q if outermost else q % s)  # the outermost quotient is below s already
        outermost = False
    return out


def _size_of(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def reshape_map(src_shape: Sequence[int], dst_shape: Sequence[int]) -> Callable[[Index], Tuple[Expr, ...]]:
    """The source index of each destination index of a row-major reshape.

    Dimensions are matched in runs of equal products, so splitting or merging adjacent
    axes gives plain affine indices; division and remainder appear only inside a run.

    >>> from probsched.ir.expr import Var
    >>> f = reshape_map((2, 6), (2, 2, 3))
    >>> [str(e) for e in f((Var("a"), Var("b"), Var("c")))]
    ['a', 'b * 3 + c']
    """
    src, dst = list(src_shape), list(dst_shape)
    runs: List[Tuple[List[int], List[int]]] = []  # (src dims, dst dims) with equal products
    si = di = 0
    while si < len(src) or di < len(dst):
        s_dims, d_dims = [], []
        ps = pd = 1
        if si < len(src):
            s_dims.append(si)
            ps = src[si]
            si += 1
        if di < len(dst):
            d_dims.append(di)
            pd = dst[di]
            di += 1
        while ps != pd:
            if ps < pd and si < len(src):
                s_dims.append(si)
                ps *= src[si]
                si += 1
            elif di < len(dst):
                d_dims.append(di)
                pd *= dst[di]
                di += 1
            else:
                s_dims.append(si)
                ps *= src[si]
                si += 1
        # trailing size-1 dimensions join the run before them
        runs.append((s_dims, d_dims))

    def fn(i: Index) -> Tuple[Expr, ...]:
        out: List[Expr] = [Const(0, "int64")] * len(src)
        for s_dims, d_dims in runs:
            flat: Optional[Expr] = None
            for d in d_dims:
                if dst[d] == 1:
                    continue
                term = i[d]
                flat = term if flat is None else flat * dst[d] + term
            if flat is None:
                flat = Const(0, "int64")
            for d, e in zip(s_dims, _unflatten(flat, [src[d] for d in s_dims])):
                out[d] = e
        return tuple(out)

    return fn


def _lower_reshape(node, ins, stages, out_types):
    (x,) = ins[:1]
    t = out_types[0]
    if node.params.get("dimensions") not in (None, ()):
        raise FrontEndError(f"reshape with dimensions={node.params['dimensions']} is not supported")
    f = reshape_map(x.shape, t.shape)
    return [LazyOperand(t.shape, t.dtype, lambda i: _at(x, f(i)))]


def _check_reshape(node, in_types, out_types, where) -> None:
    if node.params.get("dimensions") not in (None, ()):
        raise FrontEndError(f"{where()}: reshape with dimensions={node.params['dimensions']} is not supported")


def _lower_squeeze(node, ins, stages, out_types):
    (x,) = ins
    t = out_types[0]
    dims = {d % x.ndim for d in node.params["dimensions"]}

    def fn(i: Index) -> Expr:
        it = iter(i)
        return _at(x, tuple(Const(0, "int64") if d in dims else next(it) for d in range(x.ndim)))

    return [LazyOperand(t.shape, t.dtype, fn)]


def _lower_transpose(node, ins, stages, out_types):
    (x,) = ins
    t = out_types[0]
    perm = tuple(node.params["permutation"])

    def fn(i: Index) -> Expr:
        src: List[Expr] = [Const(0, "int64")] * len(perm)
        for o, d in enumerate(perm):
            src[d] = i[o]
        return _at(x, tuple(src))

    return [LazyOperand(t.shape, t.dtype, fn)]


def _lower_slice(node, ins, stages, out_types):
    (x,) = ins
    t = out_types[0]
    start = node.params["start_indices"]
    strides = node.params.get("strides") or (1,) * x.ndim
    return [LazyOperand(t.shape, t.dtype, lambda i: _at(x, tuple(e * int(s) + int(b) for e, b, s in zip(i, start, strides))))]


def _lower_rev(node, ins, stages, out_types):
    (x,) = ins
    t = out_types[0]
    dims = set(node.params["dimensions"])
    return [LazyOperand(t.shape, t.dtype, lambda i: _at(x, tuple((x.shape[d] - 1 - e) if d in dims else e for d, e in enumerate(i))))]


def _lower_iota(node, ins, stages, out_types):
    t = out_types[0]
    dim = int(node.params["dimension"])
    return [LazyOperand(t.shape, t.dtype, lambda i: cast(t.dtype, i[dim]))]


def _lower_split(node, ins, stages, out_types):
    (x,) = ins
    axis = int(node.params["axis"]) % x.ndim
    outs, offset = [], 0
    for t in out_types:
        def fn(i: Index, off=offset) -> Expr:
            return _at(x, tuple(e + off if d == axis else e for d, e in enumerate(i)))

        outs.append(LazyOperand(t.shape, t.dtype, fn))
        offset += t.shape[axis]
    return outs


def _lower_pad(node, ins, stages, out_types):
    x, value = ins
    t = out_types[0]
    config = [(int(lo), int(hi), int(interior)) for lo, hi, interior in node.params["padding_config"]]

    def body(i: Index) -> Expr:
        conds, src = [], []
        for e, s, (lo, hi, interior) in zip(i, x.shape, config):
            step = interior + 1
            shifted = e - lo
            if lo > 0:
                conds.append(binary("ge", e, Const(lo, "int64")))
            if lo + (s - 1) * step + 1 < t.shape[len(src)]:
                conds.append(binary("lt", e, Const(lo + (s - 1) * step + 1, "int64")))
            if step > 1:
                conds.append(binary("eq", shifted % step, Const(0, "int64")))
                shifted = shifted // step
            src.append(shifted)
        inside = _at(x, tuple(src))
        return if_then_else(all_of(*conds), inside, _at(value, ())) if conds else inside

    # a stage: a padded tensor read by a convolution must not put its test in the
    # convolution's inner loop (TVM's CPU rules never inline padding either); a quantized
    # activation too (padded with its zero point)
    if t.dtype == "float32" or t.dtype in QUANTIZED:
        return [stages.compute("pad", t.shape, body, dtype=t.dtype)]
    return [LazyOperand(t.shape, t.dtype, body)]


def _lower_concatenate(node, ins, stages, out_types):
    t = out_types[0]
    axis = int(node.params["dimension"])

    def body(i: Index) -> Expr:
        bounds, off = [], 0
        for o in ins:
            bounds.append(off)
            off += o.shape[axis]
        out = None
        for o, lo in reversed(list(zip(ins, bounds))):
            val = _at(o, tuple(e - lo if d == axis else e for d, e in enumerate(i)))
            out = val if out is None else if_then_else(binary("lt", i[axis], Const(lo + o.shape[axis], "int64")), val, out)
        return out

    return [stages.compute("concatenate", t.shape, body)] if t.dtype == "float32" else [LazyOperand(t.shape, t.dtype, body)]


def _check_pad(node, in_types, out_types, where) -> None:
    for lo, hi, interior in node.params["padding_config"]:
        if lo < 0 or hi < 0:
            raise FrontEndError(f"{where()}: negative padding {node.params['padding_config']} is not supported")


# ----------------------------------------------------------------------------- reductions


def _axes_of(node) -> Tuple[int, ...]:
    return tuple(int(a) for a in node.params["axes"])


def _reduction_source(x: Operand, axes: Sequence[int], i: Index):
    """(source index of ``x`` for output index ``i``, reduce axes) of a reduction over ``axes``;
    extent-1 axes are not looped over."""
    it = iter(i)
    src: List[Expr] = []
    red = []
    for d in range(x.ndim):
        if d in axes:
            if x.shape[d] == 1:
                src.append(Const(0, "int64"))
            else:
                k = reduce_axis(x.shape[d], name=f"k{d}")
                red.append(k)
                src.append(k)
        else:
            src.append(next(it))
    return tuple(src), red


_COMBINERS = {"reduce_sum": ("sum", te_sum), "reduce_max": ("max", te_max), "reduce_min": ("min", te_min)}


def _lower_reduce(node, ins, stages, out_types):
    (x,) = ins
    t = out_types[0]
    axes = set(_axes_of(node))
    base, combine = _COMBINERS[node.op]

    def body(i: Index):
        src, red = _reduction_source(x, axes, i)
        val = _at(x, src)
        return combine(val, axis=red) if red else val

    return [stages.compute(base, t.shape, body)]


def _reduce_flops(node, in_types, out_types) -> int:
    return _size(in_types[0])


def _lower_argminmax(node, ins, stages, out_types):
    (x,) = ins
    t = out_types[0]
    axes = set(_axes_of(node))
    is_max = node.op == "argmax"

    def extremum(i: Index):
        src, red = _reduction_source(x, axes, i)
        return (te_max if is_max else te_min)(_at(x, src), axis=red) if red else _at(x, src)

    best = stages.compute("max" if is_max else "min", t.shape, extremum)

    def first(i: Index):
        src, red = _reduction_source(x, axes, i)
        k = red[0] if red else Const(0, "int64")
        # the first index where the extremum occurs: the minimum of k over those, as float
        # (exact below 2**24); NaN compares unequal, as in JAX only if all are NaN
        hit = binary("eq", _at(x, src), best.at(i))
        return te_min(if_then_else(hit, cast("float32", k), _f32(float("inf"))), axis=red) if red else _f32(0.0)

    index = stages.compute("argmax" if is_max else "argmin", t.shape, first)
    return [stages.compute("cast", t.shape, lambda i: cast(t.dtype, index.at(i)), dtype=t.dtype)]


def _check_argminmax(node, in_types, out_types, where) -> None:
    if len(node.params["axes"]) != 1:
        raise FrontEndError(f"{where()}: argmax/argmin over several axes at once")
    if in_types[0].shape[node.params["axes"][0]] > 2**24:
        raise FrontEndError(f"{where()}: argmax/argmin over more than 2**24 elements")


# ----------------------------------------------------------------------------- anchors


def _dense(stages: Stages, o: Operand) -> Operand:
    """``o`` itself when each of its elements is one load whose indices are each an index
    variable, a constant or a variable plus a constant (a transpose, broadcast, slice);
    otherwise ``o`` copied into a stage of its own. A matmul's or convolution's operands
    must be read that simply for the micro-kernel rule to apply: a reshape that merges or
    splits axes (BERT's heads, ``h * 64 + d``) is laid out once, a pass over the operand,
    instead of in the innermost loop."""
    if not isinstance(o, LazyOperand) or not o.shape:
        return o
    idx = tuple(Var(f"probe{d}") for d in range(o.ndim))
    names = [v.name for v in idx]
    lds = loads(o.at(idx))
    simple = len(lds) <= 1 and all(
        (c := affine_in(ix, names)) is not None and len(c) <= 1 and all(v == 1 for v in c.values())
        for ld in lds for ix in ld.indices
    )
    return o if simple else stages.compute("relayout", o.shape, o.at, dtype=o.dtype)


def _dot_dims(node):
    (lc, rc), (lb, rb) = node.params["dimension_numbers"]
    return tuple(lc), tuple(rc), tuple(lb), tuple(rb)


def _in_order(stages: Stages, o: Operand, order: Sequence[int]) -> Operand:
    """``o`` with its dimensions in ``order``: itself (:func:`_dense`) when they are in
    order already, else a transposed copy in a stage of its own."""
    order = list(order)
    if order == list(range(o.ndim)):
        return _dense(stages, o)

    def fn(i: Index) -> Expr:
        src: List[Expr] = [Const(0, "int64")] * len(order)
        for pos, d in enumerate(order):
            src[d] = i[pos]
        return _at(o, tuple(src))

    return stages.compute("transpose", tuple(o.shape[d] for d in order), fn, dtype=o.dtype)


def _lower_dot(node, ins, stages, out_types):
    """``out[b.., m.., n..] = sum_k lhs[b.., m.., k..] * rhs[b.., k.., n..]``, the operands
    brought into that order first (the layout the micro-kernel rule recognises: the
    reduction last in A, the output's columns last in B)."""
    t = out_types[0]
    lc, rc, lb, rb = _dot_dims(node)
    l_free = [d for d in range(ins[0].ndim) if d not in lc and d not in lb]
    r_free = [d for d in range(ins[1].ndim) if d not in rc and d not in rb]
    lhs = _in_order(stages, ins[0], list(lb) + l_free + list(lc))
    rhs = _in_order(stages, ins[1], list(rb) + list(rc) + r_free)
    nb, nm, nk = len(lb), len(l_free), len(lc)
    base = "batch_matmul" if lb else "matmul"

    def body(i: Index):
        red, ks = [], []
        for n in range(nk):
            extent = lhs.shape[nb + nm + n]
            if extent == 1:
                ks.append(Const(0, "int64"))
                continue
            k = reduce_axis(extent, name=f"k{n}" if nk > 1 else "k")
            red.append(k)
            ks.append(k)
        batch, m, n_ = i[:nb], i[nb:nb + nm], i[nb + nm:]
        prod = _at(lhs, tuple(batch) + tuple(m) + tuple(ks)) * _at(rhs, tuple(batch) + tuple(ks) + tuple(n_))
        return te_sum(prod, axis=red) if red else prod

    return [stages.compute(base, t.shape, body)]


def _dot_flops(node, in_types, out_types) -> int:
    lc, _, _, _ = _dot_dims(node)
    k = int(np.prod([in_types[0].shape[d] for d in lc], dtype=np.int64)) if lc else 1
    return 2 * _size(out_types[0]) * k


def _check_dot(node, in_types, out_types, where) -> None:
    if any(t.dtype != "float32" for t in in_types) and not _integer_product(in_types, out_types):
        raise FrontEndError(f"{where()}: dot_general of non-float32 operands")


def _integer_product(in_types, out_types) -> bool:
    """Whether a matmul or convolution multiplies integers into int32 (a quantized layer:
    8-bit operands, or int32 ones a conversion of 8-bit values makes)."""
    ints = ("int32",) + QUANTIZED
    return out_types[0].dtype == "int32" and all(t.dtype in ints for t in in_types)


def _conv_params(node, in_types):
    p = node.params
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = tuple(dn.lhs_spec), tuple(dn.rhs_spec), tuple(dn.out_spec)
    nsp = len(lhs_spec) - 2
    strides = tuple(int(s) for s in p["window_strides"])
    padding = tuple((int(lo), int(hi)) for lo, hi in p["padding"])
    rdil = tuple(int(d) for d in (p.get("rhs_dilation") or (1,) * nsp))
    groups = int(p.get("feature_group_count", 1))
    return lhs_spec, rhs_spec, out_spec, nsp, strides, padding, rdil, groups


def _check_conv(node, in_types, out_types, where) -> None:
    p = node.params
    if any(int(d) != 1 for d in (p.get("lhs_dilation") or ())):
        raise FrontEndError(f"{where()}: lhs_dilation {tuple(p['lhs_dilation'])} (a transposed convolution) is not supported")
    if int(p.get("batch_group_count", 1)) != 1:
        raise FrontEndError(f"{where()}: batch_group_count {p['batch_group_count']} is not supported")
    if any(lo < 0 or hi < 0 for lo, hi in p["padding"]):
        raise FrontEndError(f"{where()}: negative padding {tuple(p['padding'])} is not supported")
    if any(t.dtype != "float32" for t in in_types) and not _integer_product(in_types, out_types):
        raise FrontEndError(f"{where()}: convolution of non-float32 operands")


def _pad_stage(stages: Stages, x: Operand, before: Sequence[int], after: Sequence[int], value: float) -> Operand:
    """``x`` padded with ``value`` as its own stage (``x`` itself when nothing is padded)."""
    if not any(before) and not any(after):
        return x
    shape = tuple(s + b + a for s, b, a in zip(x.shape, before, after))

    def body(i: Index) -> Expr:
        conds, src = [], []
        for e, s, b, a in zip(i, x.shape, before, after):
            if b:
                conds.append(binary("ge", e, Const(b, "int64")))
            if a:
                conds.append(binary("lt", e, Const(s + b, "int64")))
            src.append(e - b if b else e)
        fill = _f32(value) if x.dtype == "float32" else Const(int(value), x.dtype)  # an integer convolution's 0
        return if_then_else(all_of(*conds), _at(x, tuple(src)), fill)

    return stages.compute("pad", shape, body, dtype=x.dtype)


def _lower_conv(node, ins, stages, out_types):
    lhs, rhs = (_dense(stages, o) for o in ins)
    t = out_types[0]
    lhs_spec, rhs_spec, out_spec, nsp, strides, padding, rdil, groups = _conv_params(node, [lhs, rhs])
    ci_g = rhs.shape[rhs_spec[1]]
    co = rhs.shape[rhs_spec[0]]
    co_g = co // groups
    kernel = [rhs.shape[d] for d in rhs_spec[2:]]
    before = [0] * lhs.ndim
    after = [0] * lhs.ndim
    for k, (lo, hi) in enumerate(padding):
        before[lhs_spec[2 + k]], after[lhs_spec[2 + k]] = lo, hi
    padded = _pad_stage(stages, lhs, before, after, 0.0)
    if groups > 1 and ci_g == 1:
        base = "depthwise_conv2d" if nsp == 2 else f"depthwise_conv{nsp}d"
    elif groups > 1:
        base = f"group_conv{nsp}d"
    else:
        base = f"conv{nsp}d"

    def body(i: Index):
        n, c = i[out_spec[0]], i[out_spec[1]]
        sp = [i[d] for d in out_spec[2:]]
        red = []
        rc = reduce_axis(ci_g, name="rc") if ci_g > 1 else Const(0, "int64")
        taps = []
        for k in range(nsp):
            if kernel[k] > 1:
                r = reduce_axis(kernel[k], name=f"r{k}")
                red.append(r)
                taps.append(r)
            else:
                taps.append(Const(0, "int64"))
        if ci_g > 1:
            red.append(rc)
        chan = rc if groups == 1 else (c // co_g) * ci_g + rc if ci_g > 1 else c // co_g
        li: List[Expr] = [Const(0, "int64")] * lhs.ndim
        li[lhs_spec[0]], li[lhs_spec[1]] = n, chan
        for k in range(nsp):
            li[lhs_spec[2 + k]] = sp[k] * strides[k] + taps[k] * rdil[k]
        ri: List[Expr] = [Const(0, "int64")] * rhs.ndim
        ri[rhs_spec[0]], ri[rhs_spec[1]] = c, rc
        for k in range(nsp):
            ri[rhs_spec[2 + k]] = taps[k]
        prod = _at(padded, tuple(li)) * _at(rhs, tuple(ri))
        return te_sum(prod, axis=red) if red else prod

    return [stages.compute(base, t.shape, body)]


def _conv_flops(node, in_types, out_types) -> int:
    _, rhs_spec, _, _, _, _, _, _ = _conv_params(node, in_types)
    w = in_types[1]
    per_output = int(np.prod([w.shape[d] for d in rhs_spec[1:]], dtype=np.int64))
    return 2 * _size(out_types[0]) * per_output


_POOLS = {
    "reduce_window_max": ("max_pool", te_max, "max"),
    "reduce_window_min": ("min_pool", te_min, "min"),
    "reduce_window_sum": ("sum_pool", te_sum, "sum"),
}


def _check_pool(node, in_types, out_types, where) -> None:
    p = node.params
    if any(int(d) != 1 for d in p.get("base_dilation") or ()):
        raise FrontEndError(f"{where()}: base_dilation {tuple(p['base_dilation'])} is not supported")
    if any(lo < 0 or hi < 0 for lo, hi in p["padding"]):
        raise FrontEndError(f"{where()}: negative padding is not supported")


def _lower_pool(node, ins, stages, out_types):
    (x,) = ins
    t = out_types[0]
    p = node.params
    base, combine, combiner = _POOLS[node.op]
    identity = reduction_identity(combiner, x.dtype)  # a quantized network pools bytes
    window = [int(w) for w in p["window_dimensions"]]
    strides = [int(s) for s in p["window_strides"]]
    wdil = [int(d) for d in (p.get("window_dilation") or (1,) * x.ndim)]
    padded = _pad_stage(stages, x, [int(lo) for lo, _ in p["padding"]], [int(hi) for _, hi in p["padding"]], identity)

    def body(i: Index):
        red, src = [], []
        for d in range(x.ndim):
            if window[d] > 1:
                r = reduce_axis(window[d], name=f"r{d}")
                red.append(r)
                src.append(i[d] * strides[d] + r * wdil[d])
            else:
                src.append(i[d] * strides[d] if strides[d] != 1 else i[d])
        val = _at(padded, tuple(src))
        return combine(val, axis=red) if red else val

    return [stages.compute(base, t.shape, body)]


def _pool_flops(node, in_types, out_types) -> int:
    return _size(out_types[0]) * int(np.prod(node.params["window_dimensions"], dtype=np.int64))


# ----------------------------------------------------------------------------- the table


def _view(lower: Lowering, check: Callable = _no_check) -> OpDef:
    return OpDef(VIEW, lower, lambda *a: 0, check)


def _build_table() -> Dict[str, OpDef]:
    table: Dict[str, OpDef] = {}
    for prim, (base, fn) in _ELEMENTWISE.items():
        check = _check_bitwise if prim in ("and", "or", "not") else _check_int_arith
        table[prim] = OpDef(ELEMWISE, _ew(base, fn), _ew_flops, check)
    table["integer_pow"] = OpDef(ELEMWISE, _lower_integer_pow, _ew_flops, _check_int_arith)
    table["round"] = OpDef(ELEMWISE, _lower_round, _ew_flops, _check_int_arith)
    table["convert_element_type"] = _view(_lower_convert)
    table["broadcast_in_dim"] = _view(_lower_broadcast)
    table["reshape"] = _view(_lower_reshape, _check_reshape)
    table["squeeze"] = _view(_lower_squeeze)
    table["transpose"] = _view(_lower_transpose)
    table["slice"] = _view(_lower_slice)
    table["rev"] = _view(_lower_rev)
    table["iota"] = _view(_lower_iota)
    table["split"] = _view(_lower_split)
    table["pad"] = OpDef(ELEMWISE, _lower_pad, lambda *a: 0, _check_pad)
    table["concatenate"] = OpDef(ELEMWISE, _lower_concatenate, lambda *a: 0)
    table["stack"] = OpDef(ELEMWISE, ix.lower_stack, lambda *a: 0)
    table["tile"] = _view(ix.lower_tile, ix.check_tile)
    table["gather"] = _view(ix.lower_gather, ix.check_gather)
    table["cumsum"] = OpDef(REDUCE, ix.lower_cumsum, ix.cumsum_flops, ix.check_cumsum)
    for prim in _COMBINERS:
        table[prim] = OpDef(REDUCE, _lower_reduce, _reduce_flops)
    table["argmax"] = OpDef(REDUCE, _lower_argminmax, _reduce_flops, _check_argminmax)
    table["argmin"] = OpDef(REDUCE, _lower_argminmax, _reduce_flops, _check_argminmax)
    table["dot_general"] = OpDef(ANCHOR, _lower_dot, _dot_flops, _check_dot)
    table["conv_general_dilated"] = OpDef(ANCHOR, _lower_conv, _conv_flops, _check_conv)
    for prim in _POOLS:
        table[prim] = OpDef(ANCHOR, _lower_pool, _pool_flops, _check_pool)
    return table


#: Every primitive the graph can hold, by JAX name.
OPS: Dict[str, OpDef] = _build_table()
#: Elementwise primitives whose 0-d operands broadcast (scalar literals in a jaxpr).
SCALAR_BROADCASTING = frozenset(_ELEMENTWISE) | {"integer_pow"}


def reduction_length(node, in_types) -> int:
    """Terms summed per output element of ``node`` (1 for a node that reduces nothing):
    what the numerical tolerance of a task's check scales with."""
    if node.op == "dot_general":
        lc, _, _, _ = _dot_dims(node)
        return int(np.prod([in_types[0].shape[d] for d in lc], dtype=np.int64)) if lc else 1
    if node.op == "conv_general_dilated":
        _, rhs_spec, _, _, _, _, _, _ = _conv_params(node, in_types)
        return int(np.prod([in_types[1].shape[d] for d in rhs_spec[1:]], dtype=np.int64))
    if node.op in _COMBINERS or node.op in ("argmax", "argmin"):
        return int(np.prod([in_types[0].shape[a] for a in _axes_of(node)], dtype=np.int64))
    if node.op in _POOLS:
        return int(np.prod(node.params["window_dimensions"], dtype=np.int64))
    if node.op == "cumsum":
        return int(in_types[0].shape[int(node.params["axis"]) % len(in_types[0].shape)])
    return 1


__all__ = ["OPS", "OpDef", "ALLOWED_DTYPES", "ANCHOR", "REDUCE", "ELEMWISE", "VIEW", "reshape_map", "reduction_length"]
