"""Lowerings of the JAX primitives that index, repeat or accumulate: ``gather``, ``stack``,
``tile``, ``cumsum``, ``floor`` and ``ceil`` (what ``jnp.take``, token embeddings,
``jnp.stack``, ``jnp.tile``, ``jnp.cumsum`` and ``jax.image.resize`` make).

``gather`` reads its operand at indices loaded from another tensor (a data-dependent load):
it is an index map like the other views, so an embedding lookup costs no pass of its own.
Start indices are clamped into the operand (XLA's ``CLIP`` and ``PROMISE_IN_BOUNDS``), or
an out-of-range slice reads the fill value (``FILL_OR_DROP``, ``jnp.take``'s default).

>>> import numpy as np, jax.numpy as jnp
>>> import probsched as ps
>>> table = np.arange(12, dtype=np.float32).reshape(4, 3)
>>> g = ps.from_jax(lambda i: jnp.take(table, i, axis=0, mode="clip") * 2.0, np.array([3, 0], np.int32))
>>> [n.op for n in g.nodes]
['broadcast_in_dim', 'gather', 'mul']
>>> g.evaluate(np.array([3, 9], np.int32))[0]
array([[18., 20., 22.],
       [18., 20., 22.]], dtype=float32)
"""

from __future__ import annotations

from typing import List

import numpy as np

from ..errors import FrontEndError
from ..ir.expr import Const, Expr, abs as ir_abs, any_of, binary, cast, if_then_else, maximum, minimum
from ..te import reduce_axis
from ..te import sum as te_sum
from .operands import Index, LazyOperand, Operand, Stages


def _i64(v: int) -> Const:
    return Const(int(v), "int64")


def _at(o: Operand, i: Index) -> Expr:
    return o.at(i if o.shape else ())


# ----------------------------------------------------------------------------- gather


def _gather_dims(node):
    dn = node.params["dimension_numbers"]
    return (
        tuple(dn.offset_dims),
        tuple(dn.collapsed_slice_dims),
        tuple(dn.start_index_map),
        tuple(getattr(dn, "operand_batching_dims", ()) or ()),
        tuple(getattr(dn, "start_indices_batching_dims", ()) or ()),
    )


def _mode_name(node) -> str:
    return str(getattr(node.params.get("mode"), "name", node.params.get("mode")))


def check_gather(node, in_types, out_types, where) -> None:
    """Refuse what :func:`lower_gather` does not handle (``where()`` names the node)."""
    _, _, start_map, _, _ = _gather_dims(node)
    idx = in_types[1]
    if not idx.shape or idx.shape[-1] != len(start_map):
        raise FrontEndError(f"{where()}: gather whose index vector is not the indices' last axis")
    if idx.dtype not in ("int32",):
        raise FrontEndError(f"{where()}: gather indices of dtype {idx.dtype} (int32 expected)")
    if _mode_name(node) not in ("CLIP", "PROMISE_IN_BOUNDS", "FILL_OR_DROP"):
        raise FrontEndError(f"{where()}: gather mode {_mode_name(node)} is not supported")


def _fill_value(node, dtype: str) -> Const:
    fill = node.params.get("fill_value")
    if fill is None:
        fill = float("nan") if dtype == "float32" else (True if dtype == "bool" else int(np.iinfo(dtype).min))
    return Const(fill, dtype)


def lower_gather(node, ins: List[Operand], stages: Stages, out_types) -> List[Operand]:
    """XLA's gather as an index map (see the module docstring)."""
    x, indices = ins
    t = out_types[0]
    offset_dims, collapsed, start_map, op_batch, idx_batch = _gather_dims(node)
    sizes = [int(s) for s in node.params["slice_sizes"]]
    fill = _mode_name(node) == "FILL_OR_DROP"
    window = [d for d in range(x.ndim) if d not in collapsed and d not in op_batch]

    def fn(i: Index) -> Expr:
        batch = [e for d, e in enumerate(i) if d not in offset_dims]
        src: List[Expr] = [_i64(0)] * x.ndim
        outside = []
        for k, d in enumerate(start_map):
            raw = cast("int64", indices.at(tuple(batch) + (_i64(k),)))
            hi = x.shape[d] - sizes[d]
            if fill:
                outside += [binary("lt", raw, _i64(0)), binary("gt", raw, _i64(hi))]
            src[d] = maximum(minimum(raw, _i64(hi)), _i64(0)) if hi > 0 else _i64(0)
        for j, d in enumerate(op_batch):
            src[d] = batch[idx_batch[j]]
        for m, d in enumerate(window):
            src[d] = src[d] + i[offset_dims[m]] if sizes[d] > 1 else src[d]
        value = _at(x, tuple(src))
        return if_then_else(any_of(*outside), _fill_value(node, t.dtype), value) if outside else value

    return [LazyOperand(t.shape, t.dtype, fn)]


