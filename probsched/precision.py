"""Precision of a tensor program: the element type its multiplications read.

A program in *bfloat16* reads the operands of its multiply-accumulate reductions (a
matmul's A and B, a convolution's input and weight) in bfloat16 and accumulates, and
writes, in float32: what ``vdpbf16ps`` computes (pairs of bf16 products summed into
float32 lanes). :func:`convert` makes that program from a float32 one: every input
parameter a product reads becomes a bfloat16 buffer, and so does every intermediate that
only moves such an input (a convolution's padding stage) on its way to a product; the
products widen their operands to float32 (exactly), and everything else is unchanged.
Elementwise epilogues, softmax and norms thus stay float32.

A program in *int8* multiplies 8-bit integers and accumulates in int32: what ``vpdpbusd``
computes (four products of an unsigned and a signed byte summed into int32 lanes). From a
float32 program :func:`convert` makes the first factor of every product (the activation:
a matmul's A, a convolution's input, and what only moves it) ``uint8``, the second (the
weight) ``int8``, and the reduction's output ``int32``; what reads that output reads it
as an integer (a float epilogue widens it). The values are the caller's to choose: a
quantized network (:mod:`probsched.graph.quantization`) is built in int8 directly, with its
scales and zero points in the graph; a suite workload in int8 (``"GMM:2:int8"``) is the
kernel alone. ``"int8r"`` is int8 with weights of reduced range (``[-64, 64]``, as a
quantizer's ``reduce_range`` makes them: :mod:`probsched.ir.dtypes`), their own type, so
kernels exact only on them apply there alone (``"GMM:2:int8r"``); :func:`precision_of`
calls both int8.

The precision is part of the program (its buffers' dtypes), so it is part of its
structural hash: a database never gives a float32 record to a bfloat16 program or the
reverse. :func:`precision_of` reads it back.

>>> import probsched as ps
>>> w = ps.workloads.get("C2D:2")
>>> f = convert(w.func, "bf16")
>>> [(b.name, b.dtype) for b in f.params] + [(b.name, b.dtype) for b in f.allocs]
[('inputs', 'bfloat16'), ('weight', 'bfloat16'), ('conv2d', 'float32'), ('padded', 'bfloat16')]
>>> precision_of(f), precision_of(w.func), f.structural_hash() != w.func.structural_hash()
('bfloat16', 'float32', True)
>>> convert(f, "float32") == w.func
True
>>> q = convert(w.func, "int8")
>>> [(b.name, b.dtype) for b in q.params], precision_of(q)
([('inputs', 'uint8'), ('weight', 'int8'), ('conv2d', 'int32')], 'int8')
"""

from __future__ import annotations

from typing import Collection, Dict, List, Optional, Set

from .errors import ProbschedError
from .ir.dtypes import BF16, INT8, INT8R, NARROW_INT_DTYPES, UINT8, is_float
from .ir.expr import BinOp, Call, Cast, Const, Expr, Load, Select, cast, map_loads, walk
from .ir.stmt import Block, Buffer, PrimFunc, Store, map_blocks

#: accepted spellings -> the element type a product reads
_BY_NAME = {"float32": "float32", "fp32": "float32", "f32": "float32", "bfloat16": BF16, "bf16": BF16, "int8": "int8",
            "i8": "int8", INT8R: INT8R}
NAMES = tuple(_BY_NAME)
PRECISIONS = ("float32", BF16, "int8")
#: what a bf16 network stores in bfloat16 between tasks (``ps.compile(..., narrow=)``): the
#: values every reader rounds anyway (the results of float32 between tasks), every value,
#: none, or the faster of the first two for the network, timed when it is compiled
NARROW_MODES = ("exact", "all", "none", "auto")
#: the short names workload names and the command line use
SHORT = {"float32": "fp32", BF16: "bf16", "int8": "int8", INT8R: INT8R}


