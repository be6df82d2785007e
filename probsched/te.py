"""The tensor-expression front end: placeholders, computes, reductions, and lowering.

A program is written as tensors; :func:`create_func` lowers them to the loop-nest IR, one
block per compute stage, with a loop per axis (spatial first, then reduction).

>>> import probsched as ps
>>> A = ps.placeholder((4, 8), name="A")
>>> B = ps.placeholder((8, 3), name="B")
>>> k = ps.reduce_axis(8, name="k")
>>> C = ps.compute((4, 3), lambda i, j: ps.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> print(ps.create_func([A, B, C], name="mm"))
def mm(A: float32[4, 8], B: float32[8, 3], C: float32[4, 3]):
    for i in range(4):
        for j in range(3):
            for k in range(8):
                with block("C", v_i=S(4, i), v_j=S(3, j), v_k=R(8, k)):
                    init: C[v_i, v_j] = 0.0
                    C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]
"""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import Callable, Optional, Sequence, Union

import numpy as np

from .errors import FrontEndError, IRError
from .ir.expr import (
    BOOL,
    FLOAT_DTYPES,
    INT_DTYPES,
    NARROW_INT_DTYPES,
    Const,
    Expr,
    ExprLike,
    Load,
    Var,
    as_expr,
    binary,
    free_vars,
    if_then_else,
    loads,
    substitute,
    walk,
)
from .ir.dtypes import INT_RANGE, numpy_dtype
from .ir.stmt import Block, Buffer, IterVar, Loop, PrimFunc, Store

# Buffers belong to exactly one tensor; loads reference the buffer object itself. While a
# compute's body is being built, every tensor indexed is recorded (strongly) so the compute
# keeps its inputs alive even when they were temporaries.
_TENSOR_OF_BUFFER: "weakref.WeakValueDictionary[int, Tensor]" = weakref.WeakValueDictionary()
_INDEXED = threading.local()


class Tensor:
    """A placeholder (input) or a computed tensor. Index it to read: ``A[i, k]``."""

    def __init__(self, buffer: Buffer, op: Optional["ComputeOp"]) -> None:
        self.buffer = buffer
        self.op = op
        _TENSOR_OF_BUFFER[id(buffer)] = self

    @property
    def name(self) -> str:
        """The tensor's (and buffer's) name."""
        return self.buffer.name

    @property
    def shape(self) -> tuple:
        """The shape."""
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        """The element type."""
        return self.buffer.dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.buffer.shape)

    def __getitem__(self, indices) -> Load:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise FrontEndError(
                f"tensor {self.name} has {self.ndim} dimensions (shape {self.shape}) but is "
                f"indexed with {len(indices)} indices"
            )
        stack = getattr(_INDEXED, "stack", None)
        if stack:
            stack[-1][id(self.buffer)] = self
        try:
            return Load(self.buffer, indices)
        except IRError as exc:
            raise FrontEndError(f"tensor {self.name}: {exc}") from None

    def __repr__(self) -> str:
        kind = "placeholder" if self.op is None else "compute"
        return f"Tensor({self.name}, {kind}, shape={self.shape}, dtype={self.dtype})"


class ReduceAxis(Var):
    """A reduction axis over ``[lo, lo + extent)``; use it like an index variable."""

    __slots__ = ("lo", "extent")
    _fields = ("name", "dtype", "lo", "extent")

    def __init__(self, name: str, lo: int, extent: int) -> None:
        super().__init__(name)
        object.__setattr__(self, "lo", int(lo))
        object.__setattr__(self, "extent", int(extent))


class Reduce(Expr):
    """A reduction (front end only): the whole body of a compute, lowered to init + update."""

    __slots__ = ("combiner", "source", "axes", "where", "dtype")
    _fields = ("combiner", "source", "axes", "where")

    def __init__(self, combiner: str, source: Expr, axes: tuple, where: Expr) -> None:
        object.__setattr__(self, "combiner", combiner)
        object.__setattr__(self, "source", source)
        object.__setattr__(self, "axes", axes)
        object.__setattr__(self, "where", where)
        object.__setattr__(self, "dtype", source.dtype)

    def _nested(self, *_):
        raise FrontEndError(
            f"a reduction ({self.combiner}) must be the whole body of a compute; "
            "compute the reduction in its own stage and combine it in a second compute"
        )

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _nested
    __truediv__ = __rtruediv__ = __floordiv__ = __lt__ = __gt__ = __le__ = __ge__ = _nested


