"""Layer categories shared by every engine of ``benchmarks/bench_layers.py``, so that the time
of one inference splits into rows the engines share (stem conv, 3x3 conv, ... for a CNN;
dense matmul, attention, ... for a transformer).

Three sources, one set of rules:

- an ONNX node (:class:`OnnxIndex`): ONNX Runtime's and OpenVINO's per-layer names are
  mapped back to the node of the exported graph (:meth:`OnnxIndex.resolve`); an engine
  layer that computes a convolution or a matmul counts as the ONNX ``Conv`` / ``MatMul`` /
  ``Gemm`` it grew from (its *anchor*, found by walking back from the node it is named
  after: OpenVINO names a fully connected layer after its bias ``Add``, ONNX Runtime a
  fused convolution after its activation's output), with whatever it fused;
- a kernel call of probsched (:func:`call_category`): the JAX primitives of the fused task,
  categorised by its main operator (the convolution or the matmul it contains);
- an engine operator nothing maps back (ONNX Runtime's ``SkipLayerNormalization_token_4``,
  OpenVINO's ``MVN_53``): its operator type alone (:data:`ENGINE_KINDS`).

A convolution is the *stem* when it is the network's first; *depthwise* when it has one
input channel per group; else named by its kernel (``3x3 conv``, ``1x1 conv``). A matmul is
*dense* when one operand is a weight, else *attention* (activation times activation), as
are the operators between two such matmuls (scale, mask, softmax:
:func:`attention_region`).

>>> conv_category((7, 7), groups=1, in_per_group=3, stem=True)
'stem conv'
>>> conv_category((3, 3), groups=32, in_per_group=1, stem=False)
'depthwise conv'
>>> row_order("cnn", {"other", "5x5 conv", "1x1 conv"})
['stem conv', '3x3 conv', '1x1 conv', 'depthwise conv', 'pooling', 'dense', 'other', '5x5 conv']
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

CNN_ROWS = ("stem conv", "3x3 conv", "1x1 conv", "depthwise conv", "pooling", "dense", "other")
TRANSFORMER_ROWS = ("dense matmul", "attention", "layer norm", "elementwise", "embedding", "other")

#: Engine operator types (ONNX Runtime's ``op_name``, OpenVINO's ``node_type``) by what they compute.
ENGINE_KINDS: Dict[str, str] = {
    **dict.fromkeys(("Conv", "FusedConv", "NhwcFusedConv", "Convolution", "GroupConvolution", "QLinearConv",
                     "ConvInteger"), "conv"),
    **dict.fromkeys(("MatMul", "Gemm", "FusedMatMul", "FusedGemm", "FullyConnected", "MatMulInteger",
                     "QLinearMatMul", "DynamicQuantizeMatMul"), "matmul"),
    **dict.fromkeys(("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Pooling",
                     "AdaptivePooling", "ReduceMean"), "pool"),
    **dict.fromkeys(("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                     "SkipSimplifiedLayerNormalization", "MVN", "NormalizeL2"), "norm"),
    **dict.fromkeys(("Softmax", "SoftMax", "Attention", "MultiHeadAttention", "ScaledDotProductAttention"),
                    "attention"),
    **dict.fromkeys(("Gather", "GatherElements", "GatherND", "EmbedLayerNormalization"), "gather"),
    **dict.fromkeys(("Reshape", "Transpose", "Reorder", "ReorderInput", "ReorderOutput", "Flatten", "Squeeze",
                     "Unsqueeze", "Concat", "Convert", "Cast", "Slice", "Split", "Expand", "Identity", "ShapeOf",
                     "Shape", "StridedSlice", "Broadcast", "Tile", "Parameter", "Result", "Constant",
                     "ConstantOfShape", "Range", "MemoryInput", "MemoryOutput"), "movement"),
}
#: The ONNX operators an anchor of each kind may be.
_ANCHOR_OPS = {"conv": ("Conv", "ConvInteger", "QLinearConv"), "matmul": ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul"),
               "pool": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean")}
_MOVEMENT_ONNX = {op for op, kind in ENGINE_KINDS.items() if kind == "movement"}
_GATHER = ("Gather", "GatherElements", "GatherND")
#: Suffixes the engines add to the name of the node or value a layer is named after (ONNX
#: Runtime names a node its QDQ fusion made after the Conv it replaced, plus `_token_<n>`).
_NAME_SUFFIX = re.compile(r"(_nchwc|/WithoutBiases|_kernel_time|_token_\d+)+$")


def conv_category(kernel: Sequence[int], groups: int, in_per_group: int, stem: bool) -> str:
    """The row of a convolution: its kernel's spatial size, groups, and input channels per group."""
    if stem:
        return "stem conv"
    if groups > 1 and in_per_group == 1:
        return "depthwise conv"
    return "x".join(str(k) for k in kernel) + " conv"