def canonical(precision: str) -> str:
    """``"float32"``, ``"bfloat16"``, ``"int8"`` or ``"int8r"`` for any accepted spelling
    (``"fp32"``, ``"bf16"``, ...).

    >>> canonical("bf16"), canonical("FP32")
    ('bfloat16', 'float32')
    >>> canonical("fp16")
    Traceback (most recent call last):
    ...
    probsched.errors.ProbschedError: unknown precision 'fp16'; expected one of float32, fp32, f32, bfloat16, bf16, int8, i8, int8r
    """
    key = precision.lower() if isinstance(precision, str) else precision
    if key not in _BY_NAME:
        raise ProbschedError(f"unknown precision {precision!r}; expected one of {', '.join(_BY_NAME)}")
    return _BY_NAME[key]


def precision_of(func: PrimFunc) -> str:
    """``"int8"`` when some buffer of ``func`` is an 8-bit integer, ``"bfloat16"`` when some
    is bfloat16, else ``"float32"``."""
    dtypes = {b.dtype for b in tuple(func.params) + tuple(func.allocs)}
    if dtypes & set(NARROW_INT_DTYPES):
        return "int8"
    return BF16 if BF16 in dtypes else "float32"


def _operand_buffers(e: Expr) -> List[str]:
    """The buffers a product operand reads directly (through casts)."""
    while isinstance(e, Cast):
        e = e.value
    return [e.buffer.name] if isinstance(e, Load) else []


def product_operands(blk: Block) -> List[str]:
    """Buffers read as factors of a ``C = C + x * y`` reduction update (``[]`` otherwise)."""
    st = blk.body
    if not isinstance(st, Store) or not blk.is_reduction or st.buffer.dtype != "float32":
        return []
    v = st.value
    if not (isinstance(v, BinOp) and v.op == "add" and isinstance(v.b, BinOp) and v.b.op == "mul"):
        return []
    return _operand_buffers(v.b.a) + _operand_buffers(v.b.b)


def _moves_data(value: Expr) -> bool:
    """Whether a store's value only selects among loads and constants (a copy, a padding):
    no float arithmetic, no math function."""
    return not any(isinstance(x, (BinOp, Call)) and is_float(x.dtype) for x in walk(value))


def lowered_buffers(func: PrimFunc, keep: Collection[str] = (), factor: Optional[int] = None) -> Set[str]:
    """Names of the float32 buffers a bfloat16 program reads in bfloat16 (module docstring);
    parameters in ``keep`` stay float32 (a data move of them rounds instead). ``factor``:
    only those of the products' first (0) or second (1) factors."""
    params = {b.name: b for b in func.params}
    allocs = {b.name: b for b in func.allocs}
    written = {b.name for blk in func.blocks() for b, _ in blk.writes()}
    out: Set[str] = set()
    todo = [name for blk in func.blocks() for k, name in enumerate(product_operands(blk)) if factor in (None, k)]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        if name in params and name not in written and params[name].dtype == "float32":
            if name not in keep:
                out.add(name)
            continue
        writers = [blk for blk in func.blocks() if any(b.name == name for b, _ in blk.writes())]
        if name not in allocs or allocs[name].dtype != "float32" or len(writers) != 1:
            continue
        st = writers[0].body
        if not isinstance(st, Store) or writers[0].init is not None or not _moves_data(st.value):
            continue
        out.add(name)
        todo.extend(x.buffer.name for x in walk(st.value) if isinstance(x, Load))
    return out


def _narrow(e: Expr, dtype: str = BF16) -> Expr:
    """``e`` (a data move of ``dtype`` values) as a ``dtype`` expression: no widen-then-round."""
    inner = e
    while isinstance(inner, Cast) and inner.dtype in ("float32", "float64", "int32", "int64"):
        inner = inner.value  # widenings of the value moved, each exact
    if inner.dtype == dtype and inner is not e:
        return inner
    if isinstance(e, Select):
        return Select(e.cond, _narrow(e.t, dtype), _narrow(e.f, dtype))
    return cast(dtype, e)


