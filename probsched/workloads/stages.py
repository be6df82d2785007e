"""Tensor-expression building blocks shared by the workloads: named computes and padding.

>>> import probsched as ps
>>> x = ps.placeholder((1, 4, 3), name="x")
>>> p = pad(x, (0, 1, 0), (0, 1, 0), ("n", "l", "c"))
>>> p.shape, p.op.axes
((1, 6, 3), (<Var n>, <Var l>, <Var c>))
"""

from __future__ import annotations

import inspect
from typing import Callable, Sequence

from ..ir.expr import Expr, all_of, if_then_else
from ..te import Tensor, compute


def named_compute(shape: Sequence[int], axis_names: Sequence[str], fcompute: Callable[..., Expr], name: str) -> Tensor:
    """``ps.compute`` whose axes are named ``axis_names`` whatever ``fcompute``'s signature.

    The front end names axes after ``fcompute``'s parameters; rank-generic code (pad, N-d
    convolution) takes ``*indices``, so we hand it an explicit signature.

    >>> import probsched as ps
    >>> t = named_compute((2, 3), ("row", "col"), lambda *ix: ix[0] * 3 + ix[1], "t")
    >>> t.op.axes
    (<Var row>, <Var col>)
    """
    if len(axis_names) != len(shape):
        raise ValueError(f"compute {name}: {len(axis_names)} axis names for a rank-{len(shape)} shape")

    def f(*indices):
        return fcompute(*indices)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    f.__signature__ = inspect.Signature([inspect.Parameter(n, kind) for n in axis_names])  # type: ignore[attr-defined]
    return compute(tuple(shape), f, name=name)


def pad(
    x: Tensor, before: Sequence[int], after: Sequence[int], axis_names: Sequence[str], name: str = "padded"
) -> Tensor:
    """Zero padding as its own stage (TVM's ``topi.nn.pad``): a select guarding the load.

    A dimension padded by 0 on a side gets no bound test on that side; with no padding at
    all the stage is a plain copy (kept so every convolution has the same two-stage form).
    """
    if not (len(before) == len(after) == x.ndim):
        raise ValueError(f"pad {x.name}: padding ranks {len(before)}, {len(after)} differ from rank {x.ndim}")
    shape = tuple(s + b + a for s, b, a in zip(x.shape, before, after))

    def body(*idx):
        conds, src = [], []
        for i, s, b, a in zip(idx, x.shape, before, after):
            if b:
                conds.append(i >= b)
            if a:
                conds.append(i < s + b)
            src.append(i - b)
        return if_then_else(all_of(*conds), x[tuple(src)], 0.0)

    return named_compute(shape, axis_names, body, name)
