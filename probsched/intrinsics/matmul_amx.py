"""AMX matmul micro-kernels in 16 x 16 tiles: bf16 x bf16 -> float32 on ``tdpbf16ps`` and
u8 x s8 -> int32 on ``tdpbusd``.

``matmul_bf16amx_{M}x{N}`` computes what ``matmul_bf16_{M}x{N}`` computes, with the same
description (:func:`~.matmul_bf16.matmul_bf16_description`), call and pair-interleaved B,
on the AMX unit (:mod:`.amx`); ``matmul_int8amx_{M}x{N}`` likewise what
``matmul_int8_{M}x{N}`` computes (:func:`~.matmul_int8.matmul_int8_description`, B
4-interleaved). The reduction is read in *groups* of 4 bytes, pairs of bf16 or quads of
bytes, and one generator writes both families (:class:`Family`). C is held in
``M/16 x N/16`` tiles of 16 x 16 float32 (int32). Per *step* of 16 groups (32 of a bf16
reduction, 64 of an int8 one) the kernel loads ``M/16`` tiles of A (16 rows of 64 bytes: A
must be contiguous along the reduction, ``a_sp`` the group) and ``N/16`` tiles of B (16
groups x 16 columns, rows ``b_sp`` apart) and multiplies every pair of them into their C
tile. The 32 x 32 block uses the eight tile registers: C in 0-3, A in 4-5, B in 6-7.

- **Fewer rows** (the last tile of a block whose M the kernel does not divide): the
  variant for ``rows`` configures its tiles with fewer rows (``meta["variant"]``, as the
  vector kernels' smaller kernels), so any row count runs in one call.
- **A panel that is not whole steps**: the ``P % 16`` groups left are one more step with A's
  and B's tiles configured narrower; configuring zeroes the tiles, so C's are stored before
  and loaded after. The design space samples panels of whole steps where the reduction has
  them (``meta["panel_multiple"]``).
- **Zero start**: the tiles start at zero and C is read only around a narrower last step.

The kernels run only where their AMX unit is usable (:func:`.amx.unavailable`, ``amx_bf16``
and ``amx_int8`` apart): loading one elsewhere raises the reason, and a generated kernel
module asks Linux for the tile state when it is imported (a saved model imports its
kernels' modules without the tuner).

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
>>> A = np.full(32 * 72, 255, np.uint8)                         # 32 x 72 (18 quads: a step and 2)
>>> B = np.full((18, 16, 4), -128, np.int8)                     # 72 x 16, 4-interleaved
>>> C = np.ones(32 * 16, np.int32)
>>> if amx.usable("int8"):
...     ps.intrinsics.get("matmul_int8amx_32x16").kernel()(C, 0, 16, 1, A, 0, 72, 4, 1, B.ravel(), 0, 4, 64, 1, 18)
...     assert C.tolist() == [1 + 72 * 255 * -128] * (32 * 16)
>>> [ps.intrinsics.get(f"matmul_{p}amx_32x32").meta["dot"] for p in ("bf16", "int8")]
['tdpbf16ps', 'tdpbusd']
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Callable, List, Tuple

from . import matmul_bf16, matmul_int8
from .disk_cache import load_module, source_version
from .matmul import register_shapes

#: (M, N): M/16 x N/16 C tiles, M/16 A tiles and N/16 B tiles of the eight registers
SHAPES = ((32, 32), (32, 16))
TILE = 16  # rows of a tile; 32-bit columns of a C tile, groups of an A or B tile's row
STEP = 16  # groups of the reduction per tile multiply (64 bytes of an A row)


@dataclass(frozen=True)
class Family:
    """What an AMX kernel family differs in: its name, the :mod:`.amx` dot product and its
    instruction, the unit :func:`.amx.unavailable` asks about, the elements of a 4-byte
    group of the reduction, the vector family's description and kernel header (the call)."""

    prefix: str
    dot: str
    instruction: str
    unit: str
    group: int
    panel_axis: str
    description: Callable
    header: Tuple[str, ...]


FAMILIES = {
    "bfloat16": Family("matmul_bf16amx", "dot_bf16", "tdpbf16ps", "bf16", 2, "v_p",
                       matmul_bf16.matmul_bf16_description, matmul_bf16.KERNEL_HEADER),
    "int8": Family("matmul_int8amx", "dot_int8", "tdpbusd", "int8", 4, "v_q",
                   matmul_int8.matmul_int8_description, matmul_int8.KERNEL_HEADER),
}


