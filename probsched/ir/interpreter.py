"""A slow, simple reference evaluator of loop-nest IR functions: the tests' oracle.

:func:`interpret` executes a :class:`~probsched.ir.stmt.PrimFunc` with plain Python loops
and numpy scalars, writing the output arrays in place. It shares no code with code
generation, so a scheduled kernel that agrees with it agrees with an independent reading
of the IR. Semantics (TVM's TensorIR):

- a block evaluates its bindings, then its predicate; when the predicate holds, every
  iterator must lie in ``[0, extent)``; ``init`` runs when all reduction iterators are 0;
- ``Select`` evaluates only the taken branch; ``and``/``or`` short-circuit;
- ``//`` and ``%`` follow Python's floor semantics; float32 arithmetic stays float32
  (numpy scalars); float results of division by zero are inf/nan, silently;
- bfloat16 buffers are ``ml_dtypes.bfloat16`` arrays: loads give bfloat16 scalars, which
  the IR widens to float32 before any arithmetic, and a store rounds to nearest even;
- 8-bit integer values are widened to int32 (Python ints) before any arithmetic; a
  conversion to them, or a store of a wider value, saturates (:mod:`.dtypes`);
- every load and store is bounds-checked (numpy would wrap negative indices silently);
- intermediate buffers (``global`` and ``local`` allocs) start filled with NaN (0 for
  integers), so a read before a write shows up in the result.

Each expression is compiled once into a Python closure over a flat list of variable slots
(lexically scoped: a block body sees only its own iterators), then the loops run.

>>> import numpy as np, probsched as ps
>>> A = ps.placeholder((2, 3), name="A")
>>> k = ps.reduce_axis(3, name="k")
>>> S = ps.compute((2,), lambda i: ps.sum(A[i, k] * A[i, k], axis=k), name="S")
>>> func = ps.create_func([A, S])
>>> a = np.arange(6, dtype="float32").reshape(2, 3)
>>> s = np.empty(2, dtype="float32")
>>> interpret(func, a, s)
>>> s
array([ 5., 50.], dtype=float32)
>>> evaluate(func, a)[0]
array([ 5., 50.], dtype=float32)

Lowered functions (``lowered=True``). Code generation compiles
:func:`probsched.lowering.lower`'s result, in which each compacted ``local`` buffer holds
only the tile one iteration of its allocation loop touches, indexed relative to the tile
start (written with the loop variables, so a lowered block body sees the enclosing loop
variables too). The loop is recorded in the function's
:data:`~probsched.ir.stmt.LOCAL_ALLOC_LOOPS` attribute, and the interpreter refills such a
buffer with NaN (0 for integers) at the start of every iteration of that loop: an element
read before this iteration wrote it is NaN, as a read before any write is in a full-size
buffer. Generated code (:mod:`probsched.codegen.emit`) keeps such a buffer either as
scalars, reset to 0 at the start of each iteration of the innermost loop around its
accesses (before that loop when it is unrolled), or as an array allocated once, outside
every serial loop (at the start of the function, a parallel body or a thread's chunk),
never initialised: at the start of an iteration its elements hold garbage or what an
earlier iteration left, another tile's values. The refill is the strictest of these, so a
program it passes is right whichever form codegen picks. It is stricter than the compiled
array where a leftover happens to be right (a copy-out that rewrites a whole row in every
iteration is right once the last iteration has run): such a program copies points that
this iteration did not compute, which ``reverse_compute_at`` is meant to refuse (see
:func:`~probsched.schedule.analysis.dense_box`). Other buffers keep one fill per call.

>>> from probsched.ir.expr import Var, eq
>>> from probsched.ir.stmt import LOCAL_ALLOC_LOOPS, Block, Buffer, Loop, PrimFunc, Store
>>> X, Y, T = Buffer("X", (2,)), Buffer("Y", (2,)), Buffer("T", (1,), scope="local")
>>> i = Var("i")
>>> once = Block("once", (), (), Store(T, (0,), X[0]), predicate=eq(i, 0))  # only when i == 0
>>> use = Block("use", (), (), Store(Y, (i,), T[0] * 2.0))
>>> f = PrimFunc("f", (X, Y), (Loop(i, 2, body=(once, use)),), allocs=(T,))
>>> evaluate(f, np.ones(2, "float32"), lowered=True)[0]  # T lives the whole call
array([2., 2.], dtype=float32)
>>> g = f.replace(attrs={LOCAL_ALLOC_LOOPS: (("T", "i"),)})  # T lives one iteration of i
>>> evaluate(g, np.ones(2, "float32"), lowered=True)[0]
array([ 2., nan], dtype=float32)

Checking a schedule the way it is compiled: ``evaluate(lower(sch.mod), *inputs, lowered=True)``.
"""

