"""The operator graph: a small dataflow IR of JAX primitives over static-shape tensors.

A :class:`Graph` is what :func:`~probsched.graph.from_jax` makes of a traced JAX function:
values (tensors with a static shape and a dtype, numbered), nodes (one JAX primitive each,
in topological order, with its parameters and the user's source line), the graph's inputs
and outputs, and its constants (the closed-over weights, as numpy arrays). A node keeps the
JAX primitive it came from, so :meth:`Graph.evaluate` runs the graph exactly as JAX does
(eagerly, primitive by primitive): the reference every task and compiled model is checked
against.

>>> import numpy as np, jax.numpy as jnp
>>> import probsched as ps
>>> w = np.full((3, 2), 0.5, np.float32)
>>> g = ps.from_jax(lambda x: jnp.tanh(x @ w), np.ones((4, 3), np.float32))
>>> print(g)
graph(%0: float32[4, 3]) {
  %2: float32[4, 2] = dot_general(%0, %1)  # constant %1: float32[3, 2]
  %3: float32[4, 2] = tanh(%2)
  return %3
}
>>> g.evaluate(np.ones((4, 3), np.float32))[0][0]
array([0.9051482, 0.9051482], dtype=float32)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..arguments import check_arrays
from ..errors import FrontEndError


@dataclass(frozen=True)
class TensorType:
    """A value's static shape and dtype."""

    shape: Tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        """Bytes of a dense array of this type."""
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True, eq=False)
class Node:
    """One JAX primitive applied to values: ``outputs = op(*inputs, **params)``.

    ``primitive`` is the JAX primitive object (what :meth:`evaluate` binds); ``source`` the
    user's source line that made it (``file:line (function)``), for error messages.
    """

    op: str
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    params: Mapping[str, Any] = field(repr=False)
    primitive: Any = field(repr=False)
    source: str = ""

    def evaluate(self, *args: np.ndarray) -> List[np.ndarray]:
        """The node's outputs as JAX computes them (float32 numpy arrays)."""
        return [np.asarray(o) for o in self.bind(*args)]

    def bind(self, *args: Any) -> List[Any]:
        """The node's outputs: its primitive applied to ``args`` (arrays, or JAX tracers when
        a graph is traced again, :mod:`.quantization`)."""
        from .ops import SCALAR_BROADCASTING

        eager = all(isinstance(a, (np.ndarray, np.generic)) for a in args)
        if eager and self.op in SCALAR_BROADCASTING and len({np.ndim(a) for a in args}) > 1:
            # a jaxpr's scalar literals broadcast in elementwise operators; bound eagerly,
            # the primitive wants equal ranks (traced, the scalar stays one: no large constant)
            shape = np.broadcast_shapes(*(np.shape(a) for a in args))
            args = tuple(np.broadcast_to(a, shape) if np.ndim(a) == 0 else a for a in args)
        out = self.primitive.bind(*args, **self.params)
        return list(out) if self.primitive.multiple_results else [out]


@dataclass
class Graph:
    """Values, nodes in topological order, inputs, outputs and constants (see the module doc)."""

    name: str
    types: Dict[int, TensorType]
    nodes: List[Node]
    inputs: List[int]
    outputs: List[int]
    constants: Dict[int, np.ndarray]
    out_tree: Any = field(default=None, repr=False)  # how fn's outputs nest (a JAX PyTreeDef)
    #: the names of the inputs and outputs where the source had them (an ONNX model's)
    input_names: Optional[List[str]] = field(default=None, repr=False)
    output_names: Optional[List[str]] = field(default=None, repr=False)

    # ------------------------------------------------------------------ tasks
    def fuse(self) -> list:
        """The nodes grouped into tasks (:func:`probsched.graph.fusion.fuse`)."""
        from .fusion import fuse

        return fuse(self)

    def tasks(self) -> list:
        """The distinct fused tasks, each with its weight and FLOPs
        (:func:`probsched.graph.task.extract_tasks`); computed once."""
        cached = self.__dict__.get("_tasks")
        if cached is None:
            from .task import extract_tasks

            cached = self.__dict__["_tasks"] = extract_tasks(self)
        return cached

    # ------------------------------------------------------------------ queries
    def producer(self) -> Dict[int, Node]:
        """The node that computes each value (inputs and constants have none)."""
        return {v: n for n in self.nodes for v in n.outputs}

    def consumers(self) -> Dict[int, List[Node]]:
        """The nodes that read each value, in graph order (a node reading it twice counts once)."""
        out: Dict[int, List[Node]] = {v: [] for v in self.types}
        for n in self.nodes:
            for v in dict.fromkeys(n.inputs):
                out[v].append(n)
        return out

    def is_constant(self, value: int) -> bool:
        """Whether ``value`` is a constant of the graph (a weight or a literal)."""
        return value in self.constants

    @property
    def constant_bytes(self) -> int:
        """Bytes held by the constants (the weights)."""
        return int(sum(a.nbytes for a in self.constants.values()))

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    # ------------------------------------------------------------------ running
    def check_arguments(self, args: Sequence[Any], who: str = "") -> List[np.ndarray]:
        """``args`` as numpy arrays, or one :class:`FrontEndError` naming the argument whose
        count, shape or dtype differs from the traced example."""
        specs = [(self.types[v].shape, self.types[v].dtype) for v in self.inputs]
        return check_arrays(args, specs, who or f"graph {self.name}", self.input_names or None, FrontEndError)

    def evaluate(self, *args: Any) -> Tuple[np.ndarray, ...]:
        """Run the graph node by node with JAX (the reference of everything compiled from it)."""
        env: Dict[int, np.ndarray] = dict(self.constants)
        env.update(zip(self.inputs, self.check_arguments(args)))
        for n in self.nodes:
            env.update(zip(n.outputs, n.evaluate(*(env[v] for v in n.inputs))))
        return tuple(np.asarray(env[v]) for v in self.outputs)

    # ------------------------------------------------------------------ printing
    def __str__(self) -> str:
        shown: set = set()

        def name(v: int) -> str:
            return f"%{v}"

        params = ", ".join(f"{name(v)}: {self.types[v]}" for v in self.inputs)
        lines = [f"graph({params}) {{"]
        for n in self.nodes:
            outs = ", ".join(f"{name(v)}: {self.types[v]}" for v in n.outputs)
            args = ", ".join(name(v) for v in n.inputs)
            consts = [v for v in n.inputs if v in self.constants and v not in shown and self.types[v].size > 1]
            shown.update(consts)
            note = "  # " + ", ".join(f"constant {name(v)}: {self.types[v]}" for v in consts) if consts else ""
            lines.append(f"  {outs} = {n.op}({args}){note}")
        lines.append("  return " + ", ".join(name(v) for v in self.outputs))
        lines.append("}")
        return "\n".join(lines)


__all__ = ["Graph", "Node", "TensorType"]
