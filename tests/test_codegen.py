"""Code generation of unscheduled functions written with the front end: they compile and
agree with numpy on random inputs (never zeros)."""

from __future__ import annotations

import numpy as np
import pytest

import probsched as ps


def rand(rng, *shape, lo=0.5, hi=1.5, dtype="float32"):
    """Random values of random sign with magnitude in [lo, hi): never zero."""
    mag = rng.uniform(lo, hi, size=shape)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(dtype)


def close(got, want, n=1):
    tol = 1e-4 * max(1.0, float(np.sqrt(n)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(1234)


# ----------------------------------------------------------------------------- matmul


@pytest.fixture(scope="module")
def matmul_kernel():
    A = ps.placeholder((16, 24), name="A")
    B = ps.placeholder((24, 20), name="B")
    k = ps.reduce_axis(24, name="k")
    C = ps.compute((16, 20), lambda i, j: ps.sum(A[i, k] * B[k, j], axis=k), name="C")
    return ps.build(ps.create_func([A, B, C], name="matmul"))


def test_matmul_matches_numpy(matmul_kernel, rng):
    a, b = rand(rng, 16, 24), rand(rng, 24, 20)
    (c,) = matmul_kernel.run(a, b)
    close(c, a @ b, 24)
    out = np.empty((16, 20), np.float32)
    assert matmul_kernel(a, b, out) is None
    close(out, a @ b, 24)


def test_matmul_kernel_attributes(matmul_kernel):
    k = matmul_kernel
    assert isinstance(k, ps.Kernel)
    assert k.func.name == "matmul"
    assert k.compile_seconds > 0
    assert [b.name for b in k.inputs] == ["A", "B"] and [b.name for b in k.outputs] == ["C"]
    assert "def matmul(A, B, C):" in k.source
    assert "# block C: init hoisted out of k" in k.source  # init before the reduction loop
    assert "== 0" not in k.source
    assert "np.float32(0.0)" in k.source
    assert "_u64(" in k.source  # unsigned flat indices
    assert k.parallel_form == "none"
    assert "matmul" in repr(k)


# ----------------------------------------------------------------------------- conv


@pytest.fixture(scope="module")
def conv_kernel():
    n, h, w, ci, co, kh, kw, stride, pad = 1, 9, 9, 4, 5, 3, 3, 2, 1
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (w + 2 * pad - kw) // stride + 1
    X = ps.placeholder((n, h, w, ci), name="X")
    W = ps.placeholder((kh, kw, ci, co), name="W")
    P = ps.compute(
        (n, h + 2 * pad, w + 2 * pad, ci),
        lambda b, y, x, c: ps.if_then_else(
            ps.all_of(y >= pad, y < h + pad, x >= pad, x < w + pad), X[b, y - pad, x - pad, c], 0.0
        ),
        name="pad",
    )
    rh, rw, rc = ps.reduce_axis(kh, "rh"), ps.reduce_axis(kw, "rw"), ps.reduce_axis(ci, "rc")
    Y = ps.compute(
        (n, oh, ow, co),
        lambda b, y, x, f: ps.sum(P[b, y * stride + rh, x * stride + rw, rc] * W[rh, rw, rc, f], axis=[rh, rw, rc]),
        name="conv",
    )
    return ps.build(ps.create_func([X, W, Y], name="c2d")), (stride, pad, oh, ow)


def conv_ref(x, w, stride, pad, oh, ow):
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw = w.shape[:2]
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]), np.float64)
    for r in range(kh):
        for s in range(kw):
            patch = xp[:, r : r + stride * oh : stride, s : s + stride * ow : stride, :]
            out += np.einsum("nhwc,cf->nhwf", patch, w[r, s])
    return out


def test_padded_strided_conv(conv_kernel, rng):
    kern, (stride, pad, oh, ow) = conv_kernel
    x, w = rand(rng, 1, 9, 9, 4), rand(rng, 3, 3, 4, 5)
    (y,) = kern.run(x, w)
    close(y, conv_ref(x, w, stride, pad, oh, ow), 36)
    # the pad stage is an intermediate: allocated once by the wrapper, passed as an array
    assert [b.name for b in kern.inputs] == ["X", "W"]
    assert "allocated by the wrapper" in kern.source
    (y2,) = kern.run(x, w)
    np.testing.assert_array_equal(y, y2)


