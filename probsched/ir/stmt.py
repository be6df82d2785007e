"""Statements of the loop-nest IR: buffers, loops, blocks, stores, and the function.

The IR follows TVM's TensorIR: a *block* is one computation with its own iterators
(spatial ``S`` or reduction ``R``, each over ``[0, extent)``), bound to expressions of the
enclosing loop variables, guarded by a predicate, with an optional ``init`` for reductions.
Schedule primitives rewrite loops and bindings; block bodies, written in terms of block
iterators, rarely change. That separation is what lets each primitive check its
preconditions locally.

>>> from probsched.ir.expr import Var, Load
>>> A = Buffer("A", (4,), "float32"); B = Buffer("B", (4,), "float32")
>>> vi = IterVar(Var("v_i"), 4, "S")
>>> blk = Block("B", (vi,), (Var("i"),), Store(B, (vi.var,), Load(A, (vi.var,)) * 2.0))
>>> f = PrimFunc("double", (A, B), (Loop(Var("i"), 4, body=(blk,)),))
>>> print(f)
def double(A: float32[4], B: float32[4]):
    for i in range(4):
        with block("B", v_i=S(4, i)):
            B[v_i] = A[v_i] * 2.0
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Tuple, Union

from ..errors import IRError
from .expr import BOOL, DTYPES, INT_DTYPES, Const, Expr, Load, Var, as_expr, free_vars, loads
from .node import Node

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")

LOCAL_ALLOC_LOOPS = "local_alloc_loops"
"""Attribute of a lowered :class:`PrimFunc`: ``((buffer, loop or None), ...)``, the allocation
point of each ``local`` buffer that :func:`~probsched.lowering.compact_local_buffers` shrank
to one iteration's tile (``None``: the function root). Such a buffer holds a different tile
in each iteration of its loop, so its contents do not outlive an iteration; the interpreter
models that (``lowered=True``), code generation does not read it."""
ITER_KINDS = ("S", "R")
SCOPES = ("global", "local")


def _freeze_annotations(annotations) -> tuple:
    if annotations is None:
        return ()
    items = annotations.items() if isinstance(annotations, dict) else annotations
    out = []
    for k, v in items:
        if isinstance(v, list):
            v = tuple(v)
        try:
            hash(v)
        except TypeError:
            raise IRError(f"annotation {k!r}: value {v!r} is not hashable") from None
        out.append((str(k), v))
    return tuple(sorted(out))


#: ``replace(body=...)`` with a tuple of statements needs no ``__init__`` (see ``Node.replace``)
_BODY_AS_TUPLE = {"body": lambda v: type(v) is tuple}


class Buffer(Node):
    """A multi-dimensional array: a function parameter, an intermediate, or a local scratch."""

    __slots__ = ("name", "shape", "dtype", "scope")
    _fields = ("name", "shape", "dtype", "scope")

    def __init__(self, name: str, shape: Sequence[int], dtype: str = "float32", scope: str = "global") -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise IRError(f"buffer name {name!r} is not a Python identifier")
        shape = tuple(int(s) for s in shape)
        if any(s <= 0 for s in shape):
            raise IRError(f"buffer {name}: shape {shape} has a non-positive extent")
        if dtype not in DTYPES:
            raise IRError(f"buffer {name}: unknown dtype {dtype!r}; expected one of {DTYPES}")
        if scope not in SCOPES:
            raise IRError(f"buffer {name}: unknown scope {scope!r}; expected one of {SCOPES}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "scope", scope)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __getitem__(self, indices) -> Load:
        if not isinstance(indices, tuple):
            indices = (indices,)
        return Load(self, indices)

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


class IterVar(Node):
    """A block iterator: variable, extent (domain ``[0, extent)``) and kind ``S`` or ``R``."""

    __slots__ = ("var", "extent", "kind")
    _fields = ("var", "extent", "kind")

    def __init__(self, var: Var, extent: int, kind: str = "S") -> None:
        if kind not in ITER_KINDS:
            raise IRError(f"iterator {var}: kind {kind!r} is not 'S' (spatial) or 'R' (reduction)")
        if int(extent) <= 0:
            raise IRError(f"iterator {var}: extent {extent} is not positive")
        object.__setattr__(self, "var", var)
        object.__setattr__(self, "extent", int(extent))
        object.__setattr__(self, "kind", kind)

    def __str__(self) -> str:
        return f"{self.var.name}={self.kind}({self.extent})"


class Stmt(Node):
    """Base class of statements."""

    __slots__ = ()

    def __str__(self) -> str:
        from .printer import stmt_to_str

        return stmt_to_str(self)


class Store(Stmt):
    """``buffer[indices] = value``."""

    __slots__ = ("buffer", "indices", "value")
    _fields = ("buffer", "indices", "value")

    def __init__(self, buffer: Buffer, indices: Sequence[Expr], value: Expr) -> None:
        indices = tuple(as_expr(i) for i in indices)
        if len(indices) != len(buffer.shape):
            raise IRError(
                f"store to {buffer.name}: {len(indices)} indices for {len(buffer.shape)} dimensions"
            )
        for ix in indices:
            if ix.dtype not in INT_DTYPES:
                raise IRError(f"store to {buffer.name}: index {ix} is {ix.dtype}, not an integer")
        value = as_expr(value, buffer.dtype)
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "value", value)


class Block(Stmt):
    """One computation: iterators bound to loop expressions, a predicate, a body and an init.

    ``body`` is a :class:`Store` (or, after blockize, a tuple of statements); ``init`` is the
    statement run once before the first reduction step of each spatial point.
    """

    __slots__ = ("name", "iters", "bindings", "predicate", "body", "init", "annotations")
    _fields = ("name", "iters", "bindings", "predicate", "body", "init", "annotations")

    def __init__(
        self,
        name: str,
        iters: Sequence[IterVar],
        bindings: Sequence[Expr],
        body,
        init: Optional[Stmt] = None,
        predicate: Expr | bool = True,
        annotations=None,
    ) -> None:
        iters = tuple(iters)
        bindings = tuple(as_expr(b) for b in bindings)
        if len(iters) != len(bindings):
            raise IRError(f"block {name}: {len(iters)} iterators but {len(bindings)} bindings")
        predicate = as_expr(predicate)
        if predicate.dtype != BOOL:
            raise IRError(f"block {name}: predicate {predicate} is not boolean")
        if isinstance(body, list):
            body = tuple(body)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "iters", iters)
        object.__setattr__(self, "bindings", bindings)
        object.__setattr__(self, "predicate", predicate)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "init", init)
        object.__setattr__(self, "annotations", _freeze_annotations(annotations))

    @classmethod
    def _init_fields(cls) -> tuple:
        return ("name", "iters", "bindings", "body", "init", "predicate", "annotations")

    @property
    def is_reduction(self) -> bool:
        """True when the block has a reduction iterator."""
        return any(it.kind == "R" for it in self.iters)

    def iter_of(self, name: str) -> IterVar:
        """The iterator named ``name``."""
        for it in self.iters:
            if it.var.name == name:
                return it
        raise IRError(f"block {self.name} has no iterator {name}")

    def stores(self) -> list:
        """The stores of the body (not the init), in order."""
        return [s for s in iter_stmts(self.body) if isinstance(s, Store)]

    def writes(self) -> list:
        """(buffer, indices) of every store in body and init, in block-iterator terms."""
        out = [(s.buffer, s.indices) for s in self.stores()]
        if self.init is not None:
            out += [(s.buffer, s.indices) for s in iter_stmts(self.init) if isinstance(s, Store)]
        return out

    def reads(self) -> list:
        """(buffer, indices) of every load in the body, in block-iterator terms."""
        out = []
        for s in iter_stmts(self.body):
            if isinstance(s, Store):
                out += [(ld.buffer, ld.indices) for ld in loads(s.value)]
                for ix in s.indices:
                    out += [(ld.buffer, ld.indices) for ld in loads(ix)]
        return out

    def annotation(self, key: str, default: Any = None) -> Any:
        """The value of annotation ``key``."""
        for k, v in self.annotations:
            if k == key:
                return v
        return default


class Loop(Stmt):
    """``for var in range(extent)`` of a kind in :data:`LOOP_KINDS`, with annotations."""

    __slots__ = ("var", "extent", "kind", "body", "annotations")
    _fields = ("var", "extent", "kind", "body", "annotations")
    _as_given = _BODY_AS_TUPLE

    def __init__(self, var: Var, extent: int, kind: str = "serial", body: Sequence[Stmt] = (), annotations=None) -> None:
        if kind not in LOOP_KINDS:
            raise IRError(f"loop {var}: kind {kind!r} is not one of {LOOP_KINDS}")
        if int(extent) <= 0:
            raise IRError(f"loop {var}: extent {extent} is not positive")
        object.__setattr__(self, "var", var)
        object.__setattr__(self, "extent", int(extent))
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "body", tuple(body))
        object.__setattr__(self, "annotations", _freeze_annotations(annotations))

    @property
    def name(self) -> str:
        """The loop variable's name (unique in a function)."""
        return self.var.name

    def annotation(self, key: str, default: Any = None) -> Any:
        """The value of annotation ``key``."""
        for k, v in self.annotations:
            if k == key:
                return v
        return default


