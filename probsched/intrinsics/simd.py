"""Vector values in numba code: what the micro-kernels are written with.

numba has no vector types, LLVM's vectorizers do not form ``vdpbf16ps`` from scalar code,
and its SLP vectorizer leaves a register block of scalar float32 FMAs at about half the FMA
peak of a core with two 512-bit pipes; so the micro-kernels (:mod:`.matmul`,
:mod:`.matmul_bf16`) hold their accumulators in numba types whose LLVM form is a vector:
:data:`f32x16` (``<16 x float>``, one AVX-512 register, two AVX2 ones), :data:`f32x8`
(``<8 x float>``, one AVX2 register) and :data:`bf16x32` (``<32 x i16>``: 16 pairs of
bfloat16; :data:`bf16x16`, 8 pairs, for the 8 lanes of an f32x8). The functions below are
numba intrinsics, each a few LLVM instructions inlined where they are called, indexing flat
1-D arrays by an element offset (unchecked, unaligned):

- :func:`zeros`, :func:`load`, :func:`store`: float32 vectors (``store`` of either width);
- :func:`broadcast`: one float32 in all 16 lanes; :func:`zeros8`, :func:`load8`,
  :func:`broadcast8`: the same for 8 lanes;
- :func:`load_pairs`: 32 bfloat16 (the bits of a uint16 array): 16 lanes of 2
  (:func:`load_pairs8`: 16 of them, 8 lanes);
- :func:`broadcast_pair`: 2 adjacent bfloat16 copied to all 16 lanes (:func:`broadcast_pair8`:
  to 8);
- :func:`fma`: ``acc + a * b`` on float32 vectors of either width, one rounding (``vfmadd``);
- :func:`dot_pairs` / :func:`dot_pairs_emulated`, on vectors of either width:
  ``acc[l] += a[l].odd * b[l].odd``, then ``+= a[l].even * b[l].even`` in float32,
  rounding to nearest after each: the first is the instruction ``vdpbf16ps``
  (``avx512_bf16``, and ``avx512vl`` for 8 lanes; it also flushes denormals to zero), the
  second the same sum on any CPU, each bfloat16 widened (its bits shifted into a float32's
  upper half) and two FMAs. They agree bit for bit on normal numbers.

>>> import numba, numpy as np, ml_dtypes
>>> @numba.njit
... def dot16(c, a, b):
...     acc = zeros()
...     for p in range(a.size // 2):
...         acc = dot_pairs_emulated(acc, broadcast_pair(a, 2 * p), load_pairs(b, 32 * p))
...     store(c, 0, acc)
>>> a = np.arange(1, 5).astype(ml_dtypes.bfloat16)                # a k = 4 vector
>>> b = np.ones((2, 16, 2), ml_dtypes.bfloat16)                   # B[k // 2, j, k % 2]
>>> c = np.zeros(16, np.float32)
>>> dot16(c, a.view(np.uint16), b.view(np.uint16).ravel()); c[:3].tolist()
[10.0, 10.0, 10.0]
"""

from __future__ import annotations


from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, models, register_model


