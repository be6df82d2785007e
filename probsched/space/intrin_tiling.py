"""``MultiLevelTilingWithIntrin``: tile a matmul-like block around a register-blocked
micro-kernel and tensorize it (MetaSchedule's x86 ``MultiLevelTilingWithIntrin``).

A block is *matmul-like* when it accumulates ``C[..., n] += A[...] * B[..., n]`` where the
output's last index is a spatial iterator ``n`` that B also ends with and A does not use
(the kernel's N, contiguous in C and B), some reduction iterator ``k`` indexes both A and
B (the kernel's K panel; the one A is contiguous along when there is a choice) and some
spatial iterator ``m`` indexes A and C but not B (the kernel's M rows). GMM, BMM and the
NHWC/HWIO convolutions (1-D, 2-D, 3-D, dilated, capsule, with bias/relu consumers) are.
So are grouped convolutions, whose A reads channel ``n // G * CI_G + k``: A depends on ``n``
only through its group, so the rule first splits ``n`` into groups of ``G`` (the kernel's N
divides ``G``) and each group is a matmul. Depthwise convolutions are not (no reduction
over channels).

A block whose product reads bfloat16 operands (:mod:`probsched.precision`) takes the bf16
kernels (:mod:`probsched.intrinsics.matmul_bf16`), which read the reduction in pairs: the
rule splits ``k`` into pairs first (``k = 2 p + t``, ``t`` the innermost loop of the tile),
and B must be stored pair-interleaved, ``B'[.., p, n, t]``: for a constant weight the
layout rewrite below does it once (its tile layout is that one), otherwise a packing stage
copies each ``kc x N`` panel into a local buffer of that layout (not sampled: the kernel
cannot read B otherwise). A must be contiguous along ``k`` (a pair is one 32-bit load).
A reduction of odd length, or an A strided along ``k``, is left to the other rules, which
compute it in float32 from the bf16 loads. Where the CPU has AMX and Linux lets this
process use it (:mod:`probsched.intrinsics.amx`), the AMX tile kernels
(:mod:`probsched.intrinsics.matmul_amx`: same description, same B layout) are offered beside
the vector ones.

A block that multiplies a ``uint8`` A by an ``int8`` B into an ``int32`` accumulator (an
int8 program, :mod:`probsched.precision`) takes the VNNI kernels
(:mod:`probsched.intrinsics.matmul_int8`) the same way, the reduction read in *quads*
(``k = 4 q + t``) and B stored 4-interleaved, ``B'[.., q, n, t]``; a reduction that is
not a multiple of 4, or an A strided along ``k``, is left to the other rules, which
compute it in int32 from the byte loads (a network's first convolution, over three
channels, reads its window rows flat instead: :mod:`probsched.schedule.flat_window`). Where the CPU
has AMX int8 (``amx_int8``), its tile kernels are offered beside the VNNI ones likewise. A B
of reduced range (``int8r``: weights in ``[-64, 64]``) takes the ``vpmaddubsw`` kernels
(``matmul_int8r_*``) on a CPU without VNNI, and the int8 kernels elsewhere (:func:`int8_weights`).

The rule samples (sites named after the block ``C``):

- ``C/unit``: ``"amx"`` or ``"vector"``, where AMX kernels are offered beside vector ones;
- ``C/intrin``: the micro-kernel, among the registered matmul kernels (of that unit) whose N
  divides the extent of ``n`` and whose accumulators fit the target's vector registers
  (float32 and int8 ones drawn in proportion to their accumulators, :func:`kernel_weights`);
- ``C/<loop>/tile``: two tile levels for every other spatial loop (and for the outer parts
  of ``m`` and ``n``), and the K panel ``kc`` (``max_panel`` at most);
- ``C/panel`` instead of the K panel's tiles for an AMX kernel: a panel of whole tile
  steps (16 pairs), when the reduction has one;
- ``C/pack``: whether the ``kc x N`` panel of B is packed into a contiguous local buffer
  at the panel loop (reused by every M tile below it);
- ``C/fuse_consumer``: for a single elementwise consumer (bias, relu), whether it is
  computed per outer tile instead of in its own pass.

The loop order is ``S0 (every spatial loop) | S1 of the loops B depends on | reduction
loops, the K panel last | S1 of the other spatial loops | kc, M, N`` (the micro-kernel):
the packed panel is reused across the M tiles, C is loaded and stored once per tile and
panel. Rows left over when M does not divide ``m`` run a smaller kernel of the same family.

>>> import probsched as ps
>>> from handlers import seed, trace
>>> w = ps.workloads.matmul(24, 32, 16)
>>> sch = ps.Schedule(w.func)
>>> rule = MultiLevelTilingWithIntrin()
>>> tr = trace(seed(lambda s: rule(s, s.get_block("Z")), 0)).get_trace(sch)
>>> tr["Z/intrin"].value in ps.intrinsics.list()
True
>>> [b for b in sch.blocks() if ps.space.analysis.block(sch, b).annotation("tensorize")]
['Z_o']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from ..errors import ScheduleError
from ..ir.dtypes import INT8R
from ..ir.expr import BinOp, Cast, Const, Load, Var, free_vars, substitute, walk
from ..schedule import BlockRV, LoopRV, Schedule

if TYPE_CHECKING:
    from ..target import Target
from ..schedule.analysis import affine_in
from ..schedule.dataflow import single_store
from ..schedule.distributions import ALGORITHM
from . import analysis as an


@dataclass(frozen=True)
class MatmulRoles:
    """The iterators and operands a matmul micro-kernel takes over in one block."""

    m: str  # iterator names
    n: str
    k: str
    a: str  # buffer names
    b: str
    b_read_index: int  # of B among the block's inputs (for cache_read)
    group: Optional[int] = None  # A reads n // group (a grouped convolution), else None
    precision: str = "float32"  # the dtype A and B are read in (bfloat16: widened to float32; int8: u8 x s8)
    b_k_dim: int = -1  # the dimension of B that k indexes
    a_k_contiguous: bool = True  # A's last index steps by 1 along k, which no other index uses
    b_n_dim: int = -1  # the dimension of B that n indexes when it is not the last (B is packed with n last)
    b_dtype: str = "float32"  # B's element type (int8r: the reduced range, :func:`int8_weights`)


def _group_of(ld: Load, n: str) -> Optional[int]:
    """``G`` when every use of ``n`` in ``ld``'s indices is ``n // G`` (one constant G), else None."""
    divisors = set()

    def strip(e):
        if isinstance(e, BinOp) and e.op == "floordiv" and isinstance(e.a, Var) and e.a.name == n and isinstance(e.b, Const):
            divisors.add(int(e.b.value))
            return Const(0, "int64")
        if isinstance(e, BinOp):
            return BinOp(e.op, strip(e.a), strip(e.b), e.dtype)
        return e

    rest = [strip(ix) for ix in ld.indices]
    if len(divisors) != 1 or any(n in free_vars(ix) for ix in rest):
        return None
    return divisors.pop()