# ----------------------------------------------------------------------------- softmax, norm


@pytest.fixture(scope="module")
def softmax_kernel():
    X = ps.placeholder((6, 10), name="X")
    k1 = ps.reduce_axis(10, name="k1")
    M = ps.compute((6,), lambda i: ps.max(X[i, k1], axis=k1), name="maxelem")
    E = ps.compute((6, 10), lambda i, j: ps.exp(X[i, j] - M[i]), name="exp")
    k2 = ps.reduce_axis(10, name="k2")
    S = ps.compute((6,), lambda i: ps.sum(E[i, k2], axis=k2), name="expsum")
    Y = ps.compute((6, 10), lambda i, j: E[i, j] / S[i], name="softmax")
    return ps.build(ps.create_func([X, Y], name="softmax"))


def test_softmax(softmax_kernel, rng):
    x = rand(rng, 6, 10) * 3
    (y,) = softmax_kernel.run(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    close(y, e / e.sum(axis=1, keepdims=True), 10)
    assert "np.float32(-np.inf)" in softmax_kernel.source
    assert "_ps_exp_float32(" in softmax_kernel.source  # the vectorizable exp of codegen.mathlib


def test_norm_with_sqrt(rng):
    X = ps.placeholder((5, 12), name="X")
    k = ps.reduce_axis(12, name="k")
    S = ps.compute((5,), lambda i: ps.sum(X[i, k] * X[i, k], axis=k), name="sq")
    Y = ps.compute((5, 12), lambda i, j: X[i, j] / ps.sqrt(S[i] + 1e-5), name="normed")
    kern = ps.build(ps.create_func([X, Y], name="norm"))
    x = rand(rng, 5, 12)
    (y,) = kern.run(x)
    close(y, x / np.sqrt((x.astype(np.float64) ** 2).sum(axis=1, keepdims=True) + 1e-5), 12)


# ----------------------------------------------------------------------------- elementwise, min/max, lo > 0


def test_elementwise_chain_with_select(rng):
    A = ps.placeholder((7, 9), name="A")
    B = ps.placeholder((7, 9), name="B")
    T = ps.compute((7, 9), lambda i, j: ps.if_then_else(A[i, j] > 0.0, A[i, j] * B[i, j], -B[i, j]), name="T")
    U = ps.compute(
        (7, 9),
        lambda i, j: ps.if_then_else(ps.eq((i + j) % 2, 0), ps.tanh(T[i, j]), ps.abs(T[i, j]))
        + ps.sigmoid(B[i, j]),
        name="U",
    )
    kern = ps.build(ps.create_func([A, B, U], name="chain"))
    a, b = rand(rng, 7, 9), rand(rng, 7, 9)
    (u,) = kern.run(a, b)
    t = np.where(a > 0, a * b, -b)
    ii, jj = np.meshgrid(np.arange(7), np.arange(9), indexing="ij")
    want = np.where((ii + jj) % 2 == 0, np.tanh(t), np.abs(t)) + 1 / (1 + np.exp(-b))
    close(u, want)


def test_min_max_reductions_and_reduce_axis_with_lo(rng):
    A = ps.placeholder((4, 11), name="A")
    k1 = ps.reduce_axis(11, name="k1")
    k2 = ps.reduce_axis(11, name="k2")
    k3 = ps.reduce_axis((2, 9), name="k3")
    Mx = ps.compute((4,), lambda i: ps.max(A[i, k1], axis=k1), name="Mx")
    Mn = ps.compute((4,), lambda i: ps.min(A[i, k2], axis=k2), name="Mn")
    Sl = ps.compute((4,), lambda i: ps.sum(A[i, k3] * 2.0, axis=k3), name="Sl")
    kern = ps.build(ps.create_func([A, Mx, Mn, Sl], name="minmax"))
    a = rand(rng, 4, 11)
    mx, mn, sl = kern.run(a)
    close(mx, a.max(axis=1))
    close(mn, a.min(axis=1))
    close(sl, 2 * a[:, 2:9].sum(axis=1), 7)
    assert "np.float32(np.inf)" in kern.source and "np.float32(-np.inf)" in kern.source


def test_int_index_arithmetic_floordiv_mod(rng):
    A = ps.placeholder((4, 6), name="A")
    Idx = ps.placeholder((24,), "int64", name="Idx")
    B = ps.compute((24,), lambda i: A[i // 6, i % 6] + A[(23 - i) // 6, (23 - i) % 6], name="B")
    G = ps.compute((24,), lambda i: B[Idx[i]] * 2.0, name="G")  # a gather through an int64 input
    C = ps.compute((24,), lambda i: ps.cast("float32", Idx[i] % 5 - i // 7), name="C")
    kern = ps.build(ps.create_func([A, Idx, G, C], name="intidx"))
    a = rand(rng, 4, 6)
    idx = rng.permutation(24).astype(np.int64)
    g, c = kern.run(a, idx)
    flat = a.reshape(-1)
    b = flat + flat[::-1]
    close(g, b[idx] * 2)
    np.testing.assert_array_equal(c, (idx % 5 - np.arange(24) // 7).astype(np.float32))


def test_float64_and_int32_buffers(rng):
    A = ps.placeholder((5,), "float64", name="A")
    I = ps.placeholder((5,), "int32", name="I")
    k = ps.reduce_axis(5, name="k")
    S = ps.compute((1,), lambda z: ps.sum(A[k] * ps.cast("float64", I[k]), axis=k), name="S")
    T = ps.compute((5,), lambda i: I[i] * 3 + 1, name="T")
    kern = ps.build(ps.create_func([A, I, S, T], name="mixed"))
    a = rng.uniform(0.5, 1.5, 5)
    i = rng.integers(1, 9, 5).astype(np.int32)
    s, t = kern.run(a, i)
    np.testing.assert_allclose(s, [(a * i).sum()], rtol=1e-12)
    np.testing.assert_array_equal(t, i * 3 + 1)
    assert t.dtype == np.int32 and s.dtype == np.float64


def test_names_that_collide_with_python_and_helpers(rng):
    # buffers and axes named like numpy/numba/builtins/keywords-ish names still work
    np_ = ps.placeholder((3, 4), name="np")
    rng_buf = ps.placeholder((4,), name="range")
    k = ps.reduce_axis(4, name="min")
    out = ps.compute((3,), lambda _u64: ps.sum(np_[_u64, k] * rng_buf[k], axis=k), name="prange")
    kern = ps.build(ps.create_func([np_, rng_buf, out], name="max"))
    a, b = rand(rng, 3, 4), rand(rng, 4)
    (o,) = kern.run(a, b)
    close(o, a @ b, 4)
    assert "def max_1(np_1, range_1, prange_1):" in kern.source


def test_two_blocks_with_same_iterator_names(rng):
    A = ps.placeholder((6,), name="A")
    B = ps.compute((6,), lambda i: A[i] + 1.0, name="B")
    C = ps.compute((6,), lambda i: B[5 - i] * A[i], name="C")
    func = ps.create_func([A, C], name="twice")
    kern = ps.build(func)
    a = rand(rng, 6)
    (c,) = kern.run(a)
    close(c, (a + 1)[::-1] * a)


def test_an_init_left_in_place_is_peeled_out_of_the_inner_loops():
    """A reduction whose init was not decomposed, with spatial loops inside its reduction
    loop: the first reduction step is emitted apart, so no inner loop tests k == 0."""
    w = ps.workloads.small("GMM")
    sch = ps.Schedule(w.func)
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    sch.reorder(b, k, i, j)
    kernel = ps.build(sch)
    assert "the first step of k peeled" in kernel.source and "range(1, 5)" in kernel.source
    assert not any("if k == 0" in line or "if k ==" in line for line in kernel.source.splitlines())
    x, y = w.random_inputs(0)
    w.check(kernel.run(x, y), w.reference(x, y))


def test_a_reduction_loop_fused_with_a_spatial_one_is_not_peeled():
    w = ps.workloads.small("GMM")
    sch = ps.Schedule(w.func)
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    sch.reorder(b, j, k, i)
    kernel = ps.build(sch)  # k binds the reduction alone but i is below: peeled
    assert "peeled" in kernel.source
    sch2 = ps.Schedule(w.func)
    z2 = sch2.get_block("Z")
    b2, i2, j2, k2 = sch2.get_loops(z2)
    sch2.fuse(j2, k2)  # one loop binds spatial and reduction iterators: no first iteration to peel
    kernel2 = ps.build(sch2)
    assert "peeled" not in kernel2.source
    x, y = w.random_inputs(0)
    w.check(kernel2.run(x, y), w.reference(x, y))


def test_code_that_rounds_floats_to_integers_rounds_what_its_reference_rounds():
    """A quantized task's requantization: a fused multiply-add would move a value lying at a
    rounding tie to the other integer (a*b + c == 0.5 exactly in float32, fma(a, b, c) a
    little above it: rint gives 1 instead of 0), so such code is compiled without
    contraction; code without rounding keeps it."""
    rng = np.random.default_rng(0)
    n = 2048
    a, b = (rng.uniform(1.1, 1.9, n).astype(np.float32) for _ in range(2))
    c = (np.float32(0.5) - a * b).astype(np.float32)
    ties = (a * b + c == np.float32(0.5)) & (a.astype(np.float64) * b > a * b)
    assert ties.sum() > n // 4  # the case is exercised
    A, B, C = (ps.placeholder((n,), name=x) for x in "ABC")
    D = ps.compute((n,), lambda i: ps.rint(A[i] * B[i] + C[i]), name="D")
    kern = ps.build(ps.create_func([A, B, C, D]))
    d = np.zeros(n, np.float32)
    kern(a, b, c, d)
    np.testing.assert_array_equal(d, np.rint(a * b + c))
    assert kern.module.rounds
    E = ps.compute((n,), lambda i: A[i] * B[i] + C[i], name="E")
    assert not ps.build(ps.create_func([A, B, C, E])).module.rounds


def test_int32_arithmetic_converted_to_float_wraps_at_32_bits_as_the_ir_does():
    """An int8 task's zero-point correction ``acc - colsum`` converted to float32: numba
    computes int32 arithmetic in int64, so the code converts the int32 result (wrapping as
    the IR and its interpreter do), which also lets LLVM keep it in 32-bit lanes."""
    from probsched.ir.expr import cast
    from probsched.ir.interpreter import evaluate

    A, B = (ps.placeholder((4,), "int32", name=x) for x in "AB")
    f = ps.create_func([A, B, ps.compute((4,), lambda i: cast("float32", A[i] - B[i]), name="C")])
    a = np.array([2**31 - 1, 5, -(2**31), 0], np.int32)
    b = np.array([-1, 3, 1, 0], np.int32)
    (got,) = ps.build(f).run(a, b)
    (expected,) = evaluate(f, a, b)
    np.testing.assert_array_equal(got, expected)
    assert got[0] == -(2.0**31) and got[2] == 2.0**31  # wrapped both ways


def test_a_byte_read_back_as_float_skips_the_integers_and_keeps_the_values():
    """A quantization dequantized in the same task (a residual block's convolution
    requantized, then dequantized for the add) is a float clamped to the byte's range,
    converted to int32, to uint8 and back to float32: the code writes it as ``trunc`` of the
    float (no integer trip), and a store of a clamped value skips the second saturation.
    Same values as the interpreter at the edges (halves, the range's ends, beyond them)."""
    from probsched.ir.expr import cast, maximum, minimum, rint
    from probsched.ir.interpreter import evaluate

    n = 12
    X = ps.placeholder((n,), name="X")

    def clamped(i):
        return minimum(maximum(rint(X[i] * 2.0), 0.0), 255.0)

    D = ps.compute((n,), lambda i: cast("float32", cast("uint8", cast("int32", clamped(i)))) * 0.5, name="D")
    Q = ps.compute((n,), lambda i: cast("uint8", cast("int32", clamped(i))), name="Q")
    f = ps.create_func([X, D, Q])
    x = np.array([-3.0, -0.25, 0.0, 0.25, 0.75, 1.25, 63.5, 64.25, 127.25, 127.5, 127.75, 400.0], np.float32)
    kern = ps.build(f)
    got = kern.run(x)
    for g, want in zip(got, evaluate(f, x)):
        np.testing.assert_array_equal(g, want)
    assert got[1][-1] == 255 and got[0][0] == 0.0
    src = kern.source
    assert "np.trunc(" in src and "np.float32(np.uint8(" not in src
    # the two clamps of the IR, no float saturation on top of them; the byte store's int32
    # clamp changes no value (the form LLVM packs with saturating instructions)
    assert src.count("min(max(np.rint(") == 2 and src.count("np.rint(") == 2
    assert src.count("min(max(") == 3 and src.count(", np.int32(0)), np.int32(255)))") == 1
