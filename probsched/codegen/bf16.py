"""bfloat16 in generated kernels: bits in, float32 arithmetic, bits out.

Compiled code stores a bfloat16 as its 16 bits (a ``uint16`` array, see
:mod:`probsched.ir.dtypes`) and computes in float32: a load widens the bits exactly (shifted
left by 16 into a float32's bits), a store rounds the float32 to nearest, ties to even (the
rounding of ``ml_dtypes``, which the interpreter uses), NaN stays a quiet NaN and a value
above the largest bfloat16 rounds to infinity. A bfloat16 *value* in generated code is a
float32 that a bfloat16 represents: what :func:`widen` returns and :func:`round_f32` makes.
Each helper is a few integer operations on the bits, without a branch, which LLVM vectorizes.

The generated source binds them as globals (:meth:`~probsched.codegen.exprs.ExprWriter`
``helper``), so a kernel reads ``bf16_widen(A[_u64(i)])``.

>>> import numpy as np, ml_dtypes
>>> xs = np.array([1.0, 1.00390625, 1.01171875, -3.1e38, np.inf, np.nan], np.float32)
>>> got = np.array([bits(x) for x in xs], np.uint16)
>>> bool(np.array_equal(got[:5], xs[:5].astype(ml_dtypes.bfloat16).view(np.uint16)))
True
>>> bool(np.isnan(widen(got[5]))), float(widen(np.uint16(16256))), float(round_f32(np.float32(1.01171875)))
(True, 1.0, 1.015625)
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from .compile import FASTMATH
from .mathlib import bitcast


_OPTIONS = dict(nogil=True, cache=True, fastmath=set(FASTMATH), error_model="numpy")


@njit(types.float32(types.uint16), **_OPTIONS)
def widen(b):
    """The float32 of bfloat16 bits ``b`` (exact)."""
    return bitcast(np.uint32(np.uint32(b) << np.uint32(16)), np.float32)


@njit(types.uint16(types.float32), **_OPTIONS)
def bits(x):
    """The bits of the bfloat16 nearest ``x`` (ties to even; NaN stays a quiet NaN).

    Written for LLVM's vectorizer: both results computed and one selected (with an ``if``
    for the NaN a loop of 8 stores stayed scalar, and a depthwise convolution writing
    bfloat16 ran 3.7x slower than one writing float32), and every step cast back to 32 bits
    (numba widens ``uint32`` arithmetic to 64 bits, and a vectorized loop then runs on half
    as many lanes: twice as slow as the branching form where that one vectorized)."""
    u = bitcast(x, np.uint32)
    high = np.uint32(u >> np.uint32(16))
    nearest = np.uint32(np.uint32(np.uint32(u + (high & np.uint32(1))) + np.uint32(0x7FFF)) >> np.uint32(16))
    quiet_nan = np.uint32(high | np.uint32(0x40))
    return np.uint16(quiet_nan if x != x else nearest)


@njit(types.float32(types.float32), **_OPTIONS)
def round_f32(x):
    """``x`` rounded to the nearest bfloat16, as a float32."""
    return widen(bits(x))


#: global name hint -> helper, as generated code binds them
HELPERS = {"bf16_widen": widen, "bf16_bits": bits, "bf16_round": round_f32}
