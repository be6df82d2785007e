"""Integer vector values in numba code: what the int8 micro-kernels are written with.

The int8 kernels (:mod:`.matmul_int8`) hold their accumulators in :data:`i32x16`
(``<16 x i32>``: one AVX-512 register, two AVX2 ones) and read their operands as
:data:`u8x64` / :data:`s8x64` (64 bytes: 16 lanes of 4, the *quads* ``vpdpbusd`` reads);
a kernel whose N is not a multiple of 16 (MobileNet-V2's 24 channels) keeps its last 8
columns in the half-width :data:`i32x8` (one ymm register), read as 32 bytes. Like
:mod:`.simd`, each function is a numba intrinsic of a few LLVM instructions, indexing
flat 1-D arrays by an element offset (unchecked, unaligned):

- :func:`zeros`, :func:`load`, :func:`store`: int32 vectors (:func:`zeros8`,
  :func:`load8`, :func:`store8`: of 8 lanes);
- :func:`load_quads`: 64 int8 (``B[q, j, 0:4]`` for 16 columns ``j``): lane ``l`` holds
  elements ``4l .. 4l + 3`` (:func:`load_quads8`: 32 of them, 8 columns);
- :func:`broadcast_quad`: 4 adjacent uint8 copied to all 16 lanes (:func:`broadcast_quad8`:
  to 8);
- :func:`dot_quads` / :func:`dot_quads_256` / :func:`dot_quads_emulated`, on vectors of
  either width: ``acc[l] += sum_t a[l][t] * b[l][t]`` over the 4 bytes of each lane, ``a``
  unsigned and ``b`` signed, in int32 (wrapping, as the instruction does): the first is
  ``vpdpbusd`` on the vector's width (``avx512_vnni``; 8 lanes with its VL form), the
  second ``vpdpbusd`` on 256 bits (AVX-VNNI, Intel's client cores without AVX-512; two per
  16 lanes), the third the same sum on any CPU, the bytes widened to 16 bits (a u8 x s8
  product fits: no saturation, unlike ``vpmaddubsw``) and the four products of a lane
  added in 32 bits. They agree bit for bit.

>>> import numba, numpy as np
>>> @numba.njit
... def dot16(c, a, b):
...     acc = zeros()
...     for q in range(a.size // 4):
...         acc = dot_quads_emulated(acc, broadcast_quad(a, 4 * q), load_quads(b, 64 * q))
...     store(c, 0, acc)
>>> a = np.array([255, 1, 2, 3, 4, 5, 6, 7], np.uint8)           # a k = 8 vector
>>> b = np.full((2, 16, 4), -128, np.int8)                         # B[k // 4, j, k % 4]
>>> c = np.zeros(16, np.int32)
>>> dot16(c, a, b.ravel()); int(c[0]) == -128 * 283
True
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .simd import broadcast_32_bits, compiles_for, vector_load, vector_store, vector_type, vector_zeros

_I8, _I16, _I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
_I32X16 = ir.VectorType(_I32, 16)
_I32X8 = ir.VectorType(_I32, 8)
#: ``vpdpbusd`` on 512 bits; LLVM reads its byte operands as ``<16 x i32>`` (newer LLVMs
#: upgrade that form to their ``<64 x i8>`` one)
DOT_QUADS = "llvm.x86.avx512.vpdpbusd.512"
#: the same on 256 bits: AVX-VNNI's VEX form where the CPU has no AVX-512
DOT_QUADS_256 = "llvm.x86.avx512.vpdpbusd.256"


def vnni_available() -> bool:
    """Whether numba compiles for a CPU with ``vpdpbusd`` on 512 bits (``avx512_vnni``):
    the host's, unless ``NUMBA_CPU_FEATURES`` names others."""
    return compiles_for("avx512vnni")


def dot_quads_name(weights: str = "int8") -> str:
    """The dot product numba's target runs fastest on ``weights`` (``"int8"`` or the reduced
    range ``"int8r"``): :func:`dot_quads` (``avx512_vnni``), :func:`dot_quads_256`
    (``avx_vnni``), else on int8r weights :func:`dot_quads_maddubs` (SSSE3), on others
    ``"dot_quads_madd"``: the bytes widened and multiplied in pairs
    (:func:`.simd_int8_madd.dot`, with that module's operands). :func:`dot_quads_emulated`
    computes the same with plain vector operations, 11-13x slower than the last on Zen 3:
    a reference, never chosen."""
    if vnni_available():
        return "dot_quads"
    if compiles_for("avxvnni"):
        return "dot_quads_256"
    ssse3 = any(compiles_for(f) for f in ("ssse3", "avx", "avx2"))  # a feature list may name only the newest
    return "dot_quads_maddubs" if weights == "int8r" and ssse3 else "dot_quads_madd"


