"""The loop context of every store of a scheduled function, in linear (stride) form.

One walk over the statement tree yields a :class:`StoreContext` per :class:`Store` (block
bodies and block inits): the enclosing loops (outermost first, with the kind code generation
will give them), which of them drive reduction iterators, and every buffer access as one
linear form per dimension over those loops. Features (:mod:`.features`) are computed from
these contexts alone.

Index expressions are linearised directly over loop variables by composing each block
iterator's binding, instead of substituting and calling :func:`~probsched.schedule.analysis.affine`
(which rebuilds expressions and gives up on ``//`` and ``%``): the features need strides
and footprints of *every* access, fast, and an approximate slope is more useful than none.
``x // c`` divides the slopes by ``c`` (the mean stride of a fused loop) and ``x % c``
reduces integer slopes modulo ``c``; for affine indices the forms are exact.

>>> import probsched as ps
>>> A = ps.placeholder((8, 16), name="A")
>>> B = ps.compute((8, 16), lambda i, j: A[i, j] * 2.0, name="B")
>>> (ctx,) = store_contexts(ps.create_func([A, B]))
>>> [(l.name, l.extent) for l in ctx.loops]
[('i', 8), ('j', 16)]
>>> [(a.buffer.name, a.is_write, a.forms) for a in ctx.accesses]
[('B', True, (({'i': 1}, 0), ({'j': 1}, 0))), ('A', False, (({'i': 1}, 0), ({'j': 1}, 0)))]
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from ..ir.expr import BinOp, Cast, Const, Expr, Load, Select, Var, walk
from ..ir.stmt import Block, Buffer, Loop, PrimFunc, Store, iter_stmts

Form = Tuple[Dict[str, float], float]  # ({loop variable: slope}, constant)
UNROLL_PRAGMA = "pragma_auto_unroll_max_step"
_ZERO: Form = ({}, 0)


class LoopInfo(NamedTuple):
    """An enclosing loop as code generation runs it."""

    name: str
    extent: int
    kind: str  # serial | parallel | vectorized | unrolled
    reduce: bool  # drives a reduction iterator of the store's block


class Access(NamedTuple):
    """One access of a buffer: a linear form (over loop variables) per dimension."""

    buffer: Buffer
    is_write: bool
    forms: Tuple[Form, ...]


class Tensorized(NamedTuple):
    """A store inside a tensorized tile: the intrinsic, and where the tile loops start."""

    intrinsic: str
    tile_depth: int  # loops[tile_depth:] are the tile's loops
    axes: Tuple[str, ...]  # tile loop names in the description's iterator order


class StoreContext(NamedTuple):
    """A store with its loops (outermost first) and accesses (the write first)."""

    store: Store
    block: Block
    loops: Tuple[LoopInfo, ...]
    accesses: Tuple[Access, ...]
    is_init: bool
    unroll_step: int  # the largest enclosing pragma_auto_unroll_max_step (0: none)
    tensorized: Optional[Tensorized]


def linear(e: Expr, env: Dict[str, Form]) -> Form:
    """Linear form of an integer expression; ``env`` maps block iterators to their forms.

    >>> from probsched.ir.expr import Var
    >>> f, i = Var("f"), Var("i")
    >>> linear(f // 8 % 4 * 128 + i * 2 + 1, {})
    ({'f': 16.0, 'i': 2}, 1.0)
    """
    t = type(e)
    if t is Var:
        f = env.get(e.name)
        return f if f is not None else ({e.name: 1}, 0)
    if t is Const:
        v = e.value
        return ({}, v) if isinstance(v, (int, float)) and not isinstance(v, bool) else _ZERO
    if t is Cast:
        return linear(e.value, env)
    if t is Select:
        return linear(e.t, env)
    if t is not BinOp:
        return _ZERO  # a load used as an index: data-dependent
    op = e.op
    if op == "add" or op == "sub":
        (ca, ka), (cb, kb) = linear(e.a, env), linear(e.b, env)
        sign = 1 if op == "add" else -1
        out = dict(ca)
        for v, c in cb.items():
            out[v] = out.get(v, 0) + sign * c
        return out, ka + sign * kb
    if op == "mul":
        (ca, ka), (cb, kb) = linear(e.a, env), linear(e.b, env)
        if ca and not cb:
            return {v: c * kb for v, c in ca.items()}, ka * kb
        if cb and not ca:
            return {v: c * ka for v, c in cb.items()}, ka * kb
        if not ca and not cb:
            return {}, ka * kb
        return {v: c * max(1, kb) for v, c in ca.items()}, 0  # product of variables: rough slope
    if op == "floordiv" or op == "mod":
        ca, ka = linear(e.a, env)
        d = linear(e.b, env)[1] if not linear(e.b, env)[0] else 0
        if not d or d <= 0:
            return ca, ka
        if op == "floordiv":
            if all(isinstance(c, int) and c % d == 0 for c in ca.values()) and isinstance(ka, int):
                return {v: c // d for v, c in ca.items()}, ka // d
            return {v: c / d for v, c in ca.items()}, ka / d
        out = {v: (c % d if isinstance(c, int) else c) for v, c in ca.items()}
        return {v: c for v, c in out.items() if c}, (ka % d if isinstance(ka, int) else ka)
    if op == "min" or op == "max":
        return linear(e.a, env)
    return _ZERO  # comparisons and logic: not an address


def _accesses(store: Store, env: Dict[str, Form]) -> Tuple[Access, ...]:
    out = [Access(store.buffer, True, tuple(linear(ix, env) for ix in store.indices))]
    for x in walk(store.value):
        if type(x) is Load:
            out.append(Access(x.buffer, False, tuple(linear(ix, env) for ix in x.indices)))
    for ix in store.indices:  # indirect indices read too
        for x in walk(ix):
            if type(x) is Load:
                out.append(Access(x.buffer, False, tuple(linear(i, env) for i in x.indices)))
    return tuple(out)


def _tile_kinds(tensorized: Tensorized, loops: List[LoopInfo]) -> List[LoopInfo]:
    """A micro-kernel runs its tile register-blocked: the unit-stride axis as vectors, the
    other non-panel axes fully unrolled, the panel as a loop. Give the tile loops those kinds."""
    from .. import intrinsics

    try:
        intrin = intrinsics.get(tensorized.intrinsic)
    except Exception:  # an intrinsic registered in another process: keep the IR kinds
        return loops
    (dblk,) = intrin.description.blocks()
    unit = {a for axes in intrin.unit_stride.values() for a in axes}
    kind_of = {}
    for it, loop_name in zip(dblk.iters, tensorized.axes):
        name = it.var.name
        kind_of[loop_name] = "serial" if name == intrin.panel_axis else ("vectorized" if name in unit else "unrolled")
    return [LoopInfo(l.name, l.extent, kind_of.get(l.name, l.kind), l.reduce) if i >= tensorized.tile_depth else l for i, l in enumerate(loops)]


def _steps(s, memo: Dict[int, int]) -> int:
    """Leaf statements ``s`` executes, counted as :mod:`probsched.lowering.unroll` counts them."""
    if isinstance(s, tuple):
        return sum(_steps(x, memo) for x in s)
    key = id(s)
    n = memo.get(key)
    if n is None:
        if isinstance(s, Loop):
            n = s.extent * _steps(s.body, memo)
        elif isinstance(s, Block) and isinstance(s.body, tuple) and s.annotation("tensorize") is None:
            n = _steps(s.body, memo)
        else:
            n = 1
        memo[key] = n
    return n


def store_contexts(func: PrimFunc) -> List[StoreContext]:
    """A :class:`StoreContext` per store of ``func`` in program order (inits before bodies).

    Loop kinds are the ones code generation uses: ``pragma_auto_unroll_max_step`` is applied
    on the fly with :func:`~probsched.lowering.apply_unroll_pragmas`'s rule (a serial loop
    under the pragma whose body runs at most that many leaf statements is unrolled), which
    saves rebuilding the tree.
    """
    out: List[StoreContext] = []
    memo: Dict[int, int] = {}

    def visit(stmts, loops: List[Tuple[str, int, str]], env: Dict[str, Form], step: int, budget: int, tens: Optional[Tensorized]) -> None:
        for s in stmts:
            if isinstance(s, Loop):
                pragma = s.annotation(UNROLL_PRAGMA)
                inner_budget = budget
                if not budget and isinstance(pragma, int) and pragma > 0:
                    inner_budget = pragma
                kind = s.kind
                if inner_budget and kind == "serial" and _steps(s, memo) <= inner_budget:
                    kind = "unrolled"
                inner_step = max(step, pragma) if isinstance(pragma, int) else step
                visit(s.body, loops + [(s.name, s.extent, kind)], env, inner_step, inner_budget, tens)
            elif isinstance(s, Block):
                benv = dict(env)
                reduce_vars: set = set()
                for it, b in zip(s.iters, s.bindings):
                    form = linear(b, env)
                    benv[it.var.name] = form
                    if it.kind == "R":
                        reduce_vars.update(v for v, c in form[0].items() if c)
                if isinstance(s.body, tuple):
                    t, b = tens, budget
                    name = s.annotation("tensorize")
                    if name is not None:  # the unroll pass leaves a micro-kernel's tile alone
                        t, b = Tensorized(name, len(loops), tuple(s.annotation("tensorize_axes", ()))), 0
                    visit(s.body, loops, benv, step, b, t)
                    continue
                infos = [LoopInfo(nm, ext, kind, nm in reduce_vars) for nm, ext, kind in loops]
                if tens is not None:
                    infos = _tile_kinds(tens, infos)
                if s.init is not None and tens is None:  # a tile's init is the zero-start kernel's
                    init_loops = tuple(l for l in infos if not l.reduce)
                    for st in iter_stmts(s.init):
                        if isinstance(st, Store):
                            out.append(StoreContext(st, s, init_loops, _accesses(st, benv), True, step, tens))
                for st in iter_stmts(s.body):
                    if isinstance(st, Store):
                        out.append(StoreContext(st, s, tuple(infos), _accesses(st, benv), False, step, tens))

    visit(func.body, [], {}, 0, 0, None)
    return out
