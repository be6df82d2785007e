"""Questions schedule rules ask about blocks and loops.

>>> import probsched as ps
>>> w = ps.workloads.small("C2D")
>>> sch = ps.Schedule(w.func)
>>> is_elementwise(sch, "padded"), needs_multi_level_tiling(sch, "conv2d")
(True, True)
>>> [loop_kind(sch, "conv2d", l) for l in sch.get_loops(sch.get_block("conv2d"))]
['S', 'S', 'S', 'S', 'R', 'R', 'R']
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from ..ir.expr import Call, Load, Select, free_vars, walk
from ..ir.stmt import Block
from ..schedule import LoopRV, Schedule
from ..schedule.dataflow import consumers, producers, read_buffers, single_store, written_buffers
from ..schedule.layout import LAYOUT_FREE, Layout


def block(sch: Schedule, name: str) -> Block:
    """The IR block named ``name``."""
    return sch.block_node(name)


def loop_kinds(sch: Schedule, block_name: str) -> Dict[str, Optional[str]]:
    """:func:`loop_kind` of every loop the block's bindings use, in one pass over them
    (rules ask for all the loops of a block at once, thousands of times per search round).

    >>> import probsched as ps
    >>> sch = ps.Schedule(ps.workloads.small("GMM").func)
    >>> loop_kinds(sch, "Z")
    {'b': 'S', 'i': 'S', 'j': 'S', 'k': 'R'}
    """
    blk = block(sch, block_name)
    seen: Dict[str, set] = {}
    for it, b in zip(blk.iters, blk.bindings):
        for v in free_vars(b):
            seen.setdefault(v, set()).add(it.kind)
    return {v: (next(iter(k)) if len(k) == 1 else None) for v, k in seen.items()}


def loop_kind(sch: Schedule, block_name: str, loop: LoopRV) -> Optional[str]:
    """``"S"``/``"R"`` when ``loop`` drives only spatial/reduction iterators of the block,
    ``"O"`` when it drives none, None when both."""
    return loop_kinds(sch, block_name).get(loop.name, "O")


def is_elementwise(sch: Schedule, name: str) -> bool:
    """A single store, no reduction, indices that are its iterators (each once)."""
    blk = block(sch, name)
    st = single_store(blk)
    if st is None or blk.is_reduction or blk.init is not None:
        return False
    names = [ix.name for ix in st.indices if hasattr(ix, "name")]
    return len(names) == len(st.indices) == len(set(names)) == len(blk.iters)


def has_if_then_else(sch: Schedule, name: str) -> bool:
    """True when the block's value has a conditional (padding)."""
    st = single_store(block(sch, name))
    return st is not None and any(isinstance(x, Select) for x in walk(st.value))


def calls_math(sch: Schedule, name: str, functions: Sequence[str]) -> bool:
    """True when the block's stored values call one of the math ``functions``.

    >>> import probsched as ps
    >>> sch = ps.Schedule(ps.workloads.small("SFM").func)
    >>> calls_math(sch, "T_softmax_exp", ("exp",)), calls_math(sch, "T_softmax_norm", ("exp",))
    (True, False)
    """
    return any(
        isinstance(x, Call) and x.name in functions for st in block(sch, name).stores() for x in walk(st.value)
    )


def writes_output(sch: Schedule, name: str) -> bool:
    """True when the block writes a function parameter."""
    params = {b.name for b in sch.mod.params}
    return bool(set(written_buffers(block(sch, name))) & params)


def needs_multi_level_tiling(sch: Schedule, name: str) -> bool:
    """A reduction block whose inputs are reused across its spatial iterators (matmul, conv)."""
    blk = block(sch, name)
    st = single_store(blk)
    if st is None or not blk.is_reduction or blk.init is None:
        return False
    spatial = {it.var.name for it in blk.iters if it.kind == "S"}
    own = {st.buffer.name}
    # data reuse: some input is indexed by a strict subset of the spatial iterators
    for ld in (x for x in walk(st.value) if isinstance(x, Load) and x.buffer.name not in own):
        used = set()
        for ix in ld.indices:
            used |= free_vars(ix)
        if spatial - used:
            return True
    return False


def consumer_names(sch: Schedule, name: str) -> List[str]:
    """Names of the blocks that read what ``name`` writes."""
    return [b.name for b in consumers(sch.mod, name)]


def producer_names(sch: Schedule, name: str) -> List[str]:
    """Names of the blocks that write what ``name`` reads."""
    return [b.name for b in producers(sch.mod, name)]


def reads_of(sch: Schedule, name: str) -> List[str]:
    """Buffers the block reads (excluding its own output)."""
    blk = block(sch, name)
    own = set(written_buffers(blk))
    return [b for b in read_buffers(blk) if b not in own]


def weight_layout(sch: Schedule, name: str, buffer: str) -> Optional[Layout]:
    """The layout in which the tiles of block ``name`` read ``buffer`` in order, when
    ``buffer`` is a constant of the network (layout-free: ``ps.compile`` binds it once, so
    storing it in that order costs nothing per call) and that layout is not the one it
    has; otherwise None. MetaSchedule's RewriteLayout stores every such weight so.

    >>> import probsched as ps
    >>> sch = ps.Schedule(ps.workloads.small("GMM").func)
    >>> weight_layout(sch, "Z", "Y") is None   # a workload's operands are not constants
    True
    """
    if buffer not in (sch.mod.attr(LAYOUT_FREE) or ()):
        return None
    lay = sch.tile_layout(name, buffer)  # by name: asking records no instruction
    return None if lay is None or lay.is_identity else lay