def _family(lanes: int) -> tuple:
    """The int32 accumulator type of ``lanes`` lanes, the types of its quads (uint8, int8),
    and the functions on them: ``zeros``, ``load``, ``store``, ``load_quads`` and
    ``broadcast_quad`` (named with the suffix ``8`` for 8 lanes)."""
    acc_t, quad_t = ir.VectorType(_I32, lanes), ir.VectorType(_I8, 4 * lanes)
    acc = vector_type(f"i32x{lanes}", acc_t)
    u8, s8 = vector_type(f"u8x{4 * lanes}", quad_t), vector_type(f"s8x{4 * lanes}", quad_t)
    sfx = "" if lanes == 16 else str(lanes)
    functions = (
        vector_zeros(acc, acc_t, f"An int32 vector of {lanes} zeros."),
        vector_load(types.int32, acc, acc_t, f"load{sfx}", f"``array[index : index + {lanes}]`` (int32) as a vector."),
        vector_store(types.int32, acc_t, f"``array[index : index + {lanes}] = value`` (int32)."),
        vector_load(types.int8, s8, quad_t, f"load_quads{sfx}",
                    f"The {4 * lanes} int8 ``array[index : index + {4 * lanes}]``: lane ``l`` holds elements "
                    "``4l .. 4l + 3``."),
        broadcast_32_bits(types.uint8, u8, quad_t, f"broadcast_quad{sfx}",
                          f"The four uint8 ``array[index : index + 4]`` in each of the {lanes} lanes."),
    )
    return (acc, u8, s8), functions


#: 16 int32 lanes, and 16 lanes of 4 uint8 / int8
(i32x16, u8x64, s8x64), (zeros, load, store, load_quads, broadcast_quad) = _family(16)
#: 8 int32 lanes, and 8 lanes of 4 uint8 / int8
(i32x8, u8x32, s8x32), (zeros8, load8, store8, load_quads8, broadcast_quad8) = _family(8)
#: each accumulator type: its LLVM form and its quads' types
_ACCUMULATORS = {i32x16: (_I32X16, (u8x64, s8x64)), i32x8: (_I32X8, (u8x32, s8x32))}


def _accumulator(acc, a, b, what: str) -> ir.VectorType:
    """The LLVM type of ``acc`` (an int32 vector of 16 or 8 lanes), checking that ``a`` and
    ``b`` hold its quads."""
    if acc not in _ACCUMULATORS:
        raise TypeError(f"{what}: expected an int32 vector (i32x16 or i32x8), got {acc}")
    vector, quads = _ACCUMULATORS[acc]
    if a not in quads or b not in quads:
        raise TypeError(f"{what}: expected the quads of {acc} ({quads[0]} or {quads[1]}), got {a}, {b}")
    return vector


def _vpdpbusd(builder, name: str, vector: ir.VectorType, acc, a, b):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3), name)
    return builder.call(fn, [acc, builder.bitcast(a, vector), builder.bitcast(b, vector)])


@intrinsic
def dot_quads(typingctx, acc, a, b):
    """``vpdpbusd``: each int32 lane of ``acc`` plus its four u8 x s8 products (needs
    ``avx512_vnni``, and ``avx512vl`` for 8 lanes: LLVM cannot select it elsewhere)."""
    vector = _accumulator(acc, a, b, "dot_quads")

    def codegen(context, builder, sig, args):
        return _vpdpbusd(builder, DOT_QUADS if vector.count == 16 else DOT_QUADS_256, vector, *args)

    return acc(acc, a, b), codegen


@intrinsic
def dot_quads_256(typingctx, acc, a, b):
    """:func:`dot_quads` as 256-bit ``vpdpbusd`` (two for 16 lanes; needs ``avx_vnni`` or
    ``avx512_vnni`` with ``avx512vl``)."""
    vector = _accumulator(acc, a, b, "dot_quads_256")

    def codegen(context, builder, sig, args):
        if vector.count == 8:
            return _vpdpbusd(builder, DOT_QUADS_256, vector, *args)
        parts = [builder.bitcast(x, _I32X16) for x in args]
        out = []
        for lanes in (list(range(8)), list(range(8, 16))):
            mask = ir.Constant(_I32X8, lanes)
            out.append(_vpdpbusd(builder, DOT_QUADS_256, _I32X8, *[builder.shuffle_vector(p, p, mask) for p in parts]))
        return builder.shuffle_vector(out[0], out[1], ir.Constant(_I32X16, list(range(16))))

    return acc(acc, a, b), codegen