from __future__ import annotations

import math
import operator
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import IRError, KernelArgumentError
from .dtypes import DTYPES, NARROW_INT_DTYPES, is_float, numpy_dtype, saturate
from .expr import BinOp, Call, Cast, Const, Expr, Load, Not, Select, Var
from .stmt import LOCAL_ALLOC_LOOPS, Block, Buffer, Loop, PrimFunc, Store, StmtLike

__all__ = ["interpret", "evaluate", "register_stmt_interpreter", "Compiler"]

Env = List[object]
ExprFn = Callable[[Env], object]
StmtFn = Callable[[Env], None]

_NUMPY_DTYPE = {d: numpy_dtype(d).type for d in DTYPES}


def _nan_max(a, b):
    # NaN-propagating, like numpy.maximum, so an uninitialised read is never hidden.
    return a if (a >= b or a != a) else b


def _nan_min(a, b):
    return a if (a <= b or a != a) else b


_BINARY: Dict[str, Callable] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
    "min": _nan_min,
    "max": _nan_max,
}


def _math_fn(name: str, dtype: str) -> Callable:
    if name == "abs":
        return abs
    if name == "sigmoid":
        one = _NUMPY_DTYPE[dtype](1)
        return lambda x: one / (one + np.exp(-x))
    if name == "erf":
        cast = _NUMPY_DTYPE[dtype]
        return lambda x: cast(math.erf(x))
    if name == "pow":
        return np.power
    try:
        return {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "rint": np.rint}[name]
    except KeyError:
        raise IRError(f"interpreter: unknown math function {name!r}") from None


def _cast_fn(dtype: str) -> Callable:
    if is_float(dtype):
        return _NUMPY_DTYPE[dtype]
    if dtype in ("int32", "int64"):
        return int  # Python int: truncation toward zero, like a C cast
    if dtype in NARROW_INT_DTYPES:
        return lambda v: saturate(dtype, v)[()]  # rounded and clamped (see .dtypes)
    return bool


def _tuple_fn(fns: Sequence[ExprFn], slots: Sequence[Optional[int]]) -> Callable[[Env], tuple]:
    """A closure building the tuple of ``fns``' values.

    ``slots[i]`` is the environment slot when expression ``i`` is a bare variable: an
    all-variable tuple is then one C-level ``itemgetter`` call (the common unscheduled case).
    """
    if not fns and not slots:
        return lambda env: ()
    if all(s is not None for s in slots):
        if len(slots) == 1:
            (s0,) = slots
            return lambda env: (env[s0],)
        return operator.itemgetter(*slots)
    if len(fns) == 1:
        (f0,) = fns
        return lambda env: (f0(env),)
    if len(fns) == 2:
        f0, f1 = fns
        return lambda env: (f0(env), f1(env))
    if len(fns) == 3:
        f0, f1, f2 = fns
        return lambda env: (f0(env), f1(env), f2(env))
    if len(fns) == 4:
        f0, f1, f2, f3 = fns
        return lambda env: (f0(env), f1(env), f2(env), f3(env))
    return lambda env: tuple([f(env) for f in fns])


def _index_error(buf: Buffer, idx: tuple, what: str) -> IRError:
    return IRError(f"interpreter: {what} {buf.name}{list(idx)} is out of bounds for shape {buf.shape}")


# Extension point for statement kinds defined elsewhere (e.g. tensor-intrinsic calls).
_STMT_INTERPRETERS: Dict[type, Callable[[object, "Compiler", Dict[str, int]], StmtFn]] = {}


