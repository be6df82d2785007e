"""Where :func:`~.quantization.quantize` keeps bytes between layers: the plan of a network's
quantized values and of how each node reads them.

Quantizing only the activations the int8 layers read leaves a convolutional network
storing floats where a QDQ model from ONNX Runtime's ``quantize_static`` stores bytes: a
residual block's output is read as float32 by the next block's add, a shortcut
convolution's output is float32, the stem's max pool pools floats, and a ReLU between a
layer's bias and the next quantization keeps the division by the next scale out of the
layer's multiply-add. ResNet-50 so wrote 3x the bytes between its tasks (33 MiB against the
QDQ model's 11). The plan follows the QDQ model's quantization points instead:

- **residual adds** (two computed 4-D activations of one shape): the operand a layer (a
  convolution, then constant affine operations, each read only by the next) computes is
  added as it is, inside that layer's task; the other, the skip connection, is read as
  the dequantization of its bytes (quantized for it, or the very bytes the next layer
  reads). Where both operands are layers (a block's last convolution and its shortcut),
  the one computed first stores bytes. A QDQ import does the same
  (:func:`~.onnx_qdq.unrounded_residuals`), and so does OpenVINO's CPU plugin.
- **max pools** whose output a layer reads pool the bytes, quantized with the pool
  output's parameters (quantization keeps the order, so the maximum of the codes is the
  code of the maximum).
- **ReLU (and ReLU6) before a quantization** is the quantization's saturation: codes below
  the zero point's (and above 6's) are cut, the same values.

Layers left in float32 (``skip``) change none of this around them: an add or a pool is
planned only where a quantized layer is involved.

>>> import numpy as np, jax, probsched as ps
>>> rng = np.random.default_rng(0)
>>> w1, w2 = (rng.standard_normal((3, 3, 8, 8)).astype(np.float32) * 0.2 for _ in range(2))
>>> conv = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
>>> def block(x):
...     y = jax.nn.relu(conv(x, w1))
...     return jax.nn.relu(conv(jax.nn.relu(conv(y, w2)), w1) + y)
>>> g = ps.from_jax(block, np.ones((1, 6, 6, 8), np.float32))
>>> from probsched.graph.quantization import layers
>>> plan = plan_quantization(g, [layer.node for layer in layers(g)])
>>> len(plan.residual_adds), sorted(plan.stored) == sorted(plan.layer_inputs)
(1, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from .ir import Graph, Node
from .simplify import AFFINE


@dataclass
class QuantizationPlan:
    """``layer_inputs``: the activations the quantized layers read (as bytes); ``stored``:
    every value quantized (the layer inputs and the skip connections); ``residual_adds``:
    for each planned add (by ``id``), the position of its operand read dequantized;
    ``byte_pools``: for each planned max pool, its output (a layer input, whose parameters
    quantize the pool's input)."""

    layer_inputs: List[int]
    stored: List[int]
    residual_adds: Dict[int, int] = field(default_factory=dict)
    byte_pools: Dict[int, int] = field(default_factory=dict)
    skips: Dict[int, int] = field(default_factory=dict, repr=False)  # add id -> its skip value

    def skip_values(self) -> List[int]:
        """The values residual adds read dequantized."""
        return list(dict.fromkeys(self.skips.values()))


def plan_quantization(graph: Graph, layers: Sequence[Node]) -> QuantizationPlan:
    """The plan of ``graph`` whose quantized layers are ``layers`` (see the module docstring)."""
    chosen = {id(n) for n in layers}
    layer_inputs = list(dict.fromkeys(n.inputs[0] for n in layers))
    producer, readers = graph.producer(), graph.consumers()
    outputs = set(graph.outputs)
    order = {id(n): k for k, n in enumerate(graph.nodes)}

    def sole_reader(v: int) -> Optional[Node]:
        got = readers.get(v, [])
        return got[0] if len(got) == 1 and v not in outputs else None

    def computed_by_layer(v: int) -> Optional[Node]:
        """The quantized layer whose output ``v`` is, through constant affine operations."""
        while True:
            n = producer.get(v)
            if n is None:
                return None
            if id(n) in chosen:
                return n
            if n.op not in AFFINE or len(n.inputs) != 2 or sum(u in graph.constants for u in n.inputs) != 1:
                return None
            v = next(u for u in n.inputs if u not in graph.constants)
            if sole_reader(v) is not n:
                return None

    def activation(v: int, shape) -> bool:
        t = graph.types[v]
        return v not in graph.constants and v not in graph.inputs and t.dtype == "float32" and t.shape == shape

    plan = QuantizationPlan(layer_inputs, list(layer_inputs))
    stored: Set[int] = set(layer_inputs)
    for n in graph.nodes:
        if n.op == "add" and len(n.inputs) == 2 and n.inputs[0] != n.inputs[1]:
            shape = graph.types[n.outputs[0]].shape
            if len(shape) != 4 or not all(activation(v, shape) for v in n.inputs):
                continue
            made = [computed_by_layer(v) if sole_reader(v) is n else None for v in n.inputs]
            if made[0] is None and made[1] is None:
                continue  # no quantized layer joins this add
            if made[0] is not None and made[1] is not None:
                skip = 0 if order[id(made[0])] < order[id(made[1])] else 1  # the one computed first stores bytes
            else:
                skip = 0 if made[0] is None else 1
            plan.residual_adds[id(n)] = skip
            plan.skips[id(n)] = n.inputs[skip]
            if n.inputs[skip] not in stored:
                stored.add(n.inputs[skip])
                plan.stored.append(n.inputs[skip])
        elif n.op == "reduce_window_max" and n.outputs[0] in layer_inputs and sole_reader(n.inputs[0]) is n:
            plan.byte_pools[id(n)] = n.outputs[0]
    return plan


def relu_bounds(graph: Graph, v: int, producer: Optional[Dict[int, Node]] = None) -> Tuple[int, Optional[float], Optional[float]]:
    """``(y, floor, ceiling)`` where ``v`` is ``y`` through a ReLU (``max(y, 0)``) or a ReLU6
    (that, then ``min(., c)``): the value to quantize and the bounds (None: none) the
    quantization saturates to instead; ``(v, None, None)`` otherwise. ``producer``:
    ``graph.producer()``, where the caller has it.

    >>> import numpy as np, jax, probsched as ps
    >>> g = ps.from_jax(lambda x: jax.nn.relu6(x * 2.0), np.ones(4, np.float32))
    >>> relu_bounds(g, g.outputs[0])[1:]
    (0.0, 6.0)
    """
    producer = producer if producer is not None else graph.producer()
    ceiling = None
    y = v
    n = producer.get(y)
    if n is not None and n.op == "min":
        c = _scalar_operand(graph, n)
        if c is not None:
            ceiling, y = c, _other(graph, n)
            n = producer.get(y)
    if n is not None and n.op == "max" and _scalar_operand(graph, n) == 0.0:
        return _other(graph, n), 0.0, ceiling
    return v, None, None


def _scalar_operand(graph: Graph, n: Node) -> Optional[float]:
    consts = [u for u in n.inputs if u in graph.constants]
    if len(n.inputs) != 2 or len(consts) != 1:
        return None
    c = np.asarray(graph.constants[consts[0]])
    return float(c.reshape(-1)[0]) if c.size and np.all(c == c.reshape(-1)[0]) else None


def _other(graph: Graph, n: Node) -> int:
    return next(u for u in n.inputs if u not in graph.constants)


__all__ = ["QuantizationPlan", "plan_quantization", "relu_bounds"]
