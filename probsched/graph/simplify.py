"""Graph simplification: chains of affine operations with constants fold to one multiply-add;
boolean constants are stored as int32; unread constants are dropped.

An inference-mode batch norm after a convolution is ``(y - mean) / sqrt(var + eps) * gamma
+ beta``: four elementwise operations per output element, two of them a subtraction and a
division, once ``sqrt(var + eps)`` is folded. It is the affine map ``y * a + b`` with
per-channel constants ``a = gamma / s`` and ``b = beta - mean * gamma / s``
(TVM's SimplifyInference and FoldScaleAxis do the same). :func:`fold_affine_chains`
rewrites every chain of ``add``/``sub``/``mul``/``div`` of a value by constants, each link
read only by the next, into one ``mul`` and one ``add``; the constants are computed once,
in float32. The result differs from the unfolded chain by float32 rounding only.

>>> import numpy as np, jax
>>> import probsched as ps
>>> m, s, g, b = (np.full((4,), v, np.float32) for v in (0.5, 2.0, 3.0, 1.0))
>>> graph = ps.from_jax(lambda x: jax.nn.relu((x - m) / s * g + b), np.ones((2, 4), np.float32))
>>> [n.op for n in graph.nodes]
['mul', 'add', 'max']
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from .ir import Graph, Node

#: elementwise ops that are affine in one operand when the other is a constant
AFFINE = ("add", "sub", "mul", "div")


def _link(graph: Graph, node: Node) -> Optional[Tuple[int, str, np.ndarray, bool]]:
    """``(x, op, c, x_first)`` when ``node`` is ``op(x, c)`` or ``op(c, x)`` with a constant
    ``c`` of at most ``x``'s size and an affine result in ``x``; else None."""
    if node.op not in AFFINE or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    a, b = node.inputs
    ca, cb = a in graph.constants, b in graph.constants
    if ca == cb:
        return None
    x, c, x_first = (b, graph.constants[a], False) if ca else (a, graph.constants[b], True)
    out = graph.types[node.outputs[0]]
    if graph.types[x].dtype != "float32" or graph.types[x].shape != out.shape:
        return None  # the constant must broadcast into x, not x into a larger result
    if node.op == "div" and not x_first:
        return None  # c / x is not affine in x
    if c.ndim and c.ndim != len(out.shape):
        return None
    return x, node.op, c, x_first


def _compose(scale: np.ndarray, shift: np.ndarray, op: str, c: np.ndarray, x_first: bool) -> Tuple[np.ndarray, np.ndarray]:
    """``(scale, shift)`` of ``op`` applied to ``x * scale + shift``."""
    if op == "add":
        return scale, shift + c
    if op == "sub":
        return (scale, shift - c) if x_first else (-scale, c - shift)
    if op == "mul":
        return scale * c, shift * c
    return scale / c, shift / c  # div, x first


def fold_affine_chains(graph: Graph) -> Graph:
    """``graph`` with every chain of two or more affine operations by constants replaced by
    a multiply and an add (in place; returns the graph). See the module docstring."""
    import jax

    consumers = graph.consumers()
    producer = graph.producer()
    links: Dict[int, Tuple[int, str, np.ndarray, bool]] = {}
    for n in graph.nodes:
        link = _link(graph, n)
        if link is not None:
            links[id(n)] = link
    absorbed: set = set()
    replace: Dict[int, List[Node]] = {}
    for n in graph.nodes:
        if id(n) not in links or id(n) in absorbed:
            continue
        # a chain ends at n when its output is not read by exactly one further link
        nxt = consumers.get(n.outputs[0], [])
        if len(nxt) == 1 and id(nxt[0]) in links and links[id(nxt[0])][0] == n.outputs[0] and n.outputs[0] not in graph.outputs:
            continue
        chain = [n]
        x = links[id(n)][0]
        while True:
            p = producer.get(x)
            if p is None or id(p) not in links or len(consumers.get(x, [])) != 1 or x in graph.outputs:
                break
            chain.append(p)
            x = links[id(p)][0]
        if len(chain) < 2:
            continue
        chain.reverse()
        shape = graph.types[n.outputs[0]].shape
        scale, shift = np.ones((1,) * len(shape), np.float32), np.zeros((1,) * len(shape), np.float32)
        for link_node in chain:
            _, op, c, x_first = links[id(link_node)]
            scale, shift = _compose(scale, shift, op, c.astype(np.float32), x_first)
        scale, shift = scale.astype(np.float32), shift.astype(np.float32)
        a = _new_constant(graph, scale)
        mid = _new_value(graph, graph.types[n.outputs[0]])
        b = _new_constant(graph, shift)
        mul = Node("mul", (x, a), (mid,), {}, jax.lax.mul_p, chain[0].source)
        add = Node("add", (mid, b), n.outputs, {}, jax.lax.add_p, n.source)
        absorbed.update(id(c) for c in chain)
        replace[id(n)] = [mul, add]
    if replace:
        nodes = []
        for n in graph.nodes:
            if id(n) in replace:
                nodes += replace[id(n)]
            elif id(n) not in absorbed:
                nodes.append(n)
        graph.nodes = nodes
        used = {v for nd in nodes for v in nd.inputs} | set(graph.outputs)
        for v in [v for v in graph.constants if v not in used]:
            del graph.constants[v]
            del graph.types[v]
    return graph