def register_stmt_interpreter(cls: type, compile_fn: Callable[[object, "Compiler", Dict[str, int]], StmtFn]) -> None:
    """Teach the interpreter a new statement class.

    ``compile_fn(stmt, compiler, scope)`` returns a closure ``run(env)``; use
    ``compiler.expr(e, scope)`` for expressions and ``compiler.arrays[name]`` for buffers.
    """
    _STMT_INTERPRETERS[cls] = compile_fn


class Compiler:
    """Compiles statements and expressions of one function into closures over ``arrays``.

    ``scope`` maps the variable names visible at a point to their slot in the environment
    list; each binding site gets a fresh slot, so shadowing and reuse of names are safe.

    ``lowered``: block bodies also see the enclosing loop variables (lowered form, see
    :func:`interpret`); ``refills`` maps a loop name to the buffers whose array is reset to
    its fresh fill at the start of every iteration of that loop.
    """

    def __init__(
        self,
        arrays: Dict[str, np.ndarray],
        lowered: bool = False,
        refills: Optional[Dict[str, Sequence[Buffer]]] = None,
    ) -> None:
        self.arrays = arrays
        self.lowered = lowered
        self.refills = refills or {}
        self.n_slots = 0
        self.loop_extent: Dict[int, int] = {}  # slot of a loop variable -> its extent

    def new_slot(self) -> int:
        """A fresh environment slot."""
        self.n_slots += 1
        return self.n_slots - 1

    # ------------------------------------------------------------------ expressions
    @staticmethod
    def slot_of(e: Expr, scope: Dict[str, int]) -> Optional[int]:
        """The slot of ``e`` when it is a bound bare variable, else None."""
        return scope.get(e.name) if isinstance(e, Var) else None

    def values(self, exprs: Sequence[Expr], scope: Dict[str, int]) -> Callable[[Env], tuple]:
        """A closure evaluating ``exprs`` to a tuple (e.g. buffer indices)."""
        return _tuple_fn([self.expr(e, scope) for e in exprs], [self.slot_of(e, scope) for e in exprs])

    def expr(self, e: Expr, scope: Dict[str, int]) -> ExprFn:
        """A closure evaluating ``e`` in an environment laid out by ``scope``."""
        if isinstance(e, Var):
            try:
                slot = scope[e.name]
            except KeyError:
                raise IRError(
                    f"interpreter: variable {e.name} is used where it is not bound "
                    f"(visible: {sorted(scope)})"
                ) from None
            return lambda env: env[slot]
        if isinstance(e, Const):
            v = _NUMPY_DTYPE[e.dtype](e.value) if is_float(e.dtype) else e.value
            return lambda env: v
        if isinstance(e, BinOp):
            return self._binop(e, scope)
        if isinstance(e, Not):
            fa = self.expr(e.a, scope)
            return lambda env: not fa(env)
        if isinstance(e, Select):
            fc, ft, ff = (self.expr(x, scope) for x in (e.cond, e.t, e.f))
            return lambda env: ft(env) if fc(env) else ff(env)
        if isinstance(e, Load):
            return self._load(e, scope)
        if isinstance(e, Cast):
            fv, conv = self.expr(e.value, scope), _cast_fn(e.dtype)
            return lambda env: conv(fv(env))
        if isinstance(e, Call):
            fn = _math_fn(e.name, e.dtype)
            if len(e.args) == 2:
                fa, fb = (self.expr(a, scope) for a in e.args)
                return lambda env: fn(fa(env), fb(env))
            (fa,) = (self.expr(a, scope) for a in e.args)
            return lambda env: fn(fa(env))
        raise IRError(f"interpreter: cannot evaluate expression node {type(e).__name__}")

    def _binop(self, e: BinOp, scope: Dict[str, int]) -> ExprFn:
        fa, fb = self.expr(e.a, scope), self.expr(e.b, scope)
        if e.op == "and":
            return lambda env: bool(fa(env)) and bool(fb(env))
        if e.op == "or":
            return lambda env: bool(fa(env)) or bool(fb(env))
        op = _BINARY[e.op]
        # Float operands are always numpy scalars of the node's dtype (loads, constants,
        # casts and calls all produce them), so numpy keeps float32 arithmetic in float32.
        if isinstance(e.b, Const):
            c = e.b.value
            return lambda env: op(fa(env), c)
        return lambda env: op(fa(env), fb(env))

    def _array(self, buf: Buffer) -> np.ndarray:
        try:
            return self.arrays[buf.name]
        except KeyError:
            raise IRError(f"interpreter: buffer {buf.name} is neither a parameter nor an allocation") from None

    def _load(self, e: Load, scope: Dict[str, int]) -> ExprFn:
        arr, buf = self._array(e.buffer), e.buffer
        index = self.values(e.indices, scope)

        def load(env):
            idx = index(env)
            # numpy wraps negative indices silently and raises on too-large ones.
            if min(idx) < 0:
                raise _index_error(buf, idx, "load from")
            try:
                return arr[idx]
            except IndexError:
                raise _index_error(buf, idx, "load from") from None

        return load

    # ------------------------------------------------------------------ statements
    def stmt(self, s: StmtLike, scope: Dict[str, int]) -> StmtFn:
        """A closure executing ``s`` (a statement or a tuple of them)."""
        if isinstance(s, tuple):
            fns = [self.stmt(x, scope) for x in s]
            if len(fns) == 1:
                return fns[0]

            def seq(env):
                for f in fns:
                    f(env)

            return seq
        if isinstance(s, Loop):
            return self._loop(s, scope)
        if isinstance(s, Block):
            return self._block(s, scope)
        if isinstance(s, Store):
            return self._store(s, scope)
        for cls, compile_fn in _STMT_INTERPRETERS.items():
            if isinstance(s, cls):
                return compile_fn(s, self, scope)
        raise IRError(
            f"interpreter: cannot execute statement {type(s).__name__}; "
            "register it with register_stmt_interpreter"
        )

    def _loop(self, s: Loop, scope: Dict[str, int]) -> StmtFn:
        slot = self.new_slot()
        self.loop_extent[slot] = s.extent
        body = self.stmt(s.body, {**scope, s.var.name: slot})
        extent = s.extent
        refills = [(self._array(b), _fill_value(b)) for b in self.refills.get(s.name, ())]
        if refills:

            def loop_with_refills(env):  # a compacted local's tile lives one iteration
                for v in range(extent):
                    env[slot] = v
                    for arr, fill in refills:
                        arr.fill(fill)
                    body(env)

            return loop_with_refills

        def loop(env):  # parallel/vectorized/unrolled loops run serially: same result
            for v in range(extent):
                env[slot] = v
                body(env)

        return loop

    def _store(self, s: Store, scope: Dict[str, int]) -> StmtFn:
        arr, buf = self._array(s.buffer), s.buffer
        index = self.values(s.indices, scope)
        value = self.expr(s.value, scope)
        if buf.dtype in NARROW_INT_DTYPES and s.value.dtype != buf.dtype:  # a narrowing store saturates
            value = (lambda v, conv: lambda env: conv(v(env)))(value, _cast_fn(buf.dtype))

        def store(env):
            idx = index(env)
            if min(idx) < 0:
                raise _index_error(buf, idx, "store to")
            try:
                arr[idx] = value(env)
            except IndexError:
                raise _index_error(buf, idx, "store to") from None

        return store

    def _block(self, b: Block, scope: Dict[str, int]) -> StmtFn:
        n = len(b.iters)
        first = self.n_slots
        slots = [self.new_slot() for _ in b.iters]  # consecutive: bound with one slice store
        values = self.values(b.bindings, scope)
        inner = {it.var.name: s for it, s in zip(b.iters, slots)}
        # The predicate guards the bindings: it may use enclosing loops and the iterators.
        pred = None if (isinstance(b.predicate, Const) and b.predicate.value is True) else self.expr(
            b.predicate, {**scope, **inner}
        )
        # A block body sees its iterators only (TensorIR), which catches stale loop variables;
        # lowering rewrites compacted locals' indices with the loop variables (codegen keeps
        # them in scope), so a lowered body sees both, its iterators shadowing.
        body_scope = {**scope, **inner} if self.lowered else inner
        body = self.stmt(b.body, body_scope)
        init = None if b.init is None else self.stmt(b.init, body_scope)
        r_slots = [s for it, s in zip(b.iters, slots) if it.kind == "R"]
        r_values = _tuple_fn([], r_slots)
        r_zero = (0,) * len(r_slots)
        # Iterators bound to a whole loop of the same extent need no domain check.
        checks = [
            (s, it)
            for s, it, x in zip(slots, b.iters, b.bindings)
            if self.loop_extent.get(self.slot_of(x, scope)) != it.extent
        ]
        name = b.name

        def block(env):
            env[first : first + n] = values(env)
            if pred is not None and not pred(env):
                return
            for s, it in checks:
                if not 0 <= env[s] < it.extent:
                    raise IRError(
                        f"interpreter: block {name}: iterator {it.var.name} = {env[s]} is outside [0, {it.extent})"
                    )
            if init is not None and r_values(env) == r_zero:
                init(env)
            body(env)

        return block


