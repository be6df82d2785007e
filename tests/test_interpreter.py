"""The reference interpreter on small hand-written functions, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import probsched as ps
from probsched.errors import IRError, KernelArgumentError
from probsched.ir.expr import Var, eq
from probsched.ir.interpreter import evaluate, interpret, register_stmt_interpreter
from probsched.ir.stmt import LOCAL_ALLOC_LOOPS, Block, Buffer, IterVar, Loop, PrimFunc, Stmt, Store
from probsched.lowering import lower


def _matmul_func(n: int, m: int, k: int) -> PrimFunc:
    A = ps.placeholder((n, k), name="A")
    B = ps.placeholder((k, m), name="B")
    rk = ps.reduce_axis(k, name="k")
    C = ps.compute((n, m), lambda i, j: ps.sum(A[i, rk] * B[rk, j], axis=rk), name="C")
    return ps.create_func([A, B, C], name="mm")


def _rand(rng, *shape):
    return rng.uniform(-1, 1, size=shape).astype(np.float32)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_matmul_matches_numpy(n, m, k, seed):
    rng = np.random.default_rng(seed)
    a, b = _rand(rng, n, k), _rand(rng, k, m)
    c = np.full((n, m), np.nan, np.float32)
    assert interpret(_matmul_func(n, m, k), a, b, c) is None
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)


def test_evaluate_returns_fresh_outputs():
    rng = np.random.default_rng(0)
    a, b = _rand(rng, 3, 4), _rand(rng, 4, 2)
    (c,) = evaluate(_matmul_func(3, 2, 4), a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ hand-built loop nests
A8, S2 = Buffer("A", (8,)), Buffer("S", (2,))


def _sum_block(binding_i, binding_k) -> Block:
    """S[v_i] += A[v_i * 4 + v_k] with init S[v_i] = 0."""
    vi, vk = Var("v_i"), Var("v_k")
    return Block(
        "S",
        (IterVar(vi, 2, "S"), IterVar(vk, 4, "R")),
        (binding_i, binding_k),
        Store(S2, (vi,), S2[vi] + A8[vi * 4 + vk]),
        init=Store(S2, (vi,), 0.0),
    )


def test_init_runs_when_reduction_iterators_are_zero_after_split_and_reorder():
    # k split into k0 (2) x k1 (2) and placed outside i: init must still run once per i.
    i, k0, k1 = Var("i"), Var("k0"), Var("k1")
    blk = _sum_block(i, k0 * 2 + k1)
    nest = Loop(k0, 2, body=(Loop(i, 2, body=(Loop(k1, 2, body=(blk,)),)),))
    f = PrimFunc("split_sum", (A8, S2), (nest,))
    a = np.arange(1, 9, dtype=np.float32)
    s = np.full(2, 123.0, np.float32)
    interpret(f, a, s)
    np.testing.assert_array_equal(s, [10.0, 26.0])


def test_predicate_guards_imperfect_split_and_domain_is_checked():
    # 10 elements through a 3 x 4 split: the predicate drops the last two iterations.
    A10, B10 = Buffer("A", (10,)), Buffer("B", (10,))
    i0, i1, vi = Var("i0"), Var("i1"), Var("v_i")

    def func(pred) -> PrimFunc:
        blk = Block("B", (IterVar(vi, 10),), (i0 * 4 + i1,), Store(B10, (vi,), A10[vi] * 2.0), predicate=pred)
        return PrimFunc("f", (A10, B10), (Loop(i0, 3, body=(Loop(i1, 4, body=(blk,)),)),))

    a = np.arange(10, dtype=np.float32)
    b = np.zeros(10, np.float32)
    interpret(func(i0 * 4 + i1 < 10), a, b)
    np.testing.assert_array_equal(b, a * 2)
    with pytest.raises(IRError, match="iterator v_i = 10 is outside"):
        interpret(func(True), a, b)


def test_loop_kinds_do_not_change_results():
    i, k = Var("i"), Var("k")
    a = np.arange(1, 9, dtype=np.float32)
    for kind in ("parallel", "vectorized", "unrolled"):
        nest = Loop(i, 2, kind=kind, body=(Loop(k, 4, kind="unrolled", body=(_sum_block(i, k),)),))
        s = np.zeros(2, np.float32)
        interpret(PrimFunc("f", (A8, S2), (nest,)), a, s)
        np.testing.assert_array_equal(s, [10.0, 26.0])


def test_nested_blocks_after_blockize():
    # An outer block over i whose body is a loop and an inner reduction block bound to it.
    i, k = Var("i"), Var("k")
    vo = Var("v_o")
    inner = _sum_block(vo, k)
    outer = Block("S_o", (IterVar(vo, 2),), (i,), (Loop(k, 4, body=(inner,)),))
    f = PrimFunc("f", (A8, S2), (Loop(i, 2, body=(outer,)),))
    s = np.zeros(2, np.float32)
    interpret(f, np.arange(1, 9, dtype=np.float32), s)
    np.testing.assert_array_equal(s, [10.0, 26.0])


def test_block_without_iterators():
    blk = Block("S", (), (), Store(S2, (1,), 5.0))
    s = np.zeros(2, np.float32)
    interpret(PrimFunc("f", (S2,), (blk,)), s)
    np.testing.assert_array_equal(s, [0.0, 5.0])


def test_block_body_cannot_see_loop_variables():
    i, vi = Var("i"), Var("v_i")
    blk = Block("S", (IterVar(vi, 2),), (i,), Store(S2, (i,), 1.0))  # uses i, not v_i
    f = PrimFunc("f", (S2,), (Loop(i, 2, body=(blk,)),))
    with pytest.raises(IRError, match="variable i is used where it is not bound"):
        interpret(f, np.zeros(2, np.float32))


def test_local_and_global_allocations():
    # A -> T (local scratch) -> U (global intermediate) -> B
    A4, B4 = Buffer("A", (4,)), Buffer("B", (4,))
    T, U = Buffer("T", (4,), scope="local"), Buffer("U", (4,))
    i, j, l, v = Var("i"), Var("j"), Var("l"), Var("v")
    body = (
        Loop(i, 4, body=(Block("T", (IterVar(v, 4),), (i,), Store(T, (v,), A4[v] + 1.0)),)),
        Loop(j, 4, body=(Block("U", (IterVar(v, 4),), (j,), Store(U, (v,), T[v] * 3.0)),)),
        Loop(l, 4, body=(Block("B", (IterVar(v, 4),), (l,), Store(B4, (v,), U[v] - 1.0)),)),
    )
    f = PrimFunc("f", (A4, B4), body, allocs=(T, U))
    a = np.arange(4, dtype=np.float32)
    (b,) = evaluate(f, a)
    np.testing.assert_array_equal(b, (a + 1) * 3 - 1)


def test_intermediates_start_as_nan():
    # Reading an intermediate nobody wrote must not look like a plausible zero.
    A4, B4, T = Buffer("A", (4,)), Buffer("B", (4,)), Buffer("T", (4,))
    i, v = Var("i"), Var("v")
    f = PrimFunc(
        "f", (A4, B4), (Loop(i, 4, body=(Block("B", (IterVar(v, 4),), (i,), Store(B4, (v,), A4[v] + T[v])),)),),
        allocs=(T,),
    )
    (b,) = evaluate(f, np.ones(4, np.float32))
    assert np.isnan(b).all()


# ------------------------------------------------------------------ lowered functions
def _carried_tile(dtype: str = "float32"):
    """Y[i] = T[0] * 2 under loop i, where T[0] is written only when i == 0: right while T
    lives the whole call, a read of another iteration's leftover when it lives one iteration."""
    X, Y, T = Buffer("X", (2,), dtype), Buffer("Y", (2,), dtype), Buffer("T", (1,), dtype, scope="local")
    i = Var("i")
    once = Block("once", (), (), Store(T, (0,), X[0]), predicate=eq(i, 0))
    use = Block("use", (), (), Store(Y, (i,), T[0] * 2))
    return PrimFunc("f", (X, Y), (Loop(i, 2, body=(once, use)),), allocs=(T,))