StmtLike = Union[Stmt, Tuple[Stmt, ...]]
"""A statement or a tuple of statements (a loop's or a function's body)."""


def map_blocks(s: StmtLike, fn: Callable[[Block], Block]) -> StmtLike:
    """Apply ``fn`` to every block in ``s`` (statement or tuple), rebuilding the tree."""
    if isinstance(s, tuple):
        return tuple(map_blocks(x, fn) for x in s)
    if isinstance(s, Loop):
        return s.replace(body=map_blocks(s.body, fn))
    if isinstance(s, Block):
        if isinstance(s.body, tuple):
            s = s.replace(body=map_blocks(s.body, fn))
        return fn(s)
    return s


def iter_stmts(s: StmtLike) -> Iterator[Stmt]:
    """Every statement in ``s`` (a statement or a tuple of them), pre-order, blocks' init excluded."""
    if isinstance(s, tuple):
        for x in s:
            yield from iter_stmts(x)
        return
    yield s
    if isinstance(s, Loop):
        yield from iter_stmts(s.body)
    elif isinstance(s, Block):
        yield from iter_stmts(s.body)


class PrimFunc(Node):
    """A function: parameters (inputs then outputs), body, and allocated buffers.

    ``allocs`` are the intermediate (``global``) and scratch (``local``) buffers that the
    function owns; ``attrs`` are hashable key/value facts about the whole function (e.g.
    :data:`LOCAL_ALLOC_LOOPS`). ``==`` is structural equality; :meth:`structural_hash` is
    stable across processes and runs (it keys the tuning database).
    """

    __slots__ = ("name", "params", "body", "allocs", "attrs")
    _fields = ("name", "params", "body", "allocs", "attrs")
    _as_given = _BODY_AS_TUPLE

    def __init__(self, name: str, params: Sequence[Buffer], body: Sequence[Stmt], allocs: Sequence[Buffer] = (), attrs=None) -> None:
        params = tuple(params)
        allocs = tuple(allocs)
        names = [b.name for b in params + allocs]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise IRError(f"function {name}: buffer name(s) {sorted(dup)} used twice")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "body", tuple(body))
        object.__setattr__(self, "allocs", allocs)
        object.__setattr__(self, "attrs", _freeze_annotations(attrs))

    def __str__(self) -> str:
        from .printer import func_to_str

        return func_to_str(self)

    def attr(self, key: str, default: Any = None) -> Any:
        """The value of attribute ``key``."""
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def buffer(self, name: str) -> Buffer:
        """The parameter or allocated buffer named ``name``."""
        for b in self.params + self.allocs:
            if b.name == name:
                return b
        raise IRError(f"function {self.name} has no buffer {name}")

    def blocks(self) -> list:
        """Every block in program order."""
        return [s for s in iter_stmts(self.body) if isinstance(s, Block)]

    def loops(self) -> list:
        """Every loop in program order."""
        return [s for s in iter_stmts(self.body) if isinstance(s, Loop)]

    def to_json(self) -> str:
        """Serialise to JSON text (see :meth:`from_json`)."""
        from .serialize import func_to_json

        return func_to_json(self)

    @staticmethod
    def from_json(text: str) -> "PrimFunc":
        """Rebuild a function from :meth:`to_json` text."""
        from .serialize import func_from_json

        return func_from_json(text)

    def structural_hash(self) -> str:
        """A hex digest of the structure, identical across processes, runs and machines."""
        from .serialize import structural_hash

        return structural_hash(self)

    def input_buffers(self) -> tuple:
        """Parameters that no block writes."""
        written = {b.name for blk in self.blocks() for b, _ in blk.writes()}
        return tuple(b for b in self.params if b.name not in written)

    def output_buffers(self) -> tuple:
        """Parameters written by some block."""
        written = {b.name for blk in self.blocks() for b, _ in blk.writes()}
        return tuple(b for b in self.params if b.name in written)


def used_vars(stmts: Iterable) -> set:
    """Names of variables used by loop bounds, bindings and predicates under ``stmts``."""
    out: set = set()
    for s in iter_stmts(tuple(stmts)):
        if isinstance(s, Block):
            for b in s.bindings:
                out |= free_vars(b)
            out |= free_vars(s.predicate)
    return out


TRUE = Const(True, BOOL)
