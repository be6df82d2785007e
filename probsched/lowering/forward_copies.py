"""Lowering step: a whole-tensor copy of an input that changes nothing is not made; its
readers read the input.

A task in bfloat16 (or int8) rounds its activations into a copy stage in front of its
products (:func:`probsched.graph.precision.task_function`), and the schedule keeps that
stage, often computed at the root: one pass over the whole input before the products
start. Where the input is already stored in the copy's type (a value the task before
rounded as it wrote it: :func:`~probsched.graph.precision.narrow_between_tasks`), the stage
copies every element as it is: a pass that reads and writes the whole tensor for nothing,
which on a core short of memory bandwidth costs as much as the products themselves
(ResNet-50's 1x1 convolutions on an AMX core: 172 against 66 µs).

:func:`forward_identity_copies` removes such a stage and lets its readers (micro-kernel
calls included) read the input at the same indices, when

- the copy is a ``global`` intermediate with the input's shape and element type, written by
  that one block alone, elementwise (no reduction, no init), under no loop of another stage
  (a copy computed at a tile loop packs a tile: kept, :mod:`.compact` makes it local);
- its value is the input at the store's own indices, through conversions that lose nothing
  (bfloat16 widened to float32 and rounded back, say);
- the input is a parameter that nothing in the function writes.

Every element a reader takes from the copy is then the input's element at the same place:
the program computes what it computed (``evaluate(lower(f), ..., lowered=True)``).

>>> import probsched as ps
>>> A = ps.placeholder((64,), name="A", dtype="bfloat16")
>>> B = ps.compute((64,), lambda i: ps.cast("float32", A[i]) * 2.0, name="B")
>>> sch = ps.Schedule(ps.create_func([A, B]))
>>> copy = sch.cache_read(sch.get_block("B"), 0, "global")
>>> [b.name for b in sch.mod.allocs], [b.name for b in forward_identity_copies(sch.mod).allocs]
(['A_global'], [])
>>> print(forward_identity_copies(sch.mod))
def main(A: bfloat16[64], B: float32[64]):
    for i in range(64):
        with block("B", v_i=S(64, i)):
            B[v_i] = float32(A[v_i]) * 2.0
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..ir.dtypes import BF16, NARROW_INT_DTYPES
from ..ir.expr import Cast, Load, map_loads, walk
from ..ir.stmt import Block, Buffer, Loop, PrimFunc, Store, map_blocks
from ..schedule.tree import TreeIndex, remove_at

#: element types that hold every value of another exactly (a conversion there and back is the identity)
_HOLDS = {"float32": {BF16, *NARROW_INT_DTYPES}, "float64": {"float32", BF16, *NARROW_INT_DTYPES},
          "int32": set(NARROW_INT_DTYPES), "int64": {"int32", *NARROW_INT_DTYPES}}


def _copied_input(store: Store) -> Optional[Load]:
    """The load ``store`` copies unchanged (through conversions that lose nothing), or None."""
    value, types = store.value, []
    while isinstance(value, Cast):
        types.append(value.dtype)
        value = value.value
    if not isinstance(value, Load) or value.buffer.dtype != store.buffer.dtype or value.buffer.shape != store.buffer.shape:
        return None
    narrow = value.buffer.dtype
    if any(t != narrow and narrow not in _HOLDS.get(t, ()) for t in types):
        return None
    return value if tuple(value.indices) == tuple(store.indices) else None


def _identity_copies(func: PrimFunc, idx: TreeIndex) -> Dict[str, Tuple[Buffer, str]]:
    """Intermediate name -> the input it copies unchanged, in a loop nest of its own at the
    root (module docstring), and the copying block's name."""
    params = {b.name: b for b in func.params}
    writers: Dict[str, list] = {}
    for blk in func.blocks():
        for b, _ in blk.writes():
            writers.setdefault(b.name, []).append(blk)
    # a predicate or binding that loads the copy would keep it: none does in practice, checked all the same
    guarded = {ld.buffer.name for blk in func.blocks() for e in (blk.predicate, *blk.bindings)
               for ld in walk(e) if isinstance(ld, Load)}
    found: Dict[str, Tuple[Buffer, str]] = {}
    for buf in func.allocs:
        mine = writers.get(buf.name, [])
        if buf.scope != "global" or len(mine) != 1 or buf.name in guarded:
            continue
        blk = mine[0]
        if not isinstance(blk.body, Store) or blk.init is not None or blk.is_reduction:
            continue
        path = idx.block_path(blk.name)
        if not all(isinstance(s, Loop) for s in idx.ancestors(path)) or idx.blocks_under(path[:1]) != [blk]:
            continue  # computed at a loop of another stage (a tile's pack), or inside a blockized block
        src = _copied_input(blk.body)
        if src is None or src.buffer.name not in params or writers.get(src.buffer.name):
            continue
        found[buf.name] = (params[src.buffer.name], blk.name)
    return found


def forward_identity_copies(func: PrimFunc) -> PrimFunc:
    """``func`` without the root copies of inputs that change nothing, their readers
    reading the inputs (module docstring); ``func`` itself when there is none."""
    if not func.allocs:
        return func
    idx = TreeIndex.of(func)
    copies = _identity_copies(func, idx)
    if not copies:
        return func
    out = func
    for _, block in copies.values():  # one at a time: removing a loop nest moves the paths after it
        out = remove_at(out, TreeIndex.of(out).block_path(block))

    def read_input(ld: Load) -> Load:
        src = copies.get(ld.buffer.name)
        return Load(src[0], ld.indices) if src is not None else ld

    def fix_stmt(s):
        if isinstance(s, tuple):
            return tuple(fix_stmt(x) for x in s)
        if isinstance(s, Store):
            return Store(s.buffer, tuple(map_loads(i, read_input) for i in s.indices), map_loads(s.value, read_input))
        return s

    def fix_block(blk: Block) -> Block:
        if isinstance(blk.body, tuple) or not any(b.name in copies for b, _ in blk.reads()):
            return blk
        return blk.replace(body=fix_stmt(blk.body), init=None if blk.init is None else fix_stmt(blk.init))

    body = map_blocks(out.body, fix_block)
    return out.replace(body=body, allocs=tuple(b for b in out.allocs if b.name not in copies))