def _fill_value(buf: Buffer):
    """What an unwritten element of ``buf`` holds: NaN, or 0 (False) for integers (booleans)."""
    return np.nan if is_float(buf.dtype) else 0


def _fresh(buf: Buffer) -> np.ndarray:
    return np.full(buf.shape, _fill_value(buf), dtype=numpy_dtype(buf.dtype))


def _refills(func: PrimFunc, lowered: bool) -> Dict[str, List[Buffer]]:
    """Loop name -> the compacted local buffers that live one iteration of it."""
    recorded = func.attr(LOCAL_ALLOC_LOOPS, ())
    if recorded and not lowered:
        # its indices are relative to a tile: run without lifetimes, a stale tile would pass
        raise IRError(
            f"interpreter: {func.name} is a lowered function (attribute {LOCAL_ALLOC_LOOPS}); "
            "interpret it with lowered=True"
        )
    locals_ = {b.name: b for b in func.allocs if b.scope == "local"}
    loops = {lp.name for lp in func.loops()}
    out: Dict[str, List[Buffer]] = {}
    for name, loop in recorded:
        if name not in locals_ or (loop is not None and loop not in loops):
            raise IRError(
                f"interpreter: {func.name}: attribute {LOCAL_ALLOC_LOOPS} names local buffer {name} "
                f"under loop {loop}, which the function does not have"
            )
        if loop is not None:  # at the root: filled once per call, like every allocation
            out.setdefault(loop, []).append(locals_[name])
    return out


