"""Register-blocked int8 matmul micro-kernels: u8 x s8 -> int32 on ``vpdpbusd`` (VNNI).

``matmul_int8_{M}x{N}`` computes ``C[0:M, 0:N] += A[0:M, 0:4Q] @ B`` in int32 for a panel of
``Q`` *quads* of the reduction, A unsigned (activations), B signed (weights) and stored
4-interleaved as the instruction reads it: ``B[q, j, t]`` is the logical ``B[4q + t, j]``,
so the four bytes of one column and one quad are adjacent and 16 columns are one 64-byte
vector. The description (:func:`matmul_int8_description`) says exactly that::

    C[i, j] += int32(A[i, 4 * q + t]) * int32(B[q, j, t])    (q: the panel, t < 4)

and ``tensorize`` matches a tile whose reduction is split into quads (``k = 4q + t``) and
whose B is laid out so (the weight layout rewrite or the packing stage of
:mod:`probsched.space.intrin_tiling`), with A and C contiguous along ``t`` and ``j``.

The kernel keeps ``M x N/16`` int32 vector accumulators in registers; per quad it loads
N/16 vectors of B and, per row, broadcasts A's quad to every lane and adds the four
products to each accumulator (:func:`~.simd_int8.dot_quads`). Its zero-start variant starts
the accumulators at zero and never reads C.

An activation with a zero point (``x = s (a - z)``, ``a`` in ``[0, 255]``) needs no other
kernel: ``sum_k (a - z) w = sum_k a w - z sum_k w``, and the column sums of a constant B are
computed once with the weights, the correction applied in the epilogue
(:mod:`probsched.graph.quantization`).

On a CPU without ``avx512_vnni`` the same kernels are built on two 256-bit ``vpdpbusd``
(AVX-VNNI, Intel's client cores) or, without either, on
``vpmaddwd`` (:mod:`.simd_int8_madd`: each quad's even and odd bytes widened to 16 bits
and multiplied in pairs, exact where ``vpmaddubsw`` saturates), the same results bit for
bit, so every int8 program runs everywhere; ``dot=`` of :func:`matmul_int8_source` picks
one explicitly (:func:`~.simd_int8.dot_quads_emulated`, plain vector operations, is the
slow reference).

``matmul_int8r_{M}x{N}``, the same kernels for B of type ``"int8r"`` (weights in ``[-64,
64]``, :mod:`probsched.ir.dtypes`), run ``vpmaddubsw`` where the CPU has no VNNI
(:func:`~.simd_int8.dot_quads_maddubs`: exact on such weights only, 1.4x the ``vpmaddwd``
kernels on Zen 3); the design space offers them for int8r weights there
(:func:`~probsched.space.intrin_tiling.int8_weights`), and tensorize gives them no other B.

>>> import numpy as np, probsched as ps
>>> mk = ps.intrinsics.get("matmul_int8_4x16").kernel()
>>> A = np.arange(4 * 8, dtype=np.uint8)                          # 4 x 8 (2 quads), row-major
>>> B = np.ones((2, 16, 4), np.int8)                               # 8 x 16, 4-interleaved
>>> C = np.zeros(4 * 16, np.int32)
>>> mk(C, 0, 16, 1, A, 0, 8, 4, 1, B.ravel(), 0, 4, 64, 1, 2)
>>> C.reshape(4, 16)[:, 0].tolist()
[28, 92, 156, 220]
"""

from __future__ import annotations

from functools import lru_cache, partial
from typing import Callable, Optional

from ..ir.dtypes import INT8R
from ..te import compute, create_func, placeholder, reduce_axis, sum as te_sum
from .disk_cache import load_module, source_version
from .matmul import dot_product_block, dot_product_widths, register_shapes

#: (M, N): M rows of N/16 accumulators of 16 int32 lanes (and one of 8 where N is 8 more
#: than a multiple of 16: the N = 8 and 24 shapes serve channel counts such as MobileNet's
#: 24); AVX-512 has 32 vector registers, of which a row's hold B's quads and one or two A's
#: broadcast (the rule's register budget keeps AVX2 to the shapes that fit it)
SHAPES = (
    (4, 8), (8, 8), (4, 16), (8, 16), (4, 24), (8, 24), (12, 24), (4, 32), (6, 32), (8, 32), (12, 32), (4, 64), (6, 64),
)
QUAD = 4  # bytes of the reduction per lane and instruction
#: the dot product of CPUs without VNNI (:mod:`.simd_int8_madd`, whose module the kernel imports)
MADD = "dot_quads_madd"

