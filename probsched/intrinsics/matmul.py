"""Register-blocked float32 matmul micro-kernels, generated from one template.

``matmul_{M}x{N}`` computes ``C[0:M, 0:N] += A[0:M, k] * B[k, 0:N]`` for ``k`` over a panel
of any length, keeping the M x N accumulators in registers: ``M * N / lanes`` vector
registers (lanes = 8 with AVX2, 16 with AVX-512) plus one row of B and a broadcast of A.
Its *zero-start* variant computes ``C[0:M, 0:N] = A @ B`` instead (the accumulators start at
zero and C is never read): a tile whose reduction begins in this call needs no init pass.
Operands are strided (a convolution's input window is an A with row stride
``stride * channels``); C and B must be contiguous along N, which is what lets LLVM's SLP
vectorizer turn each row's N scalar FMAs into vector FMAs.

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
from typing import Callable, List

from ..te import compute, create_func, placeholder, reduce_axis, sum as te_sum
from ..ir.intrinsic import register
from .disk_cache import load_module

# (M, N): AVX2 fits 12 accumulator registers of 8 lanes (6x16, 4x24, 3x32 fill them);
# AVX-512's 32 registers of 16 lanes take the larger ones.
SHAPES = ((4, 8), (8, 8), (4, 16), (6, 16), (8, 16), (4, 24), (3, 32), (4, 32), (8, 32))

NUMBA_OPTIONS = "nogil=True, cache=True, fastmath={'nsz', 'arcp', 'contract', 'afn'}, error_model='numpy', boundscheck=False"


def matmul_source(m: int, n: int, zero_start: bool = False) -> str:
    """Python source of the M x N kernel (scalar accumulators, unrolled, uint64 indices);
    ``zero_start``: the accumulators start at zero instead of C's values."""
    lines = [
        "import numba",
        "import numpy as np",
        "",
        "_f = numba.types.Array(numba.float32, 1, 'C')",
        "_i = numba.int64",
        "SIGNATURE = numba.void(_f, _i, _i, _i, _f, _i, _i, _i, _f, _i, _i, _i, _i)",
        "",
        "",
        f"@numba.njit(SIGNATURE, {NUMBA_OPTIONS})",
        "def kernel(C, c_off, c_si, c_sj, A, a_off, a_si, a_sk, B, b_off, b_sj, b_sk, K):",
        f"    # {m}x{n} register block; c_sj and b_sj are 1 (tensorize checks it)",
    ]
    lines += register_block(
        m,
        n,
        start=lambda r, c: "np.float32(0.0)" if zero_start else f"C[np.uint64(crow{r} + {c})]",
        loop=["for k in range(K):", "    brow = b_off + k * b_sk"] + [f"    b{c} = B[np.uint64(brow + {c})]" for c in range(n)],
        row=lambda r: f"a{r} = A[np.uint64(a_off + {r} * a_si + k * a_sk)]",
        update=lambda r, c: f"c{r}_{c} += a{r} * b{c}",
        store=lambda r, c: f"C[np.uint64(crow{r} + {c})] = c{r}_{c}",
    )
    return "\n".join(lines) + "\n"


def register_block(
    m: int,
    cols: int,
    start: Callable[[int, int], str],
    loop: List[str],
    row: Callable[[int], str],
    update: Callable[[int, int], str],
    store: Callable[[int, int], str],
) -> List[str]:
    """Body lines of a register-blocked kernel: accumulators ``c{r}_{c}`` (``m`` rows of C,
    ``cols`` each, row ``r`` at ``crow{r}``) set by ``start``; the reduction ``loop`` (its
    header and the loads of B, relative to the loop's indent); per row the load of A
    (``row``) and the ``update`` of each accumulator; then the ``store`` of each."""
    lines = []
    for r in range(m):
        lines.append(f"    crow{r} = c_off + {r} * c_si")
        lines += [f"    c{r}_{c} = {start(r, c)}" for c in range(cols)]
    lines += [f"    {text}" for text in loop]
    for r in range(m):
        lines.append(f"        {row(r)}")
        lines += [f"        {update(r, c)}" for c in range(cols)]
    lines += [f"    {store(r, c)}" for r in range(m) for c in range(cols)]
    return lines


def dot_product_block(m: int, nv: int, lanes: int, group: int, zero_start: bool, load_b: str, broadcast_a: str) -> List[str]:
    """Body lines of a kernel on vector dot products (bf16 pairs, int8 quads: ``group``
    elements of the reduction per lane): ``m x nv`` accumulators of ``lanes`` lanes; per group
    of the panel (``P`` of them) ``nv`` vectors of B (``load_b``) and, per row, A's group in
    every lane (``broadcast_a``), each accumulator ``dot(acc, a, b)``. Its module imports
    ``zeros``, ``load``, ``store``, ``dot`` and those two."""
    return register_block(
        m,
        nv,
        start=lambda r, v: "zeros()" if zero_start else f"load(C, crow{r} + {lanes * v})",
        loop=["for p in range(P):", "    brow = b_off + p * b_sp"]
        + [f"    b{v} = {load_b}(B, brow + {group * lanes * v})" for v in range(nv)]
        + ["    arow = a_off + p * a_sp"],
        row=lambda r: f"a = {broadcast_a}(A, arow + {r} * a_si)",
        update=lambda r, v: f"c{r}_{v} = dot(c{r}_{v}, a, b{v})",
        store=lambda r, v: f"store(C, crow{r} + {lanes * v}, c{r}_{v})",
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
        from ..codegen.compile import configure_numba

        configure_numba()  # SLP on before the first compile
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
