"""Per-store program features, in the spirit of MetaSchedule's PerStoreFeature.

:func:`extract` turns a scheduled function into a float32 matrix with one row per store
(block bodies and inits, program order) and :data:`N_FEATURES` columns; :func:`feature_names`
and :func:`feature_docs` name and document each column (``python -m
probsched.cost_model.features`` prints the table). Every value is log-scaled as
``log2(1 + x)`` (one-hot flags stay 0/1), so counts that span orders of magnitude become
comparable inputs for a model.

**Which program.** Features describe the program code generation compiles (after the
design space's postprocessors, which ``sch.mod`` already includes): unroll pragmas are
applied (the rule of :func:`~probsched.lowering.apply_unroll_pragmas`, during the walk) and
``local`` buffers are sized as :func:`~probsched.lowering.compact_local_buffers` would size
them, estimated from the access boxes the features compute anyway instead of running the
pass: a full :func:`~probsched.lowering.lower` per candidate would cost most of the
budget for scoring a population. The estimate can be smaller than what the pass does
when a region goes through ``//`` or ``%`` of a fused loop (the pass then keeps the full
buffer). Passing an already lowered function gives the same features.

Groups (``buf{k}`` is the k-th accessed buffer of the store, k = 0..4: the written buffer
first, then reads by decreasing bytes, then name; missing buffers are zeros):

==========================  ===================================================================
group                       columns
==========================  ===================================================================
arithmetic (20)             each kind of :data:`~probsched.cost_model.ops.OP_KINDS` times the
                            executions of the store; flops per execution; total flops
loop kinds (34)             for vectorized, unrolled and parallel loops around the store:
                            count, product of extents, innermost length, position one-hot
                            (none, inner/middle/outer x spatial/reduce, mixed); the unroll pragma
per buffer (5 x 18)         access type (read/write/rw), bytes, unique bytes, cache lines,
                            unique lines, reuse type (loop/serial/none), reuse distance in
                            iterations and bytes, reuse count, the four volumes / reuse count,
                            innermost stride
arithmetic intensity (10)   flops / unique bytes over the loops inside each level, sampled at
                            10 points evenly spaced in log2(iterations inside the level)
allocation (4)              store's buffer is local / intermediate, its allocated bytes, bytes
                            of every allocation of the function
loop nest (6)               product of all extents, number of loops, spatial and reduction
                            products, innermost extent, store is an init
tensorize (7)               tensorized flag, intrinsic M, N, panel K, calls, flops and bytes
                            per call
traffic (4)                 data brought into registers, L1, L2 (bytes) and the L1 data TLB
                            (pages): footprint of the outermost loop level that fits times
                            that level's executions (:data:`TRAFFIC_LEVELS`)
==========================  ===================================================================

>>> import probsched as ps
>>> w = ps.workloads.small("GMM")
>>> x = extract(ps.Schedule(w.func))
>>> x.shape == (2, N_FEATURES), x.dtype        # the init store and the update
(True, dtype('float32'))
>>> col = feature_names().index("nest.outer_prod")     # 2 x 4 x 6 inits, 2 x 4 x 6 x 5 updates
>>> (2 ** x[:, col] - 1).round().tolist()
[48.0, 240.0]
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple, Union

import numpy as np

from ..codegen.build import as_func
from ..ir.stmt import PrimFunc
from .access import BUFFER_FIELDS, CACHE_LINE, MAX_BUFFERS, Access, Buf, buffer_row, elem_bytes, footprints, local_shapes, relative
from .nest import StoreContext, store_contexts
from .ops import OP_DOCS, OP_KINDS, count_ops, flops

if TYPE_CHECKING:
    from ..schedule import Schedule

AI_POINTS = 10
LOOP_KINDS = ("vectorized", "unrolled", "parallel")
POSITIONS = ("none", "inner_spatial", "middle_spatial", "outer_spatial", "inner_reduce", "middle_reduce", "outer_reduce", "mixed")
#: (name, capacity, unit, doc) of the storage levels whose incoming traffic
#: :func:`_traffic_row` estimates (this machine's: 16 AVX2 registers, L1d and L2 of one core,
#: the L1 data TLB); unit: "bytes" of elements, "line_bytes" of whole cache lines, "pages".
TRAFFIC_LEVELS = (
    ("reg", 16 * 32, "bytes", "bytes loaded into a 512 B register file (16 AVX2 registers): footprint of the outermost level that fits x its executions"),
    ("l1", 32 * 1024, "line_bytes", "bytes of cache lines brought into a 32 KiB L1: line footprint of the outermost level that fits x its executions"),
    ("l2", 1024 * 1024, "line_bytes", "bytes of cache lines brought into a 1 MiB L2: line footprint of the outermost level that fits x its executions"),
    ("tlb", 64, "pages", "pages loaded into a 64-entry L1 data TLB: page footprint of the outermost level that fits x its executions"),
)


def _build_registry() -> List[Tuple[str, str]]:
    reg = [(f"ops.{k}", f"{OP_DOCS[k]}, times the store's executions") for k in OP_KINDS]
    reg += [("ops.flops_per_exec", "floating-point operations of one execution (FMA = 2)")]
    reg += [("ops.flops", "floating-point operations of all executions")]
    for kind in LOOP_KINDS:
        reg += [
            (f"{kind}.num", f"number of {kind} loops around the store"),
            (f"{kind}.prod", f"product of the extents of the {kind} loops"),
            (f"{kind}.len", f"extent of the innermost {kind} loop"),
        ]
        reg += [(f"{kind}.pos_{p}", f"one-hot: {kind} loops are {p.replace('_', ' ')} loops of the nest") for p in POSITIONS]
    reg += [("unroll.max_step", "largest pragma_auto_unroll_max_step on an enclosing loop")]
    for k in range(MAX_BUFFERS):
        reg += [(f"buf{k}.{f}", f"buffer {k}: {doc}") for f, doc in BUFFER_FIELDS]
    reg += [(f"ai.p{i}", f"arithmetic intensity at {i}/{AI_POINTS - 1} of log2(total iterations)") for i in range(AI_POINTS)]
    reg += [
        ("alloc.is_local", "the stored buffer is a local (scratch) allocation"),
        ("alloc.is_intermediate", "the stored buffer is a global intermediate allocation"),
        ("alloc.bytes", "allocated bytes of the stored buffer (compacted for local; 0 for parameters)"),
        ("alloc.func_bytes", "allocated bytes of every allocation of the function"),
        ("nest.outer_prod", "product of the extents of all enclosing loops (executions)"),
        ("nest.num_loops", "number of enclosing loops"),
        ("nest.spatial_prod", "product of the extents of loops that drive spatial iterators only"),
        ("nest.reduce_prod", "product of the extents of loops that drive reduction iterators"),
        ("nest.innermost_extent", "extent of the innermost enclosing loop"),
        ("nest.is_init", "the store is a reduction's init"),
        ("tensorize.flag", "the store is computed by a tensor intrinsic (micro-kernel)"),
        ("tensorize.m", "intrinsic rows (M)"),
        ("tensorize.n", "intrinsic columns (N)"),
        ("tensorize.k", "extent of the intrinsic's panel axis in this tile"),
        ("tensorize.calls", "micro-kernel calls (executions of the tensorized block)"),
        ("tensorize.flops_per_call", "floating-point operations per call"),
        ("tensorize.bytes_per_call", "footprint bytes of the operands per call"),
    ]
    reg += [(f"traffic.{name}", doc) for name, _, _, doc in TRAFFIC_LEVELS]
    return reg


_REGISTRY = _build_registry()
N_FEATURES = len(_REGISTRY)
def feature_names() -> List[str]:
    """Column names of :func:`extract`'s matrix.

    >>> len(feature_names()) == N_FEATURES and feature_names()[0]
    'ops.float_add_sub'
    """
    return [n for n, _ in _REGISTRY]


def feature_docs() -> List[Tuple[str, str]]:
    """(name, one-line description) of every column."""
    return list(_REGISTRY)


# ----------------------------------------------------------------------------- other groups


def _loop_kind_rows(ctx: StoreContext) -> List[float]:
    loops = ctx.loops
    n = len(loops)
    out: List[float] = []
    for kind in LOOP_KINDS:
        idx = [j for j, l in enumerate(loops) if l.kind == kind]
        if not idx:
            out += [0.0, 0.0, 0.0, 1.0] + [0.0] * 7
            continue
        prod = 1.0
        for j in idx:
            prod *= loops[j].extent
        cats = set()
        for j in idx:
            where = "inner" if j == n - 1 else ("outer" if j == 0 else "middle")
            cats.add(f"{where}_{'reduce' if loops[j].reduce else 'spatial'}")
        pos = cats.pop() if len(cats) == 1 else "mixed"
        out += [float(len(idx)), prod, float(loops[idx[-1]].extent)] + [float(p == pos) for p in POSITIONS]
    out.append(float(ctx.unroll_step))
    return out


def _ai_curve(flops_per_exec: float, bufs: List[Buf], inner: List[float]) -> List[float]:
    n = len(inner) - 1
    # (log2 iterations inside the level, intensity) from the body (level n) outwards
    pts = []
    for j in range(n, -1, -1):
        nbytes = sum(b.fp[j] * b.elem for b in bufs)
        pts.append((math.log2(inner[j]), flops_per_exec * inner[j] / nbytes if nbytes else 0.0))
    top = pts[-1][0]
    out = []
    k = 0
    for i in range(AI_POINTS):
        t = top * i / (AI_POINTS - 1)
        while k + 1 < len(pts) - 1 and pts[k + 1][0] < t:
            k += 1
        (x0, y0), (x1, y1) = pts[k], pts[min(k + 1, len(pts) - 1)]
        out.append(y1 if x1 <= x0 or t >= x1 else y0 + (y1 - y0) * (t - x0) / (x1 - x0))
    return out


def _row(ctx: StoreContext, func_info: dict) -> List[float]:
    loops = ctx.loops
    names = [l.name for l in loops]
    extents = [l.extent for l in loops]
    n = len(loops)
    inner = [1.0] * (n + 1)
    for j in range(n - 1, -1, -1):
        inner[j] = inner[j + 1] * extents[j]
    total = inner[0]

    counts = count_ops(ctx.store.value)
    for ix in ctx.store.indices:
        count_ops(ix, counts)
    if not ctx.is_init:
        count_ops(ctx.block.predicate, counts)
    fpe = float(flops(counts))
    row: List[float] = [c * total for c in counts] + [fpe, fpe * total]
    row += _loop_kind_rows(ctx)

    shapes, fixed = func_info["shapes"], func_info["fixed"]
    by_name: Dict[str, List[Access]] = {}
    for a in ctx.accesses:
        fx = fixed.get(a.buffer.name)
        by_name.setdefault(a.buffer.name, []).append(relative(a, fx) if fx else a)
    pos = {nm: j for j, nm in enumerate(names)}
    bufs = []
    for nm, accs in by_name.items():
        b = Buf(accs[0].buffer, shapes.get(nm, accs[0].buffer.shape), accs)
        footprints(b, pos, extents)
        bufs.append(b)
    write_name = ctx.store.buffer.name
    ordered = sorted(bufs, key=lambda b: (b.name != write_name, -len(b.accesses) * b.elem, b.name))
    for k in range(MAX_BUFFERS):
        if k < len(ordered):
            row += buffer_row(ordered[k], bufs, names, extents, inner, total)
        else:
            row += [0.0] * len(BUFFER_FIELDS)
    row += _ai_curve(fpe, bufs, inner)

    sbuf = ctx.store.buffer
    scope = func_info["scope"].get(write_name)
    alloc_shape = shapes.get(write_name, sbuf.shape)
    alloc_bytes = float(np.prod(alloc_shape)) * elem_bytes(sbuf.dtype) if scope else 0.0
    row += [float(scope == "local"), float(scope == "global"), alloc_bytes, func_info["alloc_bytes"]]

    sp = rd = 1.0
    for l in loops:
        if l.reduce:
            rd *= l.extent
        else:
            sp *= l.extent
    row += [total, float(n), sp, rd, float(extents[-1]) if n else 0.0, float(ctx.is_init)]
    row += _tensorize_row(ctx, bufs, inner, fpe)
    row += _traffic_row(bufs, inner)
    return row


def _traffic_row(bufs: List[Buf], inner: List[float]) -> List[float]:
    """Data moved into each level of :data:`TRAFFIC_LEVELS` by this store (a capacity
    model): the outermost loop level whose footprint (all the store's buffers) fits the
    capacity is where the data stays resident, so each execution of that level brings its
    footprint in once. Footprints and reuse distances (``buf*.*``) do not say *how often* a
    tile is reloaded; this does: a depthwise convolution whose rows are 14 KiB apart touches
    a new page per iteration of its innermost spatial loop (``tlb``), a tap-outer loop order
    re-streams an accumulator tile that outgrew L1 once per tap (``l1``)."""
    n = len(inner) - 1
    out = []
    for _, cap, unit, _ in TRAFFIC_LEVELS:
        for j in range(n + 1):
            if unit == "pages":
                size = sum(b.fp_pages[j] for b in bufs)
            elif unit == "line_bytes":
                size = sum(b.fp_lines[j] * CACHE_LINE for b in bufs)
            else:
                size = sum(b.fp[j] * b.elem for b in bufs)
            if size <= cap or j == n:
                out.append(size * inner[0] / inner[j])
                break
    return out


def _tensorize_row(ctx: StoreContext, bufs: List[Buf], inner: List[float], fpe: float) -> List[float]:
    t = ctx.tensorized
    if t is None:
        return [0.0] * 7
    from .. import intrinsics

    try:
        meta = intrinsics.get(t.intrinsic).meta
        panel = intrinsics.get(t.intrinsic).panel_axis
        (dblk,) = intrinsics.get(t.intrinsic).description.blocks()
        axes = dict(zip([it.var.name for it in dblk.iters], t.axes))
    except Exception:
        meta, panel, axes = {}, None, {}
    ext = {l.name: l.extent for l in ctx.loops}
    k = float(ext.get(axes.get(panel), 0)) if panel else 0.0
    d = t.tile_depth
    calls = inner[0] / inner[d]
    return [
        1.0,
        float(meta.get("M", 0)),
        float(meta.get("N", 0)),
        k,
        calls,
        fpe * inner[d],
        float(sum(b.fp[d] * b.elem for b in bufs)),
    ]


# ----------------------------------------------------------------------------- public


def extract(sch_or_func: Union[PrimFunc, "Schedule"]) -> np.ndarray:
    """Features of every store of a scheduled function: float32 ``(n_stores, N_FEATURES)``.

    ``sch_or_func`` is a :class:`~probsched.Schedule` (its ``mod`` is used) or a PrimFunc.
    """
    func = as_func(sch_or_func)
    ctxs = store_contexts(func)
    shapes, fixed = local_shapes(func, ctxs)
    # lowering compacts what ``fixed`` names into local tiles, global intermediates included
    info = {"shapes": shapes, "fixed": fixed, "scope": {b.name: "local" if b.name in fixed else b.scope for b in func.allocs}}
    info["alloc_bytes"] = float(
        sum(float(np.prod(info["shapes"].get(b.name, b.shape))) * elem_bytes(b.dtype) for b in func.allocs)
    )
    rows = [_row(c, info) for c in ctxs]
    if not rows:
        return np.zeros((0, N_FEATURES), dtype=np.float32)
    x = np.asarray(rows, dtype=np.float64)
    return np.log2(1.0 + np.abs(x)).astype(np.float32)


def extract_batch(items: Sequence) -> List[np.ndarray]:
    """:func:`extract` of each schedule or function."""
    return [extract(x) for x in items]


if __name__ == "__main__":  # the feature table, one line per column
    for i, (name, doc) in enumerate(_REGISTRY):
        print(f"{i:4d}  {name:34s} {doc}")