def interpret(func: PrimFunc, *arrays: np.ndarray, lowered: bool = False) -> None:
    """Run ``func`` on ``arrays`` (one per parameter, in order); outputs are written in place.

    ``lowered=True`` runs a function in lowered form (:func:`probsched.lowering.lower`'s
    result) with the lifetimes of its compacted local buffers: see the module doc.
    """
    if len(arrays) != len(func.params):
        raise KernelArgumentError(
            f"{func.name} takes {len(func.params)} arrays ({', '.join(b.name for b in func.params)}), "
            f"got {len(arrays)}"
        )
    mem: Dict[str, np.ndarray] = {}
    for buf, a in zip(func.params, arrays):
        if not isinstance(a, np.ndarray) or a.shape != buf.shape or a.dtype != numpy_dtype(buf.dtype):
            got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
            raise KernelArgumentError(f"{func.name}: parameter {buf} got {got}")
        mem[buf.name] = a
    refills = _refills(func, lowered)
    for buf in func.allocs:
        mem[buf.name] = _fresh(buf)
    compiler = Compiler(mem, lowered=lowered, refills=refills)
    run = compiler.stmt(func.body, {})
    env: Env = [None] * compiler.n_slots
    with np.errstate(all="ignore"):
        run(env)


def evaluate(func: PrimFunc, *inputs: np.ndarray, lowered: bool = False) -> Tuple[np.ndarray, ...]:
    """Run ``func`` on its input arrays and return fresh output arrays (NaN-filled before);
    ``lowered`` as for :func:`interpret`."""
    outs = {b.name for b in func.output_buffers()}
    n_in = sum(1 for b in func.params if b.name not in outs)
    if len(inputs) != n_in:
        raise KernelArgumentError(f"{func.name} takes {n_in} input arrays, got {len(inputs)}")
    it = iter(inputs)
    args = [_fresh(b) if b.name in outs else next(it) for b in func.params]
    interpret(func, *args, lowered=lowered)
    return tuple(a for b, a in zip(func.params, args) if b.name in outs)
