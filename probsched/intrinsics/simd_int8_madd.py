"""int8 dot products without VNNI: bytes widened to 16 bits, multiplied in pairs (``vpmaddwd``).

A CPU without ``vpdpbusd`` (AMD Zen 3 and other AVX2 cores) multiplies 16-bit integers in
pairs: ``vpmaddwd`` sums two int16 x int16 products into each int32 lane, 16 products per
256-bit instruction. A u8 x s8 product, and the sum of two, fit an int32 exactly, so, unlike
``vpmaddubsw`` (u8 x s8 pairs summed into a *saturating* int16, what oneDNN and ONNX Runtime
use on AVX2: wrong where both products of a pair are large), nothing saturates and the
results are those of :func:`~.simd_int8.dot_quads`, bit for bit.

The int8 micro-kernels (:mod:`.matmul_int8`) keep the VNNI layout (B's quads: the four bytes
of one column and one quad adjacent, 8 columns in 32 bytes) and its int32 accumulators (one
lane per column: :func:`zeros`, :func:`load`, :func:`store` are :mod:`.simd_int8`'s); what
differs is how a quad becomes 16-bit words, with no shuffle (a shuffle per row of the
kernel was its bottleneck on Zen 3):

- :func:`load_quads`: a column's quad ``b0 b1 b2 b3`` read as the two words ``b0 + 256 b1``,
  ``b2 + 256 b3``, split into its *even* bytes ``(b0, b2)`` (shifted left then
  arithmetically right by 8: sign-extended) and *odd* bytes ``(b1, b3)`` (shifted right);
- :func:`broadcast_quad`: A's quad broadcast (a load), its even bytes ``(a0, a2)`` (masked)
  and odd bytes ``(a1, a3)`` (shifted right: zero-extended);
- :func:`dot`: ``acc + vpmaddwd(a_even, b_even) + vpmaddwd(a_odd, b_odd)``: each lane gains
  ``a0 b0 + a2 b2 + a1 b1 + a3 b3``, on the widest ``vpmaddwd`` the CPU has (AVX-512BW,
  AVX2, else SSE2's 128 bits).

Per quad and 8 columns a row costs two ``vpmaddwd`` and two additions, the two byte
halves of A two operations per row and of B three per 8 columns: on Zen 3, 1.3x the
float32 FMA kernels' operations per second (``bench_peak.py``), where the emulated
product (:func:`~.simd_int8.dot_quads_emulated`) ran 10x slower than them.

>>> import numba, numpy as np
>>> @numba.njit
... def dot16(c, a, b):
...     acc = zeros()
...     for q in range(a.size // 4):
...         acc = dot(acc, broadcast_quad(a, 4 * q), load_quads(b, 64 * q))
...     store(c, 0, acc)
>>> a = np.array([255, 255, 255, 255, 4, 5, 6, 7], np.uint8)      # a k = 8 vector
>>> b = np.full((2, 16, 4), -128, np.int8)                         # B[k // 4, j, k % 4]
>>> c = np.zeros(16, np.int32)
>>> dot16(c, a, b.ravel()); int(c[0]) == -128 * (4 * 255 + 22)
True
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .simd import _check, _element_ptr, vector_type
from .simd_int8 import concat, i32x8, i32x16, load, load8, pmaddwd, store, store8, zeros, zeros8

__all__ = ["dot", "load_quads", "load_quads8", "broadcast_quad", "broadcast_quad8",
           "zeros", "zeros8", "load", "load8", "store", "store8"]

_I8, _I16, _I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)


def _words(columns: int) -> ir.VectorType:
    """The LLVM type of ``columns`` columns' quads as words: the even half, then the odd."""
    return ir.VectorType(_I16, 4 * columns)


#: columns -> (B's widened quads, A's widened quad): numba types of the form above
_OPERANDS = {c: (vector_type(f"s16quads{c}", _words(c)), vector_type(f"u16quad{c}", _words(c))) for c in (16, 8)}
_ACCUMULATORS = {i32x16: 16, i32x8: 8}