def row_order(kind: str, seen: Iterable[str]) -> List[str]:
    """The table's rows: the network kind's categories, then any other seen (e.g. ``5x5 conv``)."""
    base = list(CNN_ROWS if kind == "cnn" else TRANSFORMER_ROWS)
    return base + sorted(set(seen) - set(base))


def attention_region(nodes: Sequence[Tuple[Sequence[str], Sequence[str]]], matmul: Callable[[int], bool],
                     barrier: Callable[[int], bool]) -> Set[int]:
    """Indices of the nodes between two attention matmuls: reached forward from one and
    backward from another without crossing a ``barrier`` (a dense matmul, a norm). ``nodes``
    are ``(inputs, outputs)`` value names in topological order; ``matmul(i)`` says whether
    node ``i`` multiplies two activations.

    >>> chain = [(["q", "k"], ["s"]), (["s"], ["t"]), (["t"], ["p"]), (["p", "v"], ["o"]), (["o"], ["y"])]
    >>> sorted(attention_region(chain, lambda i: i in (0, 3), lambda i: False))
    [1, 2]
    """
    producer = {v: i for i, (_, outs) in enumerate(nodes) for v in outs}
    readers: Dict[str, List[int]] = {}
    for i, (ins, _) in enumerate(nodes):
        for v in ins:
            readers.setdefault(v, []).append(i)

    def walk(starts: List[int], step: Callable[[int], Iterable[int]]) -> Set[int]:
        seen: Set[int] = set()
        stack = [j for i in starts for j in step(i)]
        while stack:
            i = stack.pop()
            if i in seen or matmul(i) or barrier(i):
                continue
            seen.add(i)
            stack.extend(step(i))
        return seen

    mms = [i for i in range(len(nodes)) if matmul(i)]
    forward = walk(mms, lambda i: (j for v in nodes[i][1] for j in readers.get(v, ())))
    backward = walk(mms, lambda i: (producer[v] for v in nodes[i][0] if v in producer))
    return forward & backward


