"""``winograd``: a 3x3 stride-1 convolution block rewritten as Winograd's F(m x m, 3 x 3).

The block must be an unscheduled channels-last convolution (NHWC data, HWIO weight)
``C[n, h, w, co] += X[n, h + rh + c, w + rw + c', rc] * W[rh, rw, rc, co]`` with a 3x3
kernel, stride 1 and dilation 1 (``c``, ``c'`` constant offsets into ``X``, a padding stage
or the input itself). With ``m`` the output tile, ``alpha = m + 2``, the image cut into
``TH x TW`` tiles (the last row and column of tiles may stick out) and ``T = N TH TW``
tiles ``t = (n TH + th) TW + tw`` in all, it becomes (matrices of
:mod:`probsched.ir.winograd`):

- ``C_wino_kernel[k, l, ci, co] = sum_ab G[k, a] G[l, b] W[a, b, ci, co]``: the weight
  transform, a stage of the program, unless ``W`` is a parameter the function calls
  layout-free (``layout_free_buffers``: a network's weight) and read by this block only.
  Then the parameter itself is transformed (:class:`~probsched.ir.winograd.WinogradKernel`,
  recorded in ``layout_transforms`` as a layout is): the kernel reads ``U`` in place of
  ``W``, callers still pass ``W``, and binding the kernel computes ``U`` once.
- ``C_wino_data[k, l, t, ci] = sum_ab B^T[k, a] B^T[l, b] X[n, th m + a + c, tw m + b + c', ci]``:
  the input tiles' transform; a row or column past the end of ``X`` (in a tile that sticks
  out) is read as zero.
- ``C_wino_bgemm[k, l, t, co] = sum_ci C_wino_data[k, l, t, ci] * U[k, l, ci, co]``: alpha^2
  independent matrix products, tiles by input channels by output channels, which the
  micro-kernel rule tiles and tensorizes like any matmul.
- ``C[n, th m + i, tw m + j, co] = sum_kl A^T[i, k] A^T[j, l] C_wino_bgemm[k, l, t, co]``,
  for the outputs inside the image: the output transform writes the block's own buffer, so
  its consumers (a network's bias, batch norm and ReLU) read what they read before.

The matrices are small constant buffers (``C_wino_B``, ``C_wino_A``, ``C_wino_G``), each
filled by a block of its own. Each transform is two passes under the loops over tiles and
chunks of channels: the columns of a tile into a local ``<stage>_half``, then its rows into
the stage's buffer, each element one sum of ``alpha`` products written out (a register
sum whose coefficients are loaded once per chunk), the channel loop innermost (it
vectorizes). Written as reductions accumulating in memory, the same passes ran 10-15x
slower (ResNet-50's first 3x3 layer: 0.9-1.9 ms against 0.09-0.16 for its input
transform). Sums with the constants folded in would also skip the zero coefficients,
but numba's compile time grows with every emitted term, and for F(4x4) such code takes
many times longer to compile. The transforms keep these loop nests (the space hands only
the batched matmul to its rules). The function records the rewrite in its ``winograd``
attribute (:data:`~probsched.ir.winograd.WINOGRAD`): the check of its results allows
Winograd's larger rounding error
(:func:`probsched.workloads.scheduled_tolerance`).

>>> import numpy as np, probsched as ps
>>> w = ps.workloads.conv2d_nhwc(1, 5, 6, 3, 4, kernel=3, stride=1, pad=1)
>>> func, blocks = winograd(w.func, "conv2d", 2)
>>> blocks
['conv2d_wino_B', 'conv2d_wino_A', 'conv2d_wino_G', 'conv2d_wino_kernel_half', 'conv2d_wino_kernel', 'conv2d_wino_data_half', 'conv2d_wino_data', 'conv2d_wino_bgemm', 'conv2d_wino_output_half', 'conv2d']
>>> from probsched.ir.interpreter import evaluate
>>> x, wt = w.random_inputs(np.random.default_rng(0))
>>> w.check(evaluate(func, x, wt), w.reference(x, wt))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..ir.expr import BinOp, Cast, Const, Expr, Load, Var, all_of, eq, if_then_else
from ..ir.layout import LAYOUT_FREE, LAYOUT_TRANSFORMS, layouts_of
from ..ir.stmt import Block, Buffer, IterVar, Loop, PrimFunc, Store
from ..ir.winograd import KERNEL, TILES, WINOGRAD, WinogradKernel, exact_matrices
from .analysis import affine
from .tree import TreeIndex, all_names, fresh_name, require, unscheduled

PRIMITIVE = "winograd"


@dataclass(frozen=True)
class ConvRoles:
    """What the rewrite reads off a convolution block: buffers, iterators, sizes."""

    out: Buffer  # C
    data: Buffer  # X
    weight: Buffer  # W
    offsets: Tuple[int, int]  # c, c': X's row and column of output (0, 0), tap (0, 0)
    batch: int
    height: int
    width: int
    in_channels: int
    out_channels: int


def match_conv(func: PrimFunc, block: str) -> Tuple[Optional[ConvRoles], str]:
    """``(roles, "")`` when block ``block`` of ``func`` is a convolution :func:`winograd`
    takes (see the module docstring), else ``(None, why not)``.

    >>> import probsched as ps
    >>> match_conv(ps.workloads.get("C2D:2").func, "conv2d")[0].in_channels
    256
    >>> match_conv(ps.workloads.small("C2D").func, "conv2d")[1]
    'block conv2d: stride or dilation is not 1 (data index v_h * 2 + v_rh)'
    """
    idx = TreeIndex.of(func)
    if block not in idx.blocks:
        return None, f"no block named {block!r}"
    blk = idx.block(block)
    st = blk.body
    if not isinstance(st, Store) or not blk.is_reduction or blk.annotations:
        return None, f"block {block} is not a plain reduction (scheduled already, or tensorized)"
    if not unscheduled(idx, blk):
        return None, f"block {block} is scheduled already (rewrite it before other primitives)"
    init = blk.init
    if not (isinstance(init, Store) and init.indices == st.indices and isinstance(init.value, Const) and init.value.value == 0):
        return None, f"block {block} does not start its sum from zero"
    value = st.value
    if not (isinstance(value, BinOp) and value.op == "add" and isinstance(value.b, BinOp) and value.b.op == "mul"):
        return None, f"block {block} is not a sum of products"
    acc, lhs, rhs = value.a, value.b.a, value.b.b
    if not (isinstance(acc, Load) and acc.buffer.name == st.buffer.name and acc.indices == st.indices):
        return None, f"block {block} is not a sum of products"
    if st.buffer.dtype != "float32" or any(isinstance(x, Cast) or x.dtype != "float32" for x in (lhs, rhs)):
        return None, f"block {block}: Winograd's rewrite takes float32 products and outputs"
    if not (isinstance(lhs, Load) and isinstance(rhs, Load)):
        return None, f"block {block}: the products are not of two loads"
    if len(blk.iters) != 7 or sum(it.kind == "R" for it in blk.iters) != 3:
        return None, f"block {block} is not a 2-d convolution (4 spatial and 3 reduction iterators)"
    kinds = {it.var.name: it for it in blk.iters}
    out_vars = [ix.name if isinstance(ix, Var) else None for ix in st.indices]
    if len(out_vars) != 4 or None in out_vars or len(set(out_vars)) != 4 or any(kinds[v].kind != "S" for v in out_vars):
        return None, f"block {block}: the output is not indexed [n, h, w, co] by its spatial iterators"
    n, h, w, co = out_vars
    x, wt = (lhs, rhs) if _is_var(rhs.indices[-1], co) else (rhs, lhs)
    wix = [ix.name if isinstance(ix, Var) else None for ix in wt.indices]
    if len(wix) != 4 or wix[3] != co or None in wix[:3] or len(set(wix)) != 4:
        return None, f"block {block}: the weight is not indexed [rh, rw, rc, co] (HWIO)"
    rh, rw, rc = wix[:3]
    if any(kinds.get(v) is None or kinds[v].kind != "R" for v in (rh, rw, rc)):
        return None, f"block {block}: the weight's first three indices are not its reduction iterators"
    if kinds[rh].extent != KERNEL or kinds[rw].extent != KERNEL:
        return None, f"block {block}: the kernel is {kinds[rh].extent}x{kinds[rw].extent}, not 3x3"
    if len(x.indices) != 4 or not (_is_var(x.indices[0], n) and _is_var(x.indices[3], rc)):
        return None, f"block {block}: the data is not indexed [n, ., ., rc] (NHWC)"
    offsets = []
    for ix, sp, r in ((x.indices[1], h, rh), (x.indices[2], w, rw)):
        form = affine(ix)
        if form is None or form[0] != {sp: 1, r: 1} or form[1] < 0:
            return None, f"block {block}: stride or dilation is not 1 (data index {ix})"
        offsets.append(form[1])
    if x.buffer.name in (st.buffer.name, wt.buffer.name):
        return None, f"block {block} reads its output or reads one buffer twice"
    shape = st.buffer.shape
    roles = ConvRoles(
        st.buffer, x.buffer, wt.buffer, (offsets[0], offsets[1]),
        kinds[n].extent, kinds[h].extent, kinds[w].extent, kinds[rc].extent, kinds[co].extent,
    )
    if (roles.batch, roles.height, roles.width, roles.out_channels) != tuple(shape):
        return None, f"block {block} writes only part of {st.buffer.name}"
    return roles, ""


def _is_var(e: Expr, name: str) -> bool:
    return isinstance(e, Var) and e.name == name


def weight_is_bound(func: PrimFunc, roles: ConvRoles) -> bool:
    """Whether the rewrite transforms the weight parameter itself (computed once, when the
    kernel is bound) rather than in a stage: a layout-free parameter read by this block
    alone and not transformed already."""
    w = roles.weight.name
    readers = [b for b in func.blocks() if any(buf.name == w for buf, _ in b.reads())]
    return (
        w in (func.attr(LAYOUT_FREE) or ())
        and any(p.name == w for p in func.params)
        and w not in layouts_of(func)
        and len(readers) == 1
    )


def winograd(func: PrimFunc, block: str, tile: int) -> Tuple[PrimFunc, List[str]]:
    """``func`` with convolution ``block`` computed by F(``tile`` x ``tile``, 3x3) (module
    docstring), and the names of the blocks that replace it, in program order: the
    matrices' tables, the weight's two passes (unless it is bound), the input's two, the
    batched matmul, the output's two (the last keeps the block's name). Raises
    ScheduleError naming what does not fit."""
    require(tile in TILES, PRIMITIVE, f"tile {tile!r} is not one of {TILES}")
    roles, why = match_conv(func, block)
    require(roles is not None, PRIMITIVE, why)
    return _Rewrite(func, block, roles, tile).run()


class _Rewrite:
    """One application of :func:`winograd`: names, buffers and the stages' loop nests."""

    def __init__(self, func: PrimFunc, block: str, roles: ConvRoles, m: int) -> None:
        self.func, self.block, self.roles, self.m = func, block, roles, m
        self.alpha = m + KERNEL - 1
        self.grid = (roles.batch, -(-roles.height // m), -(-roles.width // m))
        self.taken = all_names(func)
        self.bound = weight_is_bound(func, roles)
        self.allocs: List[Buffer] = []
        self.created: List[str] = []

    def take(self, base: str) -> str:
        """``base``, or ``base_1``, ... whichever no loop, block or buffer has."""
        name = fresh_name(self.taken, base)
        self.taken.add(name)
        return name

    def buffer(self, stage: str, shape: tuple, scope: str = "global") -> Buffer:
        """A new buffer the function allocates, named after the block and ``stage``."""
        buf = Buffer(self.take(f"{self.block}_wino_{stage}"), shape, "float32", scope)
        self.allocs.append(buf)
        return buf

    def run(self) -> Tuple[PrimFunc, List[str]]:
        roles, alpha, m, block, grid = self.roles, self.alpha, self.m, self.block, self.grid
        tiles = grid[0] * grid[1] * grid[2]
        ci, co = roles.in_channels, roles.out_channels
        at, g, bt = exact_matrices(m)
        nests: List[Loop] = []
        tables = {}
        for key, mat in (("B", bt), ("A", at)) + ((("G", g),) if not self.bound else ()):
            tables[key] = self.buffer(key, (len(mat), len(mat[0])))
            nests.append(self._table(tables[key], mat))
        if self.bound:
            u = Buffer(roles.weight.name, (alpha, alpha, ci, co), "float32")
        else:
            w = roles.weight
            half = self.buffer("kernel_half", (ci, alpha, KERNEL, co), "local")
            u = self.buffer("kernel", (alpha, alpha, ci, co))
            nests.append(self._transform(
                [("ci", ci)], ("co", co), tables["G"], half, u,
                lambda v, a, b: Load(w, (a, b, v["ci"], v["co"])),
                lambda v, p, b: (v["ci"], p, b, v["co"]),
                lambda v, p, q: (p, q, v["ci"], v["co"]),
            ))
        data = self.buffer("data", (alpha, alpha, tiles, ci))
        half = self.buffer("data_half", grid + (alpha, alpha, ci), "local")
        nests.append(self._transform(
            [("n", grid[0]), ("th", grid[1]), ("tw", grid[2])], ("ci", ci), tables["B"], half, data,
            self._data_tap,
            lambda v, p, b: (v["n"], v["th"], v["tw"], p, b, v["ci"]),
            lambda v, p, q: (p, q, self._tile_index(v), v["ci"]),
        ))
        bgemm = self.buffer("bgemm", (alpha, alpha, tiles, co))
        nests.append(self._bgemm(data, u, bgemm))
        half = self.buffer("output_half", grid + (m, alpha, co), "local")
        nests.append(self._transform(
            [("n", grid[0]), ("th", grid[1]), ("tw", grid[2])], ("co", co), tables["A"], half, roles.out,
            lambda v, a, b: Load(bgemm, (a, b, self._tile_index(v), v["co"])),
            lambda v, p, b: (v["n"], v["th"], v["tw"], p, b, v["co"]),
            lambda v, p, q: (v["n"], v["th"] * m + p, v["tw"] * m + q, v["co"]),
            self._inside, final=block,
        ))
        func = self.func
        position = TreeIndex.of(func).block_path(block)[0]
        body = func.body[:position] + tuple(nests) + func.body[position + 1 :]
        params, attrs = func.params, dict(func.attrs)
        if self.bound:
            params = tuple(u if p.name == u.name else p for p in params)
            transform = WinogradKernel(roles.weight.shape, m)
            attrs[LAYOUT_TRANSFORMS] = tuple(attrs.get(LAYOUT_TRANSFORMS, ())) + ((u.name, transform.to_json()),)
        attrs[WINOGRAD] = tuple(attrs.get(WINOGRAD, ())) + ((block, m, ci),)
        out = func.replace(params=params, body=body, allocs=func.allocs + tuple(self.allocs), attrs=attrs)
        return out, self.created

    def _tile_index(self, v: Dict[str, Var]) -> Expr:
        """The tile ``t = (n TH + th) TW + tw`` of the iterators ``v``."""
        return (v["n"] * self.grid[1] + v["th"]) * self.grid[2] + v["tw"]

    def _data_tap(self, v: Dict[str, Var], a: Var, b: Var) -> Expr:
        """Element ``(a, b)`` of input tile ``(n, th, tw)``, channel ``ci``; zero past the end
        of the data (in a tile that sticks out), where only outputs outside the image read
        it: a finite value, so it cancels exactly."""
        roles, m = self.roles, self.m
        x = roles.data
        row = v["th"] * m + a + roles.offsets[0]
        col = v["tw"] * m + b + roles.offsets[1]
        value: Expr = Load(x, (v["n"], row, col, v["ci"]))
        guards = []
        if (self.grid[1] - 1) * m + self.alpha - 1 + roles.offsets[0] >= x.shape[1]:
            guards.append(row < x.shape[1])
        if (self.grid[2] - 1) * m + self.alpha - 1 + roles.offsets[1] >= x.shape[2]:
            guards.append(col < x.shape[2])
        return if_then_else(all_of(*guards), value, Const(0.0, "float32")) if guards else value

    def _inside(self, v: Dict[str, Var], p: Var, q: Var) -> Expr:
        """Whether output ``(p, q)`` of tile ``(th, tw)`` lies inside the image."""
        roles, m = self.roles, self.m
        row, col = v["th"] * m + p, v["tw"] * m + q
        return all_of(*([row < roles.height] if roles.height % m else []), *([col < roles.width] if roles.width % m else []))

    def _table(self, buf: Buffer, mat) -> Loop:
        """A block filling ``buf`` with the constant matrix ``mat`` (selected by its
        iterators: what a program has for a constant array)."""
        rows, cols = buf.shape
        loops = [Var(self.take(f"{buf.name}_r")), Var(self.take(f"{buf.name}_c"))]
        r, c = Var("v_r"), Var("v_c")
        value = _select(r, [_select(c, [Const(float(x), "float32") for x in row]) for row in mat])
        stmt = Block(buf.name, [IterVar(r, rows, "S"), IterVar(c, cols, "S")], loops, Store(buf, (r, c), value))
        self.created.append(buf.name)
        return Loop(loops[0], rows, body=(Loop(loops[1], cols, body=(stmt,)),))

    def _transform(self, outer: Sequence[Axis], channel: Axis, table: Buffer, half: Buffer, dest: Buffer, load, at_half, at_dest, predicate=None, final: Optional[str] = None) -> Loop:
        """``table @ tile @ table^T`` for each tile ``load(v, a, b)`` reads, per iteration of
        the ``outer`` loops and channel chunk: the columns (into ``half``), then the rows
        (into ``dest``), each element one sum of ``alpha`` products written out (not a
        reduction loop: a sum kept in a register, its coefficients loaded once per channel
        chunk; a reduction accumulating in memory ran 15x slower), the channel innermost
        (the vector loop; the coefficients are invariant in it)."""
        rows, cols = table.shape  # out, in
        cname, extent = channel
        chunk = max(d for d in range(1, CHANNEL_CHUNK + 1) if extent % d == 0)
        outer_loops = [Var(self.take(a)) for a, _ in outer] + [Var(self.take(f"{cname}_o"))]

        def make(name: str, out: Buffer, inner, body) -> Block:
            loops = [Var(self.take(a)) for a, _ in inner] + [Var(self.take(f"{cname}_i"))]
            v = {a: Var(f"v_{a}") for a, _ in list(outer) + list(inner) + [channel]}
            iters = [IterVar(v[a], e, "S") for a, e in outer] + [IterVar(v[cname], extent, "S")]
            iters += [IterVar(v[a], e, "S") for a, e in inner]
            bindings = outer_loops[:-1] + [outer_loops[-1] * chunk + loops[-1]] + loops[:-1]
            index, value, pred = body(v)
            stmt = Block(name, iters, bindings, Store(out, index, value), predicate=pred)
            for var, (_, e) in reversed(list(zip(loops, list(inner) + [(None, chunk)]))):
                stmt = Loop(var, e, body=(stmt,))
            self.created.append(name)
            return stmt

        def columns(v):
            p, b = v["p"], v["b"]
            terms = [Load(table, (p, Const(a, "int64"))) * load(v, Const(a, "int64"), b) for a in range(cols)]
            return at_half(v, p, b), sum(terms[1:], terms[0]), True

        def both(v):
            p, q = v["p"], v["q"]
            pred = predicate(v, p, q) if predicate else True
            terms = [Load(table, (q, Const(b, "int64"))) * Load(half, at_half(v, p, Const(b, "int64"))) for b in range(cols)]
            return at_dest(v, p, q), sum(terms[1:], terms[0]), pred

        first = make(half.name, half, [("p", rows), ("b", cols)], columns)
        second = make(final or dest.name, dest, [("p", rows), ("q", rows)], both)
        body: tuple = (first, second)
        for var, (_, e) in reversed(list(zip(outer_loops, list(outer) + [(None, extent // chunk)]))):
            body = (Loop(var, e, body=body),)
        return body[0]

    def _bgemm(self, data: Buffer, u: Buffer, bgemm: Buffer) -> Loop:
        alpha, _, tiles, ci = data.shape
        iters = [("eps", alpha), ("nu", alpha), ("t", tiles), ("co", bgemm.shape[3]), ("ci", ci)]
        self.created.append(bgemm.name)
        loops = [Var(self.take(a)) for a, _ in iters]
        v = {a: Var(f"v_{a}") for a, _ in iters}
        out = (v["eps"], v["nu"], v["t"], v["co"])
        prod = Load(data, (v["eps"], v["nu"], v["t"], v["ci"])) * Load(u, (v["eps"], v["nu"], v["ci"], v["co"]))
        stmt = Block(
            bgemm.name, [IterVar(v[a], e, "R" if a == "ci" else "S") for a, e in iters], loops,
            Store(bgemm, out, Load(bgemm, out) + prod), init=Store(bgemm, out, Const(0.0, "float32")),
        )
        for (_, e), var in reversed(list(zip(iters, loops))):
            stmt = Loop(var, e, body=(stmt,))
        return stmt


#: The channel loop of a transform is split into chunks of at most this many (a divisor of
#: the channel count): the half-transformed tile of one chunk stays in L1 between the passes.
CHANNEL_CHUNK = 16

Axis = Tuple[str, int]  # name, extent


def _select(v: Var, cases: Sequence[Expr]) -> Expr:
    """``cases[v]``: a chain of ``if_then_else`` on ``v == 0, 1, ...``."""
    out = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        out = if_then_else(eq(v, k), cases[k], out)
    return out


__all__ = ["ConvRoles", "match_conv", "weight_is_bound", "winograd"]
