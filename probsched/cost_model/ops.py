"""Arithmetic operation counts of one execution of a store, by kind.

A float ``add``/``sub`` with a float ``mul`` operand counts as one fused multiply-add (the
code generator compiles with ``contract`` fast-math, so LLVM fuses them); the ``mul`` is then
not counted again.

>>> import probsched as ps
>>> from probsched.ir.expr import Var
>>> A = ps.placeholder((4,), name="A")
>>> c = count_ops(A[Var("i")] * 2.0 + ps.exp(A[Var("i") + 1]))
>>> {k: c[OP_KINDS.index(k)] for k in ("float_fma", "float_mul", "float_exp", "int_add_sub", "loads")}
{'float_fma': 1, 'float_mul': 0, 'float_exp': 1, 'int_add_sub': 1, 'loads': 2}
"""

from __future__ import annotations

from typing import List

from ..ir.expr import FLOAT_DTYPES, BinOp, Call, Cast, Expr, Load, Not, Select

OP_KINDS = (
    "float_add_sub",
    "float_mul",
    "float_fma",
    "float_div",
    "float_cmp",
    "float_min_max",
    "float_exp",
    "float_other_math",
    "float_select",
    "int_add_sub",
    "int_mul",
    "int_div_mod",
    "int_cmp",
    "int_min_max",
    "int_select",
    "bool_op",
    "cast",
    "loads",
)
OP_DOCS = {
    "float_add_sub": "float additions and subtractions not fused into an FMA",
    "float_mul": "float multiplications not fused into an FMA",
    "float_fma": "float multiply-adds (an add/sub with a mul operand)",
    "float_div": "float divisions",
    "float_cmp": "float comparisons",
    "float_min_max": "float min/max (max-reductions, relu)",
    "float_exp": "exp calls",
    "float_other_math": "log, sqrt, tanh, sigmoid and abs calls",
    "float_select": "float-valued selects (padding, guards)",
    "int_add_sub": "integer additions and subtractions (index arithmetic)",
    "int_mul": "integer multiplications (index arithmetic)",
    "int_div_mod": "integer floor divisions and modulos",
    "int_cmp": "integer comparisons (guards, predicates)",
    "int_min_max": "integer min/max",
    "int_select": "integer/bool-valued selects",
    "bool_op": "logical and/or/not",
    "cast": "dtype conversions",
    "loads": "buffer loads",
}
_IDX = {k: i for i, k in enumerate(OP_KINDS)}
_MATH = {"exp": _IDX["float_exp"]}
_CMP = {"lt", "le", "gt", "ge", "eq", "ne"}


def count_ops(e: Expr, out: List[int] | None = None) -> List[int]:
    """Counts of :data:`OP_KINDS` in ``e`` (added into ``out`` when given)."""
    if out is None:
        out = [0] * len(OP_KINDS)
    stack = [e]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is BinOp:
            op = x.op
            is_float = x.a.dtype in FLOAT_DTYPES or x.b.dtype in FLOAT_DTYPES
            if op in ("add", "sub") and is_float:
                a, b = x.a, x.b
                if type(a) is BinOp and a.op == "mul" and a.dtype in FLOAT_DTYPES:
                    out[_IDX["float_fma"]] += 1
                    stack += [a.a, a.b, b]
                    continue
                if type(b) is BinOp and b.op == "mul" and b.dtype in FLOAT_DTYPES:
                    out[_IDX["float_fma"]] += 1
                    stack += [a, b.a, b.b]
                    continue
                out[_IDX["float_add_sub"]] += 1
            elif op in ("add", "sub"):
                out[_IDX["int_add_sub"]] += 1
            elif op == "mul":
                out[_IDX["float_mul" if is_float else "int_mul"]] += 1
            elif op == "div":
                out[_IDX["float_div"]] += 1
            elif op in ("floordiv", "mod"):
                out[_IDX["float_div" if is_float else "int_div_mod"]] += 1
            elif op in _CMP:
                out[_IDX["float_cmp" if is_float else "int_cmp"]] += 1
            elif op in ("min", "max"):
                out[_IDX["float_min_max" if is_float else "int_min_max"]] += 1
            else:  # and / or
                out[_IDX["bool_op"]] += 1
            stack += [x.a, x.b]
        elif t is Load:
            out[_IDX["loads"]] += 1
            stack.extend(x.indices)
        elif t is Call:
            out[_MATH.get(x.name, _IDX["float_other_math"])] += 1
            stack.extend(x.args)
        elif t is Select:
            out[_IDX["float_select" if x.dtype in FLOAT_DTYPES else "int_select"]] += 1
            stack += [x.cond, x.t, x.f]
        elif t is Cast:
            out[_IDX["cast"]] += 1
            stack.append(x.value)
        elif t is Not:
            out[_IDX["bool_op"]] += 1
            stack.append(x.a)
    return out


def flops(counts: List[int]) -> int:
    """Floating-point operations of ``counts`` (an FMA is 2, a math call 1).

    >>> c = [0] * len(OP_KINDS); c[_IDX["float_fma"]] = 3; c[_IDX["float_exp"]] = 1
    >>> flops(c)
    7
    """
    total = 0
    for k in ("float_add_sub", "float_mul", "float_div", "float_cmp", "float_min_max", "float_exp", "float_other_math"):
        total += counts[_IDX[k]]
    return total + 2 * counts[_IDX["float_fma"]]
