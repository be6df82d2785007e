"""The AMX tile unit (Intel Xeon since Sapphire Rapids) as numba code uses it: the process's
permission, and the tile instructions as numba intrinsics.

**Permission.** Linux leaves the tile registers out of a process's saved state until the
process asks for them: every tile instruction faults before
``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``. :func:`unavailable` asks once per
process and unit (the grant covers all its threads, and a forked child inherits it) and
returns why AMX cannot be used here, or None; :func:`usable` is its yes or no and
:func:`require` raises the reason. The reason is logged once per unit (a warning when the
CPU has AMX but Linux refused); where AMX is not usable the design space offers no AMX
kernel. Compiling code that uses the intrinsics below asks too (typing fails with the
reason where AMX is not usable); code loaded from numba's cache must ask itself
(:func:`require`), as the generated kernel modules do when imported.

**Tiles.** Eight registers ``tmm0``-``tmm7``, each up to 16 rows of 64 bytes. Their shapes
are set together by :func:`configure` (``ldtilecfg`` of a 64-byte configuration, palette 1:
the rows and bytes per row of each tile; 0 and 0 leaves a tile unused), which also zeroes
them, and last until the next one. Tile numbers are literal integers (the instructions name
registers), offsets and strides count elements of the array:

- :func:`tile_zero` (``tilezero``);
- :func:`tile_load`, :func:`tile_store`: the tile's rows at ``array[offset + r * stride]``
  (``tileloadd``, ``tilestored``; no alignment needed);
- :func:`dot_bf16`: ``c += a @ b`` (``tdpbf16ps``): ``c`` rows of 16 float32, ``a`` the same
  rows of ``P`` bfloat16 pairs (``4P`` bytes), ``b`` ``P`` rows of 16 pairs, the
  pair-interleaved layout of the bf16 kernels (:mod:`.matmul_bf16`); each pair's two products
  are added to the float32 lane (denormals flushed to zero, as ``vdpbf16ps`` does);
- :func:`dot_int8`: ``c += a @ b`` (``tdpbusd``): ``c`` rows of 16 int32, ``a`` the same
  rows of ``Q`` quads of uint8 (``4Q`` bytes), ``b`` ``Q`` rows of 16 quads of int8, the
  4-interleaved layout of the int8 kernels (:mod:`.matmul_int8`); each quad's four products
  are added to the int32 lane (wrapping, as ``vpdpbusd`` does).

The two dot products are separate CPU features (``amx_bf16``, ``amx_int8``): ``unit`` of
:func:`unavailable`, :func:`usable` and :func:`require` names the one asked about
(``"tile"``: the tile registers alone, as :func:`configure` and the loads need).

>>> import numba, numpy as np, ml_dtypes
>>> def one_tile(dot):  # c[16, 16] += a[16, 64 bytes] @ b, b's 16 pairs (quads) x 16 columns
...     @numba.njit
...     def run(c, a, b, row):  # row: elements of 64 bytes
...         configure((16, 16, 16, 0, 0, 0, 0, 0), (64, 64, 64, 0, 0, 0, 0, 0))
...         tile_load(0, c, 0, 16)
...         tile_load(1, a, 0, row)
...         tile_load(2, b, 0, row)
...         dot(0, 1, 2)
...         tile_store(0, c, 0, 16)
...     return run
>>> a = np.ones((16, 32), ml_dtypes.bfloat16); b = np.full((16, 16, 2), 0.5, ml_dtypes.bfloat16)
>>> c = np.ones(16 * 16, np.float32)
>>> if usable():
...     one_tile(dot_bf16)(c, a.view(np.uint16).ravel(), b.view(np.uint16).ravel(), 32)
...     assert c.tolist() == [17.0] * 256
>>> c = np.ones(16 * 16, np.int32)
>>> if usable("int8"):  # every product 255 x -128
...     one_tile(dot_int8)(c, np.full(16 * 64, 255, np.uint8), np.full(16 * 64, -128, np.int8), 64)
...     assert c.tolist() == [1 + 64 * 255 * -128] * 256
>>> usable() == (unavailable() is None), usable("tile") >= usable("int8")
(True, True)
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
from typing import Optional

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ..errors import BuildError

log = logging.getLogger("probsched.intrinsics")

_SYS_ARCH_PRCTL = 158  # x86-64 Linux
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
#: per unit: the /proc/cpuinfo flags and the LLVM features its instructions need
UNITS = {
    "tile": (("amx_tile",), ("amx-tile",)),
    "bf16": (("amx_tile", "amx_bf16"), ("amx-tile", "amx-bf16")),
    "int8": (("amx_tile", "amx_int8"), ("amx-tile", "amx-int8")),
}


def _request_permission() -> Optional[str]:
    """Ask Linux for the tile data state; why it was not granted, or None."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"only x86-64 Linux is asked for the tile state here (this is {platform.system()} on {platform.machine()})"
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM), ctypes.c_ulong(_XFEATURE_XTILEDATA))
    if rc != 0:
        err = ctypes.get_errno()
        return f"Linux refused the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM): {os.strerror(err)})"
    return None


