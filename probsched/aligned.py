"""Arrays whose data start on a cache line (64 bytes), as TVM allocates its tensors.

numpy only promises 16-byte alignment, so a large array starts at 0, 16, 32 or 48 bytes into
a cache line, depending on the heap. A kernel streaming 32-byte vector loads then splits
every other load across two lines when the array is 16 bytes off, which slows a kernel that
streams such an array (DEP:0's best, reading its padded intermediate). Intermediates the
kernel allocates, the outputs of
:meth:`~probsched.codegen.kernel.Kernel.run` and the arrays candidates are measured and
compared with are therefore allocated here, so that no measurement depends on where the heap
put an array.

>>> a = aligned_empty((3, 5), "float32")
>>> a.ctypes.data % ALIGNMENT, a.shape, a.dtype.name, a.flags.c_contiguous
(0, (3, 5), 'float32', True)
>>> b = aligned_copy(np.arange(6.0).reshape(2, 3)[:, ::2])
>>> b.ctypes.data % ALIGNMENT, b.tolist()
(0, [[0.0, 2.0], [3.0, 5.0]])
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np

ALIGNMENT = 64
"""Bytes: one cache line, also an AVX-512 vector."""


def aligned_empty(shape: Union[int, Sequence[int]], dtype: "np.typing.DTypeLike") -> np.ndarray:
    """An uninitialised C-contiguous array whose data start at a multiple of :data:`ALIGNMENT`."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """A C-contiguous, aligned copy of ``a`` (same shape and dtype)."""
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out