NUMBA_OPTIONS = "nogil=True, cache=True, error_model='numpy', boundscheck=False"

#: the compiled signature and the def line of every int8 matmul kernel (the call of the description)
KERNEL_HEADER = (
    "_c = numba.types.Array(numba.int32, 1, 'C')",
    "_u = numba.types.Array(numba.uint8, 1, 'C')",
    "_s = numba.types.Array(numba.int8, 1, 'C')",
    "_i = numba.int64",
    "SIGNATURE = numba.void(_c, _i, _i, _i, _u, _i, _i, _i, _i, _s, _i, _i, _i, _i, _i)",
    "",
    "",
    f"@numba.njit(SIGNATURE, {NUMBA_OPTIONS})",
    "def kernel(C, c_off, c_si, c_sj, A, a_off, a_si, a_sp, a_st, B, b_off, b_sj, b_sp, b_st, P):",
)


def matmul_int8_source(m: int, n: int, zero_start: bool = False, dot: Optional[str] = None) -> str:
    """Python source of the M x N kernel; ``dot``: the dot product of :mod:`.simd_int8` it is
    built on (default: what the CPU runs natively, :func:`~.simd_int8.dot_quads_name`)."""
    from .simd_int8 import dot_quads_name

    dot = dot or dot_quads_name()
    family = "simd_int8_madd" if dot == MADD else "simd_int8"
    lines = [
        # numba's cache checks this file's date only: name the vector helpers' versions
        *(f"# {m} {source_version(m)}" for m in ("probsched.intrinsics.simd", f"probsched.intrinsics.{family}")),
        "import numba",
        f"from probsched.intrinsics.{family} import {'dot' if dot == MADD else dot} as dot, broadcast_quad, "
        "broadcast_quad8, load, load8, load_quads, load_quads8, store, store8, zeros, zeros8",
        "",
        *KERNEL_HEADER,
        f"    # {m}x{n} register block of {m} rows of {dot_product_widths(n)}-lane vectors over P quads; c_sj, a_st, "
        f"b_st are 1 and b_sj {QUAD} (tensorize checks it)",
    ]
    lines += dot_product_block(m, n, QUAD, zero_start, "load_quads", "broadcast_quad")
    return "\n".join(lines) + "\n"


#: weights' type -> the kernel family reading them
FAMILIES = {"int8": "matmul_int8", INT8R: "matmul_int8r"}


def matmul_int8_description(m: int, n: int, quads: int = 2, weights: str = "int8"):
    """``C[i, j] += int32(A[i, 4q + t]) * int32(B[q, j, t])`` over an M x N tile (q is the
    panel axis, of quads); B of type ``weights`` (``"int8r"``: the reduced range)."""
    A = placeholder((m, QUAD * quads), "uint8", name="A")
    B = placeholder((quads, n, QUAD), weights, name="B")
    q = reduce_axis(quads, name="q")
    t = reduce_axis(QUAD, name="t")
    C = compute((m, n), lambda i, j: te_sum(A[i, QUAD * q + t] * B[q, j, t], axis=[q, t]), name="C")
    return create_func([A, B, C], name=f"{FAMILIES[weights]}_{m}x{n}")


@lru_cache(maxsize=None)
def _loader(m: int, n: int, zero_start: bool = False, weights: str = "int8") -> Callable[[], Callable]:
    @lru_cache(maxsize=None)
    def load() -> Callable:
        from .simd_int8 import dot_quads_name

        dot = dot_quads_name(weights)
        name = f"matmul_int8_{m}x{n}" + ("_zero" if zero_start else "") + dot[len("dot_quads"):]
        return load_module(name, matmul_int8_source(m, n, zero_start, dot)).kernel

    return load


def register_all() -> None:
    """Register every shipped int8 matmul shape (idempotent), for int8 and for int8r weights."""
    for weights, dot in (("int8", "vpdpbusd"), (INT8R, "vpmaddubsw")):
        register_shapes(
            FAMILIES[weights], SHAPES, partial(matmul_int8_description, weights=weights),
            lambda m, n, zero_start=False, weights=weights: _loader(m, n, zero_start, weights),
            {"precision": "int8", "dot": dot, "step": QUAD, "weights": weights}, panel_axis="v_q",
            unit_stride={"C": ("v_j",), "A": ("v_t",), "B": ("v_t",)}, strides={"B": {"v_j": QUAD, "v_t": 1}},
        )