class OnnxIndex:
    """An ONNX graph as the engines' layers are categorised against it (see the module
    docstring): nodes by name and by output, initializer shapes, the first convolution,
    the attention region. Reads the graph's structure only (load the model with
    ``load_external_data=False``)."""

    def __init__(self, model) -> None:
        g = model.graph
        self.nodes = [n for n in g.node if n.op_type != "Constant"]
        self.by_name = {n.name: n for n in self.nodes if n.name}
        self.producer = {v: n for n in self.nodes for v in n.output if v}
        self.constants = {t.name: tuple(t.dims) for t in g.initializer}
        self.constants.update({o: () for n in g.node if n.op_type == "Constant" for o in n.output})
        for n in g.node:  # a QDQ model's weights: the dequantization of an integer constant
            if n.op_type == "DequantizeLinear" and n.input[0] in self.constants:
                self.constants[n.output[0]] = self.constants[n.input[0]]
        convs = [n for n in self.nodes if n.op_type in _ANCHOR_OPS["conv"]]
        attends = any(self._activation_matmul(n) for n in self.nodes)
        self.kind = "cnn" if convs and not attends else "transformer"  # a ViT is a transformer
        self.stem = convs[0].name if convs else None
        self.position = {n.name: i for i, n in enumerate(self.nodes)}
        pairs = [(list(n.input), list(n.output)) for n in self.nodes]
        self.attention = {self.nodes[i].name for i in attention_region(
            pairs, lambda i: self._activation_matmul(self.nodes[i]),
            lambda i: self._dense(self.nodes[i]) or self.nodes[i].op_type in _ANCHOR_OPS["conv"]
            or ENGINE_KINDS.get(self.nodes[i].op_type) == "norm")}
        self._ordinals: Dict[str, Tuple[str, int]] = {}
        self.members: Dict[str, List[str]] = {}  # category -> its nodes' names, graph order
        for n in self.nodes:
            cat = self.category(n)
            self.members.setdefault(cat, []).append(n.name)
            self._ordinals[n.name] = (cat, len(self.members[cat]))

    # ------------------------------------------------------------------ one node
    def _is_constant(self, value: str) -> bool:
        return value in self.constants

    def _dense(self, node) -> bool:
        return node.op_type in _ANCHOR_OPS["matmul"] and any(self._is_constant(v) for v in node.input[:2])

    def _activation_matmul(self, node) -> bool:
        return node.op_type in _ANCHOR_OPS["matmul"] and not self._dense(node)

    def category(self, node) -> str:
        """The row of one ONNX node."""
        op, cnn = node.op_type, self.kind == "cnn"
        if op in _ANCHOR_OPS["conv"]:
            w = self.constants.get(node.input[1], ())
            groups = next((a.i for a in node.attribute if a.name == "group"), 1)
            if len(w) < 3:
                return "other"
            return conv_category(w[2:], groups, w[1], node.name == self.stem)
        if op in _ANCHOR_OPS["matmul"]:
            return ("dense" if cnn else "dense matmul") if self._dense(node) else "attention"
        if op in _ANCHOR_OPS["pool"] and (cnn or op != "ReduceMean"):
            return "pooling"
        if cnn:
            return "other"
        if node.name in self.attention or ENGINE_KINDS.get(op) == "attention":
            return "attention"
        if ENGINE_KINDS.get(op) == "norm" or op in ("ReduceMean", "Sqrt", "Pow", "Reciprocal") and self._normalizes(node):
            return "layer norm"
        if op in _GATHER and len(self.constants.get(node.input[0], ())) == 2:
            return "embedding"
        if op in _MOVEMENT_ONNX or op in _GATHER:
            return "other"
        return "elementwise"

    def _normalizes(self, node) -> bool:
        """A decomposed layer norm's ReduceMean/Pow/Sqrt: a ReduceMean nearby."""
        return node.op_type == "ReduceMean" or any(
            self.producer.get(v) is not None and self.producer[v].op_type == "ReduceMean" for v in node.input)

    # ------------------------------------------------------------------ engine names
    def resolve(self, name: str):
        """The ONNX node an engine's layer ``name`` is named after, or None: the node of that
        name, or that computes a value of that name (after the engines' suffixes), or whose
        name is the longest ``/``-prefix of it (``.../MatMul/MatMulAddFusion``)."""
        for cand in dict.fromkeys((name, _NAME_SUFFIX.sub("", name))):
            node = self.by_name.get(cand) or self.producer.get(cand)
            if node is not None:
                return node
        parts = name.split("/")
        for k in range(len(parts) - 1, 1, -1):
            node = self.by_name.get("/".join(parts[:k]))
            if node is not None:
                return node
        return None

    def anchor(self, node, kind: str, depth: int = 6):
        """The nearest ONNX node of ``kind`` (conv, matmul, pool) at or before ``node``,
        walking back through its activation inputs at most ``depth`` nodes deep, or None."""
        ops = _ANCHOR_OPS[kind]
        frontier = [node]
        for _ in range(depth):
            nxt = []
            for n in frontier:
                if n.op_type in ops:
                    return n
                nxt += [self.producer[v] for v in n.input if v in self.producer and not self._is_constant(v)]
            frontier = nxt
        return None

    def layer(self, op_type: str, name: str) -> Tuple[str, Optional[str]]:
        """``(category, anchor name or None)`` of an engine's layer of type ``op_type`` named ``name``."""
        kind = ENGINE_KINDS.get(op_type, "elementwise")
        node = self.resolve(name)
        if kind in _ANCHOR_OPS:
            found = self.anchor(node, kind) if node is not None else None
            if found is not None:
                return self.category(found), found.name
            fallback = {"conv": "other", "matmul": "dense" if self.kind == "cnn" else "dense matmul", "pool": "pooling"}
            return fallback[kind], None
        if node is not None and node.op_type not in sum(_ANCHOR_OPS.values(), ()):
            return self.category(node), node.name
        if self.kind == "cnn":
            return "other", None
        default = {"norm": "layer norm", "attention": "attention", "gather": "embedding", "movement": "other"}
        return default.get(kind, "elementwise"), None

    def ordinal(self, name: str) -> Tuple[str, int]:
        """``(category, k)``: the node is the k-th of its category in graph order (from 1)."""
        return self._ordinals[name]