class _BFloat(ir.Type):
    """LLVM's ``bfloat`` (llvmlite has no class for it)."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


_I32 = ir.IntType(32)
_F32X16 = ir.VectorType(ir.FloatType(), 16)
_I16X32 = ir.VectorType(ir.IntType(16), 32)
_F32X8 = ir.VectorType(ir.FloatType(), 8)
_I16X16 = ir.VectorType(ir.IntType(16), 16)
#: ``vdpbf16ps`` on 16 and on 8 float32 lanes
DOT_PAIRS = "llvm.x86.avx512bf16.dpbf16ps.512"
DOT_PAIRS_256 = "llvm.x86.avx512bf16.dpbf16ps.256"


def _dot_operand_type(lanes: int) -> ir.Type:
    """What ``vdpbf16ps``'s LLVM intrinsic takes the pairs of ``lanes`` float32 lanes as:
    ``<2 lanes x bfloat>`` since LLVM 17, ``<lanes x i32>`` before (numba's llvmlite decides
    which LLVM this is)."""
    import llvmlite.binding as llvm

    return ir.VectorType(_BFloat(), 2 * lanes) if llvm.llvm_version_info[0] >= 17 else ir.VectorType(_I32, lanes)


def compiles_for(feature: str) -> bool:
    """Whether numba compiles for a CPU with LLVM feature ``feature`` (``"avx512bf16"``,
    ``"amx-tile"``): the host's, unless ``NUMBA_CPU_FEATURES`` names others (as when testing
    for an AVX2 machine). LLVM cannot select an instruction the features lack.

    >>> compiles_for("sse2"), compiles_for("no-such-feature")
    (True, False)
    """
    from numba.core import config

    features = config.CPU_FEATURES
    if features is None:
        import llvmlite.binding as llvm

        features = llvm.get_host_cpu_features().flatten()
    return f"+{feature}" in features.split(",")


def vector_type(name: str, llvm_type: ir.Type) -> types.Type:
    """A numba type ``name`` whose values are LLVM ``llvm_type`` values (vector registers)."""

    class Vector(types.Type):
        def __init__(self) -> None:
            super().__init__(name=name)

    @register_model(Vector)
    class _Model(models.PrimitiveModel):
        def __init__(self, dmm, fe_type) -> None:
            super().__init__(dmm, fe_type, llvm_type)

    return Vector()


#: 16 float32 lanes
f32x16 = vector_type("f32x16", _F32X16)
#: 8 float32 lanes
f32x8 = vector_type("f32x8", _F32X8)
#: 16 lanes of 2 bfloat16 (32 x 16 bits)
bf16x32 = vector_type("bf16x32", _I16X32)
#: 8 lanes of 2 bfloat16 (16 x 16 bits)
bf16x16 = vector_type("bf16x16", _I16X16)
#: the float32 vector types and their LLVM form
_FLOAT_VECTORS = {f32x16: _F32X16, f32x8: _F32X8}


def _element_ptr(context, builder, array_type, array, index, pointee):
    """Pointer to ``array[index]`` (no bounds check) as a ``pointee*``."""
    data = context.make_array(array_type)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [index]), pointee.as_pointer())


def _check(array, dtype, what: str) -> None:
    if not (isinstance(array, types.Array) and array.dtype == dtype and array.ndim == 1):
        raise TypeError(f"{what}: expected a 1-D {dtype} array, got {array}")


def vector_zeros(vector: types.Type, llvm_type: ir.Type, doc: str):
    """An intrinsic ``zeros()``: a ``vector`` of zeros."""

    def zeros(typingctx):
        def codegen(context, builder, sig, args):
            return ir.Constant(llvm_type, [0] * llvm_type.count)

        return vector(), codegen

    zeros.__doc__ = doc
    return intrinsic(zeros)


def vector_load(element, vector: types.Type, llvm_type: ir.Type, name: str, doc: str):
    """An intrinsic ``name(array, index)``: the ``vector`` at ``array[index:]``, a 1-D array of
    ``element`` (numba type)."""

    def load(typingctx, array, index):
        _check(array, element, name)

        def codegen(context, builder, sig, args):
            ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], llvm_type)
            return builder.load(ptr, align=element.bitwidth // 8)

        return vector(array, index), codegen

    load.__name__, load.__doc__ = name, doc
    return intrinsic(load)


def vector_store(element, llvm_type: ir.Type, doc: str):
    """An intrinsic ``store(array, index, value)``: a vector to ``array[index:]``."""

    def store(typingctx, array, index, value):
        _check(array, element, "store")

        def codegen(context, builder, sig, args):
            ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], llvm_type)
            builder.store(args[2], ptr, align=element.bitwidth // 8)
            return context.get_dummy_value()

        return types.void(array, index, value), codegen

    store.__doc__ = doc
    return intrinsic(store)


def broadcast_32_bits(element, vector: types.Type, llvm_type: ir.Type, name: str, doc: str):
    """An intrinsic ``name(array, index)``: the 32 bits at ``array[index:]`` (a float32, or a
    group of narrower ``element``) in each 32-bit lane of a ``vector``."""
    lanes = ir.VectorType(_I32, llvm_type.count * llvm_type.element.width // 32) if isinstance(
        llvm_type.element, ir.IntType) else ir.VectorType(_I32, llvm_type.count)

    def broadcast(typingctx, array, index):
        _check(array, element, name)

        def codegen(context, builder, sig, args):
            ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], _I32)
            group = builder.load(ptr, align=element.bitwidth // 8)
            one = builder.insert_element(ir.Constant(lanes, None), group, ir.Constant(_I32, 0))
            every = builder.shuffle_vector(one, one, ir.Constant(lanes, [0] * lanes.count))
            return builder.bitcast(every, llvm_type)

        return vector(array, index), codegen

    broadcast.__name__, broadcast.__doc__ = name, doc
    return intrinsic(broadcast)


zeros = vector_zeros(f32x16, _F32X16, "A float32 vector of zeros.")
zeros8 = vector_zeros(f32x8, _F32X8, "A vector of 8 float32 zeros.")
load = vector_load(types.float32, f32x16, _F32X16, "load", "``array[index : index + 16]`` (float32) as a vector.")
load8 = vector_load(types.float32, f32x8, _F32X8, "load8", "``array[index : index + 8]`` (float32) as a vector.")
broadcast = broadcast_32_bits(types.float32, f32x16, _F32X16, "broadcast", "``array[index]`` (float32) in all 16 lanes.")
broadcast8 = broadcast_32_bits(types.float32, f32x8, _F32X8, "broadcast8", "``array[index]`` (float32) in all 8 lanes.")
load_pairs = vector_load(
    types.uint16, bf16x32, _I16X32, "load_pairs",
    "The 32 bfloat16 ``array[index : index + 32]`` (uint16 bits): lane ``l`` holds elements ``2l`` (even) and "
    "``2l + 1`` (odd).",
)
broadcast_pair = broadcast_32_bits(
    types.uint16, bf16x32, _I16X32, "broadcast_pair",
    "The two bfloat16 ``array[index]`` (even) and ``array[index + 1]`` (odd) in every lane.",
)
load_pairs8 = vector_load(
    types.uint16, bf16x16, _I16X16, "load_pairs8",
    "The 16 bfloat16 ``array[index : index + 16]`` (uint16 bits): lane ``l`` of 8 holds elements ``2l`` and ``2l + 1``.",
)
broadcast_pair8 = broadcast_32_bits(
    types.uint16, bf16x16, _I16X16, "broadcast_pair8",
    "The two bfloat16 ``array[index]`` (even) and ``array[index + 1]`` (odd) in each of 8 lanes.",
)


@intrinsic
def store(typingctx, array, index, value):
    """``array[index : index + lanes] = value`` (float32, a vector of either width)."""
    _check(array, types.float32, "store")
    vector = _float_vector(value, "store")

    def codegen(context, builder, sig, args):
        builder.store(args[2], _element_ptr(context, builder, sig.args[0], args[0], args[1], vector), align=4)
        return context.get_dummy_value()

    return types.void(array, index, value), codegen


def _float_vector(value, what: str) -> ir.VectorType:
    if value not in _FLOAT_VECTORS:
        raise TypeError(f"{what}: expected a float32 vector (f32x16 or f32x8), got {value}")
    return _FLOAT_VECTORS[value]


def _fma(builder, acc, a, b):
    vector = acc.type
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{vector.count}f32")
    return builder.call(fn, [a, b, acc])


@intrinsic
def fma(typingctx, acc, a, b):
    """``acc + a * b`` on float32 vectors (three of one width), rounded once."""
    _float_vector(acc, "fma")
    if not (a == acc and b == acc):
        raise TypeError(f"fma: expected three vectors of one width, got {acc}, {a}, {b}")

    def codegen(context, builder, sig, args):
        return _fma(builder, *args)

    return acc(acc, a, b), codegen


@intrinsic
def add(typingctx, a, b):
    """``a + b`` on float32 vectors of one width (a kernel's partial sums joined)."""
    _float_vector(a, "add")
    if b != a:
        raise TypeError(f"add: expected two vectors of one width, got {a}, {b}")

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])

    return a(a, b), codegen