def matmul_amx_source(m: int, n: int, zero_start: bool = False, precision: str = "bfloat16") -> str:
    """Python source of the ``precision`` kernel computing ``m`` rows (at most 32) of ``n``
    columns (16 or 32)."""
    fam = FAMILIES[precision]
    if not 0 < m <= 2 * TILE or n not in (TILE, 2 * TILE):
        raise ValueError(f"{fam.prefix}_{m}x{n}: rows must be 1-{2 * TILE} and columns {TILE} or {2 * TILE}")
    row_tiles = [min(TILE, m - TILE * i) for i in range(-(-m // TILE))]  # rows of each row block
    nc = n // TILE
    c_tile = {(i, j): i * nc + j for i in range(len(row_tiles)) for j in range(nc)}
    a_tile = {i: len(c_tile) + i for i in range(len(row_tiles))}
    b_tile = {j: len(c_tile) + len(a_tile) + j for j in range(nc)}

    def configure(groups: str) -> str:
        rows, colsb = [0] * 8, ["0"] * 8
        for (i, _), t in c_tile.items():
            rows[t], colsb[t] = row_tiles[i], str(4 * TILE)
        for i, t in a_tile.items():
            rows[t], colsb[t] = row_tiles[i], f"4 * {groups}"  # a group is 4 bytes
        for _, t in b_tile.items():
            rows[t], colsb[t] = groups, str(4 * TILE)
        return f"configure(({', '.join(map(str, rows))}), ({', '.join(colsb)}))"

    def c_tiles(op: str) -> List[str]:
        if op == "zero":
            return [f"tile_zero({t})" for t in c_tile.values()]
        return [f"{op}({t}, C, c_off + {TILE * i} * c_si + {TILE * j}, c_si)" for (i, j), t in c_tile.items()]

    def step(first_group: str) -> List[str]:
        lines = [f"a = a_off + ({first_group}) * a_sp", f"b = b_off + ({first_group}) * b_sp"]
        lines += [f"tile_load({t}, A, a + {TILE * i} * a_si, a_si)" for i, t in a_tile.items()]
        lines += [f"tile_load({t}, B, b + {fam.group * TILE * j}, b_sp)" for j, t in b_tile.items()]
        lines += [f"{fam.dot}({t}, {a_tile[i]}, {b_tile[j]})" for (i, j), t in c_tile.items()]
        return lines

    def indent(lines: List[str], depth: int) -> List[str]:
        return ["    " * depth + x for x in lines]

    body = [f"steps = P // {STEP}", f"rest = P - {STEP} * steps", "if steps > 0:"]
    body += indent([configure(str(STEP))] + c_tiles("zero" if zero_start else "tile_load"), 1)
    body += indent(["for s in range(steps):"], 1) + indent(step(f"{STEP} * s"), 2)
    body += indent(c_tiles("tile_store"), 1)
    # the groups left: narrower A and B tiles; configuring zeroes C's tiles, stored just above
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
        f"from probsched.intrinsics.amx import configure, {fam.dot}, require, tile_load, tile_store, tile_zero",
        "",
        f"require({fam.unit!r})  # Linux faults every tile instruction until the process has asked for the tile state",
        "",
        *fam.header,
        f"    # {m} rows x {n} columns in tiles: C {sorted(c_tile.values())}, A {sorted(a_tile.values())}, B "
        f"{sorted(b_tile.values())}; c_sj, a_st, b_st are 1, a_sp and b_sj {fam.group} (tensorize checks it)",
    ]
    return "\n".join(lines + indent(body, 1)) + "\n"


@lru_cache(maxsize=None)
def _loader(m: int, n: int, zero_start: bool = False, precision: str = "bfloat16") -> Callable[[], Callable]:
    @lru_cache(maxsize=None)
    def load() -> Callable:
        from . import amx

        fam = FAMILIES[precision]
        amx.require(fam.unit)  # before compiling: LLVM cannot select tile instructions for another CPU
        name = f"{fam.prefix}_{m}x{n}" + ("_zero" if zero_start else "")
        return load_module(name, matmul_amx_source(m, n, zero_start, precision)).kernel

    return load


def register_all() -> None:
    """Register every shipped AMX shape of both families (idempotent; everywhere, offered
    only where usable)."""
    for precision, fam in FAMILIES.items():
        register_shapes(
            fam.prefix, SHAPES, fam.description, partial(_loader, precision=precision),
            {"precision": precision, "dot": fam.instruction, "unit": "amx", "panel_multiple": STEP},
            panel_axis=fam.panel_axis, unit_stride={"C": ("v_j",), "A": ("v_t",), "B": ("v_t",)},
            strides={"A": {fam.panel_axis: fam.group, "v_t": 1}, "B": {"v_j": fam.group, "v_t": 1}},
        )
