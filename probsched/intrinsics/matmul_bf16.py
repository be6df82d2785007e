"""Register-blocked bfloat16 matmul micro-kernels: bf16 x bf16 -> float32 on ``vdpbf16ps``.

``matmul_bf16_{M}x{N}`` computes ``C[0:M, 0:N] += A[0:M, 0:2P] @ B`` in float32 for a panel
of ``P`` *pairs* of the reduction, with B stored pair-interleaved as the instruction reads
it: ``B[p, j, t]`` is the logical ``B[2p + t, j]``, so the two bfloat16 of one column and
one pair are adjacent and 16 columns are one 64-byte vector. The description
(:func:`matmul_bf16_description`) says exactly that::

    C[i, j] += float32(A[i, 2 * p + t]) * float32(B[p, j, t])    (p: the panel, t < 2)

and ``tensorize`` matches a tile whose reduction is split into pairs (``k = 2p + t``) and
whose B is laid out so (the design space's weight layout rewrite or packing stage,
:mod:`probsched.space.intrin_tiling`), with A and C contiguous along ``t`` and ``j``.

The kernel keeps ``M x N/16`` float32 vector accumulators in registers; per pair it loads
N/16 vectors of B and, per row, broadcasts A's pair to every lane and adds the two products
to each accumulator (:func:`~.simd.dot_pairs`). Its zero-start variant starts the
accumulators at zero and never reads C.

On a CPU without ``avx512_bf16`` the same kernels are built on
:func:`~.simd.dot_pairs_emulated` (each bfloat16 widened, two float32 FMAs; the same
results on normal numbers), so every bf16 program runs everywhere; ``native=`` of
:func:`matmul_bf16_source` picks one explicitly.

``matmul_bf16fma_{M}x{N}`` are the same kernels always built on the widened FMAs. Where
``vdpbf16ps`` exists it is not always the faster: an Intel core with two 512-bit FMA pipes
issues twice as many FMAs as dot products, and widening a pair costs two integer ops
(shared by a row of B, or a column of A), so its bf16 dot-product peak is about half its FMA
peak and the FMA kernels can pass it (``benchmarks/bench_peak.py``; figures in
benchmarks/README.md). The design space offers both families there and measures
(:mod:`probsched.space.intrin_tiling`); elsewhere they are the same code and it offers one.

>>> import numpy as np, ml_dtypes, probsched as ps
>>> mk = ps.intrinsics.get("matmul_bf16_4x16").kernel()
>>> A = np.arange(4 * 6).astype(ml_dtypes.bfloat16)              # 4 x 6 (3 pairs), row-major
>>> B = np.ones((3, 16, 2), ml_dtypes.bfloat16)                   # 6 x 16, pair-interleaved
>>> C = np.zeros(4 * 16, np.float32)
>>> mk(C, 0, 16, 1, A.view(np.uint16), 0, 6, 2, 1, B.view(np.uint16).ravel(), 0, 2, 32, 1, 3)
>>> C.reshape(4, 16)[:, 0].tolist()
[15.0, 51.0, 87.0, 123.0]
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Optional

from ..te import compute, create_func, placeholder, reduce_axis, sum as te_sum
from .disk_cache import load_module, source_version
from .matmul import dot_product_block, dot_product_widths, register_shapes

#: (M, N): M rows of N/16 accumulators of 16 float32 lanes (and one of 8 where N is 8 more
#: than a multiple of 16: MobileNet's 24 channels). AVX-512 has 32 vector registers, of
#: which a row's hold B's pairs and one or two A's broadcast; AVX2 holds a 16-lane
#: accumulator in two.
SHAPES = (
    (4, 8), (8, 8), (4, 16), (8, 16), (4, 24), (8, 24), (12, 24), (4, 32), (6, 32), (8, 32), (12, 32), (4, 64), (6, 64),
)
#: the FMA family also keeps both halves of B's pairs and of A's pair widened: 2 N/16 + 2 more
FMA_SHAPES = ((4, 8), (8, 8), (4, 16), (8, 16), (4, 24), (8, 24), (4, 32), (6, 32), (8, 32), (12, 32), (4, 64))

NUMBA_OPTIONS = "nogil=True, cache=True, error_model='numpy', boundscheck=False"


#: the compiled signature and the def line of every bf16 matmul kernel (the call of the description)
KERNEL_HEADER = (
    "_f = numba.types.Array(numba.float32, 1, 'C')",
    "_h = numba.types.Array(numba.uint16, 1, 'C')",
    "_i = numba.int64",
    "SIGNATURE = numba.void(_f, _i, _i, _i, _h, _i, _i, _i, _i, _h, _i, _i, _i, _i, _i)",
    "",
    "",
    f"@numba.njit(SIGNATURE, {NUMBA_OPTIONS})",
    "def kernel(C, c_off, c_si, c_sj, A, a_off, a_si, a_sp, a_st, B, b_off, b_sj, b_sp, b_st, P):",
)


def native_available() -> bool:
    """Whether numba compiles for a CPU with ``vdpbf16ps`` (``avx512_bf16``): the host's,
    unless ``NUMBA_CPU_FEATURES`` names others (as when testing for an AVX2 machine)."""
    from .simd import compiles_for

    return compiles_for("avx512bf16")


def matmul_bf16_source(m: int, n: int, zero_start: bool = False, native: Optional[bool] = None) -> str:
    """Python source of the M x N kernel; ``native``: ``vdpbf16ps`` (default: when the CPU
    has it) or the emulated dot product."""
    native = native_available() if native is None else native
    dot = "dot_pairs" if native else "dot_pairs_emulated"
    lines = [
        # numba's cache checks this file's date only: name the vector helpers' version so
        # that an edited simd module is a new source, compiled anew (disk_cache names by it)
        f"# probsched.intrinsics.simd {source_version('probsched.intrinsics.simd')}",
        "import numba",
        f"from probsched.intrinsics.simd import {dot} as dot, broadcast_pair, broadcast_pair8, load, load8, load_pairs, "
        "load_pairs8, store, store as store8, zeros, zeros8",
        "",
        *KERNEL_HEADER,
        f"    # {m}x{n} register block of {m} rows of {dot_product_widths(n)}-lane vectors; c_sj, a_st, b_st are 1 and "
        "b_sj 2 (tensorize checks it)",
    ]
    lines += dot_product_block(m, n, 2, zero_start, "load_pairs", "broadcast_pair")
    return "\n".join(lines) + "\n"


def matmul_bf16_description(m: int, n: int, pairs: int = 2):
    """``C[i, j] += float32(A[i, 2p + t]) * float32(B[p, j, t])`` over an M x N tile (p is
    the panel axis, of pairs)."""
    A = placeholder((m, 2 * pairs), "bfloat16", name="A")
    B = placeholder((pairs, n, 2), "bfloat16", name="B")
    p = reduce_axis(pairs, name="p")
    t = reduce_axis(2, name="t")
    C = compute((m, n), lambda i, j: te_sum(A[i, 2 * p + t] * B[p, j, t], axis=[p, t]), name="C")
    return create_func([A, B, C], name=f"matmul_bf16_{m}x{n}")


@lru_cache(maxsize=None)
def _loader(m: int, n: int, zero_start: bool = False, fma: bool = False) -> Callable[[], Callable]:
    @lru_cache(maxsize=None)
    def load() -> Callable:
        native = not fma and native_available()
        name = f"matmul_bf16_{m}x{n}" + ("_zero" if zero_start else "") + ("" if native else "_emulated")
        return load_module(name, matmul_bf16_source(m, n, zero_start, native)).kernel

    return load


def _fma_loader(m: int, n: int, zero_start: bool = False) -> Callable[[], Callable]:
    return _loader(m, n, zero_start, True)


def register_all() -> None:
    """Register every shipped bf16 matmul shape of both families (idempotent)."""
    options = dict(
        panel_axis="v_p", unit_stride={"C": ("v_j",), "A": ("v_t",), "B": ("v_t",)}, strides={"B": {"v_j": 2, "v_t": 1}}
    )
    register_shapes("matmul_bf16", SHAPES, matmul_bf16_description, _loader, {"precision": "bfloat16", "dot": "vdpbf16ps"}, **options)
    register_shapes("matmul_bf16fma", FMA_SHAPES, matmul_bf16_description, _fma_loader, {"precision": "bfloat16", "dot": "fma"}, **options)
