"""``ps.quantize``: post-training static quantization of a network to int8.

A float32 network (a JAX function or a :class:`~.ir.Graph`) is run on calibration inputs;
every convolution and matmul whose second operand is a weight (a constant of the graph)
becomes a quantized layer (:mod:`.quant_ops`):

- its weight per output channel, symmetric, in ``int8`` (:func:`~.quant_ops.quantize_weight`;
  with ``reduce_range``, in ``[-64, 64]``: its tasks then read it as ``int8r``, whose
  products CPUs without VNNI compute faster, :mod:`probsched.ir.dtypes`; by default on such
  CPUs, :func:`reduce_range_default`);
- its activation per tensor, affine, in ``uint8``, from the range the calibration inputs
  give it: ``"minmax"`` (the smallest and largest value seen) or ``"percentile"`` (per
  calibration input the ``100 - p`` and ``p`` percentiles, averaged over the inputs: robust
  to a few outliers, which would otherwise stretch the scale for every other value);
- a value several layers read (a residual block's input) is quantized once, for all;
- around the layers, bytes are kept where a QDQ model from ONNX Runtime keeps them: a
  residual add reads its skip connection dequantized from bytes, a shortcut convolution and
  a max pool before a layer store bytes, a ReLU before a quantization is its saturation
  (:mod:`.quant_plan`), so a ResNet passes bytes between its tasks, and most of its tasks
  are those of the QDQ model (and use its records).

Layers listed in ``skip`` stay float32: indices among :func:`layers`, strings contained in
the layer's source (its ``file:line``, or an ONNX node's name), or a predicate on the
:class:`Layer`. The result is an ordinary graph: ``ps.compile`` and ``ps.tune_model`` take
it, its quantized tasks are int8 tasks with records of their own (their functions read
``uint8`` and ``int8``), and :meth:`Graph.evaluate <probsched.graph.ir.Graph.evaluate>` runs
it as JAX does, integers and all: the reference its compiled kernels are checked against.

>>> import numpy as np, jax, probsched as ps
>>> rng = np.random.default_rng(0)
>>> w1, w2 = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
>>> fn = lambda x: jax.nn.relu(x @ w1) @ w2
>>> calibration = [rng.standard_normal((2, 8)).astype(np.float32) for _ in range(8)]
>>> [layer.op for layer in layers(ps.from_jax(fn, calibration[0]))]
['dot_general', 'dot_general']
>>> q = quantize(fn, calibration)
>>> sorted({q.types[v].dtype for v in q.types})
['float32', 'int32', 'int8', 'uint8']
>>> x = rng.standard_normal((2, 8)).astype(np.float32)
>>> float(np.abs(q.evaluate(x)[0] - fn(x)).max() / np.abs(fn(x)).max()) < 0.05
True
>>> [layer.op for layer in layers(quantize(fn, calibration, skip=[1])) ]
['dot_general']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import FrontEndError
from ..ir.dtypes import INT_RANGE
from ..target import Target
from . import quant_ops
from .ir import Graph, Node
from .quant_plan import plan_quantization, relu_bounds

METHODS = ("minmax", "percentile")
#: the anchors quantized: their second operand is the weight
QUANTIZABLE = ("conv_general_dilated", "dot_general")


@dataclass(frozen=True)
class Layer:
    """A layer :func:`quantize` can quantize: its position among them, the node, and the
    source line (an imported model's node name)."""

    index: int
    node: Node

    @property
    def op(self) -> str:
        """The JAX primitive (``conv_general_dilated`` or ``dot_general``)."""
        return self.node.op

    @property
    def source(self) -> str:
        """Where the layer was written (``file:line (function)``, or ``ONNX node Conv 'name' ...``)."""
        return self.node.source


def _quantizable(graph: Graph, n: Node) -> bool:
    if n.op not in QUANTIZABLE or len(n.inputs) != 2:
        return False
    x, w = n.inputs
    types = [graph.types[v].dtype for v in (x, w, n.outputs[0])]
    if types != ["float32"] * 3 or x in graph.constants or w not in graph.constants:
        return False
    if n.op == "conv_general_dilated":
        p = n.params
        return int(p.get("batch_group_count", 1)) == 1 and all(int(d) == 1 for d in (p.get("lhs_dilation") or ()))
    (_, _), (lb, rb) = n.params["dimension_numbers"]
    return not lb and not rb


def layers(graph: Graph) -> List[Layer]:
    """The convolutions and matmuls of ``graph`` that :func:`quantize` quantizes (a float
    activation times a float weight), in graph order."""
    return [Layer(i, n) for i, n in enumerate(n for n in graph.nodes if _quantizable(graph, n))]


SkipRule = Union[int, str, Callable[[Layer], bool]]


def _skipped(layer: Layer, skip: Sequence[SkipRule]) -> bool:
    for rule in skip:
        if isinstance(rule, bool) or not isinstance(rule, (int, str)) and not callable(rule):
            raise FrontEndError(f"quantize: skip takes layer indices, source strings or predicates, got {rule!r}")
        if (isinstance(rule, int) and rule == layer.index) or (isinstance(rule, str) and rule in layer.source):
            return True
        if callable(rule) and rule(layer):
            return True
    return False


def _run(graph: Graph, args: Sequence[Any], override: Optional[Callable] = None) -> Dict[int, Any]:
    """Every value of ``graph`` for ``args`` (arrays or tracers), the nodes bound in order
    (each under its source line, which the graph traced again keeps); ``override(node, env)``
    may compute a node's outputs instead (returns None otherwise)."""
    import jax

    from .from_jax import source_scope

    env: Dict[int, Any] = dict(graph.constants)
    env.update(zip(graph.inputs, args))
    for n in graph.nodes:
        with jax.named_scope(source_scope(n.source)):
            outs = override(n, env) if override is not None else None
            env.update(zip(n.outputs, outs if outs is not None else n.bind(*(env[v] for v in n.inputs))))
    return env


def _samples(calibration: Any, graph: Graph) -> List[Tuple[np.ndarray, ...]]:
    if isinstance(calibration, np.ndarray) or not isinstance(calibration, (list, tuple)) or not calibration:
        raise FrontEndError("quantize: calibration inputs are a non-empty list of samples, each the model's arguments "
                            "(an array, or a tuple of arrays)")
    out = []
    for i, s in enumerate(calibration):
        args = tuple(s) if isinstance(s, (tuple, list)) else (s,)
        out.append(tuple(graph.check_arguments(args, f"quantize: calibration input {i}")))
    return out


def calibrate(graph: Graph, values: Sequence[int], samples: Sequence[Tuple[np.ndarray, ...]], method: str = "minmax",
              percentile: float = 99.99) -> Dict[int, Tuple[float, float]]:
    """The range ``(lo, hi)`` of each of ``values`` over the calibration ``samples`` (see the
    module docstring for the methods)."""
    import jax

    if method not in METHODS:
        raise FrontEndError(f"quantize: unknown calibration method {method!r}; expected one of {', '.join(METHODS)}")
    if not 50 < percentile <= 100:
        raise FrontEndError(f"quantize: percentile {percentile} is not in (50, 100]")
    consts = list(graph.constants)

    def intermediates(const_arrays, *args):  # the weights as arguments: XLA does not fold them in
        g = Graph(graph.name, graph.types, graph.nodes, graph.inputs, graph.outputs, dict(zip(consts, const_arrays)))
        env = _run(g, args)
        return [env[v] for v in values]

    run = jax.jit(intermediates)
    const_arrays = [graph.constants[v] for v in consts]
    seen: Dict[int, List[Tuple[float, float]]] = {v: [] for v in values}
    for args in samples:
        for v, a in zip(values, run(const_arrays, *args)):
            a = np.asarray(a, np.float64).ravel()
            if method == "minmax":
                seen[v].append((float(a.min()), float(a.max())))
            else:
                lo, hi = np.percentile(a, [100.0 - percentile, percentile])
                seen[v].append((float(lo), float(hi)))
    if method == "minmax":
        return {v: (min(r[0] for r in rs), max(r[1] for r in rs)) for v, rs in seen.items()}
    return {v: (float(np.mean([r[0] for r in rs])), float(np.mean([r[1] for r in rs]))) for v, rs in seen.items()}


def _weight(graph: Graph, n: Node, reduce_range: bool) -> quant_ops.QuantizedWeight:
    w = graph.constants[n.inputs[1]]
    if n.op == "conv_general_dilated":
        axis = n.params["dimension_numbers"].rhs_spec[0]
    else:
        (_, rc), _ = n.params["dimension_numbers"]
        axis = max(d for d in range(w.ndim) if d not in tuple(rc))
    return quant_ops.quantize_weight(w, axis, reduce_range)


def _code(value: float, scale: float, zero: int) -> int:
    """The uint8 code :func:`~.quant_ops.quantize_activation` gives ``value``."""
    lo, hi = INT_RANGE["uint8"]
    return int(np.clip(np.rint(np.float32(value) / np.float32(scale)) + zero, lo, hi))


def _quantized_node(n: Node, q: Any, scale: float, zero: int, weight: quant_ops.QuantizedWeight) -> List[Any]:
    p = n.params
    if n.op == "conv_general_dilated":
        out = quant_ops.conv(q, zero, scale, weight, p["window_strides"], p["padding"], p.get("rhs_dilation"),
                             p["dimension_numbers"], int(p.get("feature_group_count", 1)))
    else:
        out = quant_ops.dot(q, zero, scale, weight, p["dimension_numbers"])
    return [out]


def reduce_range_default(target: Target) -> bool:
    """Whether :func:`quantize` makes 7-bit weights (``reduce_range``) on ``target`` when not
    told: where its int8 products are not VNNI's. There 8-bit weights would take
    ``vpmaddwd`` on widened bytes, exact but 1.3-1.5x slower in the networks, while 7-bit
    ones take ``vpmaddubsw`` (its u8 x s8 pairs cannot overflow int16). ONNX Runtime's
    documentation asks the same of its users there ("On AVX2 and AVX512 machines, you will
    generally need to enable reduce-range as well if per-channel is enabled"). A graph
    quantized so keeps its 7-bit weights on any machine it is compiled on.

    >>> reduce_range_default(Target(isa=("avx2", "fma"))), reduce_range_default(Target(isa=("avx512f", "avx512_vnni")))
    (True, False)
    """
    return not target.runs_natively("int8")


def quantize(model: Union[Graph, Callable], calibration: Sequence[Any], *, method: str = "minmax",
             percentile: float = 99.99, skip: Sequence[SkipRule] = (), reduce_range: Optional[bool] = None,
             name: Optional[str] = None) -> Graph:
    """``model`` (a :class:`~.ir.Graph` or a JAX function) with its convolutions and matmuls
    in int8, calibrated on ``calibration`` (a list of samples, each the model's arguments: an
    array or a tuple of them; a function is traced with the first); see the module
    docstring. ``method``: ``"minmax"`` or ``"percentile"`` (``percentile``: its ``p``);
    ``skip``: layers that stay float32; ``reduce_range``: weights in ``[-64, 64]`` (ONNX
    Runtime's option of the name: a bit of precision for about 1.4x faster products on CPUs
    without VNNI, :mod:`probsched.ir.dtypes`' int8r); None (the default) chooses
    :func:`reduce_range_default` for this machine. Returns the quantized graph, named
    ``<name>_int8``."""
    import jax

    from .from_jax import from_jax

    if isinstance(model, Graph):
        graph = model
    elif callable(model):
        first = calibration[0] if isinstance(calibration, (list, tuple)) and calibration else None
        if first is None:
            _samples(calibration, None)  # the one clear error
        graph = from_jax(model, *(first if isinstance(first, (tuple, list)) else (first,)))
    else:
        raise FrontEndError(f"quantize: expected a ps.Graph or a JAX function, got {type(model).__name__}")
    samples = _samples(calibration, graph)
    chosen = [layer for layer in layers(graph) if not _skipped(layer, skip)]
    plan = plan_quantization(graph, [layer.node for layer in chosen])
    ranges = calibrate(graph, plan.stored, samples, method, percentile)
    params = {v: quant_ops.activation_params(*ranges[v]) for v in plan.stored}
    if reduce_range is None:
        reduce_range = reduce_range_default(Target.host())
    weights = {id(layer.node): _weight(graph, layer.node, reduce_range) for layer in chosen}

    skips = set(plan.skip_values())
    producer = graph.producer()

    def quantized_bytes(v: int, env: Dict[int, Any], like: Optional[int] = None) -> Any:
        """``v`` quantized with its parameters (``like``'s), once: a ReLU before it folded
        into the saturation (:func:`.quant_plan.relu_bounds`). A skip connection's
        dequantization is traced at once, before the layer whose add reads it: fusion then
        joins that add to the layer (the later group), and moves the dequantization in."""
        key = ("q", v if like is None else like)  # one quantization of a value, whoever reads it
        if key not in env:
            scale, zero = params[key[1]]
            y, floor, ceiling = relu_bounds(graph, v, producer)
            lo, hi = INT_RANGE["uint8"]
            codes = (lo if floor is None else _code(floor, scale, zero), hi if ceiling is None else _code(ceiling, scale, zero))
            env[key] = quant_ops.quantize_activation(env[y], scale, zero, bounds=codes)
        if like is None and v in skips and ("dq", v) not in env:
            env[("dq", v)] = quant_ops.dequantize_activation(env[key], *params[v])
        return env[key]

    def override(n: Node, env: Dict[int, Any]) -> Optional[List[Any]]:
        if id(n) in weights:
            x = n.inputs[0]
            scale, zero = params[x]
            return _quantized_node(n, quantized_bytes(x, env), scale, zero, weights[id(n)])
        if id(n) in plan.residual_adds:
            k = plan.residual_adds[id(n)]
            skip = n.inputs[k]
            quantized_bytes(skip, env)
            operands = [env[v] for v in n.inputs]
            operands[k] = env[("dq", skip)]
            return [operands[0] + operands[1]]
        if id(n) in plan.byte_pools:
            out = plan.byte_pools[id(n)]
            pooled = n.bind(quantized_bytes(n.inputs[0], env, like=out))[0]  # padded with the lowest code
            env[("q", out)] = pooled
            env[("dq", out)] = quant_ops.dequantize_activation(pooled, *params[out])  # any float reader's, a skip's
            return [env[("dq", out)]]
        return None

    def quantized(*args):
        env = _run(graph, args, override)
        outs = [env[v] for v in graph.outputs]
        if graph.out_tree is not None:
            return jax.tree_util.tree_unflatten(graph.out_tree, outs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    specs = [jax.ShapeDtypeStruct(graph.types[v].shape, np.dtype(graph.types[v].dtype)) for v in graph.inputs]
    out = from_jax(quantized, *specs, name=name or f"{graph.name}_int8")
    out.input_names, out.output_names = graph.input_names, graph.output_names
    return out


#: the values an integer input of :func:`random_calibration` takes: ``[0, TOKENS)``, token
#: ids below the size of every vocabulary in use
TOKENS = 1000


def random_calibration(graph: Graph, n: int = 32, seed: int = 0) -> List[Tuple[np.ndarray, ...]]:
    """``n`` random samples of ``graph``'s inputs, for :func:`quantize` where no real data is
    at hand: to time an int8 network. Ranges from random inputs are not those of real data,
    so a model to deploy is calibrated on its own inputs. A floating input is standard
    normal, an integer one uniform in ``[0, TOKENS)``, one whose name says ``mask`` all ones.

    >>> import numpy as np, probsched as ps
    >>> g = ps.from_jax(lambda x, ids: x.sum() + ids.sum(), np.zeros((2, 3), np.float32), np.zeros(4, np.int32))
    >>> [[a.dtype.name for a in s] for s in random_calibration(g, n=2)]
    [['float32', 'int32'], ['float32', 'int32']]
    """
    if n < 1:
        raise FrontEndError(f"random_calibration: n must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    names = graph.input_names or [""] * len(graph.inputs)
    out = []
    for _ in range(n):
        sample = []
        for v, name in zip(graph.inputs, names):
            t = graph.types[v]
            dtype = np.dtype(t.dtype)
            if dtype.kind == "f":
                sample.append(rng.standard_normal(t.shape).astype(dtype))
            elif "mask" in name.lower():
                sample.append(np.ones(t.shape, dtype))
            else:
                sample.append(rng.integers(0, TOKENS, t.shape).astype(dtype))
        out.append(tuple(sample))
    return out


__all__ = ["quantize", "reduce_range_default", "random_calibration", "layers", "calibrate", "Layer", "METHODS", "TOKENS"]