def test_lowered_block_bodies_see_loop_variables():
    i, vi = Var("i"), Var("v_i")
    blk = Block("S", (IterVar(vi, 2),), (i,), Store(S2, (i,), 1.0))  # compaction writes indices like this
    s = np.zeros(2, np.float32)
    interpret(PrimFunc("f", (S2,), (Loop(i, 2, body=(blk,)),)), s, lowered=True)
    np.testing.assert_array_equal(s, [1.0, 1.0])


@pytest.mark.parametrize("dtype, unwritten", [("float32", np.nan), ("int64", 0)])
def test_a_compacted_local_lives_one_iteration_of_its_loop(dtype, unwritten):
    f = _carried_tile(dtype)
    x = np.array([3, 5], dtype)
    np.testing.assert_array_equal(evaluate(f, x, lowered=True)[0], [6, 6])
    per_call = f.replace(attrs={LOCAL_ALLOC_LOOPS: (("T", None),)})  # allocated at the root
    np.testing.assert_array_equal(evaluate(per_call, x, lowered=True)[0], [6, 6])
    per_iteration = f.replace(attrs={LOCAL_ALLOC_LOOPS: (("T", "i"),)})
    np.testing.assert_array_equal(evaluate(per_iteration, x, lowered=True)[0], [6, unwritten * 2])


