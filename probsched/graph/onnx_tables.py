"""A quantized elementwise function of one byte tensor is a table of 256 bytes.

``quantize_static`` puts a ``QuantizeLinear`` / ``DequantizeLinear`` pair after each
operator it quantizes, so an activation such as BERT's GELU, ``x * 0.5 * (1 + erf(x /
sqrt 2))``, arrives as five operators, each reading a dequantized byte tensor and
requantizing its result: per element five roundings, three divisions and an erf in the
matmul's epilogue. From the first ``DequantizeLinear`` to the last ``QuantizeLinear``
every value is a function of one byte, so the whole chain is a table of 256 entries:
computed at import by the operators' own converters (numpy, :mod:`.onnx_ops`) on the 256
byte values, and the import reads ``table[q]`` instead (TFLite runs its 8-bit logistic,
tanh and GELU the same way). The chain's operators stay in the model: whatever else reads
one of its values computes it; the graph drops what nothing reads.

Tabulated (:func:`byte_functions`): a ``QuantizeLinear`` to ``uint8`` with a one-element
scale and zero point whose input is a function of one tensor of computed bytes, through
per-tensor ``DequantizeLinear`` and ``QuantizeLinear`` and :data:`ELEMENTWISE` operators
whose other inputs are one-element constants (initializers, ``Constant`` nodes, or their
quantizations) or values of the same bytes (``x * erf(x)``).

>>> import numpy as np
>>> from onnx import helper, numpy_helper, TensorProto
>>> c = lambda v, n, t=np.float32: numpy_helper.from_array(np.asarray(v, t), n)
>>> nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
...          helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
...          helper.make_node("Sigmoid", ["d"], ["y"]),
...          helper.make_node("QuantizeLinear", ["y", "s", "z"], ["out"])]
>>> g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
...     [helper.make_tensor_value_info("out", TensorProto.UINT8, [4])], [c(0.02, "s"), c(128, "z", np.uint8)])
>>> inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
>>> found = byte_functions(g, inits)
>>> list(found), found["out"].source, [n.op_type for n in found["out"].nodes]
(['out'], 'q', ['DequantizeLinear', 'Sigmoid', 'QuantizeLinear'])
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any, Callable, Dict, MutableMapping, NamedTuple, Optional, Tuple

import numpy as np

from .onnx_qdq import per_tensor_params

#: Operators a tabulated chain may hold: elementwise, one output per element of one input
ELEMENTWISE = frozenset({
    "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Erf",
    "Softplus", "Sign", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Clip", "LeakyRelu", "Elu",
    "HardSigmoid", "HardSwish", "Identity",
})


class ByteFunction(NamedTuple):
    """A ``QuantizeLinear`` whose result is a function of the bytes ``source``: ``nodes`` are
    those from ``source`` to it (itself last), in graph order."""

    source: str
    nodes: Tuple[Any, ...]


def byte_functions(graph: Any, initializers: Dict[str, np.ndarray]) -> Dict[str, ByteFunction]:
    """The ``QuantizeLinear`` outputs of ``graph`` (an ONNX ``GraphProto``) that are tables
    of one byte tensor (the module docstring), by output name.

    A forward pass gives each value the byte tensor it is a function of, if one: the bytes a
    per-tensor ``DequantizeLinear`` reads (or what those bytes are a function of: GELU's
    ``x * Phi(x)`` multiplies two dequantized tensors that both come from ``x``'s bytes),
    through :data:`ELEMENTWISE` operators with one-element constants and per-tensor
    ``QuantizeLinear``. A ``QuantizeLinear`` to ``uint8`` with such a source and at least one
    operator on the way is a table; its nodes are those between the source and it."""
    source: Dict[str, str] = {}  # value -> the byte tensor it is a function of
    computed: Dict[str, bool] = {}  # whether an ELEMENTWISE operator is on its way
    # constants by their element count: initializers, and what Constant nodes and Q/DQ of
    # constants make (quantize_static quantizes GELU's 1 and 0.5 too)
    size = {k: int(v.size) for k, v in initializers.items()}
    found: Dict[str, ByteFunction] = {}
    producer = {o: n for n in graph.node for o in n.output if o}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            continue
        out = node.output[0]
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                size[out] = int(np.prod(value.dims, dtype=np.int64))
            continue
        if node.op_type in ("DequantizeLinear", "QuantizeLinear", "Cast", "Identity") and node.input[0] in size:
            if all(i in size for i in node.input if i):
                size[out] = size[node.input[0]]
                continue
        if node.op_type == "DequantizeLinear":
            b = node.input[0]
            if b not in initializers and per_tensor_params(node, initializers) is not None:
                source[out], computed[out] = source.get(b, b), computed.get(b, False)
            continue
        if node.op_type == "QuantizeLinear":
            x = node.input[0]
            params = per_tensor_params(node, initializers)
            if x in source and params is not None:
                source[out], computed[out] = source[x], computed[x]
                if computed[x] and params[1].dtype == np.uint8:
                    found[out] = ByteFunction(source[x], _between(source[x], node, producer, graph))
            continue
        if node.op_type not in ELEMENTWISE:
            continue
        inputs = [i for i in node.input if i]
        if any(i in size and size[i] != 1 for i in inputs):
            continue  # per channel: a function of the byte and its channel
        roots = {source.get(i) for i in inputs if i not in size}
        if len(roots) == 1 and None not in roots:
            source[out], computed[out] = roots.pop(), True
    return found


def _between(root: str, last: Any, producer: Dict[str, Any], graph: Any) -> Tuple[Any, ...]:
    """The nodes from the bytes ``root`` to ``last`` (included), in graph order."""
    keep: Dict[int, Any] = {}
    stack = [last]
    while stack:
        node = stack.pop()
        if id(node) in keep:
            continue
        keep[id(node)] = node
        stack.extend(producer[i] for i in node.input if i and i != root and i in producer)
    return tuple(n for n in graph.node if id(n) in keep)


def table(fn: ByteFunction, env: Dict[str, Any], run: Callable[[Any, MutableMapping[str, Any]], None], dtype: str) -> Optional[np.ndarray]:
    """The 256 bytes ``fn`` maps each value of its source (of ``dtype``, ``uint8`` or
    ``int8``) to, in order from the type's lowest: ``run(node, values)`` evaluates one
    node on the static values ``values`` (by name) and stores its outputs there. None when
    the chain does not keep one value per byte (an operator broadcast it further)."""
    from .onnx_layout import Value

    lo = -128 if dtype == "int8" else 0
    # the chain's other inputs are constants of env; what it computes goes in the front map
    values: MutableMapping[str, Any] = ChainMap({fn.source: Value(np.arange(lo, lo + 256).astype(dtype))}, env)
    for node in fn.nodes:
        run(node, values)
    out = np.asarray(values[fn.nodes[-1].output[0]].data).reshape(-1)
    return out if out.size == 256 else None


def lookup(fn: ByteFunction, env: Dict[str, Any], run: Callable[[Any, MutableMapping[str, Any]], None]) -> Optional[Any]:
    """The :class:`~.onnx_layout.Value` of ``fn``'s ``QuantizeLinear``: ``table[q]`` of its
    source bytes in their layout; None when the source is not 8-bit (left to the operators)."""
    from .onnx_layout import Value

    src = env[fn.source]
    if src.dtype not in ("uint8", "int8") or src.static:
        return None
    import jax.numpy as jnp

    entries = table(fn, env, run, src.dtype)
    if entries is None:
        return None
    index = src.data.astype(jnp.int32) + (128 if src.dtype == "int8" else 0)
    return Value(jnp.take(jnp.asarray(entries), index, mode="clip"), src.perm)


__all__ = ["ELEMENTWISE", "ByteFunction", "byte_functions", "lookup", "table"]