def matmul_roles(sch: Schedule, name: str) -> Optional[MatmulRoles]:
    """The M, N, K iterators and A, B operands of a matmul-like block, or None.

    >>> import probsched as ps
    >>> sch = ps.Schedule(ps.workloads.small("C2D").func)
    >>> r = matmul_roles(sch, "conv2d")
    >>> (r.m, r.n, r.k, r.a, r.b)
    ('v_w', 'v_co', 'v_rc', 'padded', 'weight')
    >>> matmul_roles(sch, "padded") is None
    True
    """
    blk = an.block(sch, name)
    st = single_store(blk)
    if st is None or not blk.is_reduction or blk.init is None or not _always(blk.predicate):
        return None
    value = st.value
    if not (isinstance(value, BinOp) and value.op == "add" and isinstance(value.b, BinOp) and value.b.op == "mul"):
        return None
    acc, prod = value.a, value.b
    if not (isinstance(acc, Load) and acc.buffer.name == st.buffer.name and acc.indices == st.indices):
        return None
    lhs, rhs = _widened_load(prod.a), _widened_load(prod.b)
    if not (isinstance(lhs, Load) and isinstance(rhs, Load)):
        return None
    precision = _precision(lhs.buffer.dtype, rhs.buffer.dtype, st.buffer.dtype)
    if precision is None:
        return None
    if any(ld.buffer.name == st.buffer.name for ld in (lhs, rhs)):
        return None
    kind = {it.var.name: it.kind for it in blk.iters}
    last = st.indices[-1]
    if not isinstance(last, Var) or kind.get(last.name) != "S":
        return None
    n = last.name

    def uses(ld: Load) -> set:
        out: set = set()
        for ix in ld.indices:
            out |= free_vars(ix)
        return out

    def ends_with_n(ld: Load) -> bool:
        return isinstance(ld.indices[-1], Var) and ld.indices[-1].name == n

    # B ends with n; A must not depend on n, except through n's group (a grouped convolution).
    # Failing that, a B that reads n in another dimension (a transposed operand: attention's
    # K in Q @ K^T) is packed into a local panel with n last.
    for a, b in ((lhs, rhs), (rhs, lhs)):
        group = _group_of(a, n) if n in uses(a) else None
        if ends_with_n(b) and (group or n not in uses(a)):
            break
    else:
        for a, b in ((lhs, rhs), (rhs, lhs)):
            group = None
            if n not in uses(a) and Var(n) in b.indices:
                break
        else:
            return None
    if sum(1 for ix in b.indices if n in free_vars(ix)) != 1:
        return None
    b_n_dim = -1 if ends_with_n(b) else b.indices.index(Var(n))
    if precision == "int8" and (a.buffer.dtype, b.buffer.dtype) not in (("uint8", "int8"), ("uint8", "int8r")):
        return None  # vpdpbusd multiplies an unsigned A by a signed B
    ua, ub = uses(a) - {n}, uses(b)
    out_uses = set()
    for ix in st.indices:
        out_uses |= free_vars(ix)
    ks = [it.var.name for it in blk.iters if it.kind == "R" and it.var.name in ua and it.var.name in ub]
    ms = [it.var.name for it in blk.iters if it.kind == "S" and it.var.name in ua and it.var.name not in ub]
    ms = [v for v in ms if v in out_uses]
    if not ks or not ms:
        return None
    a_last = free_vars(a.indices[-1])
    k = next((v for v in ks if v in a_last), ks[-1])
    extent = {it.var.name: it.extent for it in blk.iters}
    # the longest M axis (ties: the innermost in C's layout) gives the fewest partial tiles
    order = {v: i for i, ix in enumerate(st.indices) for v in free_vars(ix)}
    m = max(ms, key=lambda v: (extent[v] > 1, extent[v], order.get(v, -1)))
    if extent[n] % (group or 1) or group == extent[n]:
        return None
    # within one group A's index does not move with n: n // group is a constant there
    a_indices = [substitute(ix, {n: Const(0, "int64")}) for ix in a.indices] if group else list(a.indices)
    if any(affine_in(ix, (m, n, k)) is None for ix in a_indices + list(b.indices)):
        return None  # e.g. a reshape's k // 16, k % 16: the micro-kernel cannot step through it
    inputs = [x for x in an.reads_of(sch, name)]
    if b.buffer.name not in inputs or a.buffer.name == b.buffer.name:
        return None
    b_k_dims = [d for d, ix in enumerate(b.indices) if k in free_vars(ix)]
    a_last = affine_in(a_indices[-1], (k,))
    a_k_contiguous = a_last is not None and a_last.get(k) == 1 and not any(k in free_vars(ix) for ix in a_indices[:-1])
    return MatmulRoles(
        m, n, k, a.buffer.name, b.buffer.name, inputs.index(b.buffer.name), group, precision,
        b_k_dims[0] if len(b_k_dims) == 1 and b.indices[b_k_dims[0]] == Var(k) else -1, a_k_contiguous, b_n_dim,
        b.buffer.dtype,
    )


