"""IR expressions to Python source that numba types the way the IR says.

Three rules make the text fast under numba:

- float32 constants are written ``np.float32(c)``: a bare literal is float64 in numba and
  would promote the whole expression to float64;
- a bfloat16 value is a float32 that a bfloat16 represents (:mod:`.bf16`): its constants are
  float32 constants, a cast to bfloat16 rounds (``bf16_round``), a cast from it is a float32's;
- integer index arithmetic is written in a canonical affine form (``i0 * 8192 + k + 768``)
  so that constant offsets fold, loop-invariant terms are visible and an index that depends
  only on unrolled loops becomes a literal (which is what lets local buffers become
  scalars);
- buffer subscripts are done by the caller (see :mod:`probsched.codegen.emit`): a flat
  int64 index cast to ``np.uint64`` once, so numba emits no negative-index wraparound.

>>> from probsched.ir.expr import Var, const
>>> i, j = Var("i"), Var("j")
>>> w = ExprWriter(load_src=None)
>>> w.src((i * 4 + 1) * 16 + j - i * 64)
'j + 16'
>>> w.src((i * 2 + 1) // 4)
'(i * 2 + 1) // 4'
>>> w.src(const(7) - (i % 2) * 48)
'-(i % 2) * 48 + 7'
>>> w.src(const(0.5) * const(2.0, "float32"))
'np.float32(1.0)'
>>> linear_const((i + 3) * 2 - i * 2)
6
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple

from ..errors import BuildError
from ..ir.expr import (
    BF16,
    BOOL,
    INT_DTYPES,
    BinOp,
    Call,
    Cast,
    Const,
    Expr,
    Load,
    Not,
    Select,
    Var,
)
from ..ir.dtypes import INT_RANGE, NARROW_INT_DTYPES, arithmetic_dtype, is_float, numpy_dtype

ATOM = 10
_PREC = {
    "or": 0, "and": 1,
    "lt": 3, "le": 3, "gt": 3, "ge": 3, "eq": 3, "ne": 3,
    "add": 4, "sub": 4,
    "mul": 5, "div": 5, "floordiv": 5, "mod": 5,
}
_SYM = {
    "or": "or", "and": "and", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
    "add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
}
_NP_TYPE = {d: f"np.{numpy_dtype(d).name}" for d in ("float32", "float64") + INT_DTYPES + NARROW_INT_DTYPES}


def saturate_src(text: str, from_dtype: str, dtype: str) -> str:
    """Source converting ``text`` (of ``from_dtype``) to 8-bit ``dtype`` as the IR does:
    a float rounded to nearest even, then clamped to the range (numba's own conversion of an
    out-of-range value is undefined).

    >>> saturate_src("x", "float32", "uint8")
    'np.uint8(min(max(np.rint(x), np.float32(0.0)), np.float32(255.0)))'
    >>> saturate_src("y", "int32", "int8")
    'np.int8(min(max(y, -128), 127))'
    """
    lo, hi = INT_RANGE[dtype]
    if is_float(from_dtype):
        f = arithmetic_dtype(from_dtype)
        return f"{_NP_TYPE[dtype]}(min(max(np.rint({text}), {const_src(lo, f)}), {const_src(hi, f)}))"
    return f"{_NP_TYPE[dtype]}(min(max({text}, {lo}), {hi}))"


def narrow_clamped_src(text: str, dtype: str) -> str:
    """Source converting ``text``, an int32 already within 8-bit ``dtype``'s range, to it.
    The clamp written around it changes no value: it is the form LLVM turns into saturating
    packs (``vpackssdw`` + ``vpackuswb``: two instructions per 16 values), where a bare
    conversion became two byte shuffles, an extract and a merge per 8 (the last steps of a
    quantized task's requantizing epilogue, which costs some of its tasks more than their
    products do).

    >>> narrow_clamped_src("q", "uint8")
    'np.uint8(min(max(q, np.int32(0)), np.int32(255)))'
    """
    lo, hi = INT_RANGE[dtype]
    return f"{_NP_TYPE[dtype]}(min(max({text}, np.int32({lo})), np.int32({hi})))"


def value_range(e: Expr) -> Tuple[Optional[float], Optional[float]]:
    """Bounds ``(lo, hi)`` every value of ``e`` lies within (None: none known on that side),
    from constants, clamps (``min`` / ``max``), ``rint``, conversions and the 8-bit types; a
    NaN aside. A quantizing epilogue clamps to the byte's range before it converts, which
    makes the conversion's own saturation redundant (:meth:`ExprWriter._byte_as_float`).

    >>> from probsched.ir.expr import maximum, minimum
    >>> x = Cast("float32", Var("i"))
    >>> value_range(minimum(maximum(x, 0.0), 255.0))
    (0.0, 255.0)
    >>> value_range(Cast("int32", maximum(x, -0.5)))
    (0, None)
    >>> value_range(Cast("uint8", Cast("int32", maximum(x, 300.0))))  # saturated
    (255, 255)
    """
    if isinstance(e, Const) and not isinstance(e.value, bool):
        return e.value, e.value
    if e.dtype in NARROW_INT_DTYPES and not (isinstance(e, Cast) and not is_float(e.value.dtype)):
        return INT_RANGE[e.dtype]  # a byte, or a float saturated to one
    if isinstance(e, BinOp) and e.op in ("min", "max"):
        (la, ha), (lb, hb) = value_range(e.a), value_range(e.b)
        if e.op == "max":  # above each operand's floor; below a ceiling only with both known
            return _pick(max, la, lb), (max(ha, hb) if ha is not None and hb is not None else None)
        return (min(la, lb) if la is not None and lb is not None else None), _pick(min, ha, hb)
    if isinstance(e, Call) and e.name == "rint":
        lo, hi = value_range(e.args[0])
        return _apply(round, lo), _apply(round, hi)
    if isinstance(e, Cast):
        lo, hi = value_range(e.value)
        if e.dtype in NARROW_INT_DTYPES:  # an integer saturated to the byte's range
            blo, bhi = INT_RANGE[e.dtype]
            lo, hi = blo if lo is None else lo, bhi if hi is None else hi
            return min(max(lo, blo), bhi), max(min(hi, bhi), blo)
        if e.dtype in INT_DTYPES and is_float(e.value.dtype):  # converted toward zero
            return _apply(math.trunc, lo), _apply(math.trunc, hi)
        return lo, hi
    return None, None


def _pick(choose: Callable, a: Optional[float], b: Optional[float]) -> Optional[float]:
    known = [v for v in (a, b) if v is not None]
    return choose(known) if known else None


def _apply(fn: Callable, v: Optional[float]) -> Optional[float]:
    return None if v is None else fn(v)


def _within(bounds: Tuple[Optional[float], Optional[float]], dtype: str) -> bool:
    lo, hi = INT_RANGE[dtype]
    return bounds[0] is not None and bounds[1] is not None and lo <= bounds[0] and bounds[1] <= hi


# ----------------------------------------------------------------------------- affine forms


def linearize(e: Expr) -> tuple:
    """``(terms, const)`` with ``e == sum(coef * atom) + const`` for an integer expression.

    Atoms are sub-expressions that are not sums or products by constants (variables, loads,
    ``//``, ``%``, products of two variables); terms keep first-appearance order and terms
    whose coefficients cancel are dropped.
    """
    terms: dict = {}
    const = _lin(e, 1, terms)
    return {a: c for a, c in terms.items() if c != 0}, const


def _lin(e: Expr, scale: int, terms: dict) -> int:
    if isinstance(e, Const) and e.dtype in INT_DTYPES:
        return scale * int(e.value)
    if isinstance(e, BinOp) and e.dtype in INT_DTYPES:
        if e.op == "add":
            return _lin(e.a, scale, terms) + _lin(e.b, scale, terms)
        if e.op == "sub":
            return _lin(e.a, scale, terms) + _lin(e.b, -scale, terms)
        if e.op == "mul":
            ca, cb = linear_const(e.a), linear_const(e.b)
            if ca is not None:
                return _lin(e.b, scale * ca, terms)
            if cb is not None:
                return _lin(e.a, scale * cb, terms)
    if isinstance(e, Cast) and e.dtype == "int64" and e.value.dtype in INT_DTYPES:
        return _lin(e.value, scale, terms)
    terms[e] = terms.get(e, 0) + scale
    return 0


def linear_const(e: Expr) -> Optional[int]:
    """The integer value of ``e`` when its affine form has no variable term, else None."""
    if isinstance(e, Const):
        return int(e.value) if e.dtype in INT_DTYPES else None
    if e.dtype not in INT_DTYPES:
        return None
    terms, c = linearize(e)
    return None if terms else c


def fold_bool(e: Expr) -> Expr:
    """Fold comparisons whose sides differ by a constant, and the logic above them.

    >>> from probsched.ir.expr import Var
    >>> i = Var("i")
    >>> fold_bool((i * 2 + 3 < i * 2 + 5) & (i < 4))
    <BinOp i < 4>
    """
    from ..ir.expr import binary, logical_not

    if isinstance(e, Const) or e.dtype != BOOL:
        return e
    if isinstance(e, Not):
        return logical_not(fold_bool(e.a))
    if isinstance(e, BinOp):
        if e.op in ("and", "or"):
            return binary(e.op, fold_bool(e.a), fold_bool(e.b))
        if e.op in ("lt", "le", "gt", "ge", "eq", "ne") and e.a.dtype in INT_DTYPES and e.b.dtype in INT_DTYPES:
            d = linear_const(binary("sub", e.a, e.b))
            if d is not None:
                return Const({"lt": d < 0, "le": d <= 0, "gt": d > 0, "ge": d >= 0, "eq": d == 0, "ne": d != 0}[e.op], BOOL)
    return e


# ----------------------------------------------------------------------------- constants


def const_src(value, dtype: str) -> str:
    """Source of a constant of ``dtype`` that numba types as ``dtype``.

    >>> const_src(2.0, "float32"), const_src(-math.inf, "float32"), const_src(3, "int64")
    ('np.float32(2.0)', 'np.float32(-np.inf)', '3')
    """
    if dtype == BOOL:
        return "True" if value else "False"
    if dtype == BF16:  # the value is a bfloat16's already (Const rounds it)
        dtype = "float32"
    if dtype in ("float32", "float64"):
        v = float(value)
        if math.isnan(v):
            text = "np.nan"
        elif math.isinf(v):
            text = "np.inf" if v > 0 else "-np.inf"
        else:
            text = repr(v)
        return f"{_NP_TYPE[dtype]}({text})"
    if dtype == "int64":
        return repr(int(value))
    return f"{_NP_TYPE[dtype]}({int(value)})"


# ----------------------------------------------------------------------------- printer


class ExprWriter:
    """Prints expressions; ``load_src(buffer, indices)`` prints a buffer read.

    ``bound`` (optional) is the set of variable names in scope; a variable outside it is a
    :class:`~probsched.errors.BuildError` (the IR used a name no loop or block defines).
    ``helper`` (optional) binds an njit function to a global name, ``helper(hint, fn) ->
    name``: with it, math functions that :mod:`.mathlib` implements in vectorizable form
    (float32 exp) call that instead of ``np.<name>``.
    """

    def __init__(
        self, load_src: Optional[Callable], bound: Optional[set] = None, helper: Optional[Callable] = None
    ) -> None:
        self.load_src = load_src
        self.bound = bound
        self.helper = helper

    def _math(self, name: str, dtype: str, arg: str) -> str:
        # imported here: mathlib compiles with numba, which .compile must configure first
        from .mathlib import FUNCTIONS

        fn = FUNCTIONS.get((name, dtype)) if self.helper is not None else None
        if fn is None:
            return f"{'math' if name == 'erf' else 'np'}.{name}({arg})"
        return f"{self.helper(f'{name}_{dtype}', fn)}({arg})"

    def bf16(self, name: str) -> str:
        """The global name of bfloat16 helper ``name`` (``bf16_widen``, ``bf16_bits``,
        ``bf16_round``: :mod:`.bf16`)."""
        if self.helper is None:
            raise BuildError(f"bfloat16 code needs the helper {name}: this writer binds no helpers")
        from .bf16 import HELPERS  # compiles with numba, which .compile must configure first

        return self.helper(name, HELPERS[name])

    def src(self, e: Expr) -> str:
        """The source text of ``e``."""
        return self._p(e)[0]

    def _p(self, e: Expr) -> tuple:
        if isinstance(e, Var):
            if self.bound is not None and e.name not in self.bound:
                raise BuildError(f"variable '{e.name}' is used but no enclosing loop or block defines it")
            return e.name, ATOM
        if isinstance(e, Const):
            s = const_src(e.value, e.dtype)
            neg = e.dtype in INT_DTYPES and e.value < 0
            return s, (6 if neg else ATOM)
        if isinstance(e, BinOp):
            # a product of two non-constant integers (int8 values widened) is an atom of its
            # own affine form: printed as the product it is
            if e.dtype in INT_DTYPES and e.op in ("add", "sub", "mul") and not (
                e.op == "mul" and linear_const(e.a) is None and linear_const(e.b) is None
            ):
                return self._affine(e)
            if e.op in ("min", "max"):
                return f"{e.op}({self.src(e.a)}, {self.src(e.b)})", ATOM
            if e.op in ("lt", "le", "gt", "ge", "eq", "ne", "and", "or"):
                e2 = fold_bool(e)
                if isinstance(e2, Const):
                    return self._p(e2)
                if e2 is not e and not (isinstance(e2, BinOp) and e2.op == e.op):
                    return self._p(e2)
                e = e2
            p = _PREC[e.op]
            a, pa = self._p(e.a)
            b, pb = self._p(e.b)
            # comparisons do not chain in the IR: parenthesise equal precedence on both sides
            if pa < p or (p == 3 and pa == 3):
                a = f"({a})"
            if pb <= p:
                b = f"({b})"
            return f"{a} {_SYM[e.op]} {b}", p
        if isinstance(e, Not):
            inner = fold_bool(e.a)
            if isinstance(inner, Const):
                return const_src(not inner.value, BOOL), ATOM
            s, p = self._p(inner)
            return (f"not {s}" if p == ATOM else f"not ({s})"), 2
        if isinstance(e, Call):
            args = [self.src(a) for a in e.args]
            if e.name in ("exp", "log", "sqrt", "tanh", "erf"):
                return self._math(e.name, e.dtype, args[0]), ATOM
            if e.name == "pow":
                return f"np.power({args[0]}, {args[1]})", ATOM
            if e.name == "abs":
                return f"abs({args[0]})", ATOM
            if e.name == "rint":
                return f"np.rint({args[0]})", ATOM
            if e.name == "sigmoid":
                one = const_src(1.0, e.dtype) if e.dtype in ("float32", "float64") else "1.0"
                return f"({one} / ({one} + {self._math('exp', e.dtype, f'-({args[0]})')}))", ATOM
            raise BuildError(f"unknown math function {e.name!r} in {e}")
        if isinstance(e, Cast):
            if e.dtype == "float32" and e.value.dtype == BF16:
                return self._p(e.value)  # a bfloat16 value is a float32 already
            inner = self.src(e.value)
            if e.value.dtype == "int32" and isinstance(e.value, BinOp):
                # numba computes int32 arithmetic in int64; converted as it is, LLVM keeps
                # the 64 bits (an int8 task's zero-point correction ``acc - colsum`` widened,
                # subtracted and converted in quadwords: 3x the instructions of its int32 form)
                inner = f"np.int32({inner})"
            if e.dtype == BOOL:
                return f"({inner} != 0)", ATOM
            if e.dtype == BF16:
                if e.value.dtype != "float32":
                    inner = f"np.float32({inner})"
                return f"{self.bf16('bf16_round')}({inner})", ATOM
            if e.dtype in NARROW_INT_DTYPES:
                if not is_float(e.value.dtype) and _within(value_range(e.value), e.dtype):
                    if e.value.dtype == "int32":
                        return narrow_clamped_src(inner, e.dtype), ATOM
                    return f"{_NP_TYPE[e.dtype]}({inner})", ATOM  # clamped already: no saturation
                return saturate_src(inner, e.value.dtype, e.dtype), ATOM
            if e.dtype == "float32" and e.value.dtype in NARROW_INT_DTYPES:
                exact = self._byte_as_float(e.value)
                if exact is not None:
                    return exact, ATOM
            return f"{_NP_TYPE[e.dtype]}({inner})", ATOM
        if isinstance(e, Select):
            c = fold_bool(e.cond)
            if isinstance(c, Const):
                return self._p(e.t if c.value else e.f)
            return f"({self.src(e.t)} if {self.src(c)} else {self.src(e.f)})", ATOM
        if isinstance(e, Load):
            if self.load_src is None:
                raise BuildError(f"cannot print the load {e} here")
            return self.load_src(e.buffer, e.indices), ATOM
        raise BuildError(f"cannot generate code for expression node {type(e).__name__}: {e}")

    def _byte_as_float(self, byte: Cast) -> Optional[str]:
        """A float32 source for ``float32(byte)`` without the trip through integers, where
        ``byte`` converts a float32 within its range: ``T(int32(f))`` is ``trunc(f)`` and
        ``T(f)`` (saturating, rounded) is ``rint(f)``. A quantization read back at once (a
        QDQ pair inside one task: a residual block's convolution requantized, then
        dequantized for the add) spent six vector instructions per 16 values on it."""
        if not isinstance(byte, Cast):
            return None
        f = byte.value
        if isinstance(f, Cast) and f.dtype == "int32" and f.value.dtype == "float32" and _within(value_range(f.value), byte.dtype):
            return f"np.trunc({self.src(f.value)})"
        if f.dtype == "float32" and _within(value_range(f), byte.dtype):
            return f"np.rint({self.src(f)})"
        return None

    def affine_src(self, e: Expr) -> str:
        """Canonical affine text of an integer expression."""
        return self._affine(e)[0]

    def _affine(self, e: Expr) -> tuple:
        terms, c = linearize(e)
        parts = []
        first_prec = ATOM
        for atom, coef in terms.items():
            s, p = self._p(atom)
            if not parts:
                first_prec = p
            # a leading minus binds tighter than * // %: "-(i % 2) * 48", not "-i % 2 * 48"
            if p < 5 or (p < 6 and not parts and coef < 0):
                s = f"({s})"
            mag = abs(coef)
            text = s if mag == 1 else f"{s} * {mag}"
            parts.append((coef < 0, text))
        if not parts:
            return repr(c), (6 if c < 0 else ATOM)
        out = ("-" if parts[0][0] else "") + parts[0][1]
        for neg, text in parts[1:]:
            out += (" - " if neg else " + ") + text
        if c:
            out += (" - " if c < 0 else " + ") + repr(abs(c))
        if len(parts) == 1 and not c and not parts[0][0]:
            coef = next(iter(terms.values()))
            return out, (first_prec if coef == 1 else 5)
        if len(parts) == 1 and not c:
            return out, 5
        return out, 4
