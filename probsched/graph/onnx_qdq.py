"""ONNX models in QDQ form: ``QuantizeLinear`` / ``DequantizeLinear`` around convolutions and
matmuls (what ``onnxruntime.quantization.quantize_static`` writes), imported as the integer
layers of :mod:`.quant_ops`.

``QuantizeLinear`` and ``DequantizeLinear`` are imported as what they compute (the
rounding, saturating conversion to 8 bits and back to float32), and each result remembers
where it came from (:class:`QDQ` on the :class:`~.onnx_layout.Value`). A ``Conv``,
``MatMul`` or ``Gemm`` whose activation is the dequantization of 8-bit values (per tensor)
and whose weight the dequantization of a constant ``int8`` tensor (symmetric, per output
channel or per tensor) reads those integers instead (:func:`conv`, :func:`matmul`): an
integer product in int32, dequantized by one multiplication, the float32 bias after it. The
dequantized float32 values nothing else reads are dropped from the graph. An activation
quantized to ``int8`` is read as ``uint8`` with its zero point moved by 128 (the same
values: ``vpdpbusd`` multiplies unsigned activations). Anything else (a ``DequantizeLinear``
read by a pooling, an add) computes in float32 on the dequantized values, as ONNX defines.

>>> import numpy as np, onnx
>>> from onnx import helper, numpy_helper, TensorProto
>>> import probsched as ps
>>> w = numpy_helper.from_array(np.arange(-8, 8, dtype=np.int8).reshape(4, 4), "w")
>>> s = numpy_helper.from_array(np.full(4, 0.1, np.float32), "s")
>>> xs, xz = numpy_helper.from_array(np.float32(0.05), "xs"), numpy_helper.from_array(np.uint8(128), "xz")
>>> nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"]),
...          helper.make_node("DequantizeLinear", ["q", "xs", "xz"], ["dq"]),
...          helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=1),
...          helper.make_node("MatMul", ["dq", "wf"], ["y"])]
>>> model = helper.make_model(helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w, s, xs, xz]))
>>> g = ps.from_onnx(model)
>>> [n.op for n in g.nodes if n.op in ("dot_general", "convert_element_type")]
['convert_element_type', 'dot_general', 'convert_element_type']
>>> x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
>>> from onnx.reference import ReferenceEvaluator
>>> bool(np.allclose(g.evaluate(x)[0], ReferenceEvaluator(model).run(None, {"x": x})[0], atol=1e-5))
True
"""

from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..errors import FrontEndError
from . import quant_ops
from .onnx_layout import Value

#: 8-bit ONNX types the QDQ operators read and write
_TYPES = ("uint8", "int8")


class QDQ(NamedTuple):
    """Where a value of a QDQ model came from: ``kind`` ``"q"`` (quantized from ``source``,
    a float value) or ``"dq"`` (dequantized from ``source``, 8-bit values); its scale, zero
    point (numpy arrays, one element per tensor or one per index of ``axis``) and axis."""

    kind: str
    source: Value
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int


def _params(ins: List[Optional[Value]], a, what: str, dtype: Optional[str] = None) -> Tuple[np.ndarray, np.ndarray, int]:
    x, s = ins[0], ins[1]
    z = ins[2] if len(ins) > 2 else None
    a.get("saturate")  # for float8 types only
    if a.get("block_size", 0):
        raise FrontEndError(f"{what} with block_size (blocked quantization) is not supported")
    if not s.static or (z is not None and not z.static):
        raise FrontEndError(f"{what} with a computed scale or zero point is not supported")
    scale = np.asarray(s.data, np.float32)
    zero = np.asarray(z.data) if z is not None else np.zeros((), dtype or "uint8")
    if zero.dtype.name not in _TYPES + ("int32",):  # int32: a bias quantized with its layer
        raise FrontEndError(f"{what} of {zero.dtype.name} values; supported: {', '.join(_TYPES)}")
    axis = int(a.get("axis", 1))
    return scale, zero, axis % max(1, len(x.shape))


