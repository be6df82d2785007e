"""AMX bfloat16 matmul micro-kernels: bf16 x bf16 -> float32 in 16 x 16 tiles on ``tdpbf16ps``.

``matmul_bf16amx_{M}x{N}`` computes what ``matmul_bf16_{M}x{N}`` computes, with the same
description (:func:`~.matmul_bf16.matmul_bf16_description`), call and pair-interleaved B,
on the AMX unit (:mod:`.amx`). C is held in ``M/16 x N/16`` tiles of 16 x 16 float32. Per
*step* of 16 pairs (32 of the reduction) the kernel loads ``M/16`` tiles of A (16 rows of 16
pairs: A must be contiguous along the reduction, ``a_sp`` 2) and ``N/16`` tiles of B (16
pairs x 16 columns, rows ``b_sp`` apart) and multiplies every pair of them into their C
tile. The 32 x 32 block uses the eight tile registers: C in 0-3, A in 4-5, B in 6-7.

- **Fewer rows** (the last tile of a block whose M the kernel does not divide): the
  variant for ``rows`` configures its tiles with fewer rows (``meta["variant"]``, as the
  vector kernels' smaller kernels), so any row count runs in one call.
- **A panel that is not whole steps**: the ``P % 16`` pairs left are one more step with A's
  and B's tiles configured narrower; configuring zeroes the tiles, so C's are stored before
  and loaded after. The design space samples panels of whole steps where the reduction has
  them (``meta["panel_multiple"]``).
- **Zero start**: the tiles start at zero and C is read only around a narrower last step.

The kernels run only where AMX is usable (:func:`.amx.unavailable`): loading one elsewhere
raises the reason, and a generated kernel module asks Linux for the tile state when it is
imported (a saved model imports its kernels' modules without the tuner).

>>> import numpy as np, ml_dtypes, probsched as ps
>>> from probsched.intrinsics import amx
>>> A = np.arange(32 * 64).astype(ml_dtypes.bfloat16) / 512    # 32 x 64 (32 pairs), row-major
>>> B = np.ones((32, 32, 2), ml_dtypes.bfloat16)                # 64 x 32, pair-interleaved
>>> C = np.zeros(32 * 32, np.float32)
>>> if amx.usable():
...     mk = ps.intrinsics.get("matmul_bf16amx_32x32").kernel()
...     mk(C, 0, 32, 1, A.view(np.uint16), 0, 64, 2, 1, B.view(np.uint16).ravel(), 0, 2, 64, 1, 32)
...     expected = A.astype(np.float32).reshape(32, 64).sum(1)
...     assert np.allclose(C.reshape(32, 32)[:, 7], expected, rtol=1e-5)
>>> ps.intrinsics.get("matmul_bf16amx_32x32").meta["dot"]
'tdpbf16ps'
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, List

from .disk_cache import load_module, source_version
from .matmul import register_shapes
from .matmul_bf16 import KERNEL_HEADER, matmul_bf16_description

#: (M, N): M/16 x N/16 C tiles, M/16 A tiles and N/16 B tiles of the eight registers
SHAPES = ((32, 32), (32, 16))
TILE = 16  # rows of a tile; float32 columns of a C tile, pairs of an A or B tile's row
STEP = 16  # pairs of the reduction per tile multiply


def matmul_amx_source(m: int, n: int, zero_start: bool = False) -> str:
    """Python source of the kernel computing ``m`` rows (at most 32) of ``n`` columns (16 or 32)."""
    if not 0 < m <= 2 * TILE or n not in (TILE, 2 * TILE):
        raise ValueError(f"matmul_bf16amx_{m}x{n}: rows must be 1-{2 * TILE} and columns {TILE} or {2 * TILE}")
    row_tiles = [min(TILE, m - TILE * i) for i in range(-(-m // TILE))]  # rows of each row block
    nc = n // TILE
    c_tile = {(i, j): i * nc + j for i in range(len(row_tiles)) for j in range(nc)}
    a_tile = {i: len(c_tile) + i for i in range(len(row_tiles))}
    b_tile = {j: len(c_tile) + len(a_tile) + j for j in range(nc)}

    def configure(pairs: str) -> str:
        rows, colsb = [0] * 8, ["0"] * 8
        for (i, _), t in c_tile.items():
            rows[t], colsb[t] = row_tiles[i], str(4 * TILE)
        for i, t in a_tile.items():
            rows[t], colsb[t] = row_tiles[i], f"4 * {pairs}"  # a pair is 4 bytes
        for _, t in b_tile.items():
            rows[t], colsb[t] = pairs, str(4 * TILE)
        return f"configure(({', '.join(map(str, rows))}), ({', '.join(colsb)}))"

    def c_tiles(op: str) -> List[str]:
        if op == "zero":
            return [f"tile_zero({t})" for t in c_tile.values()]
        return [f"{op}({t}, C, c_off + {TILE * i} * c_si + {TILE * j}, c_si)" for (i, j), t in c_tile.items()]

    def step(first_pair: str) -> List[str]:
        lines = [f"a = a_off + ({first_pair}) * a_sp", f"b = b_off + ({first_pair}) * b_sp"]
        lines += [f"tile_load({t}, A, a + {TILE * i} * a_si, a_si)" for i, t in a_tile.items()]
        lines += [f"tile_load({t}, B, b + {2 * TILE * j}, b_sp)" for j, t in b_tile.items()]
        lines += [f"dot_bf16({t}, {a_tile[i]}, {b_tile[j]})" for (i, j), t in c_tile.items()]
        return lines

    def indent(lines: List[str], depth: int) -> List[str]:
        return ["    " * depth + x for x in lines]

    body = ["steps = P // 16", "rest = P - 16 * steps", "if steps > 0:"]
    body += indent([configure(str(STEP))] + c_tiles("zero" if zero_start else "tile_load"), 1)
    body += indent(["for s in range(steps):"], 1) + indent(step(f"{STEP} * s"), 2)
    body += indent(c_tiles("tile_store"), 1)
    # the pairs left: narrower A and B tiles; configuring zeroes C's tiles, stored just above
    body += ["if rest > 0:"] + indent([configure("rest")], 1)
    if zero_start:
        body += indent(["if steps > 0:"], 1) + indent(c_tiles("tile_load"), 2)
        body += indent(["else:"], 1) + indent(c_tiles("zero"), 2)
    else:
        body += indent(c_tiles("tile_load"), 1)
    body += indent(step(f"{STEP} * steps") + c_tiles("tile_store"), 1)
    lines = [
        # numba's cache checks this file's date only: the tile helpers' version makes an edited amx module a new source
        f"# probsched.intrinsics.amx {source_version('probsched.intrinsics.amx')}",
        "import numba",
        "from probsched.intrinsics.amx import configure, dot_bf16, require, tile_load, tile_store, tile_zero",
        "",
        "require()  # Linux faults every tile instruction until the process has asked for the tile state",
        "",
        *KERNEL_HEADER,
        f"    # {m} rows x {n} columns in tiles: C {sorted(c_tile.values())}, A {sorted(a_tile.values())}, B "
        f"{sorted(b_tile.values())}; c_sj, a_st, b_st are 1, a_sp and b_sj 2 (tensorize checks it)",
    ]
    return "\n".join(lines + indent(body, 1)) + "\n"


@lru_cache(maxsize=None)
def _loader(m: int, n: int, zero_start: bool = False) -> Callable[[], Callable]:
    @lru_cache(maxsize=None)
    def load() -> Callable:
        from . import amx

        amx.require()  # before compiling: LLVM cannot select tile instructions for another CPU
        name = f"matmul_bf16amx_{m}x{n}" + ("_zero" if zero_start else "")
        return load_module(name, matmul_amx_source(m, n, zero_start)).kernel

    return load


def register_all() -> None:
    """Register every shipped AMX shape (idempotent; everywhere, offered only where usable)."""
    register_shapes(
        "matmul_bf16amx", SHAPES, matmul_bf16_description, _loader,
        {"precision": "bfloat16", "dot": "tdpbf16ps", "unit": "amx", "panel_multiple": STEP},
        panel_axis="v_p", unit_stride={"C": ("v_j",), "A": ("v_t",), "B": ("v_t",)},
        strides={"A": {"v_p": 2, "v_t": 1}, "B": {"v_j": 2, "v_t": 1}},
    )
