"""JSON serialisation and the stable structural hash of IR functions.

Expressions are encoded as short lists (``["bin", "add", a, b, "int64"]``), statements as
small dicts keyed by their kind, buffers by name within the function. New statement kinds
(e.g. intrinsic calls) register a codec with :func:`register_stmt_codec`.

>>> from probsched.ir.expr import Var
>>> from probsched.ir.stmt import Buffer, Block, IterVar, Loop, PrimFunc, Store
>>> A = Buffer("A", (8,))
>>> blk = Block("A", (IterVar(Var("v"), 8),), (Var("i"),), Store(A, (Var("v"),), 1.0))
>>> f = PrimFunc("ones", (A,), (Loop(Var("i"), 8, body=(blk,)),))
>>> PrimFunc.from_json(f.to_json()) == f
True
>>> len(f.structural_hash())
64
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Callable, Dict, Tuple

from ..errors import IRError
from .dtypes import is_float
from .expr import BinOp, Call, Cast, Const, Expr, Load, Not, Select, Var
from .stmt import Block, Buffer, IterVar, Loop, PrimFunc, Store, StmtLike

FORMAT_VERSION = 1


def _enc_float(v: float):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _dec_float(v) -> float:
    return float(v)


def _enc_value(v):
    """Annotation/attribute values: JSON scalars and tuples of them."""
    if isinstance(v, tuple):
        return {"t": [_enc_value(x) for x in v]}
    if isinstance(v, float):
        return {"f": _enc_float(v)}
    if v is None or isinstance(v, (bool, int, str)):
        return v
    raise IRError(f"annotation value {v!r} of type {type(v).__name__} cannot be serialised")


def _dec_value(v):
    if isinstance(v, dict):
        if "t" in v:
            return tuple(_dec_value(x) for x in v["t"])
        if "f" in v:
            return _dec_float(v["f"])
    return v


def encode_expr(e: Expr) -> list:
    """An expression as nested lists."""
    if isinstance(e, Var):
        return ["var", e.name, e.dtype]
    if isinstance(e, Const):
        v = e.value
        return ["const", _enc_float(v) if isinstance(v, float) else v, e.dtype]
    if isinstance(e, BinOp):
        return ["bin", e.op, encode_expr(e.a), encode_expr(e.b), e.dtype]
    if isinstance(e, Not):
        return ["not", encode_expr(e.a)]
    if isinstance(e, Call):
        return ["call", e.name, [encode_expr(a) for a in e.args], e.dtype]
    if isinstance(e, Cast):
        return ["cast", e.dtype, encode_expr(e.value)]
    if isinstance(e, Select):
        return ["select", encode_expr(e.cond), encode_expr(e.t), encode_expr(e.f)]
    if isinstance(e, Load):
        return ["load", e.buffer.name, [encode_expr(i) for i in e.indices]]
    raise IRError(f"cannot serialise expression node {type(e).__name__}")


def decode_expr(x: Any, buffers: Dict[str, Buffer]) -> Expr:
    """Inverse of :func:`encode_expr`; ``buffers`` maps names to buffers."""
    tag = x[0]
    if tag == "var":
        return Var(x[1], x[2])
    if tag == "const":
        v = x[1]
        return Const(_dec_float(v) if is_float(x[2]) else v, x[2])
    if tag == "bin":
        return BinOp(x[1], decode_expr(x[2], buffers), decode_expr(x[3], buffers), x[4])
    if tag == "not":
        return Not(decode_expr(x[1], buffers))
    if tag == "call":
        return Call(x[1], tuple(decode_expr(a, buffers) for a in x[2]), x[3])
    if tag == "cast":
        return Cast(x[1], decode_expr(x[2], buffers))
    if tag == "select":
        return Select(*(decode_expr(y, buffers) for y in x[1:4]))
    if tag == "load":
        return Load(_buffer(buffers, x[1]), tuple(decode_expr(i, buffers) for i in x[2]))
    raise IRError(f"unknown expression tag {tag!r} in JSON")


def _buffer(buffers: Dict[str, Buffer], name: str) -> Buffer:
    try:
        return buffers[name]
    except KeyError:
        raise IRError(f"JSON refers to buffer {name!r}, which the function does not declare") from None


Encoder = Callable[[object], dict]
Decoder = Callable[[dict, Dict[str, Buffer]], object]
_STMT_CODECS: Dict[str, Tuple[type, Encoder, Decoder]] = {}


def register_stmt_codec(tag: str, cls: type, encode: Encoder, decode: Decoder) -> None:
    """Teach the serialiser a new statement class (used by intrinsic calls)."""
    _STMT_CODECS[tag] = (cls, encode, decode)


def encode_stmt(s: StmtLike) -> Any:
    """A statement (or tuple of statements) as JSON-ready data."""
    if isinstance(s, tuple):
        return [encode_stmt(x) for x in s]
    if isinstance(s, Store):
        return {
            "store": s.buffer.name,
            "indices": [encode_expr(i) for i in s.indices],
            "value": encode_expr(s.value),
        }
    if isinstance(s, Loop):
        return {
            "loop": encode_expr(s.var),
            "extent": s.extent,
            "kind": s.kind,
            "ann": [[k, _enc_value(v)] for k, v in s.annotations],
            "body": encode_stmt(s.body),
        }
    if isinstance(s, Block):
        return {
            "block": s.name,
            "iters": [[encode_expr(it.var), it.extent, it.kind] for it in s.iters],
            "bindings": [encode_expr(b) for b in s.bindings],
            "predicate": encode_expr(s.predicate),
            "init": None if s.init is None else encode_stmt(s.init),
            "body": encode_stmt(s.body),
            "ann": [[k, _enc_value(v)] for k, v in s.annotations],
        }
    for tag, (cls, enc, _) in _STMT_CODECS.items():
        if isinstance(s, cls):
            d = enc(s)
            d["kind_tag"] = tag
            return d
    raise IRError(f"cannot serialise statement {type(s).__name__}")


def decode_stmt(x: Any, buffers: Dict[str, Buffer]) -> StmtLike:
    """Inverse of :func:`encode_stmt`."""
    if isinstance(x, list):
        return tuple(decode_stmt(y, buffers) for y in x)
    if "store" in x:
        return Store(
            _buffer(buffers, x["store"]),
            tuple(decode_expr(i, buffers) for i in x["indices"]),
            decode_expr(x["value"], buffers),
        )
    if "loop" in x:
        return Loop(
            decode_expr(x["loop"], buffers),
            x["extent"],
            x["kind"],
            decode_stmt(x["body"], buffers),
            [(k, _dec_value(v)) for k, v in x["ann"]],
        )
    if "block" in x:
        return Block(
            x["block"],
            tuple(IterVar(decode_expr(v, buffers), e, k) for v, e, k in x["iters"]),
            tuple(decode_expr(b, buffers) for b in x["bindings"]),
            decode_stmt(x["body"], buffers),
            init=None if x["init"] is None else decode_stmt(x["init"], buffers),
            predicate=decode_expr(x["predicate"], buffers),
            annotations=[(k, _dec_value(v)) for k, v in x["ann"]],
        )
    tag = x.get("kind_tag")
    if tag in _STMT_CODECS:
        return _STMT_CODECS[tag][2](x, buffers)
    raise IRError(f"unknown statement in JSON: keys {sorted(x)}")


def _enc_buffer(b: Buffer) -> list:
    return [b.name, list(b.shape), b.dtype, b.scope]


def func_to_data(f: PrimFunc) -> dict:
    """A function as JSON-ready data."""
    return {
        "format": FORMAT_VERSION,
        "name": f.name,
        "params": [_enc_buffer(b) for b in f.params],
        "allocs": [_enc_buffer(b) for b in f.allocs],
        "attrs": [[k, _enc_value(v)] for k, v in f.attrs],
        "body": encode_stmt(f.body),
    }


def func_from_data(d: dict) -> PrimFunc:
    """Inverse of :func:`func_to_data`."""
    if not isinstance(d, dict) or d.get("format") != FORMAT_VERSION:
        raise IRError(
            f"not a probsched function JSON of format {FORMAT_VERSION} "
            f"(got format {d.get('format') if isinstance(d, dict) else type(d).__name__})"
        )
    params = tuple(Buffer(n, s, t, sc) for n, s, t, sc in d["params"])
    allocs = tuple(Buffer(n, s, t, sc) for n, s, t, sc in d["allocs"])
    buffers = {b.name: b for b in params + allocs}
    return PrimFunc(
        d["name"], params, decode_stmt(d["body"], buffers), allocs, [(k, _dec_value(v)) for k, v in d["attrs"]]
    )


def func_to_json(f: PrimFunc) -> str:
    """Compact, canonical JSON text of a function."""
    return json.dumps(func_to_data(f), sort_keys=True, separators=(",", ":"), allow_nan=False)


def func_from_json(text: str) -> PrimFunc:
    """Parse :func:`func_to_json` text."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IRError(f"function JSON is not valid JSON: {exc}") from None
    return func_from_data(data)


def structural_hash(f: PrimFunc) -> str:
    """SHA-256 of the canonical JSON: stable across processes, runs and machines."""
    return hashlib.sha256(func_to_json(f).encode()).hexdigest()
