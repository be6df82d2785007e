"""Register-blocked float32 matmul micro-kernels, written with explicit vectors.

``matmul_{M}x{N}`` computes ``C[0:M, 0:N] += A[0:M, k] * B[k, 0:N]`` for ``k`` over a panel
of any length, keeping the M x N accumulators in vector registers (:mod:`.simd`, the
target's widest when they divide N, :func:`vector_lanes`): per step of ``k`` it loads B's
row as ``N / lanes`` vectors and, per row of A, broadcasts ``A[r, k]`` to every lane and
adds its products to the row's accumulators, one FMA each. Its *zero-start* variant computes ``C[0:M, 0:N] = A @ B``
instead (the accumulators start at zero and C is never read): a tile whose reduction begins
in this call needs no init pass. Operands are strided (a convolution's input window is an A
with row stride ``stride * channels``); C and B must be contiguous along N.

Why vectors and not scalar code: LLVM's SLP vectorizer turns a block of scalar FMAs into
vector ones, but leaves such a kernel at about half the FMA peak of a core with two 512-bit
FMA pipes, and takes many seconds to compile the larger blocks.

Which shapes pay depends on the core (the micro-kernel rule offers those that fit its
registers, :mod:`probsched.space.intrin_tiling`): the accumulators, ``M * N / lanes``
vectors, must fit the vector registers beside B's row or the rows' broadcasts (AVX2: 16,
AVX-512: 32), and there must be enough of them to hide the FMA latency on every pipe (two pipes of
4-5 cycles: 8 to 10). The small shapes are AVX2's (6x16, 4x24, 3x32: 12 ymm) and those of
a narrow N; AVX-512 takes the large ones (12x32, 14x32, 6x64: 24-28 zmm).

>>> import numpy as np
>>> import probsched as ps
>>> mk = ps.intrinsics.get("matmul_4x8").kernel()
>>> A = np.arange(4 * 3, dtype="float32"); B = np.ones(3 * 8, dtype="float32")
>>> C = np.zeros(4 * 8, dtype="float32")
>>> mk(C, 0, 8, 1, A, 0, 3, 1, B, 0, 1, 8, 3)   # A is 4x3 row-major, B is 3x8
>>> C.reshape(4, 8)[:, 0].tolist()
[3.0, 12.0, 21.0, 30.0]
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, List, Optional

from ..te import compute, create_func, placeholder, reduce_axis, sum as te_sum
from ..ir.intrinsic import register
from .disk_cache import load_module
from .disk_cache import source_version

#: (M, N). AVX2's 16 registers hold 12 accumulators of 8 lanes (6x16, 4x24, 3x32); AVX-512's
#: 32 hold up to 28 of 16 lanes (12x32, 14x32, 6x64); the rest serve narrow or odd N.
SHAPES = (
    (4, 8), (8, 8), (4, 16), (6, 16), (8, 16), (4, 24), (3, 32), (4, 32), (8, 32),
    (12, 32), (14, 32), (4, 64), (6, 64),
)

NUMBA_OPTIONS = "nogil=True, cache=True, error_model='numpy', boundscheck=False"


def vector_lanes(n: int, target_lanes: Optional[int] = None) -> int:
    """Lanes of the vectors a kernel of ``n`` columns is written with: the target's widest
    (``target_lanes``, default the host's: 16 with AVX-512, 8 with AVX2) when they divide
    ``n``, else 8.

    >>> vector_lanes(64, 16), vector_lanes(24, 16), vector_lanes(64, 8)
    (16, 8, 8)
    """
    if n % 8:
        raise ValueError(f"matmul kernel: N = {n} is not a multiple of 8")
    if target_lanes is None:
        from ..target import Target

        target_lanes = Target.host().vector_lanes("float32")
    return 16 if target_lanes >= 16 and n % 16 == 0 else 8


def matmul_source(m: int, n: int, zero_start: bool = False, target_lanes: Optional[int] = None) -> str:
    """Python source of the M x N kernel for a target of ``target_lanes`` float32 lanes
    (:func:`vector_lanes`); ``zero_start``: the accumulators start at zero instead of C's
    values.

    Per step of k the kernel keeps either B's row (``N / lanes`` vectors) or the rows'
    broadcasts (M vectors) in registers beside the accumulators, whichever is fewer: 3x32 on
    AVX2 is 12 accumulators, four vectors of B or three broadcasts, and only the second
    fits 16 registers. A block of few accumulators sums the panel in
    :func:`partial_sums` interleaved parts, joined at the end."""
    lanes = vector_lanes(n, target_lanes)
    nv = n // lanes
    width = "" if lanes == 16 else "8"
    by_column = m < nv
    sets = partial_sums(m, nv, 32 if lanes == 16 else 16)
    lines = [
        # numba's cache checks this file's date only: name the vector helpers' version so
        # that an edited simd module is a new source, compiled anew (disk_cache names by it)
        f"# probsched.intrinsics.simd {source_version('probsched.intrinsics.simd')}",
        "import numba",
        "from probsched.intrinsics.simd import fma, store, "
        + (f"broadcast{width} as broadcast, load{width} as load, zeros{width} as zeros" if width else "broadcast, load, zeros")
        + (", add" if sets > 1 else ""),
        "",
        "_f = numba.types.Array(numba.float32, 1, 'C')",
        "_i = numba.int64",
        "SIGNATURE = numba.void(_f, _i, _i, _i, _f, _i, _i, _i, _f, _i, _i, _i, _i)",
        "",
        "",
        f"@numba.njit(SIGNATURE, {NUMBA_OPTIONS})",
        "def kernel(C, c_off, c_si, c_sj, A, a_off, a_si, a_sk, B, b_off, b_sj, b_sk, K):",
        f"    # {m}x{n} register block of {m}x{nv} vectors of {lanes} lanes, {'column by column' if by_column else 'row by row'};"
        " c_sj and b_sj are 1 (tensorize checks it)",
    ]
    if sets > 1:
        return "\n".join(lines + _partial_sum_block(m, nv, lanes, zero_start, by_column, sets)) + "\n"
    step = _step_lines(m, nv, lanes, by_column, "k", lambda r, v: f"c{r}_{v}")
    lines += register_block(
        m,
        nv,
        start=lambda r, v: "zeros()" if zero_start else f"load(C, crow{r} + {lanes * v})",
        loop=["for k in range(K):"] + [f"    {line}" for line in step],
        row=lambda r: "",
        update=None,  # the loop's steps update the accumulators themselves
        store=lambda r, v: f"store(C, crow{r} + {lanes * v}, c{r}_{v})",
    )
    return "\n".join(lines) + "\n"


#: FMAs a core keeps in flight: two pipes of 4-5 cycles (Zen 3, Zen 4, Skylake and later)
IN_FLIGHT = 8


def partial_sums(m: int, nv: int, registers: int = 16) -> int:
    """Interleaved partial sums of the panel a kernel of ``m`` rows and ``nv`` vectors of
    columns keeps per accumulator: 1, or enough for :data:`IN_FLIGHT` independent FMAs
    when its ``m * nv`` accumulators are fewer and each of them waits on its own last FMA
    (one row of a partial tile: a 1x16 block on AVX2 keeps 2 FMAs in flight, a quarter of
    the core's rate). Only where the block is bound by that latency, not by its loads: a
    row costs a broadcast per step of the panel and a vector of columns a load of B, so
    rows beyond twice the vectors (4x8) gain nothing from more sums. On Zen 3, one thread,
    operands in L1 (``benchmarks/bench_kernels_ab.py``): 1x16 26 -> 67 GFLOP/s with 4 sums,
    2x16 52 -> 99 and 3x16 75 -> 104 with 2, 1x8 13 -> 51 with 8, 1x32 52 -> 81 with 2, of
    a 104 GFLOP/s peak; 4x8 with 2 sums measured slower (50 -> 46). The accumulators, B's
    row or the broadcasts and one spare must fit the ``registers``.

    >>> partial_sums(1, 2), partial_sums(2, 2), partial_sums(3, 2), partial_sums(6, 2), partial_sums(4, 1)
    (4, 2, 2, 1, 1)
    """
    accumulators = m * nv
    if accumulators >= IN_FLIGHT or m > 2 * nv:
        return 1
    sets = -(-IN_FLIGHT // accumulators)
    while sets > 1 and accumulators * sets + min(m, nv) + 1 > registers:
        sets -= 1
    return sets


def _step_lines(m: int, nv: int, lanes: int, by_column: bool, k: str, acc: Callable[[int, int], str]) -> List[str]:
    """One step ``k`` of the panel: B's row and A's broadcasts loaded, each accumulator
    (``acc(row, vector)``) given its FMA; by column (the rows' broadcasts, then B one vector
    at a time) or by row (B's row, then each row's broadcast)."""
    at = k if k.isidentifier() else f"({k})"
    out = [f"brow = b_off + {at} * b_sk", f"arow = a_off + {at} * a_sk"]
    if by_column:
        out += [f"a{r} = broadcast(A, arow + {r} * a_si)" for r in range(m)]
        for v in range(nv):
            out.append(f"b = load(B, brow + {lanes * v})")
            out += [f"{acc(r, v)} = fma({acc(r, v)}, a{r}, b)" for r in range(m)]
    else:
        out += [f"b{v} = load(B, brow + {lanes * v})" for v in range(nv)]
        for r in range(m):
            out.append(f"a = broadcast(A, arow + {r} * a_si)")
            out += [f"{acc(r, v)} = fma({acc(r, v)}, a, b{v})" for v in range(nv)]
    return out


def _partial_sum_block(m: int, nv: int, lanes: int, zero_start: bool, by_column: bool, sets: int) -> List[str]:
    """Body lines of an ``m`` x ``nv`` vectors kernel that sums the panel in ``sets``
    interleaved parts (:func:`partial_sums`): part ``s`` takes the steps ``k`` with
    ``k % sets == s`` of the whole ones, part 0 the rest and C's values; the parts are added
    pairwise before the store."""
    lines = []
    for r in range(m):
        lines.append(f"    crow{r} = c_off + {r} * c_si")
        for v in range(nv):
            lines.append(f"    c{r}_{v}_0 = {'zeros()' if zero_start else f'load(C, crow{r} + {lanes * v})'}")
            lines += [f"    c{r}_{v}_{s} = zeros()" for s in range(1, sets)]

    def step(k: str, s: int) -> List[str]:
        return [f"        {line}" for line in _step_lines(m, nv, lanes, by_column, k, lambda r, v: f"c{r}_{v}_{s}")]

    lines.append(f"    whole = K - K % {sets}")
    lines.append(f"    for k in range(0, whole, {sets}):")
    for s in range(sets):
        lines += step(f"k + {s}" if s else "k", s)
    lines.append("    for k in range(whole, K):")
    lines += step("k", 0)
    for r in range(m):
        for v in range(nv):
            parts = [f"c{r}_{v}_{s}" for s in range(sets)]
            while len(parts) > 1:  # pairwise: no part waits on a chain of the others
                parts = [f"add({parts[i]}, {parts[i + 1]})" if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
            lines.append(f"    store(C, crow{r} + {lanes * v}, {parts[0]})")
    return lines


def register_block(
    m: int,
    cols: int,
    start: Callable[[int, int], str],
    loop: List[str],
    row: Callable[[int], str],
    update: Optional[Callable[[int, int], str]],
    store: Callable[[int, int], str],
) -> List[str]:
    """Body lines of a register-blocked kernel: accumulators ``c{r}_{c}`` (``m`` rows of C,
    ``cols`` each, row ``r`` at ``crow{r}``) set by ``start``; the reduction ``loop`` (its
    header and the loads of B, relative to the loop's indent); per row the load of A
    (``row``) and the ``update`` of each accumulator (``update`` None: the ``loop`` does
    both itself); then the ``store`` of each."""
    lines = []
    for r in range(m):
        lines.append(f"    crow{r} = c_off + {r} * c_si")
        lines += [f"    c{r}_{c} = {start(r, c)}" for c in range(cols)]
    lines += [f"    {text}" for text in loop]
    for r in range(m) if update is not None else ():
        lines.append(f"        {row(r)}")
        lines += [f"        {update(r, c)}" for c in range(cols)]
    lines += [f"    {store(r, c)}" for r in range(m) for c in range(cols)]
    return lines


def dot_product_widths(n: int) -> List[int]:
    """Lanes of each vector of a dot-product kernel's row of ``n`` columns (bf16 pairs, int8
    quads): 16-lane vectors, and one of 8 for the rest (MobileNet-V2's 24 channels are one
    of each); on AVX2 a 16-lane vector is two registers.

    >>> dot_product_widths(64), dot_product_widths(24), dot_product_widths(8)
    ([16, 16, 16, 16], [16, 8], [8])
    """
    if n % 8 or n <= 0:
        raise ValueError(f"dot-product kernel: N = {n} is not a positive multiple of 8")
    return [16] * (n // 16) + [8] * (n % 16 // 8)


def dot_product_block(m: int, n: int, group: int, zero_start: bool, load_b: str, broadcast_a: str) -> List[str]:
    """Body lines of a kernel on vector dot products (bf16 pairs, int8 quads: ``group``
    elements of the reduction per lane): ``m`` rows of accumulators of the widths of
    :func:`dot_product_widths` (``n`` columns); per group of the panel (``P`` of them) a row
    of B's vectors (``load_b``) and, per row, A's group in every lane (``broadcast_a``), each
    accumulator ``dot(acc, a, b)``. Its module imports ``zeros``, ``load``, ``store``,
    ``dot``, those two, and for an 8-lane vector each of them but ``dot`` suffixed ``8``."""
    widths = dot_product_widths(n)
    first = [sum(widths[:v]) for v in range(len(widths))]  # each vector's first column
    sfx = ["" if w == 16 else "8" for w in widths]
    row_loads = [f"a{s} = {broadcast_a}{s}(A, arow + {{r}} * a_si)" for s in sorted(set(sfx))]
    return register_block(
        m,
        len(widths),
        start=lambda r, v: f"zeros{sfx[v]}()" if zero_start else f"load{sfx[v]}(C, crow{r} + {first[v]})",
        loop=["for p in range(P):", "    brow = b_off + p * b_sp"]
        + [f"    b{v} = {load_b}{sfx[v]}(B, brow + {group * first[v]})" for v in range(len(widths))]
        + ["    arow = a_off + p * a_sp"],
        row=lambda r: "; ".join(line.format(r=r) for line in row_loads),
        update=lambda r, v: f"c{r}_{v} = dot(c{r}_{v}, a{sfx[v]}, b{v})",
        store=lambda r, v: f"store{sfx[v]}(C, crow{r} + {first[v]}, c{r}_{v})",
    )


def matmul_description(m: int, n: int, k: int = 4):
    """``C[i, j] += A[i, k] * B[k, j]`` over an M x N tile (k is the panel axis)."""
    A = placeholder((m, k), name="A")
    B = placeholder((k, n), name="B")
    r = reduce_axis(k, name="k")
    C = compute((m, n), lambda i, j: te_sum(A[i, r] * B[r, j], axis=r), name="C")
    return create_func([A, B, C], name=f"matmul_{m}x{n}")


def _implementation(m: int, n: int, zero_start: bool) -> Callable[[], Callable]:
    @lru_cache(maxsize=None)
    def load() -> Callable:
        name = f"matmul_{m}x{n}" + ("_zero" if zero_start else "")
        module = load_module(name, matmul_source(m, n, zero_start))
        return module.kernel

    return load


@lru_cache(maxsize=None)
def _loader(m: int, n: int, zero_start: bool = False) -> Callable[[], Callable]:
    return _implementation(m, n, zero_start)


def register_shapes(prefix: str, shapes, description: Callable, loader: Callable, meta: dict, **options) -> None:
    """Register ``{prefix}_{M}x{N}`` for each shape (idempotent): ``description(m, n)``,
    ``loader(m, n, zero_start=False)`` the loader of the compiled kernel; the meta every
    matmul family shares (rows as the remainder axis, partial-tile and zero-start variants)
    plus ``meta``; ``options``: :func:`~probsched.ir.intrinsic.register`'s."""
    from ..ir import intrinsic as registry

    for m, n in shapes:
        name = f"{prefix}_{m}x{n}"
        if name in registry.list():
            continue
        register(
            name,
            description(m, n),
            loader(m, n),
            meta={
                "kind": "matmul", "M": m, "N": n, "remainder_axis": "v_i",
                # loaders of the kernel for ``rows`` of a partial tile, and of the zero-start one (None: all m)
                "variant": lambda rows, n=n: loader(rows, n),
                "zero_start_variant": lambda rows, m=m, n=n: loader(m if rows is None else rows, n, True),
                **meta,
            },
            **options,
        )


def register_all() -> None:
    """Register every shipped matmul shape (idempotent)."""
    register_shapes("matmul", SHAPES, matmul_description, _loader, {}, panel_axis="v_k", unit_stride={"C": ("v_j",), "B": ("v_j",)})
