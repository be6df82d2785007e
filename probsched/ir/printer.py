"""Readable, Python-like text of expressions, statements and functions.

>>> from probsched.ir.expr import Var
>>> i, j = Var("i"), Var("j")
>>> print(expr_to_str((i + 1) * 2 - (j - 3)))
(i + 1) * 2 - (j - 3)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .expr import BINARY_OPS, BinOp, Call, Cast, Const, Expr, Load, Not, Select, Var

if TYPE_CHECKING:
    from .stmt import PrimFunc, StmtLike

_ATOM = 10


def _const_str(c: Const) -> str:
    v = c.value
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        s = repr(v)
        return s if c.dtype == "float32" else f"{c.dtype}({s})"
    return repr(v)


def _prec(e: Expr) -> int:
    if isinstance(e, BinOp):
        return BINARY_OPS[e.op][1]
    if isinstance(e, Not):
        return 1
    if isinstance(e, Const) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool) and e.value < 0:
        return 6
    return _ATOM


def expr_to_str(e: Expr) -> str:
    """Text of an expression, parenthesised exactly where the tree needs it."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        return _const_str(e)
    if isinstance(e, BinOp):
        sym, p = BINARY_OPS[e.op]
        if e.op in ("min", "max"):
            return f"{sym}({expr_to_str(e.a)}, {expr_to_str(e.b)})"
        left = expr_to_str(e.a)
        if _prec(e.a) < p:
            left = f"({left})"
        right = expr_to_str(e.b)
        if _prec(e.b) <= p:
            right = f"({right})"
        return f"{left} {sym} {right}"
    if isinstance(e, Not):
        inner = expr_to_str(e.a)
        return f"not ({inner})" if _prec(e.a) < _ATOM else f"not {inner}"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_to_str(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_to_str(e.value)})"
    if isinstance(e, Select):
        return f"({expr_to_str(e.t)} if {expr_to_str(e.cond)} else {expr_to_str(e.f)})"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(expr_to_str(i) for i in e.indices)}]"
    return f"<{type(e).__name__}>"


def _ann_str(annotations) -> str:
    if not annotations:
        return ""
    return "  # " + ", ".join(f"{k}={v!r}" for k, v in annotations)


def _lines(s, indent: int, out: list) -> None:
    from .stmt import Block, Loop, Store

    pad = "    " * indent
    if isinstance(s, tuple):
        for x in s:
            _lines(x, indent, out)
        return
    if isinstance(s, Loop):
        rng = "range" if s.kind == "serial" else s.kind
        out.append(f"{pad}for {s.var.name} in {rng}({s.extent}):{_ann_str(s.annotations)}")
        _lines(s.body, indent + 1, out)
    elif isinstance(s, Block):
        its = ", ".join(
            f"{it.var.name}={it.kind}({it.extent}, {expr_to_str(b)})" for it, b in zip(s.iters, s.bindings)
        )
        sep = ", " if its else ""
        out.append(f'{pad}with block("{s.name}"{sep}{its}):{_ann_str(s.annotations)}')
        inner = "    " * (indent + 1)
        if not (isinstance(s.predicate, Const) and s.predicate.value is True):
            out.append(f"{inner}where({expr_to_str(s.predicate)})")
        if s.init is not None:
            sub: list = []
            _lines(s.init, 0, sub)
            if len(sub) == 1:
                out.append(f"{inner}init: {sub[0]}")
            else:
                out.append(f"{inner}init:")
                out.extend("    " * (indent + 2) + x for x in sub)
        _lines(s.body, indent + 1, out)
    elif isinstance(s, Store):
        idx = ", ".join(expr_to_str(i) for i in s.indices)
        out.append(f"{pad}{s.buffer.name}[{idx}] = {expr_to_str(s.value)}")
    else:
        text = getattr(s, "to_text", None)
        out.append(pad + (text() if text else f"<{type(s).__name__}>"))


def stmt_to_str(s: StmtLike) -> str:
    """Text of a statement (or tuple of statements)."""
    out: list = []
    _lines(s, 0, out)
    return "\n".join(out)


def func_to_str(f: PrimFunc) -> str:
    """Text of a :class:`~probsched.ir.stmt.PrimFunc`."""
    params = ", ".join(str(b) for b in f.params)
    out = [f"def {f.name}({params}):"]
    for b in f.allocs:
        shape = ", ".join(map(str, b.shape))
        out.append(f"    {b.name} = alloc({b.dtype}[{shape}], scope={b.scope!r})")
    body: list = []
    _lines(f.body, 1, body)
    out.extend(body)
    return "\n".join(out)