class ComputeOp:
    """What a computed tensor holds: its axes, body expression and the tensors it reads."""

    def __init__(self, axes: tuple, body: Expr, inputs: dict) -> None:
        self.axes = axes
        self.body = body
        self.inputs = inputs  # id(buffer) -> Tensor, strong references

    def producer_of(self, buffer: Buffer) -> Optional["Tensor"]:
        """The tensor whose buffer a load of this body reads."""
        return self.inputs.get(id(buffer)) or _TENSOR_OF_BUFFER.get(id(buffer))


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor.

    >>> import probsched as ps
    >>> ps.placeholder((2, 3), name="X")
    Tensor(X, placeholder, shape=(2, 3), dtype=float32)
    """
    allowed = FLOAT_DTYPES + INT_DTYPES + NARROW_INT_DTYPES
    if dtype not in allowed:
        raise FrontEndError(f"placeholder {name}: dtype {dtype!r} is not one of {allowed}")
    try:
        return Tensor(Buffer(name, _shape(shape, name), dtype), None)
    except IRError as exc:
        raise FrontEndError(str(exc)) from None


def _shape(shape, name: str) -> tuple:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise FrontEndError(f"tensor {name}: shape {shape!r} is not a sequence of integers") from None
    if any(s <= 0 for s in out):
        raise FrontEndError(f"tensor {name}: shape {out} has a non-positive extent")
    return out


def reduce_axis(dom: Union[int, Sequence[int]], name: str = "k") -> ReduceAxis:
    """A reduction axis over ``range(extent)`` or ``range(lo, hi)``.

    >>> import probsched as ps
    >>> k = ps.reduce_axis((1, 5), name="k")
    >>> k.lo, k.extent
    (1, 4)
    """
    if isinstance(dom, int):
        lo, hi = 0, dom
    else:
        try:
            lo, hi = (int(x) for x in dom)
        except (TypeError, ValueError):
            raise FrontEndError(f"reduce_axis {name}: domain {dom!r} is not an extent or (lo, hi)") from None
    if hi <= lo:
        raise FrontEndError(f"reduce_axis {name}: empty domain [{lo}, {hi})")
    return ReduceAxis(name, lo, hi - lo)


_IDENTITY = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}


def reduction_identity(combiner: str, dtype: str) -> Union[float, int]:
    """What a reduction by ``combiner`` starts from in ``dtype``: an integer type has no
    infinity, so its maximum starts from the type's least value and its minimum from its
    greatest.

    >>> reduction_identity("max", "float32"), reduction_identity("max", "uint8"), reduction_identity("min", "int8")
    (-inf, 0, 127)
    """
    value = _IDENTITY[combiner]
    if combiner != "sum" and np.issubdtype(numpy_dtype(dtype), np.integer):
        info = np.iinfo(numpy_dtype(dtype))
        lo, hi = INT_RANGE.get(dtype, (int(info.min), int(info.max)))  # an int8r's range is narrower than its bytes'
        return lo if combiner == "max" else hi
    return value


def _reduction(combiner: str, expr, axis, where) -> Reduce:
    if axis is None:
        raise FrontEndError(f"ps.{combiner}: a reduction needs its axis (axis=k or axis=[k1, k2])")
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    if not axes:
        raise FrontEndError(f"ps.{combiner}: empty list of reduction axes")
    for a in axes:
        if not isinstance(a, ReduceAxis):
            raise FrontEndError(f"ps.{combiner}: axis {a!r} is not a ps.reduce_axis")
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise FrontEndError(f"ps.{combiner}: axis listed twice in {names}")
    expr = as_expr(expr)
    if expr.dtype == BOOL:
        raise FrontEndError(f"ps.{combiner}: cannot reduce the boolean expression {expr}")
    cond = Const(True, BOOL) if where is None else as_expr(where)
    if cond.dtype != BOOL:
        raise FrontEndError(f"ps.{combiner}: where={cond} is not a boolean expression")
    return Reduce(combiner, expr, axes, cond)


def sum(  # noqa: A001 - the front end's name for it
    expr: ExprLike, axis: Union[ReduceAxis, Sequence[ReduceAxis], None] = None, where: Optional[ExprLike] = None
) -> Reduce:
    """Sum of ``expr`` over the reduction axes (identity 0), optionally only ``where`` true."""
    return _reduction("sum", expr, axis, where)


def max(  # noqa: A001
    expr: ExprLike, axis: Union[ReduceAxis, Sequence[ReduceAxis], None] = None, where: Optional[ExprLike] = None
) -> Reduce:
    """Maximum over the reduction axes (identity -inf)."""
    return _reduction("max", expr, axis, where)


def min(  # noqa: A001
    expr: ExprLike, axis: Union[ReduceAxis, Sequence[ReduceAxis], None] = None, where: Optional[ExprLike] = None
) -> Reduce:
    """Minimum over the reduction axes (identity +inf)."""
    return _reduction("min", expr, axis, where)


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., Expr],
    name: str = "compute",
    dtype: Optional[str] = None,
    axis_names: Optional[Sequence[str]] = None,
) -> Tensor:
    """A tensor whose element at each index is ``fcompute(*index)``.

    The axis variables are named ``axis_names`` or else after ``fcompute``'s parameters.
    ``dtype`` casts the body.

    >>> import probsched as ps
    >>> A = ps.placeholder((3,), name="A")
    >>> B = ps.compute((3,), lambda i: ps.exp(A[i]) + 1.0, name="B")
    >>> B.op.axes
    (<Var i>,)
    """
    shape = _shape(shape, name)
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if axis_names is not None:
        axis_names = list(axis_names)
        if len(axis_names) != len(shape):
            raise FrontEndError(f"compute {name}: {len(axis_names)} axis names for {len(shape)} dimensions")
    elif params and params[0].kind == inspect.Parameter.VAR_POSITIONAL or len(params) != len(shape):
        if params and params[0].kind != inspect.Parameter.VAR_POSITIONAL:
            raise FrontEndError(
                f"compute {name}: fcompute takes {len(params)} arguments but the shape {shape} has "
                f"{len(shape)} dimensions"
            )
        axis_names = [f"i{d}" for d in range(len(shape))]
    else:
        axis_names = [p.name for p in params]
    try:
        axes = tuple(Var(n) for n in axis_names)
    except IRError as exc:
        raise FrontEndError(f"compute {name}: {exc}") from None
    if not hasattr(_INDEXED, "stack"):
        _INDEXED.stack = []
    _INDEXED.stack.append({})
    try:
        body = fcompute(*axes)
        body = as_expr(body)
    except IRError as exc:
        raise FrontEndError(f"compute {name}: {exc}") from None
    finally:
        inputs = _INDEXED.stack.pop()
    if isinstance(body, Reduce):
        _check_no_nested_reduce(name, body.source)
    else:
        _check_no_nested_reduce(name, body)
    out_dtype = dtype or body.dtype
    if out_dtype == BOOL:
        raise FrontEndError(f"compute {name}: the body {body} is boolean; cast it with ps.cast")
    return Tensor(Buffer(name, shape, out_dtype), ComputeOp(axes, body, inputs))


def _check_no_nested_reduce(name: str, e: Expr) -> None:
    for x in walk(e):
        if isinstance(x, Reduce):
            raise FrontEndError(f"compute {name}: a reduction must be the whole body of the compute")


# ----------------------------------------------------------------------------- lowering


class _Names:
    """Hands out function-wide unique identifiers."""

    def __init__(self, taken) -> None:
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        # Digits without "_": split names loops "i_0", "i_1", which must not collide.
        name, n = base, 0
        while name in self.taken:
            n += 1
            name = f"{base}{n}"
        self.taken.add(name)
        return name


def _stage_order(outputs: Sequence[Tensor]) -> list:
    """Compute tensors reachable from ``outputs``, producers before consumers."""
    order: list = []
    state: dict = {}

    def visit(t: Tensor, path: tuple) -> None:
        if state.get(id(t)) == "done" or t.op is None:
            return
        if state.get(id(t)) == "active":
            raise FrontEndError(f"cycle through tensor {t.name}: {' -> '.join(path)}")
        state[id(t)] = "active"
        for ld in _body_loads(t.op.body):
            producer = t.op.producer_of(ld.buffer)
            if producer is None:
                raise FrontEndError(f"compute {t.name} reads buffer {ld.buffer.name}, which is no tensor")
            visit(producer, path + (producer.name,))
        state[id(t)] = "done"
        order.append(t)

    for t in outputs:
        visit(t, (t.name,))
    return order


def _body_loads(body: Expr) -> list:
    if isinstance(body, Reduce):
        return loads(body.source) + loads(body.where)
    return loads(body)


def _lower_stage(t: Tensor, names: _Names) -> Loop:
    op = t.op
    body = op.body
    spatial = []
    loop_vars = []
    mapping: dict = {}
    # Block iterators are scoped to their block: unique within it, and distinct from loop names.
    iter_names = _Names(names.taken)
    for ax, extent in zip(op.axes, t.shape):
        v = Var(iter_names.fresh(f"v_{ax.name}"))
        spatial.append(IterVar(v, extent, "S"))
        loop_vars.append((Var(names.fresh(ax.name)), extent))
        mapping[ax.name] = v
    reduce_iters = []
    if isinstance(body, Reduce):
        for ax in body.axes:
            if ax.name in mapping:
                raise FrontEndError(f"compute {t.name}: reduction axis {ax.name} has the name of a spatial axis")
            v = Var(iter_names.fresh(f"v_{ax.name}"))
            reduce_iters.append(IterVar(v, ax.extent, "R"))
            loop_vars.append((Var(names.fresh(ax.name)), ax.extent))
            mapping[ax.name] = v + ax.lo if ax.lo else v
    allowed = set(mapping)
    exprs = [body.source, body.where] if isinstance(body, Reduce) else [body]
    for e in exprs:
        stray = free_vars(e) - allowed
        if stray:
            raise FrontEndError(
                f"compute {t.name}: variable(s) {sorted(stray)} are used but are not axes of {t.name}; "
                "a reduction axis must be listed in ps.sum/max/min(..., axis=...)"
            )
    out_idx = tuple(it.var for it in spatial)
    if isinstance(body, Reduce):
        src = substitute(body.source, mapping)
        cond = substitute(body.where, mapping)
        acc = Load(t.buffer, out_idx)
        src = _cast_to(src, t.dtype)
        if body.combiner == "sum":
            upd = acc + src
        else:
            upd = binary(body.combiner, acc, src)
        if not (isinstance(cond, Const) and cond.value is True):
            upd = if_then_else(cond, upd, acc)
        init = Store(t.buffer, out_idx, Const(reduction_identity(body.combiner, t.dtype), t.dtype))
        store = Store(t.buffer, out_idx, upd)
    else:
        init = None
        store = Store(t.buffer, out_idx, _cast_to(substitute(body, mapping), t.dtype))
    iters = tuple(spatial + reduce_iters)
    blk = Block(t.name, iters, tuple(v for v, _ in loop_vars), store, init=init)
    stmt = blk
    for v, extent in reversed(loop_vars):
        stmt = Loop(v, extent, body=(stmt,))
    if not loop_vars:  # a 0-d compute cannot happen (shapes are non-empty) but keep the tree valid
        raise FrontEndError(f"compute {t.name}: no axes")
    return stmt


def _cast_to(e: Expr, dtype: str) -> Expr:
    from .ir.expr import cast

    return cast(dtype, e) if e.dtype != dtype else e


def create_func(tensors: Sequence[Tensor], name: str = "main") -> PrimFunc:
    """Lower tensors to a :class:`~probsched.ir.stmt.PrimFunc`.

    ``tensors`` lists the parameters in call order: every placeholder the computation reads,
    and the outputs. Computed tensors not listed become intermediate buffers.
    """
    tensors = list(tensors)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise FrontEndError(f"create_func: {t!r} is not a tensor")
    outputs = [t for t in tensors if t.op is not None]
    if not outputs:
        raise FrontEndError("create_func: the list holds no computed tensor")
    stages = _stage_order(outputs)
    listed = {id(t) for t in tensors}
    for st in stages:
        for ld in _body_loads(st.op.body):
            producer = st.op.producer_of(ld.buffer)
            if producer.op is None and id(producer) not in listed:
                raise FrontEndError(
                    f"create_func: placeholder {producer.name} is read by {st.name} but is not in the "
                    "list of tensors"
                )
    all_names = [t.name for t in tensors] + [s.name for s in stages if id(s) not in listed]
    dup = sorted({n for n in all_names if all_names.count(n) > 1})
    if dup:
        raise FrontEndError(f"create_func: two different tensors are named {dup}; tensor names must be unique")
    names = _Names(all_names)
    body = tuple(_lower_stage(s, names) for s in stages)
    params = tuple(t.buffer for t in tensors)
    allocs = tuple(s.buffer for s in stages if id(s) not in listed)
    return PrimFunc(name, params, body, allocs)
