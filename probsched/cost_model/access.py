"""Per-buffer access features of one store: footprints, cache lines, strides and reuse.

Each buffer a store touches gets a box footprint per loop level (how far each dimension
moves over the loops inside that level, from the linear forms of :mod:`.nest`, clipped to
the buffer's shape), the flat slope of its access along every loop, and from these the
18 numbers of :data:`BUFFER_FIELDS`.

>>> import probsched as ps
>>> from probsched.cost_model.nest import store_contexts
>>> A = ps.placeholder((8, 16), name="A")
>>> B = ps.compute((8, 16), lambda i, j: A[j % 8, i] * 2.0, name="B")
>>> (ctx,) = store_contexts(ps.create_func([A, B]))
>>> b = Buf(ctx.accesses[1].buffer, (8, 16), [ctx.accesses[1]])
>>> footprints(b, {"i": 0, "j": 1}, [8, 16])
>>> b.fp, b.slopes      # whole nest, inside i, inside j; A[j % 8, i] moves 16 elements per j
([64.0, 8.0, 1.0], [1.0, 16.0])
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

from ..ir.dtypes import DTYPES, storage_dtype
from ..ir.stmt import PrimFunc
from .nest import Access, StoreContext

CACHE_LINE = 64
#: Bytes of a virtual-memory page: TLB reach is counted in these.
PAGE = 4096
MAX_BUFFERS = 5
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




def elem_bytes(dtype: str) -> int:
    return storage_dtype(dtype).itemsize if dtype in DTYPES else 4


class Buf:
    """The accesses of one buffer by one store, with footprints per loop level."""

    __slots__ = ("name", "buffer", "shape", "accesses", "reads", "writes", "elem", "ranges", "fp", "fp_lines", "fp_pages", "slopes", "moving")

    def __init__(self, buffer, shape, accesses: List[Access]) -> None:
        self.name = buffer.name
        self.buffer = buffer
        self.shape = shape
        self.accesses = accesses
        self.reads = sum(not a.is_write for a in accesses)
        self.writes = len(accesses) - self.reads
        self.elem = elem_bytes(buffer.dtype)


def footprints(b: Buf, pos: Dict[str, int], extents: Sequence[int]) -> None:
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
    fp, fpl, fpp = [], [], []
    line_elems = max(1, CACHE_LINE // b.elem)
    shape = b.shape
    dim_strides = [1] * ndim  # row-major element strides
    for d in range(ndim - 2, -1, -1):
        dim_strides[d] = dim_strides[d + 1] * shape[d + 1]
    for j in range(n + 1):
        box = [min(shape[d], spans[d][j] + 1) for d in range(ndim)]
        prod = 1.0
        for d in range(ndim - 1):
            prod *= box[d]
        last = box[-1] if ndim else 1
        fp.append(prod * last)
        fpl.append(prod * math.ceil(last / line_elems))
        # pages: contiguous runs (trailing dims the box covers whole merge into one run),
        # at most the pages of the box's flat extent (runs closer than a page share pages)
        k, run = ndim - 1, float(last)
        while k > 0 and box[k] == shape[k]:
            k -= 1
            run *= box[k]
        runs = 1.0
        for d in range(k):
            runs *= box[d]
        flat = b.elem * (1.0 + sum((box[d] - 1) * dim_strides[d] for d in range(ndim)))
        fpp.append(max(1.0, min(runs * math.ceil(run * b.elem / PAGE), math.ceil(flat / PAGE))))
    b.fp, b.fp_lines, b.fp_pages, b.moving = fp, fpl, fpp, moving
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


def buffer_row(b: Buf, bufs: List[Buf], names, extents, inner: List[float], total: float) -> List[float]:
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


def local_shapes(func: PrimFunc, ctxs: List[StoreContext]) -> Tuple[Dict[str, Tuple[int, ...]], Dict[str, set]]:
    """Shapes ``compact_local_buffers`` gives local buffers, and global intermediates that a
    loop encloses every access to (it makes those local): the box each one spans inside the
    innermost loop enclosing all its accesses (estimated from the linear forms), and those
    enclosing loops: compacted indices are relative to a start that only they move."""
    out: Dict[str, Tuple[int, ...]] = {}
    fixed_of: Dict[str, set] = {}
    for buf in func.allocs:
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
        if buf.scope == "global" and not common:  # computed at the root: stays whole
            continue
        fixed = fixed_of[buf.name] = set(common)
        spans = [0.0] * len(buf.shape)
        for c, accs in users:
            ext = {l.name: l.extent for l in c.loops if l.name not in fixed}
            for a in accs:
                for d, (coefs, _) in enumerate(a.forms):
                    s = sum(abs(k) * (ext[v] - 1) for v, k in coefs.items() if v in ext)
                    spans[d] = max(spans[d], s)
        shape = tuple(min(dim, int(math.ceil(s)) + 1) for dim, s in zip(buf.shape, spans))
        if buf.scope == "global" and shape == buf.shape:  # nothing to shrink: lowering leaves it
            del fixed_of[buf.name]
            continue
        out[buf.name] = shape
    return out, fixed_of


def relative(a: Access, fixed: set) -> Access:
    """``a`` with the slopes of ``fixed`` loops dropped (an access of a compacted buffer)."""
    return Access(a.buffer, a.is_write, tuple(({v: c for v, c in f[0].items() if v not in fixed}, f[1]) for f in a.forms))
