"""Checking the arrays a caller passes against the shapes and dtypes a function takes.

>>> check_arrays([[1.0, 2.0]], [((2,), "float64")], who="f")[0].dtype.name
'float64'
>>> check_arrays([np.arange(3)], [((3,), "int32")], who="f")[0].dtype.name   # token ids
'int32'
>>> check_arrays([1.0], [((2,), "float32")], who="f", names=["x"])
Traceback (most recent call last):
...
ValueError: f: argument 0 (x) has shape () float64, but f takes float32[2]
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Type

import numpy as np


def check_arrays(
    args: Sequence[Any],
    specs: Sequence[Tuple[Tuple[int, ...], str]],
    who: str,
    names: Optional[Sequence[str]] = None,
    error: Type[Exception] = ValueError,
) -> List[np.ndarray]:
    """``args`` as numpy arrays, or one ``error`` naming the argument whose count, shape or
    dtype differs from ``specs`` (``(shape, dtype)`` each, in order). An int64 array where
    int32 is taken (token ids: numpy's and ONNX's default integer) is narrowed, once its
    values are checked to fit."""
    if len(args) != len(specs):
        listed = f" ({', '.join(names)})" if names else ""
        raise error(f"{who}: expected {len(specs)} arguments{listed}, got {len(args)}")
    out = []
    for i, (a, (shape, dtype)) in enumerate(zip(args, specs)):
        named = f" ({names[i]})" if names else ""
        if isinstance(a, dict):  # a pytree of arrays: np.asarray would box it as an object
            raise error(f"{who}: argument {i}{named} is a dict; {who} takes arrays, one per argument")
        arr = np.asarray(a)
        if np.dtype(dtype) == np.int32 and arr.dtype == np.int64 and arr.shape == tuple(shape):
            info = np.iinfo(np.int32)
            if arr.size and (arr.min() < info.min or arr.max() > info.max):
                raise error(f"{who}: argument {i}{named} holds values outside int32")
            arr = arr.astype(np.int32)
        if arr.shape != tuple(shape) or arr.dtype != np.dtype(dtype):
            raise error(
                f"{who}: argument {i}{named} has shape {arr.shape} {arr.dtype}, but {who} takes "
                f"{dtype}[{', '.join(map(str, shape))}]"
            )
        out.append(arr)
    return out


__all__ = ["check_arrays"]