#: int16 lanes of ``vpmaddwd`` -> its LLVM intrinsic, and the CPU feature it needs
_PMADDWD = {32: ("llvm.x86.avx512.pmaddw.d.512", "avx512bw"), 16: ("llvm.x86.avx2.pmadd.wd", "avx2"),
            8: ("llvm.x86.sse2.pmadd.wd", None)}


def pmaddwd(at_most: int = 32) -> tuple:
    """(int16 lanes, LLVM intrinsic) of the widest ``vpmaddwd`` numba's target selects
    (AVX-512BW, AVX2, else SSE2) of at most ``at_most`` lanes: an 8-column accumulator
    takes the 256-bit one on an AVX-512 CPU too (one module declares each intrinsic with
    one type)."""
    for lanes, (name, feature) in _PMADDWD.items():
        if lanes <= at_most and (feature is None or compiles_for(feature)):
            return lanes, name
    raise ValueError(f"no vpmaddwd of at most {at_most} lanes")


#: int16 lanes of ``vpmaddwd`` -> the ``vpmaddubsw`` of the same width (twice as many bytes)
_PMADDUBSW = {32: "llvm.x86.avx512.pmaddubs.w.512", 16: "llvm.x86.avx2.pmadd.ub.sw", 8: "llvm.x86.ssse3.pmadd.ub.sw.128"}


def concat(builder, parts):
    """The vectors ``parts`` (of one type, a power of two of them) as one, in order."""
    while len(parts) > 1:
        n = 2 * parts[0].type.count
        parts = [builder.shuffle_vector(parts[i], parts[i + 1], ir.Constant(ir.VectorType(_I32, n), list(range(n))))
                 for i in range(0, len(parts), 2)]
    return parts[0]


@intrinsic
def dot_quads_maddubs(typingctx, acc, a, b):
    """What :func:`dot_quads` computes *when every weight lies in* ``[-64, 64]``, on any CPU
    with SSSE3: ``vpmaddubsw`` sums each lane's two pairs of u8 x s8 products into int16
    (saturating: exact only while ``|a0 b0 + a1 b1| <= 2 * 255 * 64 < 2^15``), ``vpmaddwd``
    by ones sums the two into int32, an addition accumulates. Three operations per 32
    products where :func:`.simd_int8_madd.dot` (exact for every int8) needs about six: the
    kernels of the ``"int8r"`` weights (:mod:`.matmul_int8`) on CPUs without VNNI."""
    vector = _accumulator(acc, a, b, "dot_quads_maddubs")
    lanes = vector.count

    def codegen(context, builder, sig, args):
        words, maddwd = pmaddwd(2 * lanes)
        width = 2 * words  # bytes per instruction
        bytes_t, words_t, sums_t = (ir.VectorType(t, width // k) for t, k in ((_I8, 1), (_I16, 2), (_I32, 4)))
        f_pairs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(words_t, [bytes_t, bytes_t]),
                                                 _PMADDUBSW[words])
        f_quads = cgutils.get_or_insert_function(builder.module, ir.FunctionType(sums_t, [words_t, words_t]), maddwd)
        ones = ir.Constant(words_t, [1] * words_t.count)
        parts = []
        for start in range(0, 4 * lanes, width):
            take = ir.Constant(ir.VectorType(_I32, width), list(range(start, start + width)))
            pairs = builder.call(f_pairs, [builder.shuffle_vector(x, x, take) for x in (args[1], args[2])])
            parts.append(builder.call(f_quads, [pairs, ones]))
        return builder.add(args[0], concat(builder, parts))

    return acc(acc, a, b), codegen


@intrinsic
def dot_quads_emulated(typingctx, acc, a, b):
    """What :func:`dot_quads` computes, with plain integer vector operations (any CPU)."""
    vector = _accumulator(acc, a, b, "dot_quads_emulated")
    lanes = vector.count

    def codegen(context, builder, sig, args):
        wide = ir.VectorType(_I16, 4 * lanes)
        products = builder.mul(builder.zext(args[1], wide), builder.sext(args[2], wide))  # |u8 * s8| < 2^15
        out = args[0]
        for t in range(4):  # the t-th product of every lane, widened and added
            part = builder.shuffle_vector(products, products, ir.Constant(vector, [4 * l + t for l in range(lanes)]))
            out = builder.add(out, builder.sext(part, vector))
        return out

    return acc(acc, a, b), codegen