def _halves(builder, words, even, odd):
    """``words`` (a vector of ``w0 w1 ...``) as ``[even(w) ..., odd(w) ...]``."""
    return concat(builder, [even(words), odd(words)])


def _splat(words: ir.VectorType, value: int) -> ir.Constant:
    return ir.Constant(words, [value] * words.count)


def _load_quads(columns: int):
    b = _OPERANDS[columns][0]
    raw_t, words_t = ir.VectorType(_I8, 4 * columns), ir.VectorType(_I16, 2 * columns)
    eight = _splat(words_t, 8)

    def load_quads(typingctx, array, index):
        _check(array, types.int8, "load_quads")

        def codegen(context, builder, sig, args):
            raw = builder.load(_element_ptr(context, builder, sig.args[0], args[0], args[1], raw_t), align=1)
            return _halves(builder, builder.bitcast(raw, words_t),
                           lambda w: builder.ashr(builder.shl(w, eight), eight), lambda w: builder.ashr(w, eight))

        return b(array, index), codegen

    load_quads.__name__ = "load_quads" if columns == 16 else "load_quads8"
    load_quads.__doc__ = (f"The {4 * columns} int8 ``array[index : index + {4 * columns}]`` ({columns} columns' quads), "
                          "their even and odd bytes as int16.")
    return intrinsic(load_quads)


def _broadcast_quad(columns: int):
    a = _OPERANDS[columns][1]
    dwords_t, words_t = ir.VectorType(_I32, columns), ir.VectorType(_I16, 2 * columns)

    def broadcast_quad(typingctx, array, index):
        _check(array, types.uint8, "broadcast_quad")

        def codegen(context, builder, sig, args):
            quad = builder.load(_element_ptr(context, builder, sig.args[0], args[0], args[1], _I32), align=1)
            one = builder.insert_element(ir.Constant(dwords_t, None), quad, ir.Constant(_I32, 0))
            every = builder.bitcast(builder.shuffle_vector(one, one, ir.Constant(dwords_t, [0] * columns)), words_t)
            return _halves(builder, every, lambda w: builder.and_(w, _splat(words_t, 255)),
                           lambda w: builder.lshr(w, _splat(words_t, 8)))

        return a(array, index), codegen

    broadcast_quad.__name__ = "broadcast_quad" if columns == 16 else "broadcast_quad8"
    broadcast_quad.__doc__ = (f"The four uint8 ``array[index : index + 4]`` in each of {columns} columns, "
                              "their even and odd bytes as int16.")
    return intrinsic(broadcast_quad)


@intrinsic
def dot(typingctx, acc, a, b):
    """``acc`` (int32, one lane per column) plus each column's four products of ``a``'s quad
    and ``b``'s quads (widened by :func:`broadcast_quad` and :func:`load_quads`)."""
    if acc not in _ACCUMULATORS or _OPERANDS[_ACCUMULATORS[acc]] != (b, a):
        raise TypeError(f"dot: expected an int32 vector and the widened quads of its width, got {acc}, {a}, {b}")
    columns = _ACCUMULATORS[acc]

    def codegen(context, builder, sig, args):
        chunk, name = pmaddwd(2 * columns)
        words_t, sums_t = ir.VectorType(_I16, chunk), ir.VectorType(_I32, chunk // 2)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(sums_t, [words_t, words_t]), name)
        parts = []
        for start in range(0, 2 * columns, chunk):  # 8 columns per 256-bit chunk
            pair = []
            for half in (0, 2 * columns):  # even bytes, odd bytes
                lanes = ir.Constant(ir.VectorType(_I32, chunk), list(range(half + start, half + start + chunk)))
                pair.append(builder.call(fn, [builder.shuffle_vector(x, x, lanes) for x in (args[1], args[2])]))
            parts.append(builder.add(*pair))
        return builder.add(args[0], concat(builder, parts))

    return acc(acc, a, b), codegen


load_quads, load_quads8 = _load_quads(16), _load_quads(8)
broadcast_quad, broadcast_quad8 = _broadcast_quad(16), _broadcast_quad(8)
