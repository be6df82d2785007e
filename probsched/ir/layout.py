"""How a function stores its parameters: a :class:`Layout` per parameter laid out anew.

A :class:`Layout` splits each dimension of an input into factors (outer first) and orders
the pieces anew: ``W[k, n]`` read by a micro-kernel in ``kc x N`` panels, one panel per
``(n_out, k_out)`` tile, is best stored as ``W'[n_out, k_out, kc, N]`` so that each panel
is contiguous. A function records the layouts of its parameters in its
``layout_transforms`` attribute (the schedule primitive that rewrites a function to read
one is :func:`probsched.schedule.layout.transform_layout`); whoever calls the compiled
kernel passes each parameter in its logical shape and the kernel lays it out when it binds
its arguments (:func:`layouts_of`, :func:`logical_params`).

A layout is one kind of *parameter transform*; the other is Winograd's weight transform
(:class:`~probsched.ir.winograd.WinogradKernel`: ``U = G g G^T``, of another shape and
other values). A transform has a logical ``shape``, a ``physical_shape``, ``apply`` and
``to_json``; a parameter may go through several, in the order recorded (a Winograd weight
then laid out for the micro-kernel's panels), and :func:`layouts_of` gives their
composition (:class:`Transforms`).

>>> import numpy as np
>>> lay = Layout((4, 6), ((2, 2), (3, 2)), (2, 0, 1, 3))     # W[k, n] -> W'[n//2, k//2, k%2, n%2]
>>> lay.physical_shape
(3, 2, 2, 2)
>>> w = np.arange(24, dtype=np.float32).reshape(4, 6)
>>> wp = lay.apply(w)
>>> float(wp[1, 0, 1, 0]) == float(w[1, 2])
True
>>> from probsched.ir.expr import Var
>>> [str(e) for e in lay.index((Var("k"), Var("n")))]
['n // 2', 'k // 2', 'k % 2', 'n % 2']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ..aligned import aligned_copy
from .expr import Const, Expr
from .stmt import Buffer, PrimFunc
from .winograd import WinogradKernel

#: Function attribute: ``((buffer name, transform JSON), ...)`` of the parameters laid out
#: (or transformed) anew, in the order applied.
LAYOUT_TRANSFORMS = "layout_transforms"
#: Function attribute: names of the inputs that are constants where the function is used
#: (a network's weights), which the design space may lay out anew.
LAYOUT_FREE = "layout_free_buffers"


@dataclass(frozen=True)
class Layout:
    """``shape`` split per dimension into ``splits`` (outer factor first, product = extent),
    the pieces (numbered dimension by dimension) stored in ``order``."""

    shape: Tuple[int, ...]
    splits: Tuple[Tuple[int, ...], ...]
    order: Tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "splits", tuple(tuple(int(f) for f in fs) for fs in self.splits))
        object.__setattr__(self, "order", tuple(int(o) for o in self.order))
        if len(self.splits) != len(self.shape):
            raise ValueError(f"Layout: {len(self.splits)} splits for a rank-{len(self.shape)} shape {self.shape}")
        for d, (extent, fs) in enumerate(zip(self.shape, self.splits)):
            if not fs or any(f < 1 for f in fs) or int(np.prod(fs)) != extent:
                raise ValueError(f"Layout: dimension {d} of extent {extent} split into {fs}, whose product differs")
        if sorted(self.order) != list(range(sum(len(fs) for fs in self.splits))):
            raise ValueError(f"Layout: order {self.order} is not a permutation of the {sum(len(fs) for fs in self.splits)} pieces")

    @property
    def pieces(self) -> List[Tuple[int, int, int]]:
        """``(dimension, extent, stride)`` of every piece, dimension by dimension."""
        out = []
        for d, fs in enumerate(self.splits):
            stride = int(np.prod(fs))
            for f in fs:
                stride //= f
                out.append((d, f, stride))
        return out

    @property
    def physical_shape(self) -> Tuple[int, ...]:
        """The stored array's shape."""
        pieces = self.pieces
        return tuple(pieces[o][1] for o in self.order)

    @property
    def is_identity(self) -> bool:
        """Whether the stored array is the logical one."""
        return self.physical_shape == self.shape and list(self.order) == list(range(len(self.order)))

    def apply(self, array: np.ndarray) -> np.ndarray:
        """The array laid out: a C-contiguous copy of shape :attr:`physical_shape`."""
        a = np.asarray(array)
        if a.shape != self.shape:
            raise ValueError(f"Layout.apply: array of shape {a.shape}, the layout is of {self.shape}")
        split = a.reshape([f for fs in self.splits for f in fs])
        return aligned_copy(np.transpose(split, self.order))

    def index(self, indices: Sequence[Expr]) -> Tuple[Expr, ...]:
        """The physical indices of the element at logical ``indices``."""
        parts: List[Expr] = []
        for d, extent, stride in self.pieces:
            e = indices[d]
            first = stride * extent == self.shape[d]  # the outermost piece: no remainder needed
            q = e // stride if stride > 1 else e
            parts.append(Const(0, "int64") if extent == 1 else (q if first else q % extent))
        return tuple(parts[o] for o in self.order)

    def to_json(self) -> str:
        """JSON text (what the function attribute and the instruction log store)."""
        return json.dumps({"shape": self.shape, "splits": self.splits, "order": self.order})

    @staticmethod
    def from_json(text: str) -> "Layout":
        """Rebuild a layout from :meth:`to_json` text."""
        d = json.loads(text)
        return Layout(tuple(d["shape"]), tuple(tuple(s) for s in d["splits"]), tuple(d["order"]))