def _retype(func: PrimFunc, dtypes: Dict[str, str]) -> PrimFunc:
    """``func`` with buffers ``dtypes`` (name -> dtype) retyped, loads and stores adapted."""
    if not dtypes:
        return func
    new = {b.name: Buffer(b.name, b.shape, dtypes[b.name], b.scope) for b in tuple(func.params) + tuple(func.allocs) if b.name in dtypes}

    def fix_load(ld: Load) -> Expr:
        if ld.buffer.name not in new:
            return ld
        out = Load(new[ld.buffer.name], ld.indices)
        if out.dtype in NARROW_INT_DTYPES:
            return cast("int32", out)  # arithmetic reads int32
        return cast("float32", out) if out.dtype == BF16 else out  # arithmetic reads float32

    def fix_stmt(s):
        if isinstance(s, tuple):
            return tuple(fix_stmt(x) for x in s)
        if not isinstance(s, Store):
            return s
        value = map_loads(s.value, fix_load)
        indices = tuple(map_loads(i, fix_load) for i in s.indices)
        buf = new.get(s.buffer.name, s.buffer)
        if buf.dtype == BF16 or buf.dtype in NARROW_INT_DTYPES:
            value = _narrow(value, buf.dtype)
        elif buf is not s.buffer:
            value = _widened(value, buf.dtype)
        return Store(buf, indices, value)

    def fix_block(blk: Block) -> Block:
        init = None if blk.init is None else fix_stmt(blk.init)
        return blk.replace(body=fix_stmt(blk.body), init=init)

    body = map_blocks(func.body, fix_block)
    return func.replace(
        params=tuple(new.get(b.name, b) for b in func.params),
        allocs=tuple(new.get(b.name, b) for b in func.allocs),
        body=body,
    )


def _widened(e: Expr, dtype: str) -> Expr:
    """A data move of (formerly bfloat16) values as a ``dtype`` expression again."""
    if isinstance(e, Select):
        return Select(e.cond, _widened(e.t, dtype), _widened(e.f, dtype))
    if isinstance(e, Cast) and isinstance(e.value, Const):
        e = e.value
    if isinstance(e, Const):
        return Const(e.value, dtype)
    return cast(dtype, e)


def convert(func: PrimFunc, precision: str, keep: Collection[str] = ()) -> PrimFunc:
    """``func`` computing in ``precision`` (see the module docstring): ``"bf16"`` lowers the
    products' operands to bfloat16, ``"float32"`` gives a converted program back its float32
    buffers. A program without multiply-accumulate reductions is returned unchanged.
    ``keep``: input parameters that stay float32 (a network's activations between tasks): a
    product must then read them through a copy (a padding stage, a ``cache_read``), which is
    what is lowered, rounding them as it copies."""
    target = canonical(precision)
    if target == BF16:
        return _retype(func, {name: BF16 for name in lowered_buffers(func, keep)})
    if target in ("int8", INT8R):
        return _retype(func, _int8_dtypes(func, keep, target))
    if precision_of(func) == "int8":
        raise ProbschedError(f"{func.name} is an int8 program: quantization cannot be undone; convert the float32 one")
    return _retype(func, {b.name: "float32" for b in tuple(func.params) + tuple(func.allocs) if b.dtype == BF16})


def _int8_dtypes(func: PrimFunc, keep: Collection[str], weights: str = INT8) -> Dict[str, str]:
    """Buffer -> dtype of ``func`` in int8 (module docstring): each product's first factor
    uint8, its second ``weights`` (int8, or int8r: :mod:`~probsched.ir.dtypes`; with what only
    moves them), its accumulator int32."""
    activations, second = lowered_buffers(func, keep, 0), lowered_buffers(func, keep, 1)
    both = activations & second
    if both:
        raise ProbschedError(f"{func.name}: {sorted(both)} is read as both factors of a product; int8 programs multiply "
                             "an activation (uint8) by a weight (int8)")
    out = {name: UINT8 for name in activations}
    out.update({name: weights for name in second})
    for blk in func.blocks():
        if product_operands(blk):
            out[blk.body.buffer.name] = "int32"
    return out
