"""Integer analysis for schedule primitives: affine forms, interval bounds, access regions.

>>> from probsched.ir.expr import Var
>>> i0, i1, k = Var("i_0"), Var("i_1"), Var("k")
>>> print(simplify((i0 * 4 + i1) * 16 + k))
i_0 * 64 + i_1 * 16 + k
>>> bound(i1 * 16 + k, {"i_1": (0, 3), "k": (0, 15)})
(0, 63)
>>> start, extent = region(i0 * 16 + i1 + k, fixed={"i_0"}, ranges={"i_1": (0, 15), "k": (0, 2)})
>>> print(start, extent)
i_0 * 16 18
"""

from __future__ import annotations

import functools
from typing import Collection, Dict, Optional, Sequence, Set, Tuple

from ..ir.expr import INT_DTYPES, BinOp, Cast, Const, Expr, ExprLike, Select, Var, as_expr, binary, children, free_vars, rebuild, substitute

Affine = Tuple[Dict[str, int], int]
Interval = Tuple[int, int]


def affine(e: Expr) -> Optional[Affine]:
    """``e`` as ({var: coefficient}, constant) when it is affine in its variables, else None."""
    if isinstance(e, Var):
        return {e.name: 1}, 0
    if isinstance(e, Const):
        if e.dtype in INT_DTYPES:
            return {}, int(e.value)
        return None
    if isinstance(e, Cast) and e.dtype in INT_DTYPES and e.value.dtype in INT_DTYPES:
        return affine(e.value)
    if isinstance(e, BinOp) and e.dtype in INT_DTYPES:
        if e.op in ("add", "sub"):
            a, b = affine(e.a), affine(e.b)
            if a is None or b is None:
                return None
            sign = 1 if e.op == "add" else -1
            coefs = dict(a[0])
            for v, c in b[0].items():
                coefs[v] = coefs.get(v, 0) + sign * c
            return {v: c for v, c in coefs.items() if c != 0}, a[1] + sign * b[1]
        if e.op == "mul":
            a, b = affine(e.a), affine(e.b)
            if a is None or b is None:
                return None
            if not a[0]:
                a, b = b, a
            if b[0]:
                return None  # product of two variables
            k = b[1]
            return {v: c * k for v, c in a[0].items() if c * k != 0}, a[1] * k
    return None


def affine_in(e: Expr, names: Collection[str]) -> Optional[Dict[str, int]]:
    """Coefficients of the variables ``names`` when ``e`` is affine in them, else None.

    Sub-expressions free of ``names`` are opaque constants, so a fused outer loop's
    ``f // 4`` does not hide that ``f // 4 * 16 + j`` has stride 1 along ``j``.

    >>> from probsched.ir.expr import Var
    >>> f, j = Var("f", "int64"), Var("j", "int64")
    >>> affine_in(f // 4 * 16 + j * 2, {"j"})
    {'j': 2}
    >>> affine_in(j // 4, {"j"}) is None
    True
    """
    names = set(names)
    if not (free_vars(e) & names):
        return {}
    if isinstance(e, Var):
        return {e.name: 1}
    if isinstance(e, Cast) and e.dtype in INT_DTYPES and e.value.dtype in INT_DTYPES:
        return affine_in(e.value, names)
    if isinstance(e, BinOp) and e.dtype in INT_DTYPES:
        if e.op in ("add", "sub"):
            a, b = affine_in(e.a, names), affine_in(e.b, names)
            if a is None or b is None:
                return None
            sign = 1 if e.op == "add" else -1
            out = dict(a)
            for v, c in b.items():
                out[v] = out.get(v, 0) + sign * c
            return {v: c for v, c in out.items() if c != 0}
        if e.op == "mul":
            a, b = affine_in(e.a, names), affine_in(e.b, names)
            if a is None or b is None:
                return None
            if not a:
                a, b, other = b, a, e.a
            else:
                other = e.b
            if b or not isinstance(other, Const):
                return None  # product of two tile variables, or by a runtime value
            return {v: c * int(other.value) for v, c in a.items() if c * int(other.value) != 0}
    return None