#: (A's, B's dtype) -> the precision a product of them is, with the accumulator it needs
_PRECISIONS = {
    ("float32", "float32"): ("float32", "float32"), ("bfloat16", "bfloat16"): ("bfloat16", "float32"),
    ("uint8", "int8"): ("int8", "int32"), ("int8", "uint8"): ("int8", "int32"),
    ("uint8", "int8r"): ("int8", "int32"), ("int8r", "uint8"): ("int8", "int32"),
}
#: elements of the reduction a kernel of the precision reads together (pairs, quads)
K_STEP = {"bfloat16": 2, "int8": 4}


def _precision(lhs: str, rhs: str, acc: str) -> Optional[str]:
    """The precision of a product of ``lhs`` and ``rhs`` values summed into ``acc``, or None."""
    precision, needs = _PRECISIONS.get((lhs, rhs), (None, None))
    return precision if needs == acc else None


def _widened_load(e):
    """The load under a widening of a bfloat16 (to float32) or 8-bit (to int32) operand
    (the load itself otherwise)."""
    if isinstance(e, Cast) and isinstance(e.value, Load) and (e.dtype, e.value.dtype) in (
        ("float32", "bfloat16"), ("int32", "uint8"), ("int32", "int8"), ("int32", "int8r")
    ):
        return e.value
    return e


