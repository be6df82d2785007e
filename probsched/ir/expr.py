"""Expressions of the loop-nest IR: index arithmetic, float arithmetic, loads, selects.

Expressions are immutable and compared structurally (``==`` is structural equality, so
expressions can be dict keys); comparisons ``<``, ``<=``, ``>``, ``>=`` build expressions,
and equality tests are built with :func:`eq` / :func:`ne`. Constructors fold constants and
drop neutral elements (``x + 0``, ``x * 1``) so that split and fuse produce short indices.

>>> i, j = Var("i"), Var("j")
>>> e = i * 4 + j + 0
>>> print(e)
i * 4 + j
>>> e.dtype
'int64'
>>> print(const(2) * 3 + 1)
7
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence, Union

from ..errors import IRError
from .dtypes import BF16, BOOL, DTYPES, FLOAT_DTYPES, INDEX, INT_DTYPES, NARROW_INT_DTYPES, arithmetic_dtype, round_to  # noqa: F401
from .dtypes import INT_RANGE, is_integer, saturate
from .dtypes import is_float as _is_float
from .node import Node

ExprLike = Union["Expr", int, float, bool]


class Expr(Node):
    """Base class of every expression node (immutable, structurally hashable)."""

    __slots__ = ()
    dtype: str

    def __str__(self) -> str:
        from .printer import expr_to_str

        return expr_to_str(self)

    def __bool__(self) -> bool:
        raise IRError(
            f"the truth value of expression '{self}' is unknown at definition time; "
            "use ps.if_then_else / ps.all_of / & | ~ instead of Python 'if', 'and', 'or', 'not'"
        )

    # arithmetic
    def __add__(self, o: ExprLike) -> "Expr":
        return binary("add", self, o)

    def __radd__(self, o: ExprLike) -> "Expr":
        return binary("add", o, self)

    def __sub__(self, o: ExprLike) -> "Expr":
        return binary("sub", self, o)

    def __rsub__(self, o: ExprLike) -> "Expr":
        return binary("sub", o, self)

    def __mul__(self, o: ExprLike) -> "Expr":
        return binary("mul", self, o)

    def __rmul__(self, o: ExprLike) -> "Expr":
        return binary("mul", o, self)

    def __truediv__(self, o: ExprLike) -> "Expr":
        return binary("div", self, o)

    def __rtruediv__(self, o: ExprLike) -> "Expr":
        return binary("div", o, self)

    def __floordiv__(self, o: ExprLike) -> "Expr":
        return binary("floordiv", self, o)

    def __rfloordiv__(self, o: ExprLike) -> "Expr":
        return binary("floordiv", o, self)

    def __mod__(self, o: ExprLike) -> "Expr":
        return binary("mod", self, o)

    def __rmod__(self, o: ExprLike) -> "Expr":
        return binary("mod", o, self)

    def __neg__(self) -> "Expr":
        return binary("sub", const(0, self.dtype), self)

    # comparisons (== and != stay structural; see eq/ne)
    def __lt__(self, o: ExprLike) -> "Expr":
        return binary("lt", self, o)

    def __le__(self, o: ExprLike) -> "Expr":
        return binary("le", self, o)

    def __gt__(self, o: ExprLike) -> "Expr":
        return binary("gt", self, o)

    def __ge__(self, o: ExprLike) -> "Expr":
        return binary("ge", self, o)

    # logic
    def __and__(self, o: ExprLike) -> "Expr":
        return binary("and", self, o)

    def __rand__(self, o: ExprLike) -> "Expr":
        return binary("and", o, self)

    def __or__(self, o: ExprLike) -> "Expr":
        return binary("or", self, o)

    def __ror__(self, o: ExprLike) -> "Expr":
        return binary("or", o, self)

    def __invert__(self) -> "Expr":
        return logical_not(self)


class Var(Expr):
    """A named integer variable: a loop variable or a block iterator.

    Names are unique within a function; two ``Var`` with the same name are the same variable.
    """

    __slots__ = ("name", "dtype")
    _fields = ("name", "dtype")

    def __init__(self, name: str, dtype: str = INDEX) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise IRError(f"variable name {name!r} is not a Python identifier")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)


class Const(Expr):
    """A constant of a given dtype."""

    __slots__ = ("value", "dtype")
    _fields = ("value", "dtype")

    def __init__(self, value: Union[int, float, bool], dtype: str) -> None:
        if dtype not in DTYPES:
            raise IRError(f"unknown dtype {dtype!r}; expected one of {DTYPES}")
        if dtype == BOOL:
            value = bool(value)
        elif dtype == BF16:
            value = round_to(BF16, value)  # the value it stands for: structural identity is exact
        elif _is_float(dtype):
            value = float(value)
        else:
            if isinstance(value, float) and not value.is_integer():
                raise IRError(f"constant {value} is not an integer but dtype is {dtype}")
            value = int(value)
            lo, hi = INT_RANGE.get(dtype, (value, value))
            if not lo <= value <= hi:
                raise IRError(f"constant {value} is outside the range [{lo}, {hi}] of {dtype}")
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "dtype", dtype)

    def _key(self) -> tuple:
        # -0.0 == 0.0 and nan != nan in Python; structural identity must be exact.
        v = self.value
        if isinstance(v, float):
            v = ("f", v.hex()) if not math.isnan(v) else ("f", "nan")
        return ("Const", v, self.dtype)


BINARY_OPS = {
    # name: (python operator in printed form, precedence)
    "add": ("+", 4),
    "sub": ("-", 4),
    "mul": ("*", 5),
    "div": ("/", 5),
    "floordiv": ("//", 5),
    "mod": ("%", 5),
    "lt": ("<", 2),
    "le": ("<=", 2),
    "gt": (">", 2),
    "ge": (">=", 2),
    "eq": ("==", 2),
    "ne": ("!=", 2),
    "and": ("and", 1),
    "or": ("or", 0),
    "min": ("min", 9),
    "max": ("max", 9),
}
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGICAL = ("and", "or")


class BinOp(Expr):
    """``op(a, b)`` for op in :data:`BINARY_OPS`."""

    __slots__ = ("op", "a", "b", "dtype")
    _fields = ("op", "a", "b")

    def __init__(self, op: str, a: Expr, b: Expr, dtype: str) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)
        object.__setattr__(self, "dtype", dtype)


class Not(Expr):
    """Logical negation of a boolean expression."""

    __slots__ = ("a", "dtype")
    _fields = ("a",)

    def __init__(self, a: Expr) -> None:
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "dtype", BOOL)


MATH_FUNCTIONS = ("exp", "log", "sqrt", "tanh", "abs", "sigmoid", "erf", "pow", "rint")
#: Math functions of two arguments (the others take one).
BINARY_MATH = ("pow",)


class Call(Expr):
    """An elementwise math function (:data:`MATH_FUNCTIONS`) of float arguments."""

    __slots__ = ("name", "args", "dtype")
    _fields = ("name", "args")

    def __init__(self, name: str, args: tuple, dtype: str) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", tuple(args))
        object.__setattr__(self, "dtype", dtype)


class Cast(Expr):
    """Conversion of ``value`` to ``dtype``."""

    __slots__ = ("value", "dtype")
    _fields = ("value", "dtype")

    def __init__(self, dtype: str, value: Expr) -> None:
        if dtype not in DTYPES:
            raise IRError(f"cast: unknown dtype {dtype!r}")
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "dtype", dtype)


class Select(Expr):
    """``t if cond else f``; only the chosen branch is evaluated (guards out-of-range loads)."""

    __slots__ = ("cond", "t", "f", "dtype")
    _fields = ("cond", "t", "f")

    def __init__(self, cond: Expr, t: Expr, f: Expr) -> None:
        object.__setattr__(self, "cond", cond)
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "f", f)
        object.__setattr__(self, "dtype", t.dtype)


class Load(Expr):
    """``buffer[indices]``."""

    __slots__ = ("buffer", "indices", "dtype")
    _fields = ("buffer", "indices")

    def __init__(self, buffer, indices: Sequence[Expr]) -> None:  # buffer: stmt.Buffer
        indices = tuple(as_expr(i) for i in indices)
        if len(indices) != len(buffer.shape):
            raise IRError(
                f"buffer {buffer.name} has {len(buffer.shape)} dimensions but is indexed with "
                f"{len(indices)} indices"
            )
        for ix in indices:
            if ix.dtype not in INT_DTYPES:
                raise IRError(f"index {ix} of buffer {buffer.name} has dtype {ix.dtype}, not an integer")
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "dtype", buffer.dtype)


# ----------------------------------------------------------------------------- constructors


def const(value: Union[int, float, bool], dtype: str | None = None) -> Const:
    """A constant; dtype inferred from the Python type (int -> int64, float -> float32).

    >>> const(1.5).dtype, const(3).dtype, const(True).dtype
    ('float32', 'int64', 'bool')
    """
    if dtype is None:
        if isinstance(value, bool):
            dtype = BOOL
        elif isinstance(value, int):
            dtype = INDEX
        elif isinstance(value, float):
            dtype = "float32"
        else:
            import numpy as np

            if isinstance(value, np.generic):
                return const(value.item(), str(value.dtype) if str(value.dtype) in DTYPES else None)
            raise IRError(f"cannot make a constant of {value!r} ({type(value).__name__})")
    return Const(value, dtype)


def as_expr(x: ExprLike, like: str | None = None) -> Expr:
    """Turn a Python number into a constant (of dtype ``like`` when given), leave Exprs alone."""
    if isinstance(x, Expr):
        return x
    if like is not None and not isinstance(x, bool):
        if _is_float(like) or (like in INT_DTYPES and isinstance(x, int)):
            return Const(x, like)
    return const(x)


def _promote(a: Expr, b: Expr, op: str) -> str:
    """The type ``op`` computes in: bfloat16 operands are computed in float32, 8-bit
    integers in int32 (int64 when the other operand is)."""
    if a.dtype == b.dtype:
        return arithmetic_dtype(a.dtype)
    if _is_float(a.dtype) and _is_float(b.dtype):
        return "float64" if "float64" in (a.dtype, b.dtype) else "float32"
    if _is_float(a.dtype) and is_integer(b.dtype):
        return arithmetic_dtype(a.dtype)
    if _is_float(b.dtype) and is_integer(a.dtype):
        return arithmetic_dtype(b.dtype)
    if is_integer(a.dtype) and is_integer(b.dtype):
        return INDEX if INDEX in (a.dtype, b.dtype) else "int32"
    raise IRError(f"'{op}' of {a.dtype} expression {a} and {b.dtype} expression {b} is not defined")


def _fold(op: str, x, y):
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    if op == "div":
        return x / y if y != 0 else None
    if op == "floordiv":
        return x // y if y != 0 else None
    if op == "mod":
        return x % y if y != 0 else None
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    if op == "lt":
        return x < y
    if op == "le":
        return x <= y
    if op == "gt":
        return x > y
    if op == "ge":
        return x >= y
    if op == "eq":
        return x == y
    if op == "ne":
        return x != y
    if op == "and":
        return bool(x) and bool(y)
    if op == "or":
        return bool(x) or bool(y)
    raise IRError(f"unknown binary operator {op!r}")


def binary(op: str, a: ExprLike, b: ExprLike) -> Expr:
    """Build ``op(a, b)``, folding constants and neutral elements."""
    if op not in BINARY_OPS:
        raise IRError(f"unknown binary operator {op!r}")
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        a = const(a)
    # a Python number beside a bfloat16 operand is a float32 constant: the operation is float32
    if not isinstance(a, Expr):
        a = as_expr(a, arithmetic_dtype(b.dtype))  # type: ignore[union-attr]
    if not isinstance(b, Expr):
        b = as_expr(b, arithmetic_dtype(a.dtype))
    if op in LOGICAL:
        if a.dtype != BOOL or b.dtype != BOOL:
            raise IRError(f"'{op}' needs boolean operands, got {a.dtype} {a} and {b.dtype} {b}")
        dtype = BOOL
    elif op in COMPARISONS:
        _promote(a, b, op)
        dtype = BOOL
    else:
        if a.dtype == BOOL or b.dtype == BOOL:
            raise IRError(f"arithmetic '{op}' on a boolean expression ({a}, {b})")
        dtype = _promote(a, b, op)
        if op == "div" and not _is_float(dtype):
            raise IRError(f"'/' of integer expressions {a} and {b}: use '//' for index arithmetic")
    ca = a.value if isinstance(a, Const) else None
    cb = b.value if isinstance(b, Const) else None
    if ca is not None and cb is not None:
        v = _fold(op, ca, cb)
        if v is not None:
            return Const(v, dtype)
    # Neutral and absorbing elements. Only integer/bool ones: float x*0 is not 0 for inf/nan.
    if dtype in INT_DTYPES:
        if op == "add":
            if ca == 0:
                return b
            if cb == 0:
                return a
        elif op == "sub" and cb == 0:
            return a
        elif op == "mul":
            if ca == 1:
                return b
            if cb == 1:
                return a
            if ca == 0 or cb == 0:
                return Const(0, dtype)
        elif op in ("floordiv",) and cb == 1:
            return a
        elif op == "mod" and cb == 1:
            return Const(0, dtype)
    elif op == "and":
        if ca is True:
            return b
        if cb is True:
            return a
        if ca is False or cb is False:
            return Const(False, BOOL)
    elif op == "or":
        if ca is False:
            return b
        if cb is False:
            return a
        if ca is True or cb is True:
            return Const(True, BOOL)
    if dtype not in (BOOL,) and op not in COMPARISONS:
        if a.dtype != dtype:
            a = Const(a.value, dtype) if isinstance(a, Const) else Cast(dtype, a)
        if b.dtype != dtype:
            b = Const(b.value, dtype) if isinstance(b, Const) else Cast(dtype, b)
    return BinOp(op, a, b, dtype)


def logical_not(a: ExprLike) -> Expr:
    """Logical not of a boolean expression."""
    a = as_expr(a)
    if a.dtype != BOOL:
        raise IRError(f"'~' needs a boolean expression, got {a.dtype} {a}")
    if isinstance(a, Const):
        return Const(not a.value, BOOL)
    if isinstance(a, Not):
        return a.a
    return Not(a)


def eq(a: ExprLike, b: ExprLike) -> Expr:
    """``a == b`` as an expression (Python ``==`` on expressions is structural equality).

    >>> print(eq(Var("i") % 2, 0))
    i % 2 == 0
    """
    return binary("eq", a, b)


def ne(a: ExprLike, b: ExprLike) -> Expr:
    """``a != b`` as an expression."""
    return binary("ne", a, b)


def all_of(*conds: ExprLike) -> Expr:
    """Conjunction of boolean expressions (``True`` for none).

    >>> i = Var("i")
    >>> print(all_of(i >= 1, i < 9))
    i >= 1 and i < 9
    """
    out: Expr = Const(True, BOOL)
    for c in conds:
        out = binary("and", out, as_expr(c))
    return out


def any_of(*conds: ExprLike) -> Expr:
    """Disjunction of boolean expressions (``False`` for none)."""
    out: Expr = Const(False, BOOL)
    for c in conds:
        out = binary("or", out, as_expr(c))
    return out


def if_then_else(cond: ExprLike, t: ExprLike, f: ExprLike) -> Expr:
    """``t if cond else f``; the untaken branch is never evaluated (safe padding loads).

    >>> i = Var("i")
    >>> print(if_then_else(i < 4, 1.0, 0.0))
    (1.0 if i < 4 else 0.0)
    """
    cond = as_expr(cond)
    if cond.dtype != BOOL:
        raise IRError(f"if_then_else: condition {cond} has dtype {cond.dtype}, not bool")
    if not isinstance(t, Expr) and isinstance(f, Expr):
        t = as_expr(t, f.dtype)
    elif not isinstance(f, Expr) and isinstance(t, Expr):
        f = as_expr(f, t.dtype)
    t, f = as_expr(t), as_expr(f)
    if t.dtype != f.dtype:
        dtype = _promote(t, f, "if_then_else")
        t = t if t.dtype == dtype else Cast(dtype, t)
        f = f if f.dtype == dtype else Cast(dtype, f)
    if isinstance(cond, Const):
        return t if cond.value else f
    return Select(cond, t, f)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    """Elementwise minimum."""
    return binary("min", a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    """Elementwise maximum."""
    return binary("max", a, b)


def cast(dtype: str, value: ExprLike) -> Expr:
    """Convert ``value`` to ``dtype`` (to ``"uint8"``/``"int8"``: saturating, a float
    rounded to nearest even first; see :mod:`.dtypes`).

    >>> cast("float32", Var("i")).dtype, cast("uint8", 255.5).value
    ('float32', 255)
    """
    value = as_expr(value)
    if value.dtype == dtype:
        return value
    if isinstance(value, Const):
        if dtype in NARROW_INT_DTYPES and value.dtype != BOOL:
            return Const(int(saturate(dtype, value.value)), dtype)
        return Const(value.value, dtype)
    return Cast(dtype, value)


def _math(name: str, x: ExprLike) -> Expr:
    x = as_expr(x)
    if (is_integer(x.dtype) and name != "abs") or x.dtype == BF16:
        x = cast("float32", x)
    elif x.dtype in NARROW_INT_DTYPES:  # abs of an 8-bit integer: computed in int32 (abs(-128))
        x = cast("int32", x)
    if x.dtype == BOOL:
        raise IRError(f"{name} of a boolean expression {x}")
    return Call(name, (x,), x.dtype)


def exp(x: ExprLike) -> Expr:
    """``e ** x``."""
    return _math("exp", x)


def log(x: ExprLike) -> Expr:
    """Natural logarithm."""
    return _math("log", x)


def sqrt(x: ExprLike) -> Expr:
    """Square root."""
    return _math("sqrt", x)


def tanh(x: ExprLike) -> Expr:
    """Hyperbolic tangent."""
    return _math("tanh", x)


def sigmoid(x: ExprLike) -> Expr:
    """``1 / (1 + exp(-x))``."""
    return _math("sigmoid", x)


def rint(x: ExprLike) -> Expr:
    """``x`` rounded to the nearest integer, ties to even (numpy's ``rint``; what a
    quantization rounds with), as a float.

    >>> rint(Var("i")).dtype
    'float32'
    """
    return _math("rint", x)


def abs(x: ExprLike) -> Expr:  # noqa: A001 - the front end's name for it
    """Absolute value."""
    return _math("abs", x)


def erf(x: ExprLike) -> Expr:
    """The error function (exact GELU uses it)."""
    return _math("erf", x)


def power(x: ExprLike, y: ExprLike) -> Expr:
    """``x ** y`` for float ``x`` and ``y`` (NaN for a negative ``x`` and a non-integer ``y``).

    >>> power(Var("x", "float32"), 2.0)
    <Call pow(x, 2.0)>
    """
    a, b = as_expr(x), as_expr(y)
    if is_integer(a.dtype) or a.dtype == BF16:
        a = cast("float32", a)
    if a.dtype == BOOL or b.dtype == BOOL:
        raise IRError(f"pow of a boolean expression ({a}, {b})")
    b = cast(a.dtype, b) if b.dtype != a.dtype else b
    return Call("pow", (a, b), a.dtype)


# ----------------------------------------------------------------------------- traversal


def children(e: Expr) -> tuple:
    """The sub-expressions of ``e`` in evaluation order."""
    get = _CHILDREN.get(type(e))
    if get is not None:
        return get(e)
    # subclasses (a ReduceAxis is a Var): the slow path
    for cls, get in _CHILDREN.items():
        if isinstance(e, cls):
            return get(e)
    return ()


# by exact type: the traversals below run millions of times per search round, and one dict
# lookup is several times cheaper than a chain of isinstance tests
_CHILDREN = {
    BinOp: lambda e: (e.a, e.b),
    Not: lambda e: (e.a,),
    Call: lambda e: e.args,
    Cast: lambda e: (e.value,),
    Select: lambda e: (e.cond, e.t, e.f),
    Load: lambda e: e.indices,
    Var: lambda e: (),
    Const: lambda e: (),
}


def rebuild(e: Expr, new_children: Sequence[Expr]) -> Expr:
    """``e`` with its children replaced (through the folding constructors)."""
    if isinstance(e, BinOp):
        return binary(e.op, new_children[0], new_children[1])
    if isinstance(e, Not):
        return logical_not(new_children[0])
    if isinstance(e, Call):
        return Call(e.name, tuple(new_children), e.dtype)
    if isinstance(e, Cast):
        return cast(e.dtype, new_children[0])
    if isinstance(e, Select):
        return if_then_else(new_children[0], new_children[1], new_children[2])
    if isinstance(e, Load):
        return Load(e.buffer, tuple(new_children))
    return e


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace variables (by name or Var key) with expressions.

    >>> i, j = Var("i"), Var("j")
    >>> print(substitute(i * 2 + j, {"i": Var("a") * 4 + Var("b")}))
    (a * 4 + b) * 2 + j
    """
    if not mapping:
        return e
    names = {(k.name if isinstance(k, Var) else k): v for k, v in mapping.items()}

    def go(x: Expr) -> Expr:
        if isinstance(x, Var):
            r = names.get(x.name)
            return as_expr(r) if r is not None else x
        ch = children(x)
        if not ch:
            return x
        new = [go(c) for c in ch]
        if all(n is c for n, c in zip(new, ch)):
            return x
        return rebuild(x, new)

    return go(e)


def map_loads(e: Expr, fn: Callable[[Load], Expr]) -> Expr:
    """Rewrite every load in ``e`` (inner loads first) with ``fn``."""
    ch = children(e)
    if ch:
        new = [map_loads(c, fn) for c in ch]
        if any(n is not c for n, c in zip(new, ch)):
            e = rebuild(e, new)
    if isinstance(e, Load):
        return fn(e)
    return e


def walk(e: Expr) -> Iterable[Expr]:
    """Every node of ``e`` in pre-order."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(children(x)))


def free_vars(e: Expr) -> set:
    """Names of the variables used in ``e``.

    >>> sorted(free_vars(Var("i") * 3 + Var("k")))
    ['i', 'k']
    """
    out = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            out.add(x.name)
        else:
            stack.extend(children(x))
    return out


def loads(e: Expr) -> list:
    """Every :class:`Load` in ``e``, in evaluation order."""
    return [x for x in walk(e) if isinstance(x, Load)]