def _along(v: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A per-axis parameter shaped to broadcast along ``axis`` of a rank-``rank`` array."""
    if v.ndim == 0 or v.size == 1:
        return v.reshape(())
    shape = [1] * rank
    shape[axis] = v.size
    return v.reshape(shape)


def quantize_linear(ins: List[Optional[Value]], a, opset: int) -> Value:
    """``QuantizeLinear``: ``saturate(round(x / scale) + zero_point)``."""
    x = ins[0]
    to = a.get("output_dtype", 0)
    scale, zero, axis = _params(ins, a, "QuantizeLinear", {2: "uint8", 3: "int8"}.get(to))
    dtype = zero.dtype.name
    if dtype not in _TYPES:
        raise FrontEndError(f"QuantizeLinear to {dtype}; supported: {', '.join(_TYPES)}")
    if x.static:
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
        rank = len(x.shape)
        q = np.rint(np.asarray(x.logical(), np.float32) / _along(scale, axis, rank)) + _along(zero, axis, rank).astype(np.float32)
        return Value(np.clip(q, lo, hi).astype(dtype), None, QDQ("q", x, scale, zero, axis))
    if scale.size != 1:
        raise FrontEndError("QuantizeLinear of a computed value per axis is not supported (activations are quantized per tensor)")
    info = x.qdq
    if (info is not None and info.kind == "dq" and not info.source.static and info.source.dtype == dtype
            and np.array_equal(info.scale, scale) and np.array_equal(info.zero_point, zero)):
        # the bytes x was dequantized from: (q - z) * s / s rounds back to q - z exactly
        # (two roundings of a float32 under 2**-23 relative, |q - z| < 256)
        return Value(info.source.data, info.source.perm, QDQ("q", x, scale, zero, axis))
    q = quant_ops.quantize_activation(x.data, float(scale.reshape(())), int(zero.reshape(())), dtype)
    return Value(q, x.perm, QDQ("q", x, scale, zero, axis))


def dequantize_linear(ins: List[Optional[Value]], a, opset: int) -> Value:
    """``DequantizeLinear``: ``(x - zero_point) * scale`` in float32."""
    x = ins[0]
    scale, zero, axis = _params(ins, a, "DequantizeLinear", x.dtype)
    if x.dtype not in _TYPES + ("int32",):
        raise FrontEndError(f"DequantizeLinear of {x.dtype} values; supported: {', '.join(_TYPES + ('int32',))}")
    if x.static:
        rank = len(x.shape)
        data = (np.asarray(x.logical(), np.float32) - _along(zero, axis, rank).astype(np.float32)) * _along(scale, axis, rank)
        return Value(data.astype(np.float32), None, QDQ("dq", x, scale, zero.astype(x.dtype), axis))
    if scale.size != 1:
        raise FrontEndError("DequantizeLinear of a computed value per axis is not supported (activations are quantized per tensor)")
    data = quant_ops.dequantize_activation(x.data, float(scale.reshape(())), int(zero.reshape(())))
    return Value(data, x.perm, QDQ("dq", x, scale, zero, axis))


def moved(x: Value, move: Callable[[Value], Value]) -> Optional[QDQ]:
    """The dequantization a layout-only op's result is (``move``: the op, a Transpose or a
    Reshape, applied to a value): where ``x`` is a per-tensor dequantization of computed
    bytes ``q``, ``move(DQ(q))`` is ``DQ(move(q))`` (the op moves elements, the
    dequantization is the same per element), so a QuantizeLinear after it with the same
    parameters is ``move(q)`` itself (:func:`quantize_linear`). A transformer's QDQ file
    puts a Q/DQ pair around each such op of its attention; kept, each is a requantization of
    every element. None where ``x`` is no such dequantization."""
    info = _dequantized_per_tensor(x)
    return None if info is None else QDQ("dq", move(info.source), info.scale, info.zero_point, 0)


def _dequantized_per_tensor(x: Value) -> Optional[QDQ]:
    """How ``x`` was dequantized, when it is a per-tensor dequantization of computed bytes."""
    info = x.qdq
    if info is None or info.kind != "dq" or info.source.static or info.scale.size != 1:
        return None
    return info


def _activation(x: Value) -> Optional[Tuple[Value, float, int]]:
    """``(uint8 values, scale, zero point)`` of an activation dequantized per tensor, else None."""
    info = _dequantized_per_tensor(x)
    if info is None:
        return None
    q, scale, zero = info.source, float(info.scale.reshape(())), int(info.zero_point.reshape(()))
    if q.dtype == "uint8":
        return q, scale, zero
    if q.dtype == "int8" and q.qdq is not None and q.qdq.kind == "q":
        src = q.qdq.source  # quantized from float32 here: quantize it to uint8 instead, 128 higher
        return Value(quant_ops.quantize_activation(src.data, scale, zero + 128), src.perm), scale, zero + 128
    return None


def max_pool(x: Value, perm: Sequence[int], pool: Callable[[Any, Any], Any]) -> Optional[Value]:
    """A ``MaxPool`` of dequantized 8-bit values (per tensor, a positive scale) computed on
    the bytes and dequantized after: the same values, since dequantization keeps the order
    (a padded position, the byte's minimum, never beats a real one), and what the
    convolution before it stores and the one after it reads is bytes, not 4x their floats
    (ONNX Runtime runs such a pool on the bytes too). ``pool(values, lowest)`` pools
    channels-last values in ``perm``; None for any other input."""
    got = _activation(x)
    # int8 bytes are read as uint8 requantized from their float source: not these bytes
    if got is None or got[0] is not x.qdq.source or got[1] <= 0:
        return None
    q, scale, zero = got
    pooled = Value(pool(q.in_layout(perm), np.uint8(0)), perm)
    info = x.qdq
    dq = quant_ops.dequantize_activation(pooled.data, scale, zero)
    return Value(dq, perm, QDQ("dq", pooled, info.scale, info.zero_point, info.axis))


def _weight(w: Value, channels: int) -> Optional[quant_ops.QuantizedWeight]:
    """The int8 weight ``w`` dequantizes, in ONNX's layout, per output channel along
    ``channels`` (symmetric: no zero point), else None."""
    info = w.qdq
    if info is None or info.kind != "dq" or not info.source.static or info.source.dtype != "int8" or info.zero_point.any():
        return None
    values = np.asarray(info.source.logical())
    scale = info.scale.reshape(-1)
    if scale.size == 1:
        scale = np.full(values.shape[channels], scale[0], np.float32)
    elif info.axis != channels:
        return None
    return quant_ops.QuantizedWeight(values, scale.astype(np.float32), channels)


def conv(x: Value, w: Value, perm: Sequence[int], strides: Sequence[int], padding: Sequence[Tuple[int, int]],
         dilations: Sequence[int], specs: Tuple[str, str, str], group: int) -> Optional[Any]:
    """A QDQ ``Conv`` in integers (channels-last, ``perm``), or None when its operands are not
    an 8-bit activation and a symmetric int8 weight."""
    act, weight = _activation(x), _weight(w, 0)
    if act is None or weight is None:
        return None
    q, scale, zero = act
    rank = len(w.shape)
    hwio = tuple(range(2, rank)) + (1, 0)  # OIHW -> HWIO, once, here
    weight = quant_ops.QuantizedWeight(np.ascontiguousarray(np.transpose(weight.values, hwio)), weight.scale, rank - 1)
    return quant_ops.conv(q.in_layout(tuple(perm)), zero, scale, weight, strides, padding, dilations, specs, group)


def matmul(x: Value, w: Value, trans_b: bool = False) -> Optional[Any]:
    """A QDQ ``MatMul`` (or ``Gemm``'s product) of an activation ``x`` (any rank, ONNX's
    layout) and a 2-D weight ``w`` (``trans_b``: stored ``[N, K]``), in integers; or None."""
    if len(w.shape) != 2:
        return None
    act, weight = _activation(x), _weight(w, 0 if trans_b else 1)
    if act is None or weight is None:
        return None
    q, scale, zero = act
    if trans_b:
        weight = quant_ops.QuantizedWeight(np.ascontiguousarray(weight.values.T), weight.scale, 1)
    data = q.logical()
    return quant_ops.dot(data, zero, scale, weight, (((data.ndim - 1,), (0,)), ((), ())))


__all__ = ["QDQ", "quantize_linear", "dequantize_linear", "conv", "matmul", "moved"]