def pair_layout(shape: Sequence[int], k_dim: int, step: int = 2, n_dim: int = -1) -> Tuple[List[List[int]], List[int]]:
    """``(splits, order)`` storing a B of ``shape`` interleaved along dimension ``k_dim`` in
    groups of ``step``: ``B[.., k, ..]`` at ``B'[.., k // step, .., k % step]``, the group last
    (pairs: what the bf16 kernels read; quads: the int8 ones). ``n_dim``: the dimension of
    the kernel's columns when it is not the last; it is moved just before the group (a
    transposed B; with ``step`` 1, only that move).

    >>> pair_layout((3, 3, 8, 16), 2)
    ([[3], [3], [4, 2], [16]], [0, 1, 2, 4, 3])
    >>> pair_layout((64, 32), 0, 4)
    ([[16, 4], [32]], [0, 2, 1])
    >>> pair_layout((12, 32, 64), 2, 1, n_dim=1)      # B[h, n, k] stored as B'[h, k, n]
    ([[12], [32], [64]], [0, 2, 1])
    """
    ndim = len(shape)
    n_dim = n_dim % ndim
    splits = [[int(e) // step, step] if d == k_dim and step > 1 else [int(e)] for d, e in enumerate(shape)]
    pieces = sum(len(f) for f in splits)
    first = [sum(len(f) for f in splits[:d]) for d in range(ndim)]  # each dimension's first piece
    t = first[k_dim] + 1 if step > 1 else None  # the group's piece
    n = first[n_dim]
    return splits, [i for i in range(pieces) if i not in (t, n)] + [n] + ([t] if t is not None else [])


def _always(predicate) -> bool:
    return predicate is None or (isinstance(predicate, Const) and bool(predicate.value))


def _loop_of_iter(sch: Schedule, name: str) -> Optional[Dict[str, LoopRV]]:
    """iterator -> the loop binding it, when each loop binds exactly one iterator directly."""
    blk = an.block(sch, name)
    loops = {l.name: l for l in sch.get_loops(BlockRV(name))}
    out: Dict[str, LoopRV] = {}
    for it, binding in zip(blk.iters, blk.bindings):
        if not isinstance(binding, Var) or binding.name not in loops:
            return None
        out[it.var.name] = loops[binding.name]
    if len(out) != len(loops):
        return None
    return out


def register_budget(target: Optional["Target"] = None) -> int:
    """Vector accumulators a micro-kernel may keep (registers minus B's row and A's broadcast)."""
    from ..target import Target

    tgt = target or Target.host()
    lanes = tgt.vector_lanes("float32")
    return (32 if lanes >= 16 else 16) - 4


def int8_weights(target: "Target", b_dtype: str) -> str:
    """The weights' type of the int8 kernels offered for a B of ``b_dtype``: ``"int8r"`` (the
    ``vpmaddubsw`` kernels, 1.4x the exact ``vpmaddwd`` ones on Zen 3) for int8r weights on a
    CPU without VNNI; else ``"int8"``, whose kernels read int8r weights too (the same bytes)
    and include the VNNI and AMX ones.

    >>> from probsched.target import Target
    >>> zen3, zen4 = Target(isa=("avx2", "fma")), Target(isa=("avx2", "avx512f", "avx512_vnni"))
    >>> int8_weights(zen3, "int8r"), int8_weights(zen4, "int8r"), int8_weights(zen3, "int8")
    ('int8r', 'int8', 'int8')
    """
    vnni = target.has("avx512_vnni") or target.has("avx_vnni")
    return INT8R if b_dtype == INT8R and not vnni else "int8"


def _amx_usable(target: "Target", precision: str) -> bool:
    """Whether the target has the AMX tiles of ``precision`` and this process may use them (asked once)."""
    from ..intrinsics import amx

    unit = {"bfloat16": "bf16", "int8": "int8"}.get(precision)
    return unit is not None and amx.usable(unit) and target.has(f"amx_{unit}")  # asked first: the log says why not, once


def _unit_choice(sch: Schedule, name: str, candidates: List[str]) -> List[str]:
    """The candidates of the arithmetic unit sampled as ``{name}/unit`` (an algorithm
    decision: the search's family cap keeps both units in its batches, since programs on
    the AMX tiles and on the vector registers differ by large factors and the cost model's
    transfer records may know only one), when both the tile and the vector kernels are
    offered; else ``candidates``."""
    from .. import intrinsics

    tiles = [c for c in candidates if intrinsics.get(c).meta.get("unit") == "amx"]
    if not tiles or len(tiles) == len(candidates):
        return candidates
    if sch.sample_categorical(["amx", "vector"], name=f"{name}/unit", tag=ALGORITHM) == "amx":
        return tiles
    return [c for c in candidates if c not in tiles]


def kernel_candidates(n_extent: int, lanes: int, budget: int, precision: str = "float32", amx: bool = False,
                      weights: str = "int8") -> List[str]:
    """Registered matmul kernels of ``precision`` usable for an N axis of ``n_extent`` on
    ``lanes``-wide vectors; AMX tile kernels (their accumulators are tiles, not vector
    registers) only with ``amx``; int8 kernels of the family reading ``weights`` (``"int8"``
    or ``"int8r"``, :func:`int8_weights`).

    >>> kernel_candidates(96, 8, 12)
    ['matmul_3x32', 'matmul_4x16', 'matmul_4x24', 'matmul_4x8', 'matmul_6x16', 'matmul_8x8']
    >>> kernel_candidates(64, 16, 28, "bfloat16")[:3]
    ['matmul_bf16_12x32', 'matmul_bf16_4x16', 'matmul_bf16_4x32']
    """
    from .. import intrinsics

    out = []
    for nm in intrinsics.list():
        meta = intrinsics.get(nm).meta
        if meta.get("kind") != "matmul" or meta.get("precision", "float32") != precision:
            continue
        if precision == "int8" and meta.get("weights", "int8") != weights:
            continue
        mm, nn = int(meta["M"]), int(meta["N"])
        tiles = meta.get("unit") == "amx"
        if tiles and not amx:
            continue
        if n_extent % nn == 0 and (tiles or mm * -(-nn // lanes) <= budget):
            out.append(nm)
    return out


def kernel_weights(names: Sequence[str], lanes: int) -> List[float]:
    """The prior of the float32 kernel choice over ``names``: each kernel in proportion to
    its vector accumulators (``M * N / lanes``). A larger register block does more FMAs per
    load and keeps more FMAs in flight (two pipes of 4-5 cycles need 8-10), so it is drawn
    more often; every kernel stays in the support, for the search to measure.

    >>> [round(p, 2) for p in kernel_weights(["matmul_4x16", "matmul_12x32"], 16)]
    [0.14, 0.86]
    """
    from .. import intrinsics

    sizes = []
    for nm in names:
        meta = intrinsics.get(nm).meta
        sizes.append(int(meta["M"]) * -(-int(meta["N"]) // lanes))
    return [s / sum(sizes) for s in sizes]


class MultiLevelTilingWithIntrin:
    """Tile a matmul-like block to a sampled micro-kernel shape and tensorize it."""

    def __init__(
        self, max_panel: int = 512, pack_probs: Optional[Sequence[float]] = None, target=None, rewrite_layout: bool = True
    ) -> None:
        self.max_panel = max_panel
        self.rewrite_layout = rewrite_layout
        self.pack_probs = list(pack_probs) if pack_probs is not None else None
        self.target = target

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        roles = matmul_roles(sch, name)
        if roles is None or an.block(sch, name).annotation("tensorize"):
            return
        loop_of = _loop_of_iter(sch, name)
        if loop_of is None:
            return
        from .. import intrinsics
        from ..target import Target

        tgt = self.target or Target.host()
        extent = {it.var.name: it.extent for it in an.block(sch, name).iters}
        step = K_STEP.get(roles.precision, 1)
        pairs = step > 1
        if pairs and (extent[roles.k] % step or not roles.a_k_contiguous or roles.b_k_dim < 0):
            return  # the bf16 (int8) kernels read k in pairs (quads), A's adjacent (module docstring)
        candidates = kernel_candidates(
            roles.group or extent[roles.n], tgt.vector_lanes("float32"), register_budget(tgt), roles.precision,
            amx=_amx_usable(tgt, roles.precision),  # the AMX kernels are bf16 and int8 ones
            weights=int8_weights(tgt, roles.b_dtype),
        )
        if roles.precision == "bfloat16" and not tgt.has("avx512_bf16"):  # both bf16 families are the FMA kernels here: offer one
            candidates = [c for c in candidates if intrinsics.get(c).meta.get("dot") != "fma"]
        # an M axis of one row (the batch of a one-stage T2D) is a matrix-vector product: the kernel's row
        # blocking buys nothing and each call would do one row of padded work
        if not candidates or extent[roles.m] < 2:
            return
        offered = _unit_choice(sch, name, candidates)
        lanes = tgt.vector_lanes("float32")
        probs = kernel_weights(offered, lanes) if roles.precision in ("float32", "int8") else None
        intrin = sch.sample_categorical(offered, probs, name=f"{name}/intrin")

        meta = intrinsics.get(intrin).meta
        M, N = int(meta["M"]), int(meta["N"])
        blk = an.block(sch, name)
        b_uses = set()
        st = single_store(blk)
        for ld in (x for x in walk(st.value) if isinstance(x, Load) and x.buffer.name == roles.b):
            for ix in ld.indices:
                b_uses |= free_vars(ix)

        # the kernel's own loops first: M rows (the last tile may be partial), N columns, kc
        m_out, m_in = sch.split(loop_of[roles.m], [None, M])
        group_loop = None
        n_loop = loop_of[roles.n]
        if roles.group:  # one matmul per group: the group loop joins the outer spatial loops
            group_loop, n_loop = sch.split(n_loop, [None, roles.group])
        n_out, n_in = sch.split(n_loop, [None, N])
        k_loop, pair = loop_of[roles.k], None
        if pairs:  # k = 2 p + t (4 q + t): the panel counts pairs (quads)
            k_loop, pair = sch.split(k_loop, [None, step])
        panel = self.max_panel // step
        k_out, k_in = sch.split(k_loop, self._panel(sch, k_loop, panel, int(meta.get("panel_multiple", 1)), name))
        outer_of = {roles.m: m_out, roles.n: n_out}
        s0: List[LoopRV] = []
        s1_b: List[LoopRV] = []
        s1_rest: List[LoopRV] = []
        reductions: List[LoopRV] = []
        for it in blk.iters:
            v = it.var.name
            if v == roles.k:
                continue
            if it.kind == "R":
                reductions.append(loop_of[v])
                continue
            if v == roles.n and group_loop is not None:
                s0.append(group_loop)
            loop = outer_of.get(v, loop_of[v])
            if sch.get(loop).extent > 1:
                lo, hi = sch.split(loop, sch.sample_perfect_tile(loop, n=2))
            else:
                lo, hi = loop, None
            s0.append(lo)
            if hi is not None:
                (s1_b if v in b_uses else s1_rest).append(hi)
        reductions.append(k_out)
        sch.reorder(*s0, *s1_b, *reductions, *s1_rest, k_in, m_in, n_in, *([pair] if pair else []))
        sch.annotate(block, "meta_schedule.tiling_structure", "SSRS+intrin")
        before_r = (s0 + s1_b)[-1] if s0 + s1_b else None
        self._fuse_consumer(sch, name, before_r)
        # The tile keeps its init when the kernel can start from zero itself (the call that
        # begins the sum uses that variant): no pass zeroes the output tile beforehand, and
        # C is not read by that call, as TVM's register-level init does.
        if "zero_start_variant" not in meta:
            sch.decompose_reduction(block, reductions[0])
        transposed = roles.b_n_dim >= 0  # the kernel cannot read B's columns strided: always packed
        if transposed or not (self.rewrite_layout and self._lay_out_weight(sch, block, roles.b)):
            if pairs or transposed or sch.sample_categorical([True, False], self.pack_probs, name=f"{name}/pack"):
                pack = sch.cache_read(block, roles.b_read_index, "local")
                sch.compute_at(pack, k_out)
                if pairs or transposed:
                    local = single_store(an.block(sch, pack.name)).buffer
                    sch.transform_layout(local.name, *pair_layout(local.shape, roles.b_k_dim, step, roles.b_n_dim))
        sch.tensorize(k_in, intrin)

    @staticmethod
    def _panel(sch: Schedule, k_loop: LoopRV, most: int, multiple: int, name: str) -> list:
        """The K panel's tiles: any perfect tiling up to ``most``, or, for a kernel that steps
        through the panel ``multiple`` at a time (AMX tiles), one of the panels of whole
        steps when the reduction has any."""
        extent = sch.get(k_loop).extent
        whole = [f for f in range(multiple, min(most, extent) + 1, multiple) if extent % f == 0] if multiple > 1 else []
        if not whole:
            return sch.sample_perfect_tile(k_loop, n=2, max_innermost_factor=most)
        return [None, sch.sample_categorical(whole, name=f"{name}/panel")]

    @staticmethod
    def _lay_out_weight(sch: Schedule, block: BlockRV, b: str) -> bool:
        """When B is a constant of the network (:func:`.analysis.weight_layout`), sample
        whether to store it in the order the tiles read it: each micro-kernel panel
        contiguous, packed once when the network is compiled instead of on every call.
        Returns whether it did."""
        lay = an.weight_layout(sch, block.name, b)
        if lay is None or not sch.sample_categorical([True, False], name=f"{block.name}/weight_layout"):
            return False
        sch.transform_layout(b, lay.splits, lay.order)
        return True

    def _fuse_consumer(self, sch: Schedule, name: str, at: Optional[LoopRV]) -> None:
        consumers = an.consumer_names(sch, name)
        if at is None or len(consumers) != 1 or not an.is_elementwise(sch, consumers[0]):
            return
        if sch.sample_categorical([True, False], name=f"{name}/fuse_consumer"):
            try:
                sch.reverse_compute_at(BlockRV(consumers[0]), at)
            except ScheduleError:
                pass

