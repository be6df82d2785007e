"""Code generation of hand-built (scheduled-looking) IR: split loops with predicates, unrolled,
vectorized and parallel loops, local scratch buffers (arrays and scalars), init placement,
fused loops, nested blocks, and the statement-emitter extension point."""

from __future__ import annotations

import re

import numba
import numpy as np
import pytest

import probsched as ps
from probsched.codegen import MAX_UNROLL_NODES, emit_module, emitted_size, register_stmt_emitter, unregister_stmt_emitter
from probsched.ir.expr import Var, const
from probsched.ir.stmt import Block, Buffer, IterVar, Loop, PrimFunc, Stmt, Store


def rand(rng, *shape):
    mag = rng.uniform(0.5, 1.5, size=shape)
    return (mag * np.where(rng.random(shape) < 0.5, -1.0, 1.0)).astype(np.float32)


def close(got, want, n=1):
    tol = 1e-4 * max(1.0, float(np.sqrt(n)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(7)


def S(name, extent):
    return IterVar(Var(name), extent, "S")


def R(name, extent):
    return IterVar(Var(name), extent, "R")


def nest(loops, body):
    """Nest ``loops`` = [(var_name, extent, kind), ...] outermost first around ``body``."""
    stmt = body
    for name, extent, kind in reversed(loops):
        stmt = Loop(Var(name), extent, kind, body=(stmt,) if not isinstance(stmt, tuple) else stmt)
    return stmt


# ----------------------------------------------------------------------------- split + predicate


def test_non_divisible_split_elementwise(rng):
    A, B = Buffer("A", (100,)), Buffer("B", (100,))
    i0, i1 = Var("i0"), Var("i1")
    vi = S("v_i", 100)
    blk = Block("B", (vi,), (i0 * 16 + i1,), Store(B, (vi.var,), A[vi.var] * 2.0 + 1.0), predicate=i0 * 16 + i1 < 100)
    f = PrimFunc("split", (A, B), (nest([("i0", 7, "serial"), ("i1", 16, "vectorized")], blk),))
    kern = ps.build(f)
    assert "if i0 * 16 + i1 < 100:" in kern.source
    a = rand(rng, 100)
    close(kern.run(a)[0], a * 2 + 1)


def test_non_divisible_split_reduction_hoists_init(rng):
    A, Sm = Buffer("A", (3, 50)), Buffer("Sm", (3,))
    i, k0, k1 = Var("i"), Var("k0"), Var("k1")
    vi, vk = S("v_i", 3), R("v_k", 50)
    upd = Store(Sm, (vi.var,), Sm[vi.var] + A[vi.var, vk.var])
    blk = Block("Sm", (vi, vk), (i, k0 * 13 + k1), upd, init=Store(Sm, (vi.var,), 0.0), predicate=k0 * 13 + k1 < 50)
    f = PrimFunc("rsplit", (A, Sm), (nest([("i", 3, "serial"), ("k0", 4, "serial"), ("k1", 13, "serial")], blk),))
    kern = ps.build(f)
    assert "init hoisted out of k0, k1" in kern.source
    a = rand(rng, 3, 50)
    close(kern.run(a)[0], a.sum(axis=1), 50)


def test_init_not_hoistable_is_peeled(rng):
    # reduction loop outside the spatial loop: its first iteration is emitted apart, with the init
    A, Sm = Buffer("A", (5, 8)), Buffer("Sm", (5,))
    vi, vk = S("v_i", 5), R("v_k", 8)
    blk = Block(
        "Sm", (vi, vk), (Var("i"), Var("k")), Store(Sm, (vi.var,), Sm[vi.var] + A[vi.var, vk.var] * A[vi.var, vk.var]),
        init=Store(Sm, (vi.var,), 0.0),
    )
    f = PrimFunc("kouter", (A, Sm), (nest([("k", 8, "serial"), ("i", 5, "serial")], blk),))
    kern = ps.build(f)
    assert "the first step of k peeled" in kern.source and "for k in range(1, 8)" in kern.source
    assert "if k == 0:" not in kern.source and "hoisted" not in kern.source
    a = rand(rng, 5, 8)
    close(kern.run(a)[0], (a * a).sum(axis=1), 8)


# ----------------------------------------------------------------------------- unroll


def test_unrolled_loop_is_expanded_in_source(rng):
    A, B = Buffer("A", (4, 8)), Buffer("B", (4, 8))
    vi, vj = S("v_i", 4), S("v_j", 8)
    blk = Block("B", (vi, vj), (Var("i"), Var("j0") * 4 + Var("j1")), Store(B, (vi.var, vj.var), A[vi.var, vj.var] + 3.0))
    f = PrimFunc("unr", (A, B), (nest([("i", 4, "serial"), ("j0", 2, "serial"), ("j1", 4, "unrolled")], blk),))
    kern = ps.build(f)
    assert "for j1" not in kern.source
    assert kern.source.count("# block B") == 4
    assert "j1 = 3 (unrolled)" in kern.source
    assert "A[_u64(i * 8 + j0 * 4 + 3)]" in kern.source
    a = rand(rng, 4, 8)
    close(kern.run(a)[0], a + 3)


def test_unroll_above_maximum_stays_a_loop():
    def func(n):
        A, B = Buffer("A", (n,)), Buffer("B", (n,))
        vi = S("v_i", n)
        blk = Block("B", (vi,), (Var("i"),), Store(B, (vi.var,), A[vi.var]))
        return PrimFunc("big", (A, B), (Loop(Var("i"), n, "unrolled", body=(blk,)),)), blk

    n = MAX_UNROLL_NODES // emitted_size(func(1)[1]) + 1
    kern = ps.build(func(n)[0])
    assert "unroll skipped: over 4096 expression nodes" in kern.source
    a = np.arange(n, dtype="float32")
    close(kern.run(a)[0], a)


def test_unroll_limit_counts_the_iterator_lines_each_copy_repeats():
    # Each copy of a block whose iterators are `o // 4` and `o % 4` (o not unrolled) repeats
    # two assignment lines; `j // 100` (j unrolled) folds to a constant and costs nothing.
    n = 300
    A, B = Buffer("A", (3, 4, n)), Buffer("B", (3, 4, n))
    va, vb, vj = S("v_a", 3), S("v_b", 4), S("v_j", n)
    o, j = Var("o"), Var("j")

    def block(bindings):
        return Block("B", (va, vb, vj), bindings, Store(B, (va.var, vb.var, vj.var), A[va.var, vb.var, vj.var]))

    def source(blk):
        return emit_module(PrimFunc("f", (A, B), (nest([("o", 8, "serial"), ("j", n, "unrolled")], blk),))).source

    two_lines, one_line = block((o // 4, o % 4, j)), block((j // 100, o % 4, j))
    unrolled = frozenset({"j"})
    assert emitted_size(one_line, unrolled) * n <= MAX_UNROLL_NODES < emitted_size(two_lines, unrolled) * n
    src = source(two_lines)
    assert "unroll skipped" in src and src.count("# block B") == 1
    src = source(one_line)
    assert "unroll skipped" not in src and src.count("# block B") == n


# ----------------------------------------------------------------------------- vectorize, unsigned index


@pytest.fixture(scope="module")
def ikj_matmul():
    n = 64
    A, B, C = Buffer("A", (n, n)), Buffer("B", (n, n)), Buffer("C", (n, n))
    vi, vj, vk = S("v_i", n), S("v_j", n), R("v_k", n)
    blk = Block(
        "C", (vi, vj, vk), (Var("i"), Var("j"), Var("k")),
        Store(C, (vi.var, vj.var), C[vi.var, vj.var] + A[vi.var, vk.var] * B[vk.var, vj.var]),
        init=Store(C, (vi.var, vj.var), 0.0),
    )
    return PrimFunc("ikj", (A, B, C), (nest([("i", n, "serial"), ("k", n, "serial"), ("j", n, "vectorized")], blk),))


def test_vectorized_innermost_loop_uses_vector_fma(ikj_matmul, rng):
    kern = ps.build(ikj_matmul)
    asm = kern.inspect_asm()["ikj"]
    assert re.search(r"vfmadd\w*ps\s+[^\n]*(ymm|zmm)", asm), "no vector FMA in the vectorized loop"
    a, b = rand(rng, 64, 64), rand(rng, 64, 64)
    close(kern.run(a, b)[0], a @ b, 64)


def test_unsigned_index_removes_wraparound_guard():
    # In a thread's chunk (range(lo, hi)) LLVM cannot prove i >= 0: with the numba this
    # project started on, signed indexing kept numba's negative-index wraparound and the
    # loop did not vectorize. numba 0.68.1 (LLVM 22) vectorizes the signed form too, so
    # the generated code is asserted instead: it indexes with _u64 (which no later LLVM
    # can make worse), has no guard and vectorizes.
    A, B = Buffer("A", (64, 64)), Buffer("B", (64, 64))
    vi, vj = S("v_i", 64), S("v_j", 64)
    blk = Block("B", (vi, vj), (Var("i"), Var("j")), Store(B, (vi.var, vj.var), A[vi.var, vj.var] * 2.0))
    f = PrimFunc("shift", (A, B), (nest([("i", 64, "parallel"), ("j", 64, "vectorized")], blk),))
    kern = ps.build(f, parallel="threads")

    def llvm(src: str) -> str:
        ns: dict = {}
        exec(src, ns)
        i64, arr = numba.types.int64, numba.types.Array(numba.float32, 1, "C")
        d = numba.njit((i64, i64, i64, arr, arr), **ps.codegen.compile_options())(ns["shift"])
        return d.inspect_llvm(d.signatures[0])

    assert re.search(r"B\[_u64\(i \* 64 \+ j\)\] = A\[_u64\(i \* 64 \+ j\)\]", kern.source), kern.source
    unsigned = llvm(kern.source)
    assert not re.search(r"icmp slt i64 [^,\n]+, 0", unsigned), "a negative-index guard is left"
    assert re.search(r"<(8|16) x float>", unsigned), "the loop did not vectorize"
    a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) + 1
    np.testing.assert_array_equal(kern.run(a)[0], a * 2)


# ----------------------------------------------------------------------------- parallel


def parallel_matmul(kind_i="parallel", kind_j="serial", outer=None):
    n = 32
    A, B, C = Buffer("A", (n, n)), Buffer("B", (n, n)), Buffer("C", (n, n))
    vi, vj, vk = S("v_i", n), S("v_j", n), R("v_k", n)
    blk = Block(
        "C", (vi, vj, vk), (Var("i"), Var("j"), Var("k")),
        Store(C, (vi.var, vj.var), C[vi.var, vj.var] + A[vi.var, vk.var] * B[vk.var, vj.var]),
        init=Store(C, (vi.var, vj.var), 0.0),
    )
    loops = [("i", n, kind_i), ("j", n, kind_j), ("k", n, "serial")]
    if outer:
        loops = [outer] + loops
    return PrimFunc("pmm", (A, B, C), (nest(loops, blk),))


@pytest.fixture(scope="module")
def mm_inputs(rng):
    return rand(rng, 32, 32), rand(rng, 32, 32)


@pytest.mark.parametrize("form", ["threads", "prange"])
def test_parallel_loop_forms(form, mm_inputs):
    a, b = mm_inputs
    kern = ps.build(parallel_matmul(), "cpu -threads=2", parallel=form)
    assert kern.parallel_form == form
    if form == "prange":
        # the body alone is compiled for this kernel; the launcher is shared (codegen.launch),
        # called by its address, which the entry takes as an argument with the body's
        assert "_ps_call_by_address(_ps_pmm_i_launch, (_ps_pmm_i_body_address, 32, A, B, C,))" in kern.source
        assert "def pmm(A, B, C, _ps_pmm_i_launch, _ps_pmm_i_body_address):" in kern.source
        assert sorted(kern.dispatchers) == ["_ps_pmm_i_body", "pmm"] and len(kern.launches) == 1
    else:
        assert "range(_ps_lo, _ps_hi)" in kern.source and len(kern.dispatchers) == 1
    close(kern.run(a, b)[0], a @ b, 32)
    ps.build(parallel_matmul(), "cpu -threads=1", parallel=form)  # one thread: same result
    close(kern.run(a, b)[0], a @ b, 32)


@pytest.mark.parametrize("form", ["threads", "prange"])
def test_bound_kernel_runs_each_parallel_form(form, mm_inputs):
    a, b = mm_inputs
    kern = ps.build(parallel_matmul(), "cpu -threads=2", parallel=form)
    c = np.full((32, 32), np.nan, np.float32)
    run = kern.bind(a, b, c)
    run()
    close(c, a @ b, 32)
    c[:] = np.nan  # the bound arrays are the caller's: a second call writes them again
    run()
    close(c, a @ b, 32)


def test_nested_parallel_runs_inner_serially(mm_inputs):
    a, b = mm_inputs
    kern = ps.build(parallel_matmul("parallel", "parallel"), parallel="threads")
    assert kern.parallel_form == "threads"
    assert "parallel loop inside a parallel loop: runs serially" in kern.source
    close(kern.run(a, b)[0], a @ b, 32)


def test_kernels_with_parallel_loops_of_one_signature_share_a_launcher(mm_inputs):
    from probsched.codegen.launch import launcher_sources

    a, b = mm_inputs
    arrays = ("array:float32",) * 3
    ps.build(parallel_matmul(), parallel="prange", cache=False)
    before = launcher_sources()
    assert arrays in before
    other = ps.build(parallel_matmul("parallel", "vectorized"), parallel="prange", cache=False)
    assert launcher_sources() == before  # the same arguments: no new launcher
    close(other.run(a, b)[0], a @ b, 32)
    # under a serial loop the body also takes that loop's index: a launcher of its own
    nested = ps.build(parallel_matmul("parallel", "serial", outer=("o", 2, "serial")), parallel="prange", cache=False)
    assert ("int64",) + arrays in launcher_sources() and arrays in launcher_sources()
    assert "_ps_call_by_address(_ps_pmm_i_launch, (_ps_pmm_i_body_address, 32, o, A, B, C,))" in nested.source
    close(nested.run(a, b)[0], a @ b, 32)


@pytest.mark.parametrize("threads", [1, 2])
def test_launcher_runs_every_index_once_in_a_chunk_per_thread(threads):
    import numba

    from probsched.codegen.compile import compile_options, numba_type
    from probsched.codegen.launch import function_address, launcher

    def body(lo, hi, count, first):
        for i in range(lo, hi):
            count[i] += np.float32(1.0)
            first[i] = lo

    i64, f32 = numba_type("int64"), numba_type("array:float32")
    address = function_address(numba.njit((i64, i64, f32, f32), **compile_options())(body))
    launch = launcher(("array:float32",) * 2)
    saved = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        for extent in (1, 2, 3, 7):
            count, first = np.zeros(extent, np.float32), np.full(extent, -1, np.float32)
            launch(address, extent, count, first)
            assert count.tolist() == [1.0] * extent
            starts = sorted(set(first.tolist()))  # contiguous chunks, at most one per thread
            assert len(starts) == min(threads, extent) and starts[0] == 0
    finally:
        numba.set_num_threads(saved)


def test_launcher_raises_when_a_chunk_of_the_body_fails():
    import numba

    from probsched.codegen.compile import compile_options, numba_type
    from probsched.codegen.launch import function_address, launcher

    def body(lo, hi, out, bad):
        for i in range(lo, hi):
            if i == bad[0]:
                raise MemoryError("no room for a scratch buffer")  # what a failed np.empty raises
            out[i] = np.float32(1.0)

    f32 = numba_type("array:float32")
    address = function_address(numba.njit((numba_type("int64"),) * 2 + (f32, f32), **compile_options())(body))
    launch = launcher(("array:float32",) * 2)
    out = np.zeros(6, np.float32)
    launch(address, 6, out, np.full(1, -1, np.float32))  # no failing index: runs as before
    assert out.tolist() == [1.0] * 6
    for bad in (0, 5):  # the first chunk, the last one
        with pytest.raises(RuntimeError, match="parallel loop body failed"):
            launch(address, 6, np.zeros(6, np.float32), np.full(1, bad, np.float32))


def test_parallel_loop_below_serial_loop_uses_prange(mm_inputs):
    a, b = mm_inputs
    f = parallel_matmul("parallel", "serial", outer=("o", 1 + 1, "serial"))
    kern = ps.build(f)
    assert kern.parallel_form == "prange"
    close(kern.run(a, b)[0], a @ b, 32)
    with pytest.raises(ps.BuildError, match="parallel='threads' needs"):
        ps.build(f, parallel="threads")


# ----------------------------------------------------------------------------- local buffers


def tiled_local_matmul(unroll_j: bool, parallel_i0: bool = False):
    """C = A @ B (16x16x8) through a 4x4 local accumulator, compute_at'ed under (i0, j0)."""
    n, kk, t = 16, 8, 4
    A, B, C = Buffer("A", (n, kk)), Buffer("B", (kk, n)), Buffer("C", (n, n))
    L = Buffer("C_local", (t, t), scope="local")
    i0, j0 = Var("i0"), Var("j0")
    vi, vj, vk = S("v_i", n), S("v_j", n), R("v_k", kk)
    li, lj = vi.var - i0 * t, vj.var - j0 * t
    upd = Block(
        "C_local", (vi, vj, vk), (i0 * t + Var("i1"), j0 * t + Var("j1"), Var("k")),
        Store(L, (li, lj), L[li, lj] + A[vi.var, vk.var] * B[vk.var, vj.var]),
        init=Store(L, (li, lj), 0.0),
    )
    jk = "unrolled" if unroll_j else "vectorized"
    compute = nest([("k", kk, "serial"), ("i1", t, "unrolled"), ("j1", t, jk)], upd)
    wi, wj = S("w_i", n), S("w_j", n)
    wb = Block("C", (wi, wj), (i0 * t + Var("i2"), j0 * t + Var("j2")), Store(C, (wi.var, wj.var), L[wi.var - i0 * t, wj.var - j0 * t]))
    back = nest([("i2", t, "unrolled"), ("j2", t, jk)], wb)
    body = Loop(j0, n // t, body=(compute, back))
    top = Loop(i0, n // t, "parallel" if parallel_i0 else "serial", body=(body,))
    return PrimFunc("tiled", (A, B, C), (top,), allocs=(L,))


def test_local_buffer_with_constant_indices_becomes_scalars(rng):
    kern = ps.build(tiled_local_matmul(unroll_j=True))
    src = kern.source
    assert "np.empty" not in src
    assert "local C_local: float32[4, 4] as scalars" in src
    assert "C_local_15 = C_local_15 + " in src
    assert "the first step of k peeled" in src  # the init is not hoisted over the spatial i1/j1: peeled
    a, b = rand(rng, 16, 8), rand(rng, 8, 16)
    close(kern.run(a, b)[0], a @ b, 8)
    # LLVM's SLP vectorizer (switched on by probsched) packs the scalar accumulators
    assert ps.codegen.compile.slp_enabled()
    asm = kern.inspect_asm()["tiled"]
    assert re.search(r"vfmadd\w*ps", asm) and not re.search(r"vfmadd\w*ss", asm)


def test_local_buffer_with_variable_indices_is_an_array(rng, monkeypatch):
    kern = ps.build(tiled_local_matmul(unroll_j=False))
    src = kern.source
    # allocated once, at the top of the function, not inside the tile loops; small: on the stack
    assert re.search(r"def tiled\(A, B, C\):\n    C_local = _ps_stack_empty\(16, np.float32\)", src)
    a, b = rand(rng, 16, 8), rand(rng, 8, 16)
    close(kern.run(a, b)[0], a @ b, 8)
    # past the stack limit: a heap array
    monkeypatch.setattr(ps.codegen.stackalloc, "MAX_STACK_BYTES", 32)
    big = ps.build(tiled_local_matmul(unroll_j=False), cache=False)
    assert re.search(r"def tiled\(A, B, C\):\n    C_local = np.empty\(16, dtype=np.float32\)", big.source)
    close(big.run(a, b)[0], a @ b, 8)


@pytest.mark.parametrize("form", ["threads", "prange"])
def test_local_buffer_under_parallel_loop_is_per_thread(form, rng):
    kern = ps.build(tiled_local_matmul(unroll_j=False, parallel_i0=True), "cpu -threads=2", parallel=form)
    src = kern.source
    if form == "prange":
        # once per thread's chunk, before the chunk's loop
        assert re.search(r"def _ps_tiled_i0_body\(_ps_lo, _ps_hi, A, B, C\):.*\n    C_local = _ps_stack_empty.*\n    for i0 in range\(_ps_lo, _ps_hi\)", src)
    else:
        assert re.search(r"if _ps_seg == 0:\n        C_local = _ps_stack_empty\(16, np.float32\).*\n        for i0 in range\(_ps_lo, _ps_hi\)", src)
    a, b = rand(rng, 16, 8), rand(rng, 8, 16)
    close(kern.run(a, b)[0], a @ b, 8)


# ----------------------------------------------------------------------------- fused loops, nested blocks


def test_fused_loop_bindings_are_assigned_once(rng):
    A, B = Buffer("A", (6, 5)), Buffer("B", (6, 5))
    f_ = Var("f")
    vi, vj = S("v_i", 6), S("v_j", 5)
    blk = Block("B", (vi, vj), (f_ // 5, f_ % 5), Store(B, (vi.var, vj.var), A[vi.var, vj.var] - 1.0))
    func = PrimFunc("fused", (A, B), (Loop(f_, 30, body=(blk,)),))
    kern = ps.build(func)
    assert "v_i = f // 5" in kern.source and "v_j = f % 5" in kern.source
    a = rand(rng, 6, 5)
    close(kern.run(a)[0], a - 1)


def test_block_with_statement_tuple_body(rng):
    # an outer block (as blockize makes) whose body holds a loop and an inner block
    A, B = Buffer("A", (4, 6)), Buffer("B", (4, 6))
    oi = S("o_i", 4)
    vi, vj = S("v_i", 4), S("v_j", 6)
    inner = Block("inner", (vi, vj), (oi.var, Var("j")), Store(B, (vi.var, vj.var), A[vi.var, vj.var] * A[vi.var, vj.var]))
    outer = Block("outer", (oi,), (Var("i"),), (Loop(Var("j"), 6, body=(inner,)),))
    kern = ps.build(PrimFunc("blockized", (A, B), (Loop(Var("i"), 4, body=(outer,)),)))
    assert "# block outer" in kern.source and "# block inner" in kern.source
    a = rand(rng, 4, 6)
    close(kern.run(a)[0], a * a)


# ----------------------------------------------------------------------------- errors


def test_unbound_variable_and_out_of_range_constant_index():
    A, B = Buffer("A", (4,)), Buffer("B", (4,))
    vi = S("v_i", 4)
    bad = Block("B", (vi,), (Var("nope"),), Store(B, (vi.var,), A[vi.var]))
    with pytest.raises(ps.BuildError, match=r"\['nope'\].*not defined"):
        ps.build(PrimFunc("unbound", (A, B), (Loop(Var("i"), 4, body=(bad,)),)))
    oob = Block("B", (vi,), (Var("i"),), Store(B, (vi.var,), A[const(4)]))
    with pytest.raises(ps.BuildError, match=r"index 4 is out of range \[0, 4\) of buffer A"):
        ps.build(PrimFunc("oob", (A, B), (Loop(Var("i"), 4, body=(oob,)),)))


class Opaque(Stmt):
    __slots__ = ()
    _fields = ()


def test_unknown_statement_is_a_build_error():
    A = Buffer("A", (2,))
    with pytest.raises(ps.BuildError, match="no code generator for statement Opaque"):
        ps.build(PrimFunc("opaque", (A,), (Opaque(),)))


# ----------------------------------------------------------------------------- extension point


@numba.njit(nogil=True, fastmath=True)
def _axpy(x, y, alpha):  # a stand-in for a micro-kernel
    for i in range(x.shape[0]):
        y[i] = y[i] + alpha * x[i]


class Axpy(Stmt):
    """``Y += alpha * X`` on whole buffers, emitted as a call of an njit function."""

    __slots__ = ("x", "y", "alpha")
    _fields = ("x", "y", "alpha")

    def __init__(self, x, y, alpha) -> None:
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "alpha", alpha)

    def writes(self):
        return [self.y]


def _emit_axpy(stmt, ctx):
    fn = ctx.add_global("axpy", _axpy)
    ctx.comment("axpy micro-kernel")
    ctx.line(f"{fn}({ctx.array(stmt.x)}, {ctx.array(stmt.y)}, {ctx.expr(stmt.alpha)})")


class BadCall(Stmt):
    __slots__ = ()
    _fields = ()


@pytest.fixture
def emitters():
    register_stmt_emitter(Axpy, _emit_axpy)
    register_stmt_emitter(BadCall, lambda s, ctx: ctx.line("undefined_helper(1)"))
    yield
    unregister_stmt_emitter(Axpy)
    unregister_stmt_emitter(BadCall)


def test_registered_statement_emitter(emitters, rng):
    X, Y = Buffer("X", (8,)), Buffer("Y", (8,))
    vi = S("v_i", 8)
    init = Block("Y", (vi,), (Var("i"),), Store(Y, (vi.var,), X[vi.var]))
    f = PrimFunc("axpy", (X, Y), (Loop(Var("i"), 8, body=(init,)), Axpy(X, Y, const(3.0))))
    kern = ps.build(f)
    assert "_ps_axpy(X, Y, np.float32(3.0))" in kern.source
    assert [b.name for b in kern.outputs] == ["Y"]
    x = rand(rng, 8)
    close(kern.run(x)[0], 4 * x)


def test_numba_error_becomes_build_error_with_source_context(emitters):
    A = Buffer("A", (2,))
    with pytest.raises(ps.BuildError) as info:
        ps.build(PrimFunc("broken", (A,), (BadCall(),)))
    msg = str(info.value)
    assert "numba could not compile broken" in msg and "undefined_helper" in msg
    assert re.search(r">\s+\d+ \|     undefined_helper\(1\)", msg)


def test_auto_parallel_form_is_prange_wherever_a_loop_is_parallel():
    from probsched.codegen.emit import choose_form

    small = parallel_matmul()
    assert choose_form(small) == "prange"
    # a billion statements per call: work that hides a thread handoff no longer picks threads
    big = PrimFunc("big", small.params, (Loop(Var("o"), 1 << 15, "parallel", body=small.body),))
    assert choose_form(big) == "prange" and choose_form(big, "threads") == "threads"
    nested = parallel_matmul("parallel", "serial", outer=("o", 256, "serial"))
    assert choose_form(nested) == "prange"
    with pytest.raises(ps.BuildError, match="top level"):
        choose_form(nested, "threads")
    serial = parallel_matmul("serial", "serial")
    assert choose_form(serial) == "none" and choose_form(serial, "threads") == "none"


def test_emit_module_without_compiling():
    ms = emit_module(parallel_matmul(), parallel="threads")
    assert ms.parallel_form == "threads" and [s.extent for s in ms.segments] == [32]
    compile(ms.source, "<test>", "exec")


def test_registered_block_emitter_for_annotated_blocks(rng):
    # a block marked by an annotation (as tensorize marks blocks) is emitted by a hook that
    # sees the block's iterators bound; returning False falls back to the default
    from probsched.codegen import register_block_emitter, unregister_block_emitter

    A, B = Buffer("A", (4, 8)), Buffer("B", (4,))
    vi, vk = S("v_i", 4), R("v_k", 8)
    loop_k = Loop(Var("k"), 8, body=(Block("inner", (S("w", 4), R("r", 8)), (vi.var, Var("k")),
                                           Store(B, (Var("w"),), B[Var("w")] + A[Var("w"), Var("r")])),))
    outer = Block("rowsum", (vi,), (Var("i"),), (loop_k,), init=Store(B, (vi.var,), 0.0), annotations={"test_intrin": "rowsum8"})
    f = PrimFunc("annot", (A, B), (Loop(Var("i"), 4, body=(outer,)),))

    def emit_rowsum(blk, ctx):
        fn = ctx.add_global("rowsum8", _rowsum8)
        ctx.line(f"{fn}({ctx.array(A)}, {ctx.index(A, (blk.iters[0].var, 0))}, {ctx.array(B)}, {ctx.index(B, (blk.iters[0].var,))})")

    a = rand(rng, 4, 8)
    register_block_emitter("test_intrin", emit_rowsum)
    try:
        kern = ps.build(f)
        assert "_ps_rowsum8(A, i * 8, B, i)" in kern.source and "for k" not in kern.source
        close(kern.run(a)[0], a.sum(axis=1), 8)
        register_block_emitter("test_intrin", lambda blk, ctx: False)
        kern2 = ps.build(f)
        assert "for k in range(8):" in kern2.source
        close(kern2.run(a)[0], a.sum(axis=1), 8)
    finally:
        unregister_block_emitter("test_intrin")


@numba.njit(nogil=True)
def _rowsum8(a, a_off, b, b_off):
    s = np.float32(0.0)
    for r in range(8):
        s += a[a_off + r]
    b[b_off] = s