# ---------------------------------------------------------------------- probsched's calls
_POOL = ("reduce_window_max", "reduce_window_sum", "reduce_window_min", "reduce_window")
_REDUCE = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin")
_MOVEMENT_JAX = {"transpose", "reshape", "broadcast_in_dim", "squeeze", "expand_dims", "convert_element_type",
                 "concatenate", "slice", "copy", "copy_p", "pad", "rev", "dynamic_slice", "iota"}
_SOURCE = re.compile(r"ONNX node (\S+) (['\"])(.*?)\2 \(inputs")


def onnx_name(source: str) -> Optional[str]:
    """The ONNX node a graph node was imported from (its ``source``), or None.

    >>> onnx_name("ONNX node Conv '/conv1/Conv' (inputs x: float32[1, 3, 8, 8])")
    '/conv1/Conv'
    """
    found = _SOURCE.findall(source or "")
    return found[-1][2] if found else None


def _conv_of(node, types) -> Tuple[Tuple[int, ...], int, int]:
    """A ``conv_general_dilated``'s kernel size, groups and input channels per group."""
    w = types[node.inputs[1]].shape
    dn = node.params.get("dimension_numbers")
    rhs = tuple(dn.rhs_spec) if dn is not None else tuple(range(len(w)))
    return tuple(w[d] for d in rhs[2:]), int(node.params.get("feature_group_count", 1)), w[rhs[1]]


def main_node(nodes: Sequence, constants: Set[int] = frozenset()):
    """The node a fused call is named by: its convolution, else its matmul, pooling, table
    lookup (a gather from a constant), reduction, else its first computing node."""
    def lookup(n) -> bool:
        return n.op == "gather" and n.inputs[0] in constants

    for match in (lambda n: n.op == "conv_general_dilated", lambda n: n.op == "dot_general",
                  lambda n: n.op in _POOL, lookup, lambda n: n.op in _REDUCE):
        for n in nodes:
            if match(n):
                return n
    return next((n for n in nodes if n.op not in _MOVEMENT_JAX), nodes[0] if nodes else None)


def call_category(nodes: Sequence, types, constants: Set[int], kind: str, stem: bool,
                  attention: Set[int] = frozenset()) -> str:
    """The row of one kernel call of probsched: ``nodes`` are its graph nodes (JAX
    primitives), ``types`` the graph's value types, ``constants`` the values computed from
    the graph's constants alone (:func:`constant_values`), ``kind`` the network's (``cnn`` or
    ``transformer``), ``stem`` whether it holds the network's first convolution,
    ``attention`` the ids (``id(node)``) of the graph's nodes between attention matmuls."""
    cnn = kind == "cnn"
    main = main_node(nodes, constants)
    op = main.op if main is not None else ""
    if op == "conv_general_dilated":
        return conv_category(*_conv_of(main, types), stem=stem)
    if op == "dot_general":
        return ("dense" if cnn else "dense matmul") if any(v in constants for v in main.inputs) else "attention"
    if op in _POOL or (cnn and op in _REDUCE):
        return "pooling"
    if cnn:
        return "other"
    ops = {n.op for n in nodes}
    if op == "gather":
        return "embedding"
    if "exp" in ops and "reduce_max" in ops or any(id(n) in attention for n in nodes):
        return "attention"
    if ops & {"sqrt", "rsqrt"} and "reduce_sum" in ops:
        return "layer norm"
    return "other" if ops <= _MOVEMENT_JAX else "elementwise"