def unavailable(unit: str = "bf16") -> Optional[str]:
    """Why this process cannot run the AMX ``unit`` (``"bf16"``, ``"int8"`` dot products, or
    ``"tile"``: the registers, loads and stores), asking Linux once per unit; None when it can."""
    return _unavailable(unit)


@functools.lru_cache(maxsize=None)
def _unavailable(unit: str) -> Optional[str]:
    # cached by the unit alone: unavailable() and unavailable("bf16") are one question, asked and logged once
    from ..target import Target
    from .simd import compiles_for

    if unit not in UNITS:
        raise ValueError(f"no AMX unit {unit!r}: one of {', '.join(UNITS)}")
    flags, features = UNITS[unit]
    missing = [f for f in flags if not Target.host().has(f)]
    if missing:
        log.info("AMX %s kernels not offered: the CPU has no %s", unit, " ".join(missing))
        return f"the CPU has no {' '.join(missing)}"
    off = [f for f in features if not compiles_for(f)]
    if off:
        reason = f"numba compiles without {' '.join(off)} (NUMBA_CPU_FEATURES)"
    else:
        reason = _request_permission()  # asking again (another unit) is granted again: arch_prctl is idempotent
    if reason:
        log.warning("AMX %s kernels not offered: %s", unit, reason)
    return reason


unavailable.cache_clear = _unavailable.cache_clear  # type: ignore[attr-defined]  # every answer asked anew (tests)
unavailable.cache_info = _unavailable.cache_info  # type: ignore[attr-defined]


def usable(unit: str = "bf16") -> bool:
    """Whether this process may run the AMX ``unit``'s instructions (see :func:`unavailable`)."""
    return unavailable(unit) is None


def require(unit: str = "bf16") -> None:
    """Raise :class:`~probsched.errors.BuildError` naming why the AMX ``unit`` is not usable
    here: a program with tile kernels cannot be built on this machine (a record tuned on
    another CPU, say), and whoever builds candidates skips it as it skips any that fails to build."""
    reason = unavailable(unit)
    if reason:
        raise BuildError(f"AMX tile kernels cannot run in this process: {reason}")


# ------------------------------------------------------------------ tile instructions

_I8, _I16, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(64)
_PTR = _I8.as_pointer()


def _call(builder, name: str, argtypes, args) -> None:
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), argtypes), name)
    builder.call(fn, args)


def _tile(t) -> int:
    """The register number of a literal tile argument (a typing error otherwise)."""
    if not isinstance(t, types.IntegerLiteral) or not 0 <= t.literal_value < 8:
        raise TypingError(f"an AMX tile is a literal integer 0-7, got {t}")
    return t.literal_value


def _host_check(what: str, unit: str = "tile") -> None:
    # Typing asks for the permission, so a process that compiles tile code may run it; and
    # LLVM aborts the process on an instruction it cannot select: refuse while typing instead
    reason = unavailable(unit)
    if reason:
        raise TypingError(f"{what}: AMX {unit} tile kernels cannot run in this process: {reason}")


def _address(context, builder, array_type, array, offset):
    data = context.make_array(array_type)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [offset]), _PTR)


def _stride_bytes(context, builder, array_type, stride_type, stride):
    itemsize = context.get_abi_sizeof(context.get_data_type(array_type.dtype))
    return builder.mul(context.cast(builder, stride, stride_type, types.int64), ir.Constant(_I64, itemsize))