def transform_from_json(text: str):
    """A parameter transform from its JSON text: a :class:`Layout`, or the
    :class:`~probsched.ir.winograd.WinogradKernel` its ``kind`` names."""
    kind = json.loads(text).get("kind", "layout")
    if kind == "winograd_kernel":
        return WinogradKernel.from_json(text)
    if kind != "layout":
        raise ValueError(f"unknown parameter transform {kind!r}")
    return Layout.from_json(text)


@dataclass(frozen=True)
class Transforms:
    """Several transforms of one parameter, applied in order (each reads what the one
    before produced).

    >>> w = WinogradKernel((3, 3, 2, 4), 2)
    >>> both = Transforms((w, Layout(w.physical_shape, ((4,), (4,), (2,), (2, 2)), (0, 1, 3, 2, 4))))
    >>> both.shape, both.physical_shape
    ((3, 3, 2, 4), (4, 4, 2, 2, 2))
    >>> both.apply(np.ones(both.shape, np.float32)).shape
    (4, 4, 2, 2, 2)
    """

    steps: Tuple

    @property
    def shape(self) -> Tuple[int, ...]:
        """The logical shape (what callers pass)."""
        return self.steps[0].shape

    @property
    def physical_shape(self) -> Tuple[int, ...]:
        """The stored array's shape."""
        return self.steps[-1].physical_shape

    def apply(self, array: np.ndarray) -> np.ndarray:
        """The array through every step."""
        for step in self.steps:
            array = step.apply(array)
        return array

    def to_json(self) -> str:
        """JSON text of the steps (identifies the stored array)."""
        return json.dumps([json.loads(step.to_json()) for step in self.steps])


def layouts_of(func: PrimFunc) -> Dict[str, object]:
    """The transforms ``func`` stores its parameters in, by name (empty for most
    functions): a :class:`Layout` (or :class:`~probsched.ir.winograd.WinogradKernel`) when
    there is one, their :class:`Transforms` when there are several."""
    steps: Dict[str, list] = {}
    for name, text in func.attr(LAYOUT_TRANSFORMS) or ():
        steps.setdefault(name, []).append(transform_from_json(text))
    return {name: s[0] if len(s) == 1 else Transforms(tuple(s)) for name, s in steps.items()}


def logical_params(func: PrimFunc) -> Tuple[Buffer, ...]:
    """``func``'s parameters with the shapes their callers pass (before any transform)."""
    lays = layouts_of(func)
    return tuple(Buffer(b.name, lays[b.name].shape, b.dtype) if b.name in lays else b for b in func.params)


def lay_out_inputs(func: PrimFunc, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """``func``'s input arrays (in :meth:`~probsched.ir.stmt.PrimFunc.input_buffers` order,
    logical shapes) as the function itself reads them: what the IR interpreter takes."""
    lays = layouts_of(func)
    return [lays[b.name].apply(a) if b.name in lays else a for b, a in zip(func.input_buffers(), inputs)]



__all__ = [
    "Layout", "Transforms", "LAYOUT_TRANSFORMS", "LAYOUT_FREE", "layouts_of", "logical_params", "lay_out_inputs",
    "transform_from_json",
]
