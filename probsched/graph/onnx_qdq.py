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

One exception, the residual add (:func:`unrounded_residuals`): where a convolution's or
matmul's output is quantized only to be dequantized into an ``Add`` with a dequantized
skip connection, whose sum (after a ``Relu``, if one) is quantized again, the import
keeps that first quantization's saturation but not its rounding: ``DQ(Q(y))`` is read as
``clip(y, (0 - z) s, (255 - z) s)``. OpenVINO drops the same rounding in the same pattern
(its CPU plugin fuses the requantization, the add and the second quantization into the
convolution), and so saves per element two roundings, a multiply and two adds of the
epilogue, which on ResNet-50's 1x1 expansions costs as much as the convolution itself;
the sum is rounded once instead of twice, so the result is nearer float32's.
``from_onnx(..., keep_residual_rounding=True)`` keeps ONNX's semantics to the bit.

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

from collections import defaultdict
from typing import Any, Callable, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

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


def per_tensor_params(node: Any, initializers: Dict[str, np.ndarray]) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """``(scale, zero point)`` of an ONNX ``QuantizeLinear`` / ``DequantizeLinear`` node whose
    scale and zero point are one-element initializers (a missing zero point is a ``uint8``
    0), as 0-d arrays; None otherwise (computed, or per axis)."""
    names = list(node.input[1:3]) + [""] * (3 - len(node.input))
    if not names[0] or any(n and (n not in initializers or initializers[n].size != 1) for n in names[:2]):
        return None
    zero = initializers[names[1]] if names[1] else np.zeros((), np.uint8)
    return np.asarray(initializers[names[0]], np.float32).reshape(()), np.asarray(zero).reshape(())


#: Operators whose output a residual add may read unrounded (:func:`unrounded_residuals`)
ACCUMULATING = frozenset({"Conv", "MatMul", "Gemm"})


def unrounded_residuals(graph: Any, initializers: Dict[str, np.ndarray]) -> FrozenSet[str]:
    """Outputs of the ``DequantizeLinear`` nodes of ``graph`` (an ONNX ``GraphProto``) the
    import reads without their ``QuantizeLinear``'s rounding (the module docstring): each
    dequantizes, with the same per-tensor parameters, the quantization of a ``Conv``,
    ``MatMul`` or ``Gemm`` output (or of that output plus a constant bias), and is read only
    by an ``Add`` whose other input is dequantized computed bytes (a skip connection) and
    whose result, after a ``Relu`` or not, is read only by a ``QuantizeLinear``; the layer's
    weight a constant (not attention's product of two activations). Where both
    of an add's inputs are such (a block's last convolution and its shortcut's), the one
    quantized last: the other is what the skip stores.

    >>> from onnx import helper, numpy_helper
    >>> c = lambda v, n, t=np.float32: numpy_helper.from_array(np.asarray(v, t), n)
    >>> nodes = [helper.make_node("Conv", ["x", "w"], ["y"]),
    ...          helper.make_node("QuantizeLinear", ["y", "s", "z"], ["q"]),
    ...          helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
    ...          helper.make_node("DequantizeLinear", ["skip", "s", "z"], ["e"]),
    ...          helper.make_node("Add", ["d", "e"], ["sum"]),
    ...          helper.make_node("Relu", ["sum"], ["r"]),
    ...          helper.make_node("QuantizeLinear", ["r", "s", "z"], ["out"])]
    >>> g = helper.make_graph(nodes, "g", [], [], [c(0.1, "s"), c(128, "z", np.uint8), c([[[[0.5]]]], "w")])
    >>> sorted(unrounded_residuals(g, {t.name: numpy_helper.to_array(t) for t in g.initializer}))
    ['d']
    """
    producer = {o: n for n in graph.node for o in n.output if o}
    readers: Dict[str, List[Any]] = defaultdict(list)
    for node in graph.node:
        for i in node.input:
            if i:
                readers[i].append(node)
    for o in graph.output:
        readers[o.name].append(None)  # a model output is read outside: keep it as it is

    def sole_reader(name: str) -> Optional[Any]:
        got = readers.get(name, [])
        return got[0] if len(got) == 1 else None

    def constant(name: str) -> bool:
        node = producer.get(name)
        return name in initializers or (node is not None and node.op_type == "DequantizeLinear" and node.input[0] in initializers)

    def layer(name: str) -> bool:  # a layer of constant weights (not attention's product of two activations)
        node = producer.get(name)
        return node is not None and node.op_type in ACCUMULATING and len(node.input) > 1 and constant(node.input[1])

    def accumulated(name: str) -> bool:  # a layer's output, or that plus a constant bias
        if layer(name):
            return True
        node = producer.get(name)
        return (node is not None and node.op_type == "Add" and len(node.input) == 2
                and any(layer(a) and constant(b) for a, b in (node.input, node.input[::-1])))

    order = {id(n): k for k, n in enumerate(graph.node)}

    def requantized(dq: Any) -> Optional[int]:
        """Where ``dq`` dequantizes a quantized accumulation it alone reads: the position
        of the ``QuantizeLinear`` in the graph; else None."""
        q = producer.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear" or not accumulated(q.input[0]):
            return None
        p, r = per_tensor_params(q, initializers), per_tensor_params(dq, initializers)
        if p is None or r is None or not all(np.array_equal(u, v) and u.dtype == v.dtype for u, v in zip(p, r)):
            return None
        return order[id(q)]

    found = set()
    for add in graph.node:
        if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.input) != 2 or add.input[0] == add.input[1]:
            continue
        dqs = [producer.get(i) for i in add.input]
        # both operands dequantized computed bytes (a skip connection, not a bias)
        if any(d is None or d.op_type != "DequantizeLinear" or d.input[0] in initializers for d in dqs):
            continue
        after = sole_reader(add.output[0])
        if after is not None and after.op_type == "Relu":
            after = sole_reader(after.output[0])
        if after is None or after.op_type != "QuantizeLinear":
            continue
        # the add joins the accumulation quantized last (a block's last convolution, not
        # its shortcut's, which the skip reads as the bytes it stores)
        ranked = [(at, k) for k, d in enumerate(dqs) if sole_reader(d.output[0]) is add and (at := requantized(d)) is not None]
        if ranked:
            found.add(dqs[max(ranked)[1]].output[0])
    return frozenset(found)


def unrounded(q: Value) -> Optional[Value]:
    """``DequantizeLinear`` of the quantization ``q`` without its rounding: the float32 value
    ``q`` was quantized from, clipped to what ``q``'s type holds, ``clip(y, (lo - z) s,
    (hi - z) s)``; None when ``q`` is not a per-tensor quantization of a computed value."""
    info = q.qdq
    if info is None or info.kind != "q" or info.source.static or info.scale.size != 1 or q.dtype not in _TYPES:
        return None
    import jax.numpy as jnp

    scale, zero = np.float32(info.scale.reshape(())), float(np.asarray(info.zero_point).reshape(()))
    # what DequantizeLinear makes of the type's ends: (end - z) * s in float32
    lo, hi = (np.float32(float(v) - zero) * scale for v in (np.iinfo(q.dtype).min, np.iinfo(q.dtype).max))
    y = info.source.data
    # vectors, not literals: blocks of one shape with other parameters stay one task
    bounds = (quant_ops.along_last_axis(min(lo, hi), y), quant_ops.along_last_axis(max(lo, hi), y))
    return Value(jnp.clip(y, *bounds), info.source.perm)


__all__ = ["QDQ", "quantize_linear", "dequantize_linear", "conv", "matmul", "moved", "per_tensor_params", "unrounded",
           "unrounded_residuals"]
