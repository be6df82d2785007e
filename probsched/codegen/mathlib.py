"""Vectorizable float32 math functions for generated kernels.

numba lowers ``np.exp`` on a float32 to a call of libm's ``expf``: LLVM cannot vectorize a
loop around an opaque call, and that call was most of a softmax's time.
:func:`exp_f32` is the classic Cody-Waite range reduction plus a degree-6 polynomial
(Cephes' ``expf`` coefficients), written in straight-line numba code that inlines and
vectorizes (several times faster than ``np.exp`` in the same numba loop: ``python
benchmarks/bench_exp.py``), and more accurate than numpy's float32 exp (max relative error 8.1e-8 against float64 over
[-87, 88.7], numpy 1.9e-7). Edge cases follow IEEE exp (``nan`` stays ``nan``, overflow
gives ``inf``) except below: results under ``exp(-87)`` (about 1.6e-38, the bottom of the
normal range) are flushed to ``0``. A denormal result or operand costs the CPU a microcode
assist per vector, and a kernel whose inputs reach that range (a masked softmax's
``exp(-10000)``, erf's tail in GELU on activations of magnitude 10 and more) ran 10-20
times slower than on the same count of ordinary values.

How the result is scaled by ``2**n`` depends on the CPU numba compiles for. With AVX-512,
``llvm.ldexp`` becomes one ``vscalefps`` that also gives IEEE overflow and underflow,
faster than the integer form below. Compiled for AVX2 (``NUMBA_CPU_NAME=haswell`` with
AVX-512 disabled), the same ``ldexp`` is a libm call per element, many times slower; so
there the scaling is done with integer bit tricks (two normal powers of two and explicit
overflow/underflow selects). The two variants agree bit for bit (``python
benchmarks/bench_exp.py`` times both).

The generated source binds it as a global (see :meth:`ExprWriter` ``helper``), so the
printed kernel reads ``exp_f32(x)``:

>>> import numpy as np
>>> xs = np.array([-80.0, -1.0, 0.0, 0.5, 88.0], np.float32)
>>> got = np.array([exp_f32(x) for x in xs])
>>> bool(np.allclose(got, np.exp(xs.astype(np.float64)), rtol=2e-7, atol=0))
True
>>> float(exp_f32(np.float32(89.0))), float(exp_f32(np.float32(-105.0))), bool(np.isnan(exp_f32(np.float32("nan"))))
(inf, 0.0, True)
"""

from __future__ import annotations

import math
from typing import Dict

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .compile import FASTMATH


@intrinsic
def bitcast(typingctx, x, to):
    """``x``'s bits as a number of type ``to`` of the same width (``bitcast(i, np.float32)``:
    an LLVM bitcast, one vector op, no call). numba widens int32 arithmetic to int64: cast
    ``x`` to the width first."""
    if x.bitwidth != to.instance_type.bitwidth:
        raise TypeError(f"bitcast of {x} to {to.instance_type}: the widths differ")
    sig = to.instance_type(x, to)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


_HI = np.float32(88.72284)  # ln(FLT_MAX): above it exp overflows to inf
_LO = np.float32(-87.0)  # below it exp is flushed to 0: 2**n stays normal for p in [0.7, 1.42]


@intrinsic
def _ldexp_float32(typingctx, x, n):
    """``x * 2**n`` as LLVM's ``ldexp`` intrinsic (vectorizable; ``vscalefps`` on AVX-512)."""
    sig = types.float32(types.float32, types.int32)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.FloatType(), [ir.FloatType(), ir.IntType(32)])
        fn = builder.module.globals.get("llvm.ldexp.f32.i32")
        if fn is None:
            fn = ir.Function(builder.module, fnty, "llvm.ldexp.f32.i32")
        return builder.call(fn, args)

    return sig, codegen


_OPTIONS = dict(nogil=True, cache=True, fastmath=set(FASTMATH), error_model="numpy")


@njit(types.UniTuple(types.float32, 2)(types.float32), inline="always", **_OPTIONS)
def _reduced(x):
    """``(n, p)`` with ``exp(x) = p * 2**n`` for ``x`` clamped to [_LO, _HI] (``p * 2**n``
    is never a denormal: ``n >= -125``)."""
    c = min(max(x, _LO), _HI)
    n = np.floor(c * np.float32(1.44269504) + np.float32(0.5))
    # r = c - n*ln2 in two steps (ln2 = 0.693359375 - 2.12194440e-4): n*0.693359375 is exact
    r = c - n * np.float32(0.693359375)
    r = r + n * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    return n, p * r * r + r + np.float32(1.0)


@njit(types.float32(types.float32), **_OPTIONS)
def exp_f32_scalef(x):
    """``exp(x)`` scaled with ``ldexp`` (fast where the CPU has a vector ldexp: AVX-512)."""
    n, p = _reduced(x)
    # n in [-125, 128]: ldexp overflows to inf, and its result is never a denormal
    y = _ldexp_float32(p, np.int32(n))
    y = np.float32(0.0) if x < _LO else y
    return x if x != x else y


