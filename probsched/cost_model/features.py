"""Per-store program features, in the spirit of MetaSchedule's PerStoreFeature.

:func:`extract` turns a scheduled function into a float32 matrix with one row per store
(block bodies and inits, program order) and :data:`N_FEATURES` columns; :func:`feature_names`
and :func:`feature_docs` name and document each column (``python -m
probsched.cost_model.features`` prints the table). Every value is log-scaled as
``log2(1 + x)`` (one-hot flags stay 0/1), so counts that span orders of magnitude become
comparable inputs for a model.

**Which program.** Features describe the program code generation compiles: unroll pragmas
are applied (the rule of :func:`~probsched.lowering.apply_unroll_pragmas`, during the walk)
and ``local`` buffers
are sized as :func:`~probsched.lowering.compact_local_buffers` would size them, but estimated
here from the access boxes the features compute anyway instead of running the pass: a full
:func:`~probsched.lowering.lower` costs about 1.5 ms per GMM candidate, most of the budget
for scoring a population. Passing an already lowered function gives the same features.

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
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ..codegen.build import as_func
from ..ir.stmt import PrimFunc
from .nest import Access, StoreContext, store_contexts
from .ops import OP_DOCS, OP_KINDS, count_ops, flops

CACHE_LINE = 64
MAX_BUFFERS = 5
AI_POINTS = 10
LOOP_KINDS = ("vectorized", "unrolled", "parallel")
POSITIONS = ("none", "inner_spatial", "middle_spatial", "outer_spatial", "inner_reduce", "middle_reduce", "outer_reduce", "mixed")
BUFFER_FIELDS = (
    ("acc_read", "accessed only by loads"),
    ("acc_write", "accessed only by the store"),
    ("acc_rw", "both loaded and stored (an accumulator)"),
    ("bytes", "bytes accessed over all executions of the store"),
    ("unique_bytes", "bytes of the distinct elements accessed (footprint)"),
    ("lines", "cache lines touched: runs along the innermost varying loop x lines per run"),
    ("unique_lines", "distinct cache lines of the footprint"),
    ("reuse_loop", "reuse type: some loop does not move the access (loop-carried reuse)"),
    ("reuse_serial", "reuse type: read and written in the same execution (no invariant loop)"),
    ("reuse_none", "reuse type: no reuse"),
    ("reuse_dis_iter", "iterations between reuses (inside the innermost invariant loop)"),
    ("reuse_dis_bytes", "bytes of all the store's buffers touched between reuses"),
    ("reuse_ct", "extent of the innermost invariant loop (times an element is reused there)"),
    ("bytes_d_reuse_ct", "bytes / reuse count"),
    ("unique_bytes_d_reuse_ct", "unique bytes / reuse count"),
    ("lines_d_reuse_ct", "lines / reuse count"),
    ("unique_lines_d_reuse_ct", "unique lines / reuse count"),
    ("stride", "elements between consecutive accesses along the innermost loop that moves it"),
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
    return reg


_REGISTRY = _build_registry()
N_FEATURES = len(_REGISTRY)
_FLAG = np.array(
    [n.split(".")[-1].startswith(("pos_", "acc_", "reuse_loop", "reuse_serial", "reuse_none", "is_", "flag")) for n, _ in _REGISTRY]
)


def feature_names() -> List[str]:
    """Column names of :func:`extract`'s matrix.

    >>> len(feature_names()) == N_FEATURES and feature_names()[0]
    'ops.float_add_sub'
    """
    return [n for n, _ in _REGISTRY]


def feature_docs() -> List[Tuple[str, str]]:
    """(name, one-line description) of every column."""
    return list(_REGISTRY)


# ----------------------------------------------------------------------------- per buffer


def _elem_bytes(dtype: str) -> int:
    return 8 if dtype in ("float64", "int64") else (1 if dtype == "bool" else 4)


class _Buf:
    """The accesses of one buffer by one store, with footprints per loop level."""

    __slots__ = ("name", "buffer", "shape", "accesses", "reads", "writes", "elem", "ranges", "fp", "fp_lines", "slopes", "moving")

    def __init__(self, buffer, shape, accesses: List[Access]) -> None:
        self.name = buffer.name
        self.buffer = buffer
        self.shape = shape
        self.accesses = accesses
        self.reads = sum(not a.is_write for a in accesses)
        self.writes = len(accesses) - self.reads
        self.elem = _elem_bytes(buffer.dtype)


def _footprints(b: _Buf, pos: Dict[str, int], extents: Sequence[int]) -> None:
    """Footprint (elements and cache lines) of ``b`` over the loops inside each level 0..n,
    the loops that move it, and the flat slope of its representative access per loop."""
    n = len(extents)
    ndim = len(b.shape)
    # spans[d][j]: how far dimension d moves over loops j..n-1 (max over the accesses)
    spans = [[0.0] * (n + 1) for _ in range(ndim)]
    moving = set()
    for a in b.accesses:
        for d, (coefs, _) in enumerate(a.forms):
            if not coefs:
                continue
            contrib = [0.0] * n
            for v, c in coefs.items():
                j = pos.get(v)
                if j is not None and c:
                    contrib[j] += abs(c) * (extents[j] - 1)
                    moving.add(j)
            acc = 0.0
            row = spans[d]
            for j in range(n - 1, -1, -1):
                acc += contrib[j]
                if acc > row[j]:
                    row[j] = acc
    fp, fpl = [], []
    line_elems = max(1, CACHE_LINE // b.elem)
    shape = b.shape
    for j in range(n + 1):
        prod = 1.0
        for d in range(ndim - 1):
            prod *= min(shape[d], spans[d][j] + 1)
        last = min(shape[-1], spans[-1][j] + 1) if ndim else 1
        fp.append(prod * last)
        fpl.append(prod * math.ceil(last / line_elems))
    b.fp, b.fp_lines, b.moving = fp, fpl, moving
    # flat slope (elements) of the representative access per loop: the write, else the first
    rep = next((a for a in b.accesses if a.is_write), b.accesses[0])
    slopes = [0.0] * n
    stride = 1
    for d in range(ndim - 1, -1, -1):
        for v, c in rep.forms[d][0].items():
            j = pos.get(v)
            if j is not None:
                slopes[j] += c * stride
        stride *= shape[d]
    b.slopes = slopes


def _buffer_row(b: _Buf, bufs: List[_Buf], names, extents, inner: List[float], total: float) -> List[float]:
    n = len(names)
    kind = [float(b.writes == 0), float(b.reads == 0), float(b.reads > 0 and b.writes > 0)]
    nbytes = total * b.elem * len(b.accesses)
    unique_bytes = b.fp[0] * b.elem
    k_star = next((j for j in range(n - 1, -1, -1) if b.slopes[j] and extents[j] > 1), None)
    if k_star is None:
        stride, lines = 0.0, total / max(inner[0], 1.0)
    else:
        stride = abs(b.slopes[k_star])
        run = extents[k_star]
        per_run = min(run, math.ceil(run * stride * b.elem / CACHE_LINE))
        lines = total / inner[k_star] * per_run
    unique_lines = b.fp_lines[0]
    invariant = [j for j in range(n) if extents[j] > 1 and j not in b.moving]
    if invariant:
        r = invariant[-1]
        reuse = [1.0, 0.0, 0.0]
        dis_iter = inner[r + 1]
        dis_bytes = sum(o.fp[r + 1] * o.elem for o in bufs)
        ct = float(extents[r])
    elif b.reads and b.writes:
        reuse = [0.0, 1.0, 0.0]
        dis_iter, dis_bytes, ct = 1.0, float(sum(o.elem * len(o.accesses) for o in bufs)), float(len(b.accesses) - 1)
    else:
        reuse = [0.0, 0.0, 1.0]
        dis_iter = dis_bytes = ct = 0.0
    div = max(ct, 1.0)
    return kind + [nbytes, unique_bytes, lines, unique_lines] + reuse + [
        dis_iter,
        dis_bytes,
        ct,
        nbytes / div,
        unique_bytes / div,
        lines / div,
        unique_lines / div,
        stride,
    ]


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


def _ai_curve(flops_per_exec: float, bufs: List[_Buf], inner: List[float]) -> List[float]:
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


def _local_shapes(func: PrimFunc, ctxs: List[StoreContext]) -> Tuple[Dict[str, Tuple[int, ...]], Dict[str, set]]:
    """Shapes ``compact_local_buffers`` gives local buffers: the box each one spans inside the
    innermost loop enclosing all its accesses (estimated from the linear forms), and those
    enclosing loops: compacted indices are relative to a start that only they move."""
    out: Dict[str, Tuple[int, ...]] = {}
    fixed_of: Dict[str, set] = {}
    for buf in func.allocs:
        if buf.scope != "local":
            continue
        users = [(c, [a for a in c.accesses if a.buffer.name == buf.name]) for c in ctxs]
        users = [(c, acc) for c, acc in users if acc]
        if not users:
            continue
        common = [l.name for l in users[0][0].loops]
        for c, _ in users[1:]:
            names = [l.name for l in c.loops]
            k = 0
            while k < min(len(common), len(names)) and common[k] == names[k]:
                k += 1
            common = common[:k]
        fixed = fixed_of[buf.name] = set(common)
        spans = [0.0] * len(buf.shape)
        for c, accs in users:
            ext = {l.name: l.extent for l in c.loops if l.name not in fixed}
            for a in accs:
                for d, (coefs, _) in enumerate(a.forms):
                    s = sum(abs(k) * (ext[v] - 1) for v, k in coefs.items() if v in ext)
                    spans[d] = max(spans[d], s)
        out[buf.name] = tuple(min(dim, int(math.ceil(s)) + 1) for dim, s in zip(buf.shape, spans))
    return out, fixed_of


def _relative(a: Access, fixed: set) -> Access:
    """``a`` with the slopes of ``fixed`` loops dropped (an access of a compacted buffer)."""
    return Access(a.buffer, a.is_write, tuple(({v: c for v, c in f[0].items() if v not in fixed}, f[1]) for f in a.forms))


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
        by_name.setdefault(a.buffer.name, []).append(_relative(a, fx) if fx else a)
    pos = {nm: j for j, nm in enumerate(names)}
    bufs = []
    for nm, accs in by_name.items():
        b = _Buf(accs[0].buffer, shapes.get(nm, accs[0].buffer.shape), accs)
        _footprints(b, pos, extents)
        bufs.append(b)
    write_name = ctx.store.buffer.name
    ordered = sorted(bufs, key=lambda b: (b.name != write_name, -len(b.accesses) * b.elem, b.name))
    for k in range(MAX_BUFFERS):
        if k < len(ordered):
            row += _buffer_row(ordered[k], bufs, names, extents, inner, total)
        else:
            row += [0.0] * len(BUFFER_FIELDS)
    row += _ai_curve(fpe, bufs, inner)

    sbuf = ctx.store.buffer
    scope = func_info["scope"].get(write_name)
    alloc_shape = shapes.get(write_name, sbuf.shape)
    alloc_bytes = float(np.prod(alloc_shape)) * _elem_bytes(sbuf.dtype) if scope else 0.0
    row += [float(scope == "local"), float(scope == "global"), alloc_bytes, func_info["alloc_bytes"]]

    sp = rd = 1.0
    for l in loops:
        if l.reduce:
            rd *= l.extent
        else:
            sp *= l.extent
    row += [total, float(n), sp, rd, float(extents[-1]) if n else 0.0, float(ctx.is_init)]
    row += _tensorize_row(ctx, bufs, inner, fpe)
    return row


def _tensorize_row(ctx: StoreContext, bufs: List[_Buf], inner: List[float], fpe: float) -> List[float]:
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


def extract(sch_or_func) -> np.ndarray:
    """Features of every store of a scheduled function: float32 ``(n_stores, N_FEATURES)``.

    ``sch_or_func`` is a :class:`~probsched.Schedule` (its ``mod`` is used) or a PrimFunc.
    """
    func = as_func(sch_or_func)
    ctxs = store_contexts(func)
    shapes, fixed = _local_shapes(func, ctxs)
    info = {"shapes": shapes, "fixed": fixed, "scope": {b.name: b.scope for b in func.allocs}}
    info["alloc_bytes"] = float(
        sum(float(np.prod(info["shapes"].get(b.name, b.shape))) * _elem_bytes(b.dtype) for b in func.allocs)
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
