"""Exact JSON encoding of site values, and the exact equality it preserves.

Traces are stored and compared across processes, so a value must come back exactly:
same type (a tuple stays a tuple, ``True`` stays a bool, ``np.float32`` stays
``np.float32``) and same bits (``-0.0``, NaN payloads). Plain JSON cannot say that, so
everything JSON would blur is tagged:

==================  =============================================
value               encoding
==================  =============================================
None, bool, int     ``null``, ``true``/``false``, JSON integer
str, list           JSON string, JSON array
finite float        JSON number (``repr`` round-trips exactly)
inf, -inf, NaN      ``{"$float": "inf"}``, ``"-inf"``, ``"nan:<64-bit hex>"``
tuple               ``{"$tuple": [...]}``
dict                ``{"$dict": [[key, value], ...]}`` (any encodable keys)
bytes               ``{"$bytes": "<hex>"}``
numpy scalar        ``{"$np": "<dtype.str>", "hex": "<raw bytes>"}``
numpy str/bytes     ``{"$np": "str_", "text": ...}``, ``{"$np": "bytes_", "hex": ...}``
==================  =============================================

Anything else raises ``TypeError``: a value that cannot round-trip is refused rather
than silently changed.

>>> import json, numpy as np
>>> v = (1, [True, None], {"x": np.float32(0.1)}, float("-inf"))
>>> back = decode_value(json.loads(json.dumps(encode_value(v))))
>>> exact_equal(v, back), type(back[2]["x"]).__name__
(True, 'float32')
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

__all__ = ["encode_value", "decode_value", "exact_equal"]

_INF_TAG = {math.inf: "inf", -math.inf: "-inf"}


def _float_bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _encode_float(x: float) -> Any:
    if math.isfinite(x):
        return x
    if math.isnan(x):
        return {"$float": "nan:" + format(struct.unpack("<Q", _float_bits(x))[0], "016x")}
    return {"$float": _INF_TAG[x]}


def _decode_float(tag: str) -> float:
    if tag == "inf":
        return math.inf
    if tag == "-inf":
        return -math.inf
    if tag.startswith("nan:"):
        return struct.unpack("<d", struct.pack("<Q", int(tag[4:], 16)))[0]
    raise ValueError(f"bad $float tag {tag!r}")


def encode_value(value: Any) -> Any:
    """Encode ``value`` as a JSON-compatible structure that :func:`decode_value` inverts.

    >>> encode_value((1, float("nan"), "s"))
    {'$tuple': [1, {'$float': 'nan:7ff8000000000000'}, 's']}
    >>> encode_value(np.int8(-1))
    {'$np': '|i1', 'hex': 'ff'}
    """
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        return _encode_float(value)
    if t is list:
        return [encode_value(v) for v in value]
    if t is tuple:
        return {"$tuple": [encode_value(v) for v in value]}
    if t is dict:
        return {"$dict": [[encode_value(k), encode_value(v)] for k, v in value.items()]}
    if t is bytes:
        return {"$bytes": value.hex()}
    # numpy strings go by content: their raw bytes drop trailing NULs (and are junk
    # for the empty string), while np.str_("a\0") keeps them.
    if t is np.str_:
        return {"$np": "str_", "text": value[:]}  # str(value) would drop NULs too
    if t is np.bytes_:
        return {"$np": "bytes_", "hex": value[:].hex()}
    if isinstance(value, np.generic) and value.dtype.kind in "biufcMm":
        return {"$np": value.dtype.str, "hex": value.tobytes().hex()}
    raise TypeError(f"cannot encode value {value!r} of type {t.__name__} exactly as JSON")


def decode_value(data: Any) -> Any:
    """Invert :func:`encode_value`.

    >>> decode_value({"$tuple": [1, {"$float": "-inf"}]})
    (1, -inf)
    >>> decode_value({"$np": "<f4", "hex": "0000803f"})
    np.float32(1.0)
    """
    t = type(data)
    if t is list:
        return [decode_value(v) for v in data]
    if t is not dict:
        return data
    if len(data) == 1:
        ((tag, payload),) = data.items()
        if tag == "$tuple":
            return tuple(decode_value(v) for v in payload)
        if tag == "$float":
            return _decode_float(payload)
        if tag == "$dict":
            return {decode_value(k): decode_value(v) for k, v in payload}
        if tag == "$bytes":
            return bytes.fromhex(payload)
    elif len(data) == 2 and "$np" in data:
        kind = data["$np"]
        if kind == "str_":
            return np.str_(data["text"])
        if kind == "bytes_":
            return np.bytes_(bytes.fromhex(data["hex"]))
        return np.frombuffer(bytes.fromhex(data["hex"]), dtype=np.dtype(kind))[0]
    raise ValueError(f"not an encoded value: {data!r}")


def exact_equal(a: Any, b: Any) -> bool:
    """Equality that also requires equal types and, for floats, identical bits.

    ``1 == True == 1.0`` in Python, but as recorded decisions they differ; NaN equals
    a NaN with the same bits; ``0.0`` differs from ``-0.0``.

    >>> exact_equal(1, True), exact_equal((1.0,), (1.0,)), exact_equal(float("nan"), float("nan"))
    (False, True, True)
    >>> exact_equal(0.0, -0.0), exact_equal(np.float32(1), np.float64(1))
    (False, False)
    """
    t = type(a)
    if t is not type(b):
        return False
    if t is float:
        return _float_bits(a) == _float_bits(b)
    if t is tuple or t is list:
        return len(a) == len(b) and all(exact_equal(x, y) for x, y in zip(a, b))
    if t is dict:
        if len(a) != len(b):
            return False
        # A dict holds at most one key == k, so find b's own key object and compare
        # it exactly: {1: x} must differ from {True: x}.
        b_keys = {k: k for k in b}
        for k, v in a.items():
            if k not in b_keys or not exact_equal(k, b_keys[k]) or not exact_equal(v, b[k]):
                return False
        return True
    if t is np.str_:
        return str.__eq__(a, b)
    if t is np.bytes_:
        return bytes.__eq__(a, b)
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    try:
        return bool(a == b)
    except Exception:
        return False