def conjuncts(e: Expr) -> list:
    """The terms of a conjunction (``a and b and c`` -> ``[a, b, c]``; ``True`` -> ``[]``):
    the guards of a block predicate one by one.

    >>> from probsched.ir.expr import Var, all_of
    >>> i, j = Var("i"), Var("j")
    >>> [str(c) for c in conjuncts(all_of(i < 4, j < 3))]
    ['i < 4', 'j < 3']
    """
    if isinstance(e, BinOp) and e.op == "and":
        return conjuncts(e.a) + conjuncts(e.b)
    if isinstance(e, Const) and e.value is True:
        return []
    return [e]


def is_multiple(e: Expr, d: int) -> bool:
    """True when the integer expression ``e`` is a multiple of ``d`` for every value of its
    variables (a sufficient check: sums and products of multiples, ``x * (k * d)``).

    >>> from probsched.ir.expr import Var
    >>> f, j = Var("f", "int64"), Var("j", "int64")
    >>> is_multiple(f % 3 * 6 + j * 12, 6), is_multiple(f % 3 * 6 + j, 6)
    (True, False)
    """
    if d == 1:
        return True
    if isinstance(e, Const):
        return e.dtype in INT_DTYPES and int(e.value) % d == 0
    if isinstance(e, Cast) and e.dtype in INT_DTYPES:
        return is_multiple(e.value, d)
    if isinstance(e, BinOp) and e.dtype in INT_DTYPES:
        if e.op in ("add", "sub"):
            return is_multiple(e.a, d) and is_multiple(e.b, d)
        if e.op == "mul":
            return is_multiple(e.a, d) or is_multiple(e.b, d)
    return False


def from_affine(form: Affine, order: Optional[list] = None) -> Expr:
    """Rebuild an expression from an affine form (variables in ``order`` when given)."""
    coefs, c = form
    names = list(coefs)
    if order:
        rank = {n: i for i, n in enumerate(order)}
        names.sort(key=lambda n: rank.get(n, len(rank)))
    out: Expr = Const(0, "int64")
    for n in names:
        k = coefs[n]
        term = Var(n) if k == 1 else Var(n) * k
        out = out + term
    return out + c


def dense_box(indices: Sequence[Expr], ranges: Dict[str, Interval]) -> bool:
    """True when the points ``indices`` take as the variables of ``ranges`` vary fill their
    bounding box (no holes), which a consumer moved over that box relies on; other
    variables are held fixed. Sufficient test: each dimension affine in the varying
    variables with coefficients that leave no gap (sorted by size, each at most one more than
    the span of the smaller ones), and no variable shared by two dimensions (a diagonal).

    >>> from probsched.ir.expr import Var
    >>> i, j, f = Var("i", "int64"), Var("j", "int64"), Var("f", "int64")
    >>> r = {"i": (0, 3), "j": (0, 1)}
    >>> dense_box([f * 8 + i * 2 + j], r), dense_box([i * 2], r), dense_box([i, i], r)
    (True, False, False)
    """
    varying = {v for v, (lo, hi) in ranges.items() if hi > lo}
    seen: set = set()
    for e in indices:
        coefs = affine_in(e, varying)
        if coefs is None or seen & set(coefs):
            return False
        seen |= set(coefs)
        span = 0
        for c, (lo, hi) in sorted((abs(c), ranges[v]) for v, c in coefs.items()):
            if c > span + 1:
                return False
            span += c * (hi - lo)
    return True


# Memoized: expressions are immutable and hash structurally, and a search round simplifies
# the same index expressions over and over (hundreds of thousands of calls in a round).
def simplify(e: Expr, ranges: Optional[Dict[str, Interval]] = None) -> Expr:
    """Canonical affine form of integer sub-expressions (keeps variable first-use order).

    With ``ranges`` (inclusive bounds of some variables), a division or remainder of an
    affine expression by a constant ``d`` splits it into the terms that are multiples of
    ``d`` and the rest; when the rest provably lies in ``[0, d)`` the division is the
    multiples' quotient and the remainder is the rest. That is what a split loop's index
    ``(ko * 64 + ki) // 64`` becomes (``ko``) when ``ki < 64``: a weight laid out for its
    tiles (:mod:`probsched.schedule.layout`) is read without a division.

    >>> from probsched.ir.expr import Var
    >>> ko, ki = Var("ko"), Var("ki")
    >>> print(simplify((ko * 64 + ki) // 64, {"ki": (0, 63)}), simplify((ko * 64 + ki) % 64, {"ki": (0, 63)}))
    ko ki
    >>> print(simplify((ko * 64 + ki) // 64))
    (ko * 64 + ki) // 64
    """
    return _simplify(e, None if ranges is None else tuple(sorted(ranges.items())))


