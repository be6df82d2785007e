"""The ONNX operators :func:`~probsched.graph.from_onnx` imports, each written with
numpy (when its inputs are known at import: shape arithmetic, weights) or ``jax.numpy`` and
``jax.lax`` (traced into the graph), with ONNX's semantics for opsets 13 to 21.

A converter takes the node's inputs (:class:`~.onnx_layout.Value`, None for an omitted
optional input), its attributes (:class:`Attrs`, which records the ones read: an attribute
no converter reads is refused) and the opset, and returns the node's outputs. Convolutions,
batch norm, pooling, elementwise operators, concatenation and reductions that keep their
axes compute in the layout their operand is held in (:mod:`.onnx_layout`); every other
operator reads the ONNX layout.

>>> sorted(CONVERTERS)[:6]
['Abs', 'Add', 'And', 'ArgMax', 'ArgMin', 'AveragePool']
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import FrontEndError
from . import onnx_qdq
from .onnx_layout import Value, channels_last, common_layout, inverse, is_static, operand_in, xp_of

Converter = Callable[[List[Optional[Value]], "Attrs", int], Any]

#: ONNX element types the import reads (TensorProto numbers): the others are refused.
DTYPES = {1: "float32", 6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64", 16: "bfloat16", 2: "uint8",
          3: "int8"}


class Attrs:
    """A node's attributes as Python values; remembers which ones were read."""

    def __init__(self, attrs: Dict[str, Any], n_outputs: int = 1) -> None:
        self._attrs = attrs
        self.read: set = set()
        self.n_outputs = n_outputs  # how many outputs the node names (Split without sizes)

    def get(self, name: str, default: Any = None) -> Any:
        """The attribute's value, or ``default``."""
        self.read.add(name)
        return self._attrs.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self._attrs

    def unread(self) -> Dict[str, Any]:
        """The attributes no converter read (what the import does not support)."""
        return {k: v for k, v in self._attrs.items() if k not in self.read}


CONVERTERS: Dict[str, Converter] = {}


def converter(*names: str):
    """Register a converter under ONNX operator names."""

    def deco(fn: Converter) -> Converter:
        for n in names:
            CONVERTERS[n] = fn
        return fn

    return deco


def _jnp():
    import jax.numpy as jnp

    return jnp


def _lax():
    import jax.lax as lax

    return lax


def static_ints(v: Optional[Value], what: str) -> Optional[List[int]]:
    """An input that must be known at import (a shape, axes, pads) as a list of ints."""
    if v is None:
        return None
    if not v.static:
        raise FrontEndError(f"{what} is computed from the model's inputs (a dynamic shape); probsched compiles static shapes")
    return [int(x) for x in np.asarray(v.data).reshape(-1)]


def _axes(a: Attrs, ins: List[Optional[Value]], pos: int) -> Optional[List[int]]:
    """Axes given as an attribute (older opsets) or as input ``pos`` (newer)."""
    if len(ins) > pos and ins[pos] is not None:
        return static_ints(ins[pos], "axes")
    return a.get("axes")


def _np_dtype(to: int) -> str:
    if to not in DTYPES:
        raise FrontEndError(f"cast to ONNX element type {to} is not supported (supported: {', '.join(sorted(set(DTYPES.values())))})")
    return DTYPES[to]


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# ----------------------------------------------------------------------------- elementwise


def _elementwise(fn: Callable[..., Any]) -> Converter:
    """An elementwise operator over broadcast operands, computed in their common layout."""

    def convert(ins, a, opset):
        perm = common_layout(ins)
        args = [operand_in(v, perm) if v is not None else None for v in ins]
        return Value(fn(xp_of(*args), *args), perm)

    return convert


def _erf(xp, x):
    if xp is np:
        from scipy.special import erf

        return erf(x).astype(x.dtype)
    return _lax().erf(x)


_UNARY = {
    "Relu": lambda xp, x: xp.maximum(x, np.float32(0)),
    "Sigmoid": lambda xp, x: _jax_nn().sigmoid(x) if xp is not np else (1 / (1 + np.exp(-x))).astype(x.dtype),
    "Tanh": lambda xp, x: xp.tanh(x),
    "Exp": lambda xp, x: xp.exp(x),
    "Log": lambda xp, x: xp.log(x),
    "Sqrt": lambda xp, x: xp.sqrt(x),
    "Reciprocal": lambda xp, x: 1 / x,
    "Neg": lambda xp, x: -x,
    "Abs": lambda xp, x: xp.abs(x),
    "Floor": lambda xp, x: xp.floor(x),
    "Ceil": lambda xp, x: xp.ceil(x),
    "Erf": _erf,
    "Not": lambda xp, x: xp.logical_not(x),
    "Softplus": lambda xp, x: xp.log(xp.exp(x) + 1),
    "Sign": lambda xp, x: xp.sign(x),
    "IsNaN": lambda xp, x: xp.isnan(x),
    "IsInf": lambda xp, x: xp.isinf(x),
}