@njit(types.float32(types.float32), **_OPTIONS)
def exp_f32_bits(x):
    """``exp(x)`` scaled with integer bit tricks (for CPUs without a vector ldexp)."""
    n, p = _reduced(x)
    # 2**n as two normal powers of two, so n in [-125, 128] needs no special case
    k = np.int32(n)
    h = k >> np.int32(1)
    y = p * bitcast(np.int32((h + np.int32(127)) << np.int32(23)), np.float32)
    y = y * bitcast(np.int32((k - h + np.int32(127)) << np.int32(23)), np.float32)
    y = np.float32(0.0) if x < _LO else y
    y = np.float32(np.inf) if x > _HI else y
    return x if x != x else y


def vector_ldexp() -> bool:
    """Whether numba compiles for a CPU on which ``ldexp`` vectorizes (AVX-512's ``vscalefps``)."""
    import llvmlite.binding as llvm
    from numba import config

    if config.CPU_NAME not in (None, "host") or config.CPU_FEATURES is not None:
        return False  # compiling for a named CPU (e.g. portable caches): assume the worst
    return bool(llvm.get_host_cpu_features().get("avx512f", False))


#: ``exp(x)`` for a float32 ``x``, vectorizable: the variant of the CPU numba compiles for.
exp_f32 = exp_f32_scalef if vector_ldexp() else exp_f32_bits


@njit(types.float32(types.float32), **_OPTIONS)
def tanh_f32(x):
    """``tanh(x)``, vectorizable: an odd polynomial below 0.625 (Cephes' ``tanhf``
    coefficients, where ``1 - 2/(e^2x + 1)`` would cancel) and :func:`exp_f32` above.

    >>> xs = np.array([-20.0, -1.0, -1e-3, 0.0, 0.3, 0.7, 5.0], np.float32)
    >>> got = np.array([tanh_f32(x) for x in xs])
    >>> bool(np.allclose(got, np.tanh(xs.astype(np.float64)), rtol=3e-7, atol=1e-12))
    True
    """
    a = abs(x)
    z = x * x
    p = np.float32(-5.70498872745e-3)
    p = p * z + np.float32(2.06390887954e-2)
    p = p * z - np.float32(5.37397155531e-2)
    p = p * z + np.float32(1.33314422036e-1)
    p = p * z - np.float32(3.33332819422e-1)
    small = x + x * z * p
    e = exp_f32(np.float32(2.0) * min(a, np.float32(10.0)))  # tanh(10) rounds to 1
    big = np.float32(1.0) - np.float32(2.0) / (e + np.float32(1.0))
    big = big if x >= np.float32(0.0) else -big
    return small if a < np.float32(0.625) else big


@njit(types.float32(types.float32), **_OPTIONS)
def erf_f32(x):
    """``erf(x)``, vectorizable: Abramowitz and Stegun's 7.1.26 (absolute error below
    1.5e-7) with :func:`exp_f32`, and its Taylor series below 0.25 in magnitude, where the
    absolute bound would be a large relative error.

    >>> import math
    >>> xs = np.array([-3.0, -0.6, -1e-4, 0.0, 0.2, 1.0, 6.0], np.float32)
    >>> got = np.array([erf_f32(x) for x in xs])
    >>> bool(np.allclose(got, [math.erf(float(v)) for v in xs], rtol=1e-6, atol=2e-7))
    True
    """
    a = abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * a)
    q = np.float32(1.061405429)
    q = q * t - np.float32(1.453152027)
    q = q * t + np.float32(1.421413741)
    q = q * t - np.float32(0.284496736)
    q = q * t + np.float32(0.254829592)
    # erf(x) rounds to 1 from |x| = 4; capping a*a at 30 keeps q * t * exp(-a*a) a normal number
    big = np.float32(1.0) - q * t * exp_f32(-min(a * a, np.float32(30.0)))
    big = big if x >= np.float32(0.0) else -big
    z = x * x
    s = np.float32(1.0 / 216.0)
    s = np.float32(-1.0 / 42.0) + z * s
    s = np.float32(1.0 / 10.0) + z * s
    s = np.float32(-1.0 / 3.0) + z * s
    small = np.float32(1.1283791670955126) * x * (np.float32(1.0) + z * s)
    return small if a < np.float32(0.25) else big


@njit(types.float64(types.float64), **_OPTIONS)
def erf_f64(x):
    """``erf(x)`` of a float64 (libm's)."""
    return math.erf(x)


#: Math functions with a vectorizable implementation, by (IR name, dtype).
FUNCTIONS: Dict[tuple, object] = {
    ("exp", "float32"): exp_f32,
    ("tanh", "float32"): tanh_f32,
    ("erf", "float32"): erf_f32,
    ("erf", "float64"): erf_f64,
}