def prune_dead_nodes(graph: Graph) -> Graph:
    """``graph`` without the nodes whose results nothing reads (in place), then without the
    constants only they read: a trace keeps every equation, and an importer may compute a
    value it ends up not using (an ONNX ``DequantizeLinear`` whose convolution reads the
    integers instead).

    >>> import numpy as np
    >>> import probsched as ps
    >>> g = ps.from_jax(lambda x: (x * 2.0, x + 1.0)[0], np.ones(3, np.float32))
    >>> [n.op for n in g.nodes]
    ['mul']
    """
    live = set(graph.outputs)
    kept: List[Node] = []
    for n in reversed(graph.nodes):
        if live.intersection(n.outputs):
            kept.append(n)
            live.update(n.inputs)
    if len(kept) != len(graph.nodes):
        graph.nodes = kept[::-1]
        for v in [v for v in graph.types if v not in live and v not in graph.inputs]:
            graph.constants.pop(v, None)
            del graph.types[v]
    return prune_constants(graph)


def prune_constants(graph: Graph) -> Graph:
    """``graph`` without the constants no node and no output reads (in place): the
    bfloat16 originals of weights whose cast to float32 was folded, for instance."""
    used = {v for nd in graph.nodes for v in nd.inputs} | set(graph.outputs)
    for v in [v for v in graph.constants if v not in used]:
        del graph.constants[v]
        del graph.types[v]
    return graph


def widen_boolean_constants(graph: Graph) -> Graph:
    """``graph`` with every boolean constant of more than one element (a causal mask) held
    as an int32 constant and a ``ne(c, 0)`` node where it was (in place): a task's
    parameters are numbers, and the comparison is an index map, substituted where read.

    >>> import numpy as np, jax.numpy as jnp
    >>> import probsched as ps
    >>> mask = np.tril(np.ones((3, 3), bool))
    >>> g = ps.from_jax(lambda x: jnp.where(mask, x, 0.0), np.ones((3, 3), np.float32))
    >>> [n.op for n in g.nodes], sorted(str(t) for v, t in g.types.items() if v in g.constants)
    (['ne', 'select_n'], ['float32[3, 3]', 'int32[3, 3]', 'int32[]'])
    """
    import jax
    from .ir import TensorType

    masks = [v for v, a in graph.constants.items() if a.dtype == np.bool_ and a.size > 1]
    if not masks:
        return graph
    front: List[Node] = []
    renamed: Dict[int, int] = {}
    for v in masks:
        t = graph.types[v]
        as_int = _new_value(graph, TensorType(t.shape, "int32"))
        graph.constants[as_int] = graph.constants.pop(v).astype(np.int32)
        zero = _new_value(graph, TensorType((), "int32"))
        graph.constants[zero] = np.zeros((), np.int32)
        out = _new_value(graph, t)
        front.append(Node("ne", (as_int, zero), (out,), {}, jax.lax.ne_p, "a boolean constant"))
        renamed[v] = out
    graph.nodes = front + [
        Node(n.op, tuple(renamed.get(v, v) for v in n.inputs), n.outputs, n.params, n.primitive, n.source)
        for n in graph.nodes
    ]
    graph.outputs = [renamed.get(v, v) for v in graph.outputs]
    return prune_constants(graph)


def _new_value(graph: Graph, t) -> int:
    v = max(graph.types) + 1
    graph.types[v] = t
    return v


def _new_constant(graph: Graph, array: np.ndarray) -> int:
    from .ir import TensorType

    v = _new_value(graph, TensorType(tuple(array.shape), "float32"))
    graph.constants[v] = np.array(array, order="C")
    return v


__all__ = ["fold_affine_chains", "prune_constants", "prune_dead_nodes", "widen_boolean_constants"]