_BINARY = {
    "Add": lambda xp, x, y: x + y,
    "Sub": lambda xp, x, y: x - y,
    "Mul": lambda xp, x, y: x * y,
    "Div": lambda xp, x, y: _int_div(xp, x, y) if np.issubdtype(np.dtype(x.dtype), np.integer) else x / y,
    "Pow": lambda xp, x, y: xp.power(x, y.astype(x.dtype) if hasattr(y, "astype") else y),
    "Equal": lambda xp, x, y: xp.equal(x, y),
    "Less": lambda xp, x, y: xp.less(x, y),
    "LessOrEqual": lambda xp, x, y: xp.less_equal(x, y),
    "Greater": lambda xp, x, y: xp.greater(x, y),
    "GreaterOrEqual": lambda xp, x, y: xp.greater_equal(x, y),
    "And": lambda xp, x, y: xp.logical_and(x, y),
    "Or": lambda xp, x, y: xp.logical_or(x, y),
    "Xor": lambda xp, x, y: xp.logical_xor(x, y),
    "Where": lambda xp, c, x, y: xp.where(c, x, y),
}


def _int_div(xp, x, y):
    """ONNX's integer division truncates toward zero (numpy's ``//`` floors)."""
    return xp.sign(x) * xp.sign(y) * (xp.abs(x) // xp.abs(y))


def _jax_nn():
    import jax

    return jax.nn


for _name, _fn in {**_UNARY, **_BINARY}.items():
    CONVERTERS[_name] = _elementwise(_fn)


def _variadic(reduce: Callable[[Any, Any, Any], Any], mean: bool = False) -> Converter:
    def fn(xp, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = reduce(xp, out, x)
        return out / len(xs) if mean else out

    return _elementwise(fn)


CONVERTERS["Max"] = _variadic(lambda xp, x, y: xp.maximum(x, y))
CONVERTERS["Min"] = _variadic(lambda xp, x, y: xp.minimum(x, y))
CONVERTERS["Sum"] = _variadic(lambda xp, x, y: x + y)
CONVERTERS["Mean"] = _variadic(lambda xp, x, y: x + y, mean=True)


@converter("Mod")
def _mod(ins, a, opset):
    fmod = a.get("fmod", 0)
    return _elementwise(lambda xp, x, y: xp.fmod(x, y) if fmod else xp.mod(x, y))(ins, a, opset)


@converter("LeakyRelu")
def _leaky_relu(ins, a, opset):
    alpha = np.float32(a.get("alpha", 0.01))
    return _elementwise(lambda xp, x: xp.where(x >= 0, x, x * alpha))(ins, a, opset)


@converter("Elu")
def _elu(ins, a, opset):
    alpha = np.float32(a.get("alpha", 1.0))
    return _elementwise(lambda xp, x: xp.where(x > 0, x, alpha * (xp.exp(x) - 1)))(ins, a, opset)


@converter("HardSigmoid")
def _hard_sigmoid(ins, a, opset):
    alpha, beta = np.float32(a.get("alpha", 0.2)), np.float32(a.get("beta", 0.5))
    return _elementwise(lambda xp, x: xp.minimum(xp.maximum(x * alpha + beta, np.float32(0)), np.float32(1)))(ins, a, opset)


@converter("HardSwish")
def _hard_swish(ins, a, opset):
    six = np.float32(1 / 6)
    return _elementwise(
        lambda xp, x: x * xp.minimum(xp.maximum(x * six + np.float32(0.5), np.float32(0)), np.float32(1)))(ins, a, opset)


@converter("Gelu")
def _gelu(ins, a, opset):
    approximate = a.get("approximate", "none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    if approximate not in ("none", "tanh"):
        raise FrontEndError(f"attribute approximate={approximate!r} (supported: 'none', 'tanh')")

    def fn(xp, x):
        if approximate == "tanh":
            inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
            return np.float32(0.5) * x * (1 + xp.tanh(inner))
        return np.float32(0.5) * x * (1 + _erf(xp, x * np.float32(1 / math.sqrt(2))))

    return _elementwise(fn)(ins, a, opset)


@converter("Clip")
def _clip(ins, a, opset):
    lo = ins[1] if len(ins) > 1 else None
    hi = ins[2] if len(ins) > 2 else None
    lo_v = lo.data if lo is not None else a.get("min")
    hi_v = hi.data if hi is not None else a.get("max")
    x = ins[0]
    xp = xp_of(x.data, lo_v if lo is not None else None, hi_v if hi is not None else None)
    out = x.data
    if lo_v is not None:
        out = xp.maximum(out, xp.asarray(lo_v, dtype=out.dtype) if xp is np else np.asarray(lo_v).astype(x.dtype))
    if hi_v is not None:
        out = xp.minimum(out, xp.asarray(hi_v, dtype=out.dtype) if xp is np else np.asarray(hi_v).astype(x.dtype))
    return Value(out, x.perm)


@converter("PRelu")
def _prelu(ins, a, opset):
    return _elementwise(lambda xp, x, s: xp.where(x >= 0, x, x * s))(ins, a, opset)


@converter("Cast", "CastLike")
def _cast(ins, a, opset):
    x = ins[0]
    a.get("saturate")
    a.get("round_mode")
    dtype = ins[1].dtype if len(ins) > 1 else _np_dtype(a.get("to"))
    if x.static:
        return Value(np.asarray(x.data).astype(dtype), x.perm)
    if dtype in ("float64", "float16", "bfloat16"):
        # the graph computes in float32: a cast to double is a no-op there; to half, refused
        if dtype != "float64":
            raise FrontEndError(f"cast of a computed value to {dtype}; probsched computes in float32")
        dtype = "float32"
    if dtype == "int64":
        dtype = "int32"
    return Value(x.data.astype(dtype), x.perm)


@converter("Identity", "Dropout")
def _identity(ins, a, opset):
    a.get("seed")
    a.get("ratio")  # inference: dropout is the identity whatever its ratio
    mode = ins[2] if len(ins) > 2 else None
    if mode is not None and not mode.static:
        raise FrontEndError("Dropout with a computed training_mode")
    if mode is not None and bool(np.asarray(mode.data)):
        raise FrontEndError("Dropout in training mode (training_mode=True)")
    x = ins[0]
    return [x, Value(np.ones(x.shape, bool))]


# ----------------------------------------------------------------------------- constants, shapes


@converter("Constant")
def _constant(ins, a, opset):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        v = a.get(key)
        if v is not None:
            if key.startswith("value_float"):
                return Value(np.asarray(v, np.float32))
            if key.startswith("value_int"):
                return Value(np.asarray(v, np.int64))
            return Value(v)
    for key in ("sparse_value", "value_string", "value_strings"):
        if key in a:
            raise FrontEndError(f"a Constant's {key} is not supported")
    raise FrontEndError("a Constant without a value")


@converter("Shape")
def _shape(ins, a, opset):
    shape = ins[0].shape
    start, end = a.get("start", 0), a.get("end", None)
    return Value(np.asarray(shape[slice(start, end)], np.int64))


@converter("Size")
def _size(ins, a, opset):
    return Value(np.asarray(int(np.prod(ins[0].shape, dtype=np.int64)), np.int64))


@converter("ConstantOfShape")
def _constant_of_shape(ins, a, opset):
    shape = static_ints(ins[0], "ConstantOfShape's shape")
    value = a.get("value")
    fill = np.asarray(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    return Value(np.full(shape, fill[0], dtype=fill.dtype))


@converter("Range")
def _range(ins, a, opset):
    start, limit, delta = ins
    if not (start.static and limit.static and delta.static):
        raise FrontEndError("Range over computed bounds (a dynamic shape)")
    dtype = start.data.dtype
    return Value(np.arange(start.data, limit.data, delta.data).astype(dtype))


@converter("Reshape")
def _reshape(ins, a, opset):
    x = ins[0]
    shape = static_ints(ins[1], "Reshape's shape")
    allowzero = a.get("allowzero", 0)
    src = x.shape
    out = [src[i] if (d == 0 and not allowzero) else d for i, d in enumerate(shape)]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        out[out.index(-1)] = int(np.prod(src, dtype=np.int64)) // max(known, 1)

    def reshape(v: Value) -> Value:
        data = v.logical()
        return Value(xp_of(data).reshape(data, tuple(out)))

    return replace(reshape(x), qdq=onnx_qdq.moved(x, reshape))


@converter("Flatten")
def _flatten(ins, a, opset):
    x = ins[0]
    axis = _norm_axis(a.get("axis", 1), len(x.shape))
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    data = x.logical()
    return Value(xp_of(data).reshape(data, (lead, -1 if data.size else 0)))


@converter("Transpose")
def _transpose(ins, a, opset):
    x = ins[0]
    rank = len(x.shape)
    perm = tuple(a.get("perm") or range(rank - 1, -1, -1))
    inv = inverse(perm)

    def transpose(v: Value) -> Value:
        # no data moves: the result is the same array in a layout composed of both
        held = v.perm if v.perm is not None else tuple(range(rank))
        new = tuple(inv[p] for p in held)
        return Value(v.data, None if new == tuple(range(rank)) else new)

    return replace(transpose(x), qdq=onnx_qdq.moved(x, transpose))


@converter("Squeeze")
def _squeeze(ins, a, opset):
    x = ins[0]
    axes = _axes(a, ins, 1)
    shape = x.shape
    axes = [d for d in range(len(shape)) if shape[d] == 1] if axes is None else [_norm_axis(d, len(shape)) for d in axes]
    data = x.logical()
    return Value(xp_of(data).reshape(data, tuple(s for d, s in enumerate(shape) if d not in axes)))


@converter("Unsqueeze")
def _unsqueeze(ins, a, opset):
    x = ins[0]
    axes = _axes(a, ins, 1)
    rank = len(x.shape) + len(axes)
    axes = sorted(_norm_axis(d, rank) for d in axes)
    shape = list(x.shape)
    for d in axes:
        shape.insert(d, 1)
    data = x.logical()
    return Value(xp_of(data).reshape(data, tuple(shape)))


@converter("Expand")
def _expand(ins, a, opset):
    x = ins[0]
    shape = static_ints(ins[1], "Expand's shape")
    data = x.logical()
    return Value(xp_of(data).broadcast_to(data, np.broadcast_shapes(tuple(x.shape), tuple(shape))))


@converter("Concat")
def _concat(ins, a, opset):
    vals = [v for v in ins if v is not None]
    axis = _norm_axis(a.get("axis"), len(vals[0].shape))
    perm = vals[0].perm
    if perm is not None and all(v.perm == perm for v in vals):
        data = [v.data for v in vals]
        return Value(xp_of(*data).concatenate(data, axis=perm.index(axis)), perm)
    data = [v.logical() for v in vals]
    xp = xp_of(*data)
    if xp is not np:
        data = [d.astype(np.int32) if is_static(d) and d.dtype == np.int64 else d for d in data]
    return Value(xp.concatenate(data, axis=axis))


@converter("Split")
def _split(ins, a, opset):
    x = ins[0]
    axis = _norm_axis(a.get("axis", 0), len(x.shape))
    sizes = static_ints(ins[1], "Split's sizes") if len(ins) > 1 and ins[1] is not None else a.get("split")
    if sizes is None:
        n = a.get("num_outputs") or a.n_outputs
        extent = x.shape[axis]
        chunk = -(-extent // n)
        sizes = [min(chunk, extent - k * chunk) for k in range(n)]
    data = x.logical()
    xp = xp_of(data)
    bounds = np.cumsum(sizes)[:-1].tolist()
    return [Value(p) for p in xp.split(data, bounds, axis=axis)]


@converter("Slice")
def _slice(ins, a, opset):
    x = ins[0]
    starts = static_ints(ins[1], "Slice's starts")
    ends = static_ints(ins[2], "Slice's ends")
    shape = x.shape
    axes = static_ints(ins[3], "Slice's axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = static_ints(ins[4], "Slice's steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    index = [slice(None)] * len(shape)
    for s, e, ax, st in zip(starts, ends, axes, steps):
        ax = _norm_axis(ax, len(shape))
        n = shape[ax]
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
            index[ax] = slice(s, max(e, s), st)
        elif st < 0:
            s, e = min(max(s, -1), n - 1), min(max(e, -1), n - 1)
            index[ax] = slice(s, e if e >= 0 else None, st) if s > e else slice(0, 0)
        else:
            raise FrontEndError("Slice with step 0")
    return Value(x.logical()[tuple(index)])


@converter("Gather")
def _gather(ins, a, opset):
    x, idx = ins
    axis = _norm_axis(a.get("axis", 0), len(x.shape))
    data = x.logical()
    n = x.shape[axis]
    if idx.static:
        i = np.asarray(idx.data).astype(np.int64)
        i = np.where(i < 0, i + n, i)
        if x.static:
            return Value(np.take(data, i, axis=axis))
        if i.ndim == 0:  # x[:, 0]: a slice, not a gather
            return Value(_lax().index_in_dim(data, int(i), axis, keepdims=False))
        return Value(_jnp().take(data, i.astype(np.int32), axis=axis, mode="clip"))
    jnp = _jnp()
    i = idx.logical()
    i = jnp.where(i < 0, i + n, i)
    return Value(jnp.take(data, i, axis=axis, mode="clip"))


@converter("GatherElements")
def _gather_elements(ins, a, opset):
    x, idx = ins
    axis = _norm_axis(a.get("axis", 0), len(x.shape))
    data, i = x.logical(), idx.logical()
    n = x.shape[axis]
    xp = xp_of(data, i)
    i = xp.where(i < 0, i + n, i)
    if xp is np:
        return Value(np.take_along_axis(data, i, axis=axis))
    return Value(xp.take_along_axis(data, i.astype(np.int32) if is_static(i) else i, axis=axis, mode="clip"))


@converter("GatherND")
def _gather_nd(ins, a, opset):
    x, idx = ins
    if a.get("batch_dims", 0):
        raise FrontEndError("GatherND with batch_dims > 0 is not supported")
    data, i = x.logical(), idx.logical()
    depth = np.shape(i)[-1]
    xp = xp_of(data, i)
    i = xp.where(i < 0, i + np.asarray(x.shape[:depth], np.int64).astype(i.dtype), i)
    if is_static(i) and xp is not np:
        i = i.astype(np.int32)
    return Value(data[tuple(i[..., k] for k in range(depth))])


@converter("Tile")
def _tile(ins, a, opset):
    reps = static_ints(ins[1], "Tile's repeats")
    data = ins[0].logical()
    return Value(xp_of(data).tile(data, reps))


@converter("Trilu")
def _trilu(ins, a, opset):
    upper = a.get("upper", 1)
    k = static_ints(ins[1], "Trilu's k")[0] if len(ins) > 1 and ins[1] is not None else 0
    data = ins[0].logical()
    xp = xp_of(data)
    return Value(xp.triu(data, k) if upper else xp.tril(data, k))


@converter("CumSum")
def _cumsum(ins, a, opset):
    x = ins[0]
    axis = _norm_axis(static_ints(ins[1], "CumSum's axis")[0], len(x.shape))
    exclusive, reverse = a.get("exclusive", 0), a.get("reverse", 0)
    data = x.logical()
    xp = xp_of(data)
    if reverse:
        data = xp.flip(data, axis)
    out = xp.cumsum(data, axis=axis, dtype=data.dtype)
    if exclusive:
        out = out - data
    return Value(xp.flip(out, axis) if reverse else out)


@converter("Pad")
def _pad(ins, a, opset):
    x = ins[0]
    rank = len(x.shape)
    pads = static_ints(ins[1], "Pad's pads") if len(ins) > 1 and ins[1] is not None else a.get("pads")
    value = ins[2].data if len(ins) > 2 and ins[2] is not None else a.get("value", 0.0)
    axes = static_ints(ins[3], "Pad's axes") if len(ins) > 3 and ins[3] is not None else list(range(rank))
    mode = a.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("constant", "reflect", "edge"):
        raise FrontEndError(f"Pad mode {mode!r} (supported: constant, reflect, edge)")
    width = [(0, 0)] * rank
    n = len(axes)
    for k, ax in enumerate(axes):
        width[_norm_axis(ax, rank)] = (pads[k], pads[k + n])
    if any(lo < 0 or hi < 0 for lo, hi in width):
        raise FrontEndError(f"negative pads {pads}")
    perm = x.perm
    data = x.data if perm is not None else x.logical()
    if perm is not None:
        width = [width[p] for p in perm]
    xp = xp_of(data)
    if mode == "constant":
        fill = np.asarray(value).reshape(-1)[0] if np.size(value) else 0
        return Value(xp.pad(data, width, mode="constant", constant_values=np.asarray(fill).astype(data.dtype)), perm)
    return Value(xp.pad(data, width, mode=mode), perm)


# ----------------------------------------------------------------------------- reductions, normalisation


def _reduce(kind: str) -> Converter:
    def convert(ins, a, opset):
        x = ins[0]
        keepdims = a.get("keepdims", 1)
        noop = a.get("noop_with_empty_axes", 0)
        axes = _axes(a, ins, 1)
        rank = len(x.shape)
        if not axes:
            if noop:
                return x
            axes = list(range(rank))
        axes = tuple(sorted(_norm_axis(d, rank) for d in axes))
        if keepdims and x.perm is not None:
            data, perm, phys = x.data, x.perm, tuple(sorted(x.perm.index(d) for d in axes))
        else:
            data, perm, phys = x.logical(), None, axes
        xp = xp_of(data)
        if kind == "ReduceMean":
            out = xp.mean(data, axis=phys, keepdims=bool(keepdims))
        elif kind == "ReduceSum":
            out = xp.sum(data, axis=phys, keepdims=bool(keepdims))
        elif kind == "ReduceMax":
            out = xp.max(data, axis=phys, keepdims=bool(keepdims))
        elif kind == "ReduceMin":
            out = xp.min(data, axis=phys, keepdims=bool(keepdims))
        elif kind == "ReduceProd":
            out = xp.prod(data, axis=phys, keepdims=bool(keepdims))
        elif kind == "ReduceSumSquare":
            out = xp.sum(data * data, axis=phys, keepdims=bool(keepdims))
        elif kind == "ReduceL2":
            out = xp.sqrt(xp.sum(data * data, axis=phys, keepdims=bool(keepdims)))
        else:  # ReduceL1
            out = xp.sum(xp.abs(data), axis=phys, keepdims=bool(keepdims))
        if xp is np:
            out = np.asarray(out, dtype=data.dtype)
        return Value(out, perm)

    return convert


for _name in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL2", "ReduceL1"):
    CONVERTERS[_name] = _reduce(_name)


def _arg(kind: str) -> Converter:
    def convert(ins, a, opset):
        x = ins[0]
        axis = _norm_axis(a.get("axis", 0), len(x.shape))
        keepdims = a.get("keepdims", 1)
        if a.get("select_last_index", 0):
            raise FrontEndError("select_last_index=1 is not supported")
        data = x.logical()
        xp = xp_of(data)
        out = (xp.argmax if kind == "ArgMax" else xp.argmin)(data, axis=axis)
        if keepdims:
            out = xp.expand_dims(out, axis)
        return Value(out.astype(np.int64) if xp is np else out)

    return convert


CONVERTERS["ArgMax"] = _arg("ArgMax")
CONVERTERS["ArgMin"] = _arg("ArgMin")


def _softmax_of(log: bool) -> Converter:
    def convert(ins, a, opset):
        x = ins[0]
        rank = len(x.shape)
        axis = _norm_axis(a.get("axis", -1 if opset >= 13 else 1), rank)
        data = x.logical()
        nn = _jax_nn()
        fn = nn.log_softmax if log else nn.softmax
        if opset < 13:  # the input is read as a matrix whose rows start at `axis`
            lead = int(np.prod(x.shape[:axis], dtype=np.int64))
            return Value(fn(data.reshape(lead, -1), axis=1).reshape(x.shape))
        return Value(fn(data, axis=axis))

    return convert


CONVERTERS["Softmax"] = _softmax_of(False)
CONVERTERS["LogSoftmax"] = _softmax_of(True)


@converter("LayerNormalization")
def _layer_norm(ins, a, opset):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    rank = len(x.shape)
    axis = _norm_axis(a.get("axis", -1), rank)
    eps = np.float32(a.get("epsilon", 1e-5))
    if a.get("stash_type", 1) != 1:
        raise FrontEndError("stash_type other than float32")
    data = x.logical()
    xp = xp_of(data)
    axes = tuple(range(axis, rank))
    mean = xp.mean(data, axis=axes, keepdims=True)
    d = data - mean
    var = xp.mean(d * d, axis=axes, keepdims=True)
    y = d / xp.sqrt(var + eps) * scale.logical()
    if bias is not None:
        y = y + bias.logical()
    return Value(y)


@converter("BatchNormalization")
def _batch_norm(ins, a, opset):
    x, scale, bias, mean, var = ins[:5]
    eps = np.float32(a.get("epsilon", 1e-5))
    a.get("momentum")
    if a.get("training_mode", 0):
        raise FrontEndError("BatchNormalization in training mode")
    rank = len(x.shape)
    params = [scale, bias, mean, var]
    if all(p.static for p in params):
        s = (scale.data / np.sqrt(var.data + eps)).astype(np.float32)
        b = (bias.data - mean.data * s).astype(np.float32)
    else:
        jnp = _jnp()
        s = scale.logical() / jnp.sqrt(var.logical() + eps)
        b = bias.logical() - mean.logical() * s
    shape = (1, -1) + (1,) * (rank - 2)
    s_v = Value(xp_of(s).reshape(s, shape))
    b_v = Value(xp_of(b).reshape(b, shape))
    perm = x.perm
    out = operand_in(x, perm) * operand_in(s_v, perm) + operand_in(b_v, perm)
    return Value(out, perm)


# ----------------------------------------------------------------------------- matmul, convolution, pooling


@converter("MatMul")
def _matmul(ins, a, opset):
    quantized = onnx_qdq.matmul(ins[0], ins[1])
    if quantized is not None:
        return Value(quantized)
    x, y = (v.logical() for v in ins)
    return Value(xp_of(x, y).matmul(x, y))


@converter("Gemm")
def _gemm(ins, a, opset):
    A, B = ins[0].logical(), ins[1].logical()
    C = ins[2].logical() if len(ins) > 2 and ins[2] is not None else None
    alpha, beta = np.float32(a.get("alpha", 1.0)), np.float32(a.get("beta", 1.0))
    trans_b = bool(a.get("transB", 0))
    out = None if a.get("transA", 0) else onnx_qdq.matmul(ins[0], ins[1], trans_b)
    if a.get("transA", 0):
        A = A.T
    if trans_b:
        B = B.T  # a static weight: transposed once, here
    xp = xp_of(A, B, C)
    out = xp.matmul(A, B) if out is None else out
    if alpha != 1:
        out = out * alpha
    if C is not None:
        out = out + (C * beta if beta != 1 else C)
    return Value(out)


@converter("Einsum")
def _einsum(ins, a, opset):
    eq = a.get("equation")
    eq = eq.decode() if isinstance(eq, bytes) else eq
    data = [v.logical() for v in ins]
    return Value(xp_of(*data).einsum(eq, *data))


def _window(a: Attrs, spatial: Sequence[int], kernel: Sequence[int], ceil_mode: bool = False) -> Tuple[list, list, list]:
    """(strides, dilations, [(lo, hi)] padding) of a convolution or pooling window."""
    n = len(spatial)
    strides = list(a.get("strides") or [1] * n)
    dil = list(a.get("dilations") or [1] * n)
    auto_pad = a.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    pads = a.get("pads")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        padding = []
        for s, k, st, d in zip(spatial, kernel, strides, dil):
            total = max((-(-s // st) - 1) * st + (k - 1) * d + 1 - s, 0)
            small = total // 2
            padding.append((total - small, small) if auto_pad == "SAME_LOWER" else (small, total - small))
    elif auto_pad == "VALID":
        padding = [(0, 0)] * n
    elif auto_pad == "NOTSET":
        pads = list(pads or [0] * (2 * n))
        padding = [(pads[k], pads[k + n]) for k in range(n)]
    else:
        raise FrontEndError(f"auto_pad={auto_pad!r} (supported: NOTSET, SAME_UPPER, SAME_LOWER, VALID)")
    if ceil_mode:
        # ONNX's ceil_mode: one more window where the last one would start inside the input
        padded = []
        for s, k, st, d, (lo, hi) in zip(spatial, kernel, strides, dil, padding):
            eff = (k - 1) * d + 1
            out = -(-(s + lo + hi - eff) // st) + 1
            if (out - 1) * st >= s + lo:
                out -= 1
            padded.append((lo, max(hi, (out - 1) * st + eff - s - lo)))
        padding = padded
    return strides, dil, padding


def _conv_specs(rank: int) -> Tuple[str, str, str]:
    sp = "DHW"[3 - (rank - 2):] if rank <= 5 else None
    if sp is None:
        raise FrontEndError(f"convolution of rank {rank}")
    return "N" + sp + "C", sp + "IO", "N" + sp + "C"


@converter("Conv")
def _conv(ins, a, opset):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    rank = len(x.shape)
    if rank < 3:
        raise FrontEndError(f"Conv of a rank-{rank} input")
    group = a.get("group", 1)
    kernel = list(a.get("kernel_shape") or w.shape[2:])
    if list(w.shape[2:]) != kernel:
        raise FrontEndError(f"kernel_shape {kernel} differs from the weight's {list(w.shape[2:])}")
    perm = channels_last(rank)
    strides, dil, padding = _window(a, x.shape[2:], kernel)
    out = onnx_qdq.conv(x, w, perm, strides, padding, dil, _conv_specs(rank), group)  # a QDQ convolution
    if out is None:
        xd = x.in_layout(perm)
        # OIHW -> HWIO; a constant weight is laid out once, here
        wperm = tuple(range(2, rank)) + (1, 0)
        wd = np.ascontiguousarray(np.transpose(w.data, wperm)) if w.static else _jnp().transpose(w.logical(), wperm)
        if w.static and w.dtype != "float32":
            raise FrontEndError(f"a {w.dtype} weight {list(w.shape)}; probsched computes in float32 (export the model in float32)")
        out = _lax().conv_general_dilated(xd, wd, tuple(strides), padding, rhs_dilation=tuple(dil),
                                          dimension_numbers=_conv_specs(rank), feature_group_count=group)
    if b is not None:
        out = out + b.logical()  # the channels are last: the bias broadcasts as it is
    return Value(out, perm)


def _pool_window(a: Attrs, x: Value):
    kernel = list(a.get("kernel_shape"))
    strides, dil, padding = _window(a, x.shape[2:], kernel, ceil_mode=bool(a.get("ceil_mode", 0)))
    return kernel, strides, dil, padding


@converter("MaxPool")
def _max_pool(ins, a, opset):
    x = ins[0]
    if a.get("storage_order", 0):
        raise FrontEndError("storage_order=1 (column-major indices) is not supported")
    kernel, strides, dil, padding = _pool_window(a, x)
    perm = channels_last(len(x.shape))
    lax = _lax()

    def pool(v: Any, lowest: Any) -> Any:
        return lax.reduce_window(v, lowest, lax.max, (1, *kernel, 1), (1, *strides, 1), [(0, 0), *padding, (0, 0)],
                                 window_dilation=(1, *dil, 1))

    quantized = onnx_qdq.max_pool(x, perm, pool)  # the maximum of a QDQ model's bytes
    return quantized if quantized is not None else Value(pool(x.in_layout(perm), -np.inf), perm)


def _window_counts(spatial, kernel, strides, dil, padding, within) -> np.ndarray:
    """Elements each pooling window covers inside ``within`` (per spatial axis: the
    first and past-the-last position counted), as a float32 array over the output."""
    per_axis = []
    for s, k, st, d, (lo, hi), (w_lo, w_hi) in zip(spatial, kernel, strides, dil, padding, within):
        n_out = (s + lo + hi - ((k - 1) * d + 1)) // st + 1
        counts = []
        for o in range(n_out):
            taps = [o * st + t * d - lo for t in range(k)]
            counts.append(sum(1 for p in taps if w_lo <= p < w_hi))
        per_axis.append(np.asarray(counts, np.float32))
    out = per_axis[0]
    for c in per_axis[1:]:
        out = np.multiply.outer(out, c)
    return out.astype(np.float32)


@converter("AveragePool")
def _avg_pool(ins, a, opset):
    x = ins[0]
    kernel, strides, dil, padding = _pool_window(a, x)
    include = a.get("count_include_pad", 0)
    spatial = x.shape[2:]
    perm = channels_last(len(x.shape))
    xd = x.in_layout(perm)
    lax = _lax()
    total = lax.reduce_window(xd, np.float32(0), lax.add, (1, *kernel, 1), (1, *strides, 1),
                              [(0, 0), *padding, (0, 0)], window_dilation=(1, *dil, 1))
    if include:  # the explicit pads count, the ceil_mode overhang does not
        pads = a.get("pads") or [0] * (2 * len(spatial))
        n = len(spatial)
        within = [(-pads[k], s + pads[k + n]) for k, s in enumerate(spatial)] if a.get("auto_pad", "NOTSET") in (
            "NOTSET", b"NOTSET") else [(-lo, s + hi) for s, (lo, hi) in zip(spatial, padding)]
    else:
        within = [(0, s) for s in spatial]
    counts = _window_counts(spatial, kernel, strides, dil, padding, within)
    return Value(total / counts.reshape((1,) + counts.shape + (1,)), perm)


def _global_pool(kind: str) -> Converter:
    def convert(ins, a, opset):
        x = ins[0]
        perm = channels_last(len(x.shape))
        xd = x.in_layout(perm)
        axes = tuple(range(1, len(x.shape) - 1))
        xp = xp_of(xd)
        out = xp.mean(xd, axis=axes, keepdims=True) if kind == "avg" else xp.max(xd, axis=axes, keepdims=True)
        return Value(out, perm)

    return convert


CONVERTERS["GlobalAveragePool"] = _global_pool("avg")
CONVERTERS["GlobalMaxPool"] = _global_pool("max")
CONVERTERS["QuantizeLinear"] = onnx_qdq.quantize_linear
CONVERTERS["DequantizeLinear"] = onnx_qdq.dequantize_linear


#: The operator names, sorted: what an error about an unsupported operator lists (``If`` on
#: a condition known at import is run by the importer itself, the branch taken inlined).
SUPPORTED = tuple(sorted([*CONVERTERS, "If"]))

__all__ = ["CONVERTERS", "SUPPORTED", "Attrs", "DTYPES", "converter", "static_ints"]