@functools.lru_cache(maxsize=1 << 16)
def _simplify(e: Expr, range_items: Optional[tuple]) -> Expr:
    ranges = None if range_items is None else dict(range_items)
    form = affine(e)
    if form is not None:
        order = []
        _var_order(e, order)
        return from_affine(form, order)
    if isinstance(e, BinOp) and e.dtype in INT_DTYPES:
        a, b = _simplify(e.a, range_items), _simplify(e.b, range_items)
        if e.op in ("floordiv", "mod") and isinstance(b, Const) and b.value > 0:
            fa = affine(a)
            d = int(b.value)
            if fa is not None:
                whole = {v: c for v, c in fa[0].items() if c % d == 0}
                rest = {v: c for v, c in fa[0].items() if c % d != 0}
                c_whole, c_rest = fa[1] - fa[1] % d, fa[1] % d
                rb = (c_rest, c_rest) if not rest else (bound(from_affine((rest, c_rest)), ranges) if ranges else None)
                if rb is not None and 0 <= rb[0] and rb[1] < d:
                    order: list = []
                    _var_order(a, order)
                    if e.op == "floordiv":
                        return from_affine(({v: c // d for v, c in whole.items()}, c_whole // d), order)
                    return from_affine((rest, c_rest), order)
        return binary(e.op, a, b)
    return e


def _var_order(e: Expr, out: list) -> None:
    from ..ir.expr import walk

    for x in walk(e):
        if isinstance(x, Var) and x.name not in out:
            out.append(x.name)


def bound(e: Expr, ranges: Dict[str, Interval]) -> Optional[Interval]:
    """Inclusive integer bounds of ``e`` over variable ranges, or None when unknown."""
    if isinstance(e, Var):
        return ranges.get(e.name)
    if isinstance(e, Const):
        if e.dtype in INT_DTYPES or e.dtype == "bool":
            v = int(e.value)
            return v, v
        return None
    if isinstance(e, Cast):
        return bound(e.value, ranges) if e.dtype in INT_DTYPES else None
    if isinstance(e, Select):
        t, f = bound(e.t, ranges), bound(e.f, ranges)
        if t is None or f is None:
            return None
        return min(t[0], f[0]), max(t[1], f[1])
    if not isinstance(e, BinOp):
        return None
    a, b = bound(e.a, ranges), bound(e.b, ranges)
    if a is None or b is None:
        return None
    op = e.op
    if op == "add":
        return a[0] + b[0], a[1] + b[1]
    if op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        ps = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
        return min(ps), max(ps)
    if op == "floordiv":
        if b[0] == b[1] and b[0] > 0:
            return a[0] // b[0], a[1] // b[0]
        return None
    if op == "mod":
        if b[0] == b[1] and b[0] > 0:
            c = b[0]
            if a[0] // c == a[1] // c:
                return a[0] % c, a[1] % c
            return 0, c - 1
        return None
    if op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if op in ("lt", "le", "gt", "ge", "eq", "ne", "and", "or"):
        return 0, 1
    return None


def region(e: Expr, fixed: Set[str], ranges: Dict[str, Interval]) -> Optional[Tuple[Expr, int]]:
    """The values of ``e`` when ``fixed`` variables are held and the others span ``ranges``.

    Returns ``(start, extent)``: ``start`` an expression of the fixed variables, ``extent`` a
    constant that covers every value (possibly over-approximated), or None when unknown.
    """
    names = free_vars(e)
    if not (names & fixed):
        b = bound(e, ranges)
        return None if b is None else (Const(b[0], "int64"), b[1] - b[0] + 1)
    form = affine(e)
    if form is None:
        table: Dict[Expr, Var] = {}
        hidden = _opaque(e, table, fixed)
        if table:
            r = region(hidden, fixed | {v.name for v in table.values()}, ranges)
            return None if r is None else (substitute(r[0], {v.name: x for x, v in table.items()}), r[1])
    if form is not None:
        coefs, c = form
        fixed_part = ({v: k for v, k in coefs.items() if v in fixed}, c)
        inner = from_affine(({v: k for v, k in coefs.items() if v not in fixed}, 0))
        b = bound(inner, ranges)
        if b is None:
            return None
        order: list = []
        _var_order(e, order)
        start = from_affine((fixed_part[0], fixed_part[1] + b[0]), order)
        return start, b[1] - b[0] + 1
    if isinstance(e, BinOp) and e.op == "floordiv" and isinstance(e.b, Const) and e.b.value > 0:
        inner = region(e.a, fixed, ranges)
        if inner is None:
            return None
        start, extent = inner
        d = int(e.b.value)
        fs = affine(start)
        aligned = fs is not None and all(k % d == 0 for k in fs[0].values()) and fs[1] % d == 0
        ext = (extent - 1) // d + 1 if aligned else (extent - 1) // d + 2
        return simplify(start // d), ext
    if isinstance(e, BinOp) and e.op == "mod" and isinstance(e.b, Const) and e.b.value > 0:
        return Const(0, "int64"), int(e.b.value)
    return None


def _opaque(e: Expr, table: Dict[Expr, Var], keep: Optional[Set[str]] = None) -> Expr:
    """``e`` with its maximal non-affine integer parts (``f // 3 * 4``'s ``f // 3``, a load)
    replaced by placeholder variables, equal parts by the same one; with ``keep``, only
    parts whose variables are all in ``keep``. A tile start under a fused loop is such a
    part: held fixed, it is one more variable of an affine index.

    >>> f, i = Var("f"), Var("i")
    >>> t = {}
    >>> print(_opaque(f // 3 * 4 + i, t), list(t.values()))
    _ps_opaque0 * 4 + i [<Var _ps_opaque0>]
    """
    if e.dtype not in INT_DTYPES or affine(e) is not None:
        return e
    if isinstance(e, BinOp) and e.op in ("add", "sub", "mul"):
        return binary(e.op, _opaque(e.a, table, keep), _opaque(e.b, table, keep))
    names = free_vars(e)
    if keep is not None and not (names and names <= keep):
        kids = children(e)
        return rebuild(e, [_opaque(k, table, keep) for k in kids]) if kids else e
    if e not in table:
        table[e] = Var(f"_ps_opaque{len(table)}", e.dtype)
    return table[e]


def union(r1: Tuple[Expr, int], r2: Tuple[Expr, int]) -> Optional[Tuple[Expr, int]]:
    """Smallest region covering both when their starts differ by a constant, else None."""
    table: Dict[Expr, Var] = {}
    f1, f2 = affine(_opaque(r1[0], table)), affine(_opaque(r2[0], table))
    if f1 is None or f2 is None or f1[0] != f2[0]:
        return None
    d = f2[1] - f1[1]
    if d >= 0:
        return r1[0], max(r1[1], d + r2[1])
    return r2[0], max(r2[1], -d + r1[1])


def always_true(cond: Expr, ranges: Dict[str, Interval]) -> bool:
    """True when a comparison holds for every value in ``ranges`` (False = unknown)."""
    if isinstance(cond, Const):
        return bool(cond.value)
    if isinstance(cond, BinOp) and cond.op == "and":
        return always_true(cond.a, ranges) and always_true(cond.b, ranges)
    if isinstance(cond, BinOp) and cond.op in ("lt", "le", "gt", "ge"):
        a, b = bound(cond.a, ranges), bound(cond.b, ranges)
        if a is None or b is None:
            return False
        if cond.op == "lt":
            return a[1] < b[0]
        if cond.op == "le":
            return a[1] <= b[0]
        if cond.op == "gt":
            return a[0] > b[1]
        return a[0] >= b[1]
    return False


def as_index(x: ExprLike) -> Expr:
    """An int or expression as an int64 expression."""
    return as_expr(x, "int64")