# ----------------------------------------------------------------------------- stack, tile


def lower_stack(node, ins: List[Operand], stages: Stages, out_types) -> List[Operand]:
    """``stack`` along a new axis: a select on that axis's index (a stage for floats)."""
    t = out_types[0]
    axis = int(node.params["axis"]) % len(t.shape)

    def body(i: Index) -> Expr:
        rest = tuple(e for d, e in enumerate(i) if d != axis)
        out = _at(ins[-1], rest)
        for k in range(len(ins) - 2, -1, -1):
            out = if_then_else(binary("eq", i[axis], _i64(k)), _at(ins[k], rest), out)
        return out

    return [stages.compute("stack", t.shape, body)] if t.dtype == "float32" else [LazyOperand(t.shape, t.dtype, body)]


def check_tile(node, in_types, out_types, where) -> None:
    """``tile`` must keep the rank (``jnp.tile`` broadcasts to it first)."""
    if len(node.params["reps"]) != len(in_types[0].shape):
        raise FrontEndError(f"{where()}: tile with reps {tuple(node.params['reps'])} of another rank")


def lower_tile(node, ins: List[Operand], stages: Stages, out_types) -> List[Operand]:
    """``tile``: each axis read modulo the operand's extent (a view)."""
    (x,) = ins
    t = out_types[0]
    return [LazyOperand(t.shape, t.dtype, lambda i: _at(x, tuple(
        e if s == n else (_i64(0) if s == 1 else e % s) for e, s, n in zip(i, x.shape, t.shape))))]


# ----------------------------------------------------------------------------- cumsum


def lower_cumsum(node, ins: List[Operand], stages: Stages, out_types) -> List[Operand]:
    """``cumsum``: each element sums the prefix (or suffix, ``reverse``) of its axis, a
    reduction over the whole axis masked to the prefix (quadratic in the axis's length,
    which inference graphs keep short: positions, small masks)."""
    (x,) = ins
    t = out_types[0]
    axis = int(node.params["axis"]) % x.ndim
    reverse = bool(node.params.get("reverse", False))
    n = x.shape[axis]

    def body(i: Index):
        if n == 1:
            return _at(x, i)
        k = reduce_axis(n, name="k")
        src = tuple(k if d == axis else e for d, e in enumerate(i))
        keep = binary("ge" if reverse else "le", k, i[axis])
        return te_sum(if_then_else(keep, _at(x, src), Const(0.0, "float32")), axis=[k])

    return [stages.compute("cumsum", t.shape, body)]


def check_cumsum(node, in_types, out_types, where) -> None:
    """Only float32 prefix sums."""
    if in_types[0].dtype != "float32":
        raise FrontEndError(f"{where()}: cumsum of {in_types[0].dtype} values is not supported")


def cumsum_flops(node, in_types, out_types) -> int:
    """One addition per element of the prefix each output reads (half the axis, on average)."""
    t = in_types[0]
    n = t.shape[int(node.params["axis"]) % len(t.shape)]
    return int(np.prod(t.shape, dtype=np.int64)) * max(1, (n + 1) // 2)


# ----------------------------------------------------------------------------- floor, ceil

#: Floats at least this large are integers already (float32 has 23 fraction bits).
_INTEGRAL = float(2**23)


def floor(x: Expr) -> Expr:
    """``floor(x)`` from a cast toward zero, corrected for negative non-integers; large,
    infinite and NaN values are returned as they are."""
    t = cast("float32", cast("int64", x))
    down = if_then_else(binary("gt", t, x), t - Const(1.0, "float32"), t)
    return if_then_else(binary("lt", ir_abs(x), Const(_INTEGRAL, "float32")), down, x)


def ceil(x: Expr) -> Expr:
    """``ceil(x) = -floor(-x)``."""
    return -floor(-x)


__all__ = ["lower_gather", "check_gather", "lower_stack", "lower_tile", "check_tile", "lower_cumsum", "check_cumsum",
           "cumsum_flops", "floor", "ceil"]