def test_lowered_functions_need_the_flag_and_a_consistent_attribute():
    f = _carried_tile()
    x = np.ones(2, np.float32)
    with pytest.raises(IRError, match="is a lowered function .* lowered=True"):
        evaluate(f.replace(attrs={LOCAL_ALLOC_LOOPS: (("T", "i"),)}), x)
    for bad in (("T", "j"), ("X", "i"), ("U", None)):
        with pytest.raises(IRError, match=f"names local buffer {bad[0]} under loop {bad[1]}"):
            evaluate(f.replace(attrs={LOCAL_ALLOC_LOOPS: (bad,)}), x, lowered=True)


def test_lowered_schedule_with_compacted_caches():
    # matmul in 2 x 3 tiles of C computed in a local write cache, B's row read through a
    # local cache per k: lowering shrinks both and records the loop each one lives in
    sch = ps.Schedule(_matmul_func(4, 6, 5))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 2])
    j0, j1 = sch.split(j, [None, 3])
    sch.reorder(i0, j0, k, i1, j1)
    sch.reverse_compute_at(sch.cache_write(c, 0, "local"), j0)
    sch.compute_at(sch.cache_read(c, 1, "local"), k)
    lowered = lower(sch.mod)
    assert lowered.attr(LOCAL_ALLOC_LOOPS) == (("B_local", "k"), ("C_local", "j_0"))
    assert PrimFunc.from_json(lowered.to_json()) == lowered
    rng = np.random.default_rng(1)
    a, b = _rand(rng, 4, 5), _rand(rng, 5, 6)
    (c_out,) = evaluate(lowered, a, b, lowered=True)
    np.testing.assert_allclose(c_out, a @ b, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ expressions
def _elementwise(fn, n=9, dtype="float32", in_dtype="float32") -> PrimFunc:
    X = ps.placeholder((n,), in_dtype, name="X")
    Y = ps.compute((n,), fn(X), name="Y", dtype=dtype)
    return ps.create_func([X, Y])


def test_select_evaluates_only_the_taken_branch():
    # Without the guard the load X[i - 2] would be out of bounds for i < 2.
    f = _elementwise(lambda X: lambda i: ps.if_then_else(i >= 2, X[i - 2], -1.0))
    x = np.arange(9, dtype=np.float32)
    (y,) = evaluate(f, x)
    np.testing.assert_array_equal(y, np.concatenate([[-1, -1], x[:-2]]))


@pytest.mark.parametrize("shift", [-1, 1])
def test_out_of_bounds_loads_raise_instead_of_wrapping(shift):
    f = _elementwise(lambda X: lambda i: X[i + shift])
    with pytest.raises(IRError, match=r"load from X\[(-1|9)\] is out of bounds"):
        evaluate(f, np.ones(9, np.float32))


def test_floordiv_and_mod_have_floor_semantics():
    x = np.zeros(9, np.float32)
    (q,) = evaluate(_elementwise(lambda X: lambda i: ps.cast("float32", (i - 4) // 3)), x)
    (r,) = evaluate(_elementwise(lambda X: lambda i: ps.cast("float32", (i - 4) % 3)), x)
    idx = np.arange(9) - 4
    np.testing.assert_array_equal(q, idx // 3)
    np.testing.assert_array_equal(r, idx % 3)


def test_float32_accumulation_stays_float32():
    # 1 + 2**-25 + 2**-25 + ... is exactly 1 in float32 (each step rounds back), not in float64.
    n = 64
    X = ps.placeholder((n,), name="X")
    k = ps.reduce_axis(n, name="k")
    S = ps.compute((1,), lambda i: ps.sum(X[k], axis=k), name="S")
    x = np.full(n, 2.0**-25, np.float32)
    x[0] = 1.0
    (s,) = evaluate(ps.create_func([X, S]), x)
    assert s[0] == np.cumsum(x, dtype=np.float32)[-1] == 1.0
    assert x.astype(np.float64).sum() > 1.0


@pytest.mark.parametrize(
    "name, fn, ref",
    [
        ("exp", ps.exp, np.exp),
        ("log", ps.log, np.log),
        ("sqrt", ps.sqrt, np.sqrt),
        ("tanh", ps.tanh, np.tanh),
        ("abs", ps.abs, np.abs),
        ("sigmoid", ps.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    ],
)
def test_math_calls(name, fn, ref):
    x = np.linspace(0.1, 3.0, 9, dtype=np.float32) * (1 if name in ("log", "sqrt") else np.float32(-1) ** np.arange(9))
    (y,) = evaluate(_elementwise(lambda X: lambda i: fn(X[i])), x.astype(np.float32))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=3e-7, atol=0)


def test_min_max_and_max_reduction():
    x = np.array([3, -1, 4, -1, 5, -9, 2, 6, -5], np.float32)
    (lo,) = evaluate(_elementwise(lambda X: lambda i: ps.minimum(X[i], 0.5)), x)
    (hi,) = evaluate(_elementwise(lambda X: lambda i: ps.maximum(X[i], 0.5)), x)
    np.testing.assert_array_equal(lo, np.minimum(x, 0.5))
    np.testing.assert_array_equal(hi, np.maximum(x, 0.5))
    X = ps.placeholder((9,), name="X")
    k = ps.reduce_axis(9, name="k")
    M = ps.compute((1,), lambda i: ps.max(X[k], axis=k), name="M")
    N = ps.compute((1,), lambda i: ps.min(X[k], axis=k), name="N")
    assert evaluate(ps.create_func([X, M]), x)[0][0] == 6
    assert evaluate(ps.create_func([X, N]), x)[0][0] == -9


def test_casts_truncate_toward_zero_and_int_arrays_work():
    x = np.array([-2.7, -0.5, 0.5, 2.7, 3.0, -3.0, 1.9, -1.9, 0.0], np.float32)
    (y,) = evaluate(_elementwise(lambda X: lambda i: ps.cast("int64", X[i]), dtype="int64"), x)
    np.testing.assert_array_equal(y, np.trunc(x).astype(np.int64))
    xi = np.arange(9, dtype=np.int32) - 4
    (z,) = evaluate(_elementwise(lambda X: lambda i: ps.cast("float32", X[i]) * 0.5, in_dtype="int32"), xi)
    np.testing.assert_array_equal(z, xi * np.float32(0.5))


def test_reduction_with_where_and_logic():
    X = ps.placeholder((10,), name="X")
    k = ps.reduce_axis(10, name="k")
    cond = ps.any_of(ps.eq(k % 3, 0), ~(k < 8))
    S = ps.compute((1,), lambda i: ps.sum(X[k], axis=k, where=cond), name="S")
    x = np.arange(10, dtype=np.float32)
    (s,) = evaluate(ps.create_func([X, S]), x)
    assert s[0] == 0 + 3 + 6 + 9 + 8


# ------------------------------------------------------------------ errors and extension
def test_argument_errors():
    f = _matmul_func(2, 2, 2)
    a = np.zeros((2, 2), np.float32)
    with pytest.raises(KernelArgumentError, match="takes 3 arrays"):
        interpret(f, a, a)
    with pytest.raises(KernelArgumentError, match=r"B: float32\[2, 2\] got float64\[2, 2\]"):
        interpret(f, a, a.astype(np.float64), a)
    with pytest.raises(KernelArgumentError, match=r"got float32\[3, 2\]"):
        interpret(f, a, a, np.zeros((3, 2), np.float32))
    with pytest.raises(KernelArgumentError, match="takes 2 input arrays"):
        evaluate(f, a)


class _Fill(Stmt):
    """A stand-in for a statement kind defined elsewhere (e.g. an intrinsic call)."""

    __slots__ = ("buffer", "value")
    _fields = ("buffer", "value")

    def __init__(self, buffer, value):
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "value", value)


def test_unknown_statement_and_registered_extension():
    B4 = Buffer("B", (4,))
    f = PrimFunc("f", (B4,), (_Fill(B4, 7.0),))
    with pytest.raises(IRError, match="cannot execute statement _Fill"):
        interpret(f, np.zeros(4, np.float32))

    def compile_fill(stmt, compiler, scope):
        arr = compiler.arrays[stmt.buffer.name]
        return lambda env: arr.fill(stmt.value)

    register_stmt_interpreter(_Fill, compile_fill)
    b = np.zeros(4, np.float32)
    interpret(f, b)
    np.testing.assert_array_equal(b, 7.0)