def constant_values(graph) -> Set[int]:
    """The graph's constants and the values computed from them alone (a weight transposed
    or reshaped is still a weight)."""
    const = set(graph.constants)
    for n in graph.nodes:
        if n.inputs and all(v in const for v in n.inputs):
            const.update(n.outputs)
    return const


def network_kind(graph, constants: Set[int]) -> str:
    """``transformer`` when a matmul multiplies two activations, else ``cnn`` when the graph
    convolves, else ``transformer`` (rows of matmuls and elementwise operators)."""
    ops = [n for n in graph.nodes if n.op in ("dot_general", "conv_general_dilated")]
    if any(n.op == "dot_general" and not any(v in constants for v in n.inputs) for n in ops):
        return "transformer"
    return "cnn" if any(n.op == "conv_general_dilated" for n in ops) else "transformer"


def graph_attention(graph, const: Set[int]) -> Set[int]:
    """``id`` of the graph's nodes between two attention matmuls (:func:`attention_region`);
    ``const``: :func:`constant_values`."""
    nodes = graph.nodes
    pairs = [([str(v) for v in n.inputs], [str(v) for v in n.outputs]) for n in nodes]

    def matmul(i: int) -> bool:
        return nodes[i].op == "dot_general" and not any(v in const for v in nodes[i].inputs)

    def barrier(i: int) -> bool:
        return nodes[i].op in ("conv_general_dilated", "dot_general", "sqrt", "rsqrt")

    return {id(nodes[i]) for i in attention_region(pairs, matmul, barrier)}


def call_nodes(graph, inputs: Sequence[int], outputs: Sequence[int], producer: Optional[dict] = None) -> List:
    """The graph nodes one kernel call computes: back from its ``outputs`` to its ``inputs``
    (and the constants), in graph order."""
    producer = producer if producer is not None else graph.producer()
    stop = set(inputs) | set(graph.constants)
    seen: Dict[int, object] = {}
    stack = [v for v in outputs if v not in stop]
    while stack:
        n = producer.get(stack.pop())
        if n is None or id(n) in seen:
            continue
        seen[id(n)] = n
        stack.extend(v for v in n.inputs if v not in stop)
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    return sorted(seen.values(), key=lambda n: order[id(n)])


def probsched_layers(graph, steps: Sequence) -> List[Tuple[str, Optional[str]]]:
    """``(category, ONNX anchor or None)`` of each kernel call of a compiled network
    (``model.steps``, in run order; ``graph`` the one it was compiled from)."""
    producer = graph.producer()
    const = constant_values(graph)
    kind = network_kind(graph, const)
    attention = graph_attention(graph, const) if kind == "transformer" else set()
    out, stem_seen = [], False
    for step in steps:
        nodes = call_nodes(graph, step.inputs, step.outputs, producer)
        main = main_node(nodes, const)
        stem = main is not None and main.op == "conv_general_dilated" and not stem_seen
        stem_seen = stem_seen or stem
        cat = call_category(nodes, graph.types, const, kind, stem, attention)
        out.append((cat, onnx_name(main.source) if main is not None else None))
    return out


__all__ = ["CNN_ROWS", "TRANSFORMER_ROWS", "ENGINE_KINDS", "conv_category", "row_order", "attention_region",
           "OnnxIndex", "onnx_name", "main_node", "call_category", "constant_values", "network_kind", "graph_attention",
           "call_nodes", "probsched_layers"]
