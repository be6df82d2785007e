"""Element types of the IR: their names, numpy dtypes, and how compiled kernels store them.

``"bfloat16"`` is a *storage* type: float32's sign and 8-bit exponent with 8 significant
bits (7 stored), so a bfloat16 is the upper half of a float32. numpy has no bfloat16;
arrays at the API are ``ml_dtypes.bfloat16`` (the package JAX uses), compiled kernels see
their bits as ``uint16``. In the IR, arithmetic on bfloat16 values is float32 arithmetic
(:func:`~probsched.ir.expr.binary` widens the operands, exactly: the bits shifted left by
16), and a value stored to a bfloat16 buffer is rounded to nearest, ties to even.

``"uint8"`` and ``"int8"`` are the storage types of quantized programs (activations and
weights, :mod:`probsched.precision`): arithmetic on them is int32 arithmetic (the operands
widened, exactly), and a conversion to them *saturates*: a float is rounded to nearest,
ties to even, then clamped to the type's range (as ONNX's ``QuantizeLinear``), an integer
clamped. A store of a wider value to an 8-bit buffer converts so (:func:`saturate`).

``"int8r"`` is int8 of *reduced range*: bytes whose values lie in ``[-64, 64]``, as ONNX
Runtime's ``reduce_range`` quantizes weights for CPUs without VNNI. A product of one with a
uint8 and the sum of two such products fit an int16 (``2 * 255 * 64 < 2^15``), so the
``vpmaddubsw`` those CPUs have is exact on them (:func:`~probsched.intrinsics.simd_int8.dot_quads_maddubs`).
The front end gives a constant int8 weight this type when its values allow
(:func:`narrowest`); being a type, it is part of a program's structural hash, so a kernel
that needs it is never applied to other weights. Its numpy dtype is int8, and an int8r
value is an int8 one (:func:`holds`).

>>> numpy_dtype("bfloat16").name, storage_dtype("bfloat16"), storage_dtype("float32")
('bfloat16', dtype('uint16'), dtype('float32'))
>>> import numpy as np
>>> a = np.array([1.0, 1.00390625, 1.01171875], dtype=numpy_dtype(BF16))  # 1 + 2^-8 ties to 1
>>> a.astype(np.float32).tolist(), as_storage(a).tolist()
([1.0, 1.0, 1.015625], [16256, 16256, 16258])
>>> UNIT_ROUNDOFF["bfloat16"] == 2.0 ** -8
True
>>> arithmetic_dtype("uint8"), saturate("uint8", np.array([-3.0, 2.5, 3.5, 300.0])).tolist()
('int32', [0, 2, 4, 255])
"""

from __future__ import annotations

import functools

import numpy as np

INDEX = "int64"
BOOL = "bool"
BF16 = "bfloat16"
UINT8, INT8, INT8R = "uint8", "int8", "int8r"
FLOAT_DTYPES = ("float32", "float64", BF16)
#: integer types of arithmetic and of indices
INT_DTYPES = ("int32", "int64")
#: integer storage types, computed in int32 (quantized data)
NARROW_INT_DTYPES = (UINT8, INT8, INT8R)
DTYPES = FLOAT_DTYPES + INT_DTYPES + NARROW_INT_DTYPES + (BOOL,)
#: the range a conversion to an 8-bit type saturates to
INT_RANGE = {UINT8: (0, 255), INT8: (-128, 127), INT8R: (-64, 64)}
#: types stored as another's bytes, with fewer values
_STORED_AS = {INT8R: INT8}

#: Half the distance from 1 to the next number (2^-p for p significant bits): the largest
#: relative error of one rounding to nearest.
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, BF16: 2.0**-8}

_UINT16 = np.dtype(np.uint16)


@functools.lru_cache(maxsize=None)
def _bf16() -> np.dtype:
    # imported when a bfloat16 array is first made: ml_dtypes takes a second to import
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def _is_bf16(d: np.dtype) -> bool:
    return d.name == BF16 and d.kind == "V"  # no import of ml_dtypes to answer no


def is_float(dtype: str) -> bool:
    """Whether ``dtype`` is a floating-point type (bfloat16 included)."""
    return dtype in FLOAT_DTYPES


def is_integer(dtype: str) -> bool:
    """Whether ``dtype`` is an integer type (the 8-bit storage types included)."""
    return dtype in INT_DTYPES or dtype in NARROW_INT_DTYPES


def arithmetic_dtype(dtype: str) -> str:
    """The type values of ``dtype`` are computed in: float32 for bfloat16, int32 for the
    8-bit integers, else itself."""
    if dtype == BF16:
        return "float32"
    return "int32" if dtype in NARROW_INT_DTYPES else dtype


def holds(wide: str, narrow: str) -> bool:
    """Whether every value of type ``narrow`` is one of ``wide``, stored alike (a kernel
    reading ``wide`` reads ``narrow`` right).

    >>> holds("int8", "int8r"), holds("int8r", "int8"), holds("int8", "uint8")
    (True, False, False)
    """
    return wide == narrow or _STORED_AS.get(narrow) == wide


def narrowest(dtype: str, values: np.ndarray) -> str:
    """The narrowest type holding ``values`` of ``dtype``: ``"int8r"`` for int8 values in
    its range, else ``dtype``.

    >>> narrowest("int8", np.array([-64, 3, 64])), narrowest("int8", np.array([-65, 0]))
    ('int8r', 'int8')
    """
    for narrow, wide in _STORED_AS.items():
        lo, hi = INT_RANGE[narrow]
        if wide == dtype and (values.size == 0 or (int(values.min()) >= lo and int(values.max()) <= hi)):
            return narrow
    return dtype


def saturate(dtype: str, values) -> np.ndarray:
    """``values`` converted to 8-bit ``dtype`` as the IR converts (module docstring): floats
    rounded to nearest even, then everything clamped to the range."""
    lo, hi = INT_RANGE[dtype]
    a = np.asarray(values)
    if a.dtype.kind == "f" or a.dtype.kind == "V":
        a = np.rint(a.astype(np.float64))
    return np.clip(a, lo, hi).astype(numpy_dtype(dtype))


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of arrays of ``dtype`` at the API (``ml_dtypes.bfloat16`` for bfloat16,
    int8 for int8r)."""
    return _bf16() if dtype == BF16 else np.dtype(_STORED_AS.get(dtype, dtype))


def storage_dtype(dtype) -> np.dtype:
    """What compiled code stores ``dtype`` as: uint16 bits for bfloat16, else the dtype itself."""
    if isinstance(dtype, str) and dtype == BF16:
        return _UINT16
    d = np.dtype(_STORED_AS.get(dtype, dtype) if isinstance(dtype, str) else dtype)
    return _UINT16 if _is_bf16(d) else d


def as_storage(array: np.ndarray) -> np.ndarray:
    """``array`` viewed as compiled code reads it (a bfloat16 array as its uint16 bits; no copy)."""
    return array.view(_UINT16) if _is_bf16(array.dtype) else array


def round_to(dtype: str, value: float) -> float:
    """``value`` rounded to ``dtype`` (to nearest, ties to even), as a Python float."""
    if dtype == BF16:
        return float(np.asarray(value, np.float32).astype(_bf16()))
    if dtype == "float32":
        return float(np.float32(value))
    return float(value)