def _pairs_of(acc, a, b, what: str) -> ir.VectorType:
    """The LLVM type of ``acc`` (a float32 vector of 16 or 8 lanes), checking that ``a`` and
    ``b`` hold its pairs."""
    pairs = {f32x16: bf16x32, f32x8: bf16x16}
    if acc not in pairs or a != pairs[acc] or b != pairs[acc]:
        raise TypeError(f"{what}: expected a float32 vector and two of its pairs (f32x16, bf16x32 or f32x8, bf16x16), "
                        f"got {acc}, {a}, {b}")
    return _FLOAT_VECTORS[acc]


@intrinsic
def dot_pairs(typingctx, acc, a, b):
    """``vdpbf16ps``: each float32 lane of ``acc`` plus its two bfloat16 products (needs
    ``avx512_bf16``, and ``avx512vl`` for 8 lanes: LLVM cannot select it elsewhere)."""
    vector = _pairs_of(acc, a, b, "dot_pairs")
    pairs = _dot_operand_type(vector.count)
    name = DOT_PAIRS if vector.count == 16 else DOT_PAIRS_256

    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector, pairs, pairs]), name)
        return builder.call(fn, [args[0], builder.bitcast(args[1], pairs), builder.bitcast(args[2], pairs)])

    return acc(acc, a, b), codegen


@intrinsic
def dot_pairs_emulated(typingctx, acc, a, b):
    """What :func:`dot_pairs` computes, with float32 FMAs (any CPU)."""
    vector = _pairs_of(acc, a, b, "dot_pairs_emulated")
    words = ir.VectorType(_I32, vector.count)

    def codegen(context, builder, sig, args):
        upper = ir.Constant(words, [-65536] * vector.count)  # 0xFFFF0000: the odd bfloat16 is a float32 already
        shift = ir.Constant(words, [16] * vector.count)

        def halves(v):
            v = builder.bitcast(v, words)
            odd = builder.bitcast(builder.and_(v, upper), vector)
            even = builder.bitcast(builder.shl(v, shift), vector)
            return odd, even

        (a_odd, a_even), (b_odd, b_even) = halves(args[1]), halves(args[2])
        return _fma(builder, _fma(builder, args[0], a_odd, b_odd), a_even, b_even)

    return acc(acc, a, b), codegen
