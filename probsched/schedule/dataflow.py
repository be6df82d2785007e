"""Producer/consumer relations between blocks and rewriting of buffer accesses.

>>> import probsched as ps
>>> f = ps.workloads.small("C2D").func
>>> [b.name for b in producers(f, "conv2d")], [b.name for b in consumers(f, "padded")]
(['padded'], ['conv2d'])
>>> read_buffers(f.blocks()[1]), written_buffers(f.blocks()[1])
(['conv2d', 'padded', 'weight'], ['conv2d'])
"""

from __future__ import annotations

from typing import Callable, Dict, List

from ..ir.expr import Expr, map_loads  # noqa: F401 - map_loads: the IR's, imported from here too
from ..ir.stmt import Block, PrimFunc, Store, StmtLike, iter_stmts
from .tree import iter_blocks


def written_buffers(blk: Block) -> List[str]:
    """Names of the buffers a block writes, in order of first store."""
    out: List[str] = []
    for buf, _ in blk.writes():
        if buf.name not in out:
            out.append(buf.name)
    return out


def read_buffers(blk: Block) -> List[str]:
    """Names of the buffers a block reads, in order of first load (its own output included)."""
    out: List[str] = []
    for buf, _ in blk.reads():
        if buf.name not in out:
            out.append(buf.name)
    return out


def producers(func: PrimFunc, block: str) -> List[Block]:
    """Blocks (other than ``block``) that write a buffer ``block`` reads, in program order."""
    blocks = list(iter_blocks(func.body))
    me = next(b for b in blocks if b.name == block)
    reads = set(read_buffers(me))
    return [b for b in blocks if b.name != block and reads & set(written_buffers(b))]


def consumers(func: PrimFunc, block: str) -> List[Block]:
    """Blocks (other than ``block``) that read a buffer ``block`` writes, in program order."""
    blocks = list(iter_blocks(func.body))
    me = next(b for b in blocks if b.name == block)
    writes = set(written_buffers(me))
    return [b for b in blocks if b.name != block and writes & set(read_buffers(b))]


def writers_of(func: PrimFunc, buffer: str) -> List[Block]:
    """Blocks that write ``buffer``."""
    return [b for b in iter_blocks(func.body) if buffer in written_buffers(b)]


def readers_of(func: PrimFunc, buffer: str) -> List[Block]:
    """Blocks that read ``buffer``."""
    return [b for b in iter_blocks(func.body) if buffer in read_buffers(b)]


def map_block_exprs(blk: Block, fn: Callable[[Expr], Expr], stores: Callable[[Store], Store] = None) -> Block:
    """Apply ``fn`` to every value/index expression of the block's body and init stores."""

    def fix_stmt(s):
        if isinstance(s, tuple):
            return tuple(fix_stmt(x) for x in s)
        if isinstance(s, Store):
            s = Store(s.buffer, tuple(fn(i) for i in s.indices), fn(s.value))
            return stores(s) if stores else s
        return s

    init = None if blk.init is None else fix_stmt(blk.init)
    return blk.replace(body=fix_stmt(blk.body), init=init)


def load_indices(blk: Block, buffer: str) -> List[tuple]:
    """Index tuples (block-iterator terms) of every load of ``buffer`` in the block's body."""
    return [idx for buf, idx in blk.reads() if buf.name == buffer]


def binding_map(blk: Block) -> Dict[str, Expr]:
    """Block iterator name -> binding expression (over loop variables)."""
    return {it.var.name: b for it, b in zip(blk.iters, blk.bindings)}


def single_store(blk: Block) -> Store:
    """The block's only store, or None when the body is anything else."""
    if isinstance(blk.body, Store):
        return blk.body
    return None


def stores_in(s: StmtLike) -> List[Store]:
    """Stores in a statement or tuple."""
    return [x for x in iter_stmts(s if isinstance(s, tuple) else (s,)) if isinstance(x, Store)]
