"""``ModelInterface``: what a compiled network takes and gives, without the graph it came from.

A network's interface is its input and output values (the graph's value ids, their names,
shapes and dtypes), its constants, and how its outputs nest (the function returned a dict,
a tuple, ...). The runtime needs nothing more to check arguments, place values and hand the
outputs back, and a saved model (:mod:`.artifact`) stores exactly this. How outputs nest is
an :class:`OutputTree`, written with plain containers (dict, list, tuple) so that a model
loaded without JAX returns what the JAX function returned.

>>> import numpy as np
>>> spec = TensorSpec((2,), "float32")
>>> iface = ModelInterface("m", (0,), (1, 2), {0: spec, 1: spec, 2: spec}, {}, ("x",), ("y", "z"),
...                        OutputTree.of({"y": 0, "z": [1]}))
>>> iface.pack([np.zeros(2), np.ones(2)])["z"][0].tolist()
[1.0, 1.0]
>>> iface.check_arguments([np.zeros(3, np.float32)])
Traceback (most recent call last):
...
probsched.errors.KernelArgumentError: m: argument 0 (x) has shape (3,) float32, but m takes float32[2]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..arguments import check_arrays
from ..errors import KernelArgumentError
from ..ir.dtypes import numpy_dtype


class TensorSpec(NamedTuple):
    """A value's shape and dtype."""

    shape: Tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * numpy_dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class OutputTree:
    """How a function's outputs nest, as JSON: ``{"leaf": i}``, ``{"tuple": [...]}``,
    ``{"list": [...]}``, ``{"dict": [[key, tree], ...]}`` (keys kept in order).

    >>> t = OutputTree.of((0, {"b": 1, "a": [2]}))
    >>> t.unflatten(["x", "y", "z"])
    ('x', {'b': 'y', 'a': ['z']})
    >>> OutputTree.from_json(t.to_json()) == t
    True
    """

    tree: Any

    @staticmethod
    def of(structure: Any) -> "OutputTree":
        """The tree of a structure of dicts, lists and tuples whose leaves are output indices."""

        def walk(x: Any) -> Any:
            if isinstance(x, dict):
                return {"dict": [[k, walk(v)] for k, v in x.items()]}
            if isinstance(x, tuple) and not hasattr(x, "_fields"):
                return {"tuple": [walk(v) for v in x]}
            if isinstance(x, list):
                return {"list": [walk(v) for v in x]}
            if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
                return {"leaf": int(x)}
            raise TypeError(f"outputs nested in a {type(x).__name__}: only dicts, lists and tuples can be kept")

        return OutputTree(walk(structure))

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        """The outputs ``leaves`` nested as the function returned them."""

        def build(t: Any) -> Any:
            (kind, value), = t.items()
            if kind == "leaf":
                return leaves[value]
            if kind == "tuple":
                return tuple(build(v) for v in value)
            if kind == "list":
                return [build(v) for v in value]
            return {k: build(v) for k, v in value}

        return build(self.tree)

    def to_json(self) -> Any:
        return self.tree

    @staticmethod
    def from_json(data: Any) -> "OutputTree":
        return OutputTree(data)


@dataclass
class ModelInterface:
    """A network's inputs, outputs, value types and constants (see the module docstring).

    ``tree``: how the outputs nest (None: one output, or a tuple of several); an in-process
    model may hold the JAX tree itself (anything with ``unflatten``).
    """

    name: str
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]
    types: Dict[int, TensorSpec]
    constants: Dict[int, np.ndarray]
    input_names: Tuple[str, ...] = ()
    output_names: Tuple[str, ...] = ()
    tree: Optional[Any] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.inputs, self.outputs = tuple(self.inputs), tuple(self.outputs)
        self.input_names = tuple(self.input_names) or tuple(f"input{i}" for i in range(len(self.inputs)))
        self.output_names = tuple(self.output_names) or tuple(f"output{i}" for i in range(len(self.outputs)))

    def with_types(self, dtypes: Dict[int, str]) -> "ModelInterface":
        """This interface with values ``dtypes`` (value -> dtype) stored in another element
        type (a compiled network's values between tasks, e.g. in bfloat16).

        >>> i = ModelInterface("f", (0,), (2,), {v: TensorSpec((4,), "float32") for v in range(3)}, {})
        >>> i.with_types({1: "bfloat16"}).types[1].nbytes, i.types[1].nbytes
        (8, 16)
        """
        types = dict(self.types)
        for v, dtype in dtypes.items():
            types[v] = TensorSpec(types[v].shape, dtype)
        return dataclasses.replace(self, types=types)

    @staticmethod
    def of_graph(graph: Any) -> "ModelInterface":
        """The interface of a front-end :class:`~probsched.graph.Graph`."""
        types = {v: TensorSpec(tuple(t.shape), str(t.dtype)) for v, t in graph.types.items()}
        tree = graph.out_tree
        if tree is not None and not hasattr(tree, "unflatten"):
            tree = _JaxTree(tree)
        return ModelInterface(
            graph.name, tuple(graph.inputs), tuple(graph.outputs), types, dict(graph.constants),
            tuple(getattr(graph, "input_names", None) or ()), tuple(getattr(graph, "output_names", None) or ()), tree,
        )

    def check_arguments(self, args: Sequence[Any], who: str = "") -> List[np.ndarray]:
        """``args`` as numpy arrays, or one :class:`~probsched.errors.KernelArgumentError`
        naming the input whose count, shape or dtype differs from the model's."""
        specs = [(self.types[v].shape, self.types[v].dtype) for v in self.inputs]
        return check_arrays(args, specs, who or self.name, self.input_names, KernelArgumentError)

    def pack(self, outs: Sequence[np.ndarray]) -> Any:
        """The outputs as the function returned them."""
        if self.tree is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        return self.tree.unflatten(list(outs))

    def output_tree(self) -> Optional[OutputTree]:
        """The outputs' nesting as an :class:`OutputTree` (what a saved model stores); None
        for one output or a tuple."""
        if self.tree is None or isinstance(self.tree, OutputTree):
            return self.tree
        return OutputTree.of(self.tree.unflatten(list(range(len(self.outputs)))))


class _JaxTree:
    """A JAX tree definition with the ``unflatten`` the interface calls."""

    def __init__(self, treedef: Any) -> None:
        self.treedef = treedef

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        import jax

        return jax.tree_util.tree_unflatten(self.treedef, list(leaves))


__all__ = ["ModelInterface", "OutputTree", "TensorSpec"]
