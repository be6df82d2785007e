"""What a graph value is while a fused group is lowered to tensor expressions.

An :class:`Operand` is anything that gives an expression for an element: a tensor of the
task (:class:`TensorOperand`: a placeholder or a compute stage, read with a load), a scalar
constant (:class:`ScalarOperand`: embedded in the expressions), or a lazy index map
(:class:`LazyOperand`: broadcasts, reshapes, transposes, slices, comparisons, ... which
compute nothing of their own and are substituted into whatever reads them, as TVM's
injective operators end up after inlining). :class:`Stages` hands out the compute stages of
one task with unique, deterministic names, so two structurally equal groups lower to equal
functions.

>>> import probsched as ps
>>> x = TensorOperand(ps.placeholder((2, 3), name="x0"))
>>> t = LazyOperand((3, 2), "float32", lambda i: x.at((i[1], i[0])))   # a transpose
>>> stages = Stages()
>>> y = stages.compute("exp", (3, 2), lambda i: ps.exp(t.at(i)))
>>> y.tensor.name, str(y.at((0, 1)))
('exp', 'exp[0, 1]')
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from ..ir.expr import Const, Expr
from ..te import Tensor, compute

Index = Tuple[Expr, ...]


class Operand:
    """A value of the group being lowered: ``shape``, ``dtype``, and ``at(index) -> Expr``."""

    shape: Tuple[int, ...]
    dtype: str

    def at(self, index: Sequence) -> Expr:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def ndim(self) -> int:
        """Rank."""
        return len(self.shape)


class TensorOperand(Operand):
    """A placeholder or a compute stage of the task. A 0-d value lives in a tensor of shape
    ``(1,)`` (loop nests need an axis): ``scalar=True``."""

    def __init__(self, tensor: Tensor, scalar: bool = False) -> None:
        self.tensor = tensor
        self.shape = () if scalar else tuple(tensor.shape)
        self.dtype = tensor.dtype

    def at(self, index: Sequence) -> Expr:
        if not self.shape:
            return self.tensor[0]
        return self.tensor[tuple(index)]


class ScalarOperand(Operand):
    """A constant with one element, embedded in expressions whatever the index."""

    def __init__(self, value: np.ndarray) -> None:
        arr = np.asarray(value)
        self.shape = tuple(arr.shape)
        self.dtype = arr.dtype.name
        item = arr.reshape(-1)[0].item()
        self.value = Const(item, self.dtype)

    def at(self, index: Sequence) -> Expr:
        return self.value


class LazyOperand(Operand):
    """An index map: ``fn(index)`` is the element's expression."""

    def __init__(self, shape: Sequence[int], dtype: str, fn: Callable[[Index], Expr]) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.fn = fn

    def at(self, index: Sequence) -> Expr:
        return self.fn(tuple(index))


class Stages:
    """Makes the compute stages of one task, named ``base``, ``base1``, ``base2``, ..."""

    def __init__(self) -> None:
        self._taken: Dict[str, int] = {}
        self.tensors: list = []  # every stage made, in order (keeps them alive for create_func)

    def name(self, base: str) -> str:
        """A fresh stage name from ``base``."""
        n = self._taken.get(base, 0)
        self._taken[base] = n + 1
        return base if n == 0 else f"{base}{n}"

    def compute(
        self, base: str, shape: Sequence[int], body: Callable[[Index], Expr], dtype: Optional[str] = None
    ) -> TensorOperand:
        """A stage ``base[i...] = body(i)`` (the body may be a ``ps.sum``/``max``/``min``)."""
        scalar = len(shape) == 0
        names = [f"i{d}" for d in range(max(1, len(shape)))]
        fn = (lambda i: body(())) if scalar else (lambda i: body(tuple(i)))
        t = compute(tuple(shape) or (1,), lambda *i: fn(i), name=self.name(base), dtype=dtype, axis_names=names)
        self.tensors.append(t)
        return TensorOperand(t, scalar)


__all__ = ["Operand", "TensorOperand", "ScalarOperand", "LazyOperand", "Stages", "Index"]