@intrinsic
def configure(typingctx, rows, colsb):
    """``ldtilecfg``: tile ``t`` gets ``rows[t]`` rows (at most 16) of ``colsb[t]`` bytes (at
    most 64, a multiple of 4); both 8-tuples of integers. A thread whose tiles have this shape
    already keeps them as they are (``ldtilecfg`` costs as much as several tile multiplies,
    ``sttilecfg`` little): no tile's value may be assumed after it."""
    _host_check("configure")
    for x in (rows, colsb):
        if not (isinstance(x, types.BaseTuple) and len(x) == 8 and all(isinstance(e, types.Integer) for e in x)):
            raise TypingError(f"configure: expected two 8-tuples of integers, got {rows} and {colsb}")

    def codegen(context, builder, sig, args):
        config = cgutils.alloca_once(builder, ir.ArrayType(_I8, 64))  # in the entry block: no stack growth in loops
        builder.store(ir.Constant(ir.ArrayType(_I8, 64), [0] * 64), config)
        base = builder.bitcast(config, _PTR)
        builder.store(ir.Constant(_I8, 1), base)  # palette 1
        for t, (r, c) in enumerate(zip(cgutils.unpack_tuple(builder, args[0]), cgutils.unpack_tuple(builder, args[1]))):
            colsb_at = builder.bitcast(builder.gep(base, [ir.Constant(_I64, 16 + 2 * t)]), _I16.as_pointer())
            builder.store(builder.trunc(c, _I16), colsb_at)
            builder.store(builder.trunc(r, _I8), builder.gep(base, [ir.Constant(_I64, 48 + t)]))
        current = cgutils.alloca_once(builder, ir.ArrayType(_I8, 64))
        _call(builder, "llvm.x86.sttilecfg", [_PTR], [builder.bitcast(current, _PTR)])
        whole = ir.IntType(512).as_pointer()
        same = builder.icmp_unsigned("==", builder.load(builder.bitcast(config, whole)), builder.load(builder.bitcast(current, whole)))
        with builder.if_then(builder.not_(same), likely=False):
            _call(builder, "llvm.x86.ldtilecfg", [_PTR], [base])
        return context.get_dummy_value()

    return types.void(rows, colsb), codegen


@intrinsic(prefer_literal=True)
def tile_zero(typingctx, tile):
    """``tilezero``: tile ``tile`` holds zeros."""
    _host_check("tile_zero")
    t = _tile(tile)

    def codegen(context, builder, sig, args):
        _call(builder, "llvm.x86.tilezero", [_I8], [ir.Constant(_I8, t)])
        return context.get_dummy_value()

    return types.void(tile), codegen


def _memory_op(name: str, llvm_name: str):
    @intrinsic(prefer_literal=True)
    def op(typingctx, tile, array, offset, stride):
        _host_check(name)
        t = _tile(tile)
        if not isinstance(array, types.Array) or not isinstance(offset, types.Integer) or not isinstance(stride, types.Integer):
            raise TypingError(f"{name}: expected (tile, array, offset, stride), got {array}, {offset}, {stride}")

        def codegen(context, builder, sig, args):
            address = _address(context, builder, sig.args[1], args[1], args[2])
            stride = _stride_bytes(context, builder, sig.args[1], sig.args[3], args[3])
            _call(builder, llvm_name, [_I8, _PTR, _I64], [ir.Constant(_I8, t), address, stride])
            return context.get_dummy_value()

        return types.void(tile, array, offset, stride), codegen

    return op


tile_load = _memory_op("tile_load", "llvm.x86.tileloadd64")
tile_load.__doc__ = "``tileloadd``: tile ``tile``'s rows from ``array[offset + r * stride]`` (elements)."
tile_store = _memory_op("tile_store", "llvm.x86.tilestored64")
tile_store.__doc__ = "``tilestored``: tile ``tile``'s rows to ``array[offset + r * stride]`` (elements)."


def _dot(name: str, llvm_name: str, unit: str, doc: str):
    @intrinsic(prefer_literal=True)
    def dot(typingctx, c, a, b):
        _host_check(name, unit)
        tiles = [_tile(x) for x in (c, a, b)]

        def codegen(context, builder, sig, args):
            _call(builder, llvm_name, [_I8] * 3, [ir.Constant(_I8, t) for t in tiles])
            return context.get_dummy_value()

        return types.void(c, a, b), codegen

    dot.__doc__ = doc
    return dot


dot_bf16 = _dot("dot_bf16", "llvm.x86.tdpbf16ps", "bf16", "``tdpbf16ps``: float32 tile ``c`` += bfloat16 tile ``a`` @ pair-interleaved tile ``b``.")
dot_int8 = _dot("dot_int8", "llvm.x86.tdpbusd", "int8", "``tdpbusd``: int32 tile ``c`` += uint8 tile ``a`` @ 4-interleaved int8 tile ``b``.")
