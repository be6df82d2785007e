"""Values of an ONNX import: an array (numpy when its value is known at import, a JAX tracer
otherwise) and the layout it is held in.

ONNX lays out convolutions channels-first (NCHW, OIHW); the tuned convolution kernels read
channels-last (NHWC activations, HWIO weights: what :mod:`probsched.models` write and the
micro-kernel rules expect). As TVM's ``ConvertLayout`` does, a convolution's output is kept
channels-last, and the operators that do not care where the channels are (elementwise
arithmetic, batch norm, pooling, concatenation, reductions that keep their axes) take it
that way and hand it on; a value goes back to the ONNX layout only where an operator needs
the logical order (a reshape, a matmul, a graph output). A :class:`Value` records the
permutation: ``data == transpose(logical, perm)``.

>>> import numpy as np
>>> v = Value(np.arange(24).reshape(1, 2, 3, 4), None)
>>> nhwc = Value(v.in_layout(channels_last(4)), channels_last(4))
>>> nhwc.data.shape, nhwc.shape
((1, 3, 4, 2), (1, 2, 3, 4))
>>> bool((nhwc.logical() == v.data).all())
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import numpy as np

Perm = Tuple[int, ...]


def channels_last(rank: int) -> Perm:
    """The permutation that takes ``N, C, *spatial`` to ``N, *spatial, C``."""
    return (0,) + tuple(range(2, rank)) + (1,)


def inverse(perm: Sequence[int]) -> Perm:
    """The permutation that undoes ``perm``."""
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


def is_static(x: Any) -> bool:
    """Whether ``x`` is known at import (a numpy array, not a JAX tracer)."""
    return isinstance(x, (np.ndarray, np.generic))


def xp_of(*arrays: Any):
    """numpy when every array is known at import (shape arithmetic stays exact int64),
    else ``jax.numpy`` (the computation is traced into the graph)."""
    if all(a is None or is_static(a) for a in arrays):
        return np
    import jax.numpy as jnp

    return jnp


def _transpose(x: Any, perm: Sequence[int]) -> Any:
    if tuple(perm) == tuple(range(len(perm))):
        return x
    shape = tuple(np.shape(x))
    kept = [p for p in perm if shape[p] != 1]
    if kept == sorted(kept):
        # only size-1 axes move: a reshape (a pooled N,1,1,C read as N,C,1,1)
        return xp_of(x).reshape(x, tuple(shape[p] for p in perm))
    return xp_of(x).transpose(x, tuple(perm))


@dataclass
class Value:
    """An ONNX value: ``data`` in the layout ``perm`` (None: ONNX's own); ``qdq``: the
    quantization it is the result of (:class:`~.onnx_qdq.QDQ`), if any."""

    data: Any
    perm: Optional[Perm] = None
    qdq: Optional[Any] = None

    @property
    def shape(self) -> Tuple[int, ...]:
        """The logical (ONNX) shape."""
        s = tuple(int(d) for d in np.shape(self.data))
        return s if self.perm is None else tuple(s[i] for i in inverse(self.perm))

    @property
    def dtype(self) -> str:
        """The element type's name."""
        return np.dtype(self.data.dtype).name

    @property
    def static(self) -> bool:
        """Known at import."""
        return is_static(self.data)

    def logical(self) -> Any:
        """The array in ONNX's layout."""
        return self.data if self.perm is None else _transpose(self.data, inverse(self.perm))

    def in_layout(self, perm: Optional[Perm]) -> Any:
        """The array in layout ``perm`` (None: ONNX's), transposed only if it is not."""
        if perm == self.perm:
            return self.data
        x = self.logical()
        return x if perm is None else _transpose(x, perm)

    def describe(self) -> str:
        """``float32[1, 3, 224, 224]``: how an error message shows it."""
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


def broadcast_to_rank(x: Any, rank: int) -> Any:
    """``x`` with leading size-1 axes up to ``rank`` (numpy broadcasting, made explicit)."""
    missing = rank - np.ndim(x)
    return x if missing <= 0 else xp_of(x).reshape(x, (1,) * missing + tuple(np.shape(x)))


def common_layout(values: Sequence[Optional[Value]]) -> Optional[Perm]:
    """The layout an elementwise operator over ``values`` computes in: that of its
    operands held in another layout, when they agree and the result has their rank."""
    perms = {v.perm for v in values if v is not None and v.perm is not None}
    if len(perms) != 1:
        return None
    perm = perms.pop()
    rank = max(len(v.shape) for v in values if v is not None)
    return perm if rank == len(perm) else None


def operand_in(v: Value, perm: Optional[Perm]) -> Any:
    """Operand ``v`` of an elementwise operator computing in layout ``perm``: brought to the
    operator's rank first, so that a per-channel constant ``(C, 1, 1)`` becomes ``(1, 1, 1, C)``."""
    if perm is None or v.perm == perm:
        return v.logical() if perm is None else v.data
    return _transpose(broadcast_to_rank(v.logical(), len(perm)), perm)


__all__ = ["Value", "Perm", "channels_last", "inverse", "is_static", "xp_of", "broadcast_to_rank", "common_layout", "operand_in"]
