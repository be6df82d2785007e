"""Shipped micro-kernels against numpy, blockize, and tensorize's structural matching."""

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import probsched as ps
from probsched.intrinsics import simd
from probsched.intrinsics.matmul import SHAPES
from probsched.ir.interpreter import evaluate

# the AVX-512 shapes (up to 28 vector accumulators) compile in seconds each: the slow sweep
# takes them, test_largest_kernel_on_strided_operands_partial_rows_and_odd_k one of them
MATMULS = [
    pytest.param(f"matmul_{m}x{n}", marks=pytest.mark.slow) if m * n > 200 else f"matmul_{m}x{n}" for m, n in SHAPES
]


def tile_case(rng, m, n, K, a_si, a_sk, b_sk, c_si, pad):
    """Flat A, B, C holding an m x K, K x n and m x n tile at ``pad`` with those strides, and
    the tiles themselves (float64)."""
    A = rng.uniform(-1, 1, pad + (m - 1) * a_si + max(K - 1, 0) * a_sk + 1).astype("float32")
    B = rng.uniform(-1, 1, pad + max(K - 1, 0) * b_sk + n).astype("float32")
    C = rng.uniform(-1, 1, pad + (m - 1) * c_si + n).astype("float32")
    a = np.array([[A[pad + r * a_si + k * a_sk] for k in range(K)] for r in range(m)], dtype="float64").reshape(m, K)
    b = np.array([[B[pad + k * b_sk + c] for c in range(n)] for k in range(K)], dtype="float64").reshape(K, n)
    c = np.array([[C[pad + r * c_si + c] for c in range(n)] for r in range(m)], dtype="float64")
    return A, B, C, a, b, c


def check_call(mk, m, n, K, a_si, a_sk, b_sk, c_si, pad, zero_start=False, seed=0):
    """Call ``mk`` on a strided case: the tile is ``A @ B`` (plus C's old tile unless
    ``zero_start``) and nothing outside it was written."""
    A, B, C, a, b, c0 = tile_case(np.random.default_rng(seed), m, n, K, a_si, a_sk, b_sk, c_si, pad)
    before = C.copy()
    mk(C, pad, c_si, 1, A, pad, a_si, a_sk, B, pad, 1, b_sk, K)
    got = np.array([[C[pad + r * c_si + c] for c in range(n)] for r in range(m)])
    np.testing.assert_allclose(got, (0 if zero_start else c0) + a @ b, rtol=1e-5, atol=1e-5)
    mask = np.ones(C.shape, bool)
    for r in range(m):
        mask[pad + r * c_si : pad + r * c_si + n] = False
    assert np.array_equal(C[mask], before[mask]), "the kernel wrote outside its tile"


@pytest.mark.parametrize("name", MATMULS)
def test_matmul_kernel_with_strided_operands(name):
    intrin = ps.intrinsics.get(name)
    m, n = intrin.meta["M"], intrin.meta["N"]
    mk = intrin.kernel()
    for K, a_si, a_sk, b_sk, c_si, pad in [(1, 1, m, n, n, 0), (7, 13, 1, n + 3, n + 5, 2), (20, 2, 2 * m, 3 * n, 2 * n, 1)]:
        # A and B laid out with arbitrary strides inside bigger flat buffers, at an offset
        check_call(mk, m, n, K, a_si, a_sk, b_sk, c_si, pad)


def test_largest_kernel_on_strided_operands_partial_rows_and_odd_k():
    # 28 accumulators: all but 4 of AVX-512's vector registers (it spills where there are 16)
    intrin = ps.intrinsics.get("matmul_14x32")
    full, zero_rows = intrin.kernel(), intrin.meta["zero_start_variant"](5)()
    check_call(full, 14, 32, 13, 37, 2, 35, 33, 3)  # A strided along k, B and C rows padded
    check_call(zero_rows, 5, 32, 9, 9, 1, 32, 40, 1, zero_start=True)


# kernels the other tests compile too: both vector widths (16 lanes; 8 lanes, three vectors a row)
SHARED = {("matmul_4x8", False): 4, ("matmul_4x24", False): 4, ("matmul_4x16", False): 4, ("matmul_4x16", True): 4}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    # partial tiles of few rows sum their panel in interleaved parts (partial_sums), any K
    kernel=st.sampled_from(sorted(SHARED) + [("matmul_4x16", 3), ("matmul_4x16", -1), ("matmul_4x16", -2)]),
    K=st.integers(0, 9),
    a_si=st.integers(1, 12),
    a_sk=st.integers(0, 5),
    b_extra=st.integers(0, 9),
    c_extra=st.integers(0, 9),
    pad=st.integers(0, 3),
)
def test_kernels_compute_the_strided_tile(kernel, K, a_si, a_sk, b_extra, c_extra, pad):
    # any panel (empty and odd ones too), A strided along both axes (even 0: a broadcast
    # row), B and C rows apart: C's tile gets A @ B added, or set to it when starting from zero
    name, mode = kernel
    intrin = ps.intrinsics.get(name)
    n = intrin.meta["N"]
    if mode is False:
        m, mk, zero_start = intrin.meta["M"], intrin.kernel(), False
    elif mode is not True and mode < 0:  # the kernel of a partial tile of -mode rows
        m, mk, zero_start = -mode, intrin.meta["variant"](-mode)(), False
    else:  # the zero-start kernel, of all rows (True) or of a partial tile's
        m = intrin.meta["M"] if mode is True else mode
        mk, zero_start = intrin.meta["zero_start_variant"](None if mode is True else mode)(), True
    check_call(mk, m, n, K, a_si, a_sk, n + b_extra, n + c_extra, pad, zero_start, seed=K)


def test_a_block_of_few_accumulators_sums_its_panel_in_parts_and_joins_them_once():
    from probsched.intrinsics.matmul import matmul_source

    one_row = matmul_source(1, 16, target_lanes=8)  # 2 accumulators on AVX2: 4 parts of the panel
    assert "for k in range(0, whole, 4):" in one_row and one_row.count("add(") == 2 * 3
    assert "add(" not in matmul_source(6, 16, target_lanes=8)  # 12 accumulators keep the pipes busy


def test_vector_helpers_of_both_widths():
    @numba.njit
    def axpy(out, a, x, y):  # out[0:24] = a[0] * x + y with one 16-lane and one 8-lane vector
        s16, s8 = simd.broadcast(a, 0), simd.broadcast8(a, 0)
        simd.store(out, 0, simd.fma(simd.load(y, 0), s16, simd.load(x, 0)))
        simd.store(out, 16, simd.fma(simd.fma(simd.zeros8(), s8, simd.load8(x, 16)), simd.broadcast8(a, 1), simd.load8(y, 16)))

    x, y = np.arange(24, dtype=np.float32), np.ones(24, np.float32)
    out = np.zeros(24, np.float32)
    axpy(out, np.array([2.0, 1.0], np.float32), x, y)
    np.testing.assert_array_equal(out, 2 * x + y)

    @numba.njit
    def mixed(out, a):
        simd.store(out, 0, simd.fma(simd.zeros(), simd.broadcast8(a, 0), simd.broadcast(a, 0)))

    with pytest.raises(TypeError, match="fma: expected three vectors of one width"):
        mixed(out, x)


def tiled(n=12, m=32, k=20, mi=6, nj=16, kk=10):
    w = ps.workloads.matmul(n, m, k, batch=None)
    sch = ps.Schedule(w.func)
    c = sch.get_block(w.func.blocks()[0].name)
    i, j, r = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, mi])
    j0, j1 = sch.split(j, [None, nj])
    k0, k1 = sch.split(r, [None, kk])
    sch.reorder(i0, j0, k0, k1, i1, j1)
    sch.decompose_reduction(c, k0)
    return w, sch, k1


def test_blockize_keeps_semantics():
    w, sch, k1 = tiled()
    blk = sch.blockize(k1)
    node = sch.get(blk)
    assert isinstance(node.body, tuple) and [it.var.name for it in node.iters] == ["v_i_o", "v_j_o", "v_k_o"]
    x = w.random_inputs(np.random.default_rng(0))
    w.check(evaluate(sch.mod, *x), w.reference(*x))


def test_partial_tiles_only_along_the_remainder_axis():
    w = ps.workloads.matmul(10, 20, 8, batch=None)
    sch = ps.Schedule(w.func)
    c = sch.get_block(w.func.blocks()[0].name)
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])  # 10 = 3 * 4 guarded: rows are the remainder axis
    j0, j1 = sch.split(j, [None, 16])  # 20 = 2 * 16 guarded: columns are not
    sch.reorder(i0, j0, k, i1, j1)
    sch.decompose_reduction(c, k)
    blk = sch.blockize(k)
    assert "v_i_o + i_1 < 10" in str(sch.mod)
    x = w.random_inputs(np.random.default_rng(0))
    w.check(evaluate(sch.mod, *x), w.reference(*x))
    with pytest.raises(ps.ScheduleError, match="partial tiles only along i_1"):
        sch.tensorize(blk, "matmul_4x16")


def test_tensorized_partial_tiles_compile_and_match():
    w = ps.workloads.matmul(14, 32, 20, batch=None)
    sch = ps.Schedule(w.func)
    c = sch.get_block(w.func.blocks()[0].name)
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    sch.decompose_reduction(c, k)
    sch.parallel(i0)
    sch.tensorize(k, "matmul_4x16")
    kernel = ps.build(sch)
    assert "matmul_4x16_2(" in kernel.source and "matmul_4x16_3(" not in kernel.source
    x = w.random_inputs(np.random.default_rng(0))
    out = w.empty_outputs()
    kernel(*x, *out)
    w.check(out, w.reference(*x))


@pytest.mark.parametrize("k_tile, rows", [(20, 14), (5, 14), (5, 12)])
def test_a_tile_that_keeps_its_init_starts_from_zero_where_the_sum_begins(k_tile, rows):
    # the reduction's init stays in the tile: the call that begins the sum (k panel 0) is the
    # zero-start kernel, later panels accumulate; no pass zeroes C, and C's old contents
    # (NaN here) never reach the result
    w = ps.workloads.matmul(rows, 32, 20, batch=None)
    sch = ps.Schedule(w.func)
    c = sch.get_block(w.func.blocks()[0].name)
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, k_tile])
    sch.reorder(i0, j0, k0, k1, i1, j1)
    sch.tensorize(k1, "matmul_4x16")
    kernel = ps.build(sch)
    assert "_zero(" in kernel.source and "_init" not in kernel.source
    assert ("else:" in kernel.source) == (k_tile < 20)  # one panel: always the zero-start call
    x = w.random_inputs(np.random.default_rng(0))
    (out,) = w.empty_outputs()
    out[...] = np.nan
    kernel(*x, out)
    w.check([out], w.reference(*x))


@pytest.mark.parametrize("m", [4, 3])
def test_zero_start_kernel_overwrites_its_tile(m):
    mk = ps.intrinsics.get("matmul_4x16").meta["zero_start_variant"](None if m == 4 else m)()
    rng = np.random.default_rng(1)
    A = rng.uniform(-1, 1, m * 5).astype("float32")
    B = rng.uniform(-1, 1, 5 * 16).astype("float32")
    C = np.full(m * 16 + 3, np.nan, dtype="float32")
    mk(C, 0, 16, 1, A, 0, 5, 1, B, 0, 1, 16, 5)
    np.testing.assert_allclose(C[: m * 16].reshape(m, 16), A.reshape(m, 5) @ B.reshape(5, 16), rtol=1e-5, atol=1e-5)
    assert np.isnan(C[m * 16 :]).all(), "the kernel wrote outside its tile"


def test_tensorize_marks_the_block_and_replays():
    w, sch, k1 = tiled()
    blk = sch.tensorize(k1, "matmul_6x16")
    node = sch.get(blk)
    assert node.annotation("tensorize") == "matmul_6x16"
    assert node.annotation("tensorize_axes") == ("i_1", "j_1", "k_1")
    again = ps.InstructionLog.from_json(sch.instructions.to_json()).apply(ps.Schedule(w.func))
    assert again.mod == sch.mod


@pytest.mark.parametrize(
    "variant, message",
    [
        ("shape", "loop i_1 has extent 4, axis v_i needs 6"),
        ("init", "has an init that intrinsic test_mm_6x16_accumulate_only cannot perform"),
        ("transposed", "not contiguous along loop"),
        ("reduction", "operator add vs max"),
    ],
)
def test_tensorize_refuses_blocks_that_do_not_match(variant, message):
    A = ps.placeholder((12, 20), name="A")
    r = ps.reduce_axis(20, name="k")
    if variant == "transposed":
        B = ps.placeholder((32, 20), name="B")
        C = ps.compute((12, 32), lambda i, j: ps.sum(A[i, r] * B[j, r], axis=r), name="C")
    elif variant == "reduction":
        B = ps.placeholder((20, 32), name="B")
        C = ps.compute((12, 32), lambda i, j: ps.max(A[i, r] * B[r, j], axis=r), name="C")
    else:
        B = ps.placeholder((20, 32), name="B")
        C = ps.compute((12, 32), lambda i, j: ps.sum(A[i, r] * B[r, j], axis=r), name="C")
    sch = ps.Schedule(ps.create_func([A, B, C]))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4 if variant == "shape" else 6])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    if variant != "init":
        sch.decompose_reduction(c, k)
    intrin = "matmul_6x16"
    if variant == "init":  # the shipped kernels start from zero themselves: one that cannot
        six = ps.intrinsics.get("matmul_6x16")
        meta = {k: v for k, v in six.meta.items() if k not in ("zero_start_variant", "kind")}
        intrin = "test_mm_6x16_accumulate_only"
        ps.intrinsics.register(intrin, six.description, six.implementation, panel_axis="v_k",
                               unit_stride=six.unit_stride, meta=meta, replace=True)
    try:
        with pytest.raises(ps.ScheduleError) as info:
            sch.tensorize(sch.blockize(k), intrin)
    finally:  # the design space offers every registered matmul kernel: leave none behind
        ps.intrinsics.unregister("test_mm_6x16_accumulate_only")
    assert message in str(info.value), str(info.value)
    assert "tensorize" not in str(sch.mod)


def test_register_a_user_intrinsic():
    desc = ps.intrinsics.matmul.matmul_description(2, 8)
    intrin = ps.intrinsics.register(
        "test_mm_2x8",
        desc,
        ps.intrinsics.get("matmul_4x8").implementation,
        panel_axis="v_k",
        unit_stride={"C": ("v_j",), "B": ("v_j",)},
        replace=True,
    )
    assert "test_mm_2x8" in ps.intrinsics.list() and intrin.operands()[0] == ("C", ("v_i", "v_j"))
    with pytest.raises(ps.ProbschedError, match="already registered"):
        ps.intrinsics.register("test_mm_2x8", desc, intrin.implementation)
    with pytest.raises(ps.ProbschedError, match="no intrinsic named"):
        ps.intrinsics.get("nope")


def test_matching_is_memoized_per_structure_and_intrinsic_object():
    # two schedules built apart give structurally equal tiles: the second match is served
    # from the memo, and must answer exactly as the matcher does (both ways, as copies)
    from probsched.schedule import tensorize as tz

    from probsched.schedule import schedule as schedule_mod

    w, sch, k1 = tiled()
    blk = sch.get(sch.blockize(k1))
    schedule_mod._TRANSITIONS.clear()  # else the second schedule gets the first's very objects
    w2, sch2, k2 = tiled()
    twin = sch2.get(sch2.blockize(k2))
    assert twin is not blk and twin == blk
    six = ps.intrinsics.get("matmul_6x16")
    axes, bufmap = tz.match_intrinsic(blk, six)
    axes.append("mutated")
    bufmap.clear()
    assert (twin, six.name, id(six), ()) in tz._MATCHES  # outer loops: none given
    assert tz.match_intrinsic(twin, six) == (["i_1", "j_1", "k_1"], tz._match_intrinsic(twin, six)[1])
    four = ps.intrinsics.get("matmul_4x16")
    for b in (blk, twin):
        with pytest.raises(ps.ScheduleError, match="loop i_1 has extent 6, axis v_i needs 4"):
            tz.match_intrinsic(b, four)
    # an intrinsic registered again under the same name is a new object: matched afresh
    name = "test_mm_memo"
    ps.intrinsics.register(name, ps.intrinsics.matmul.matmul_description(4, 16), four.implementation,
                           panel_axis="v_k", unit_stride=four.unit_stride, replace=True)
    with pytest.raises(ps.ScheduleError, match="axis v_i needs 4"):
        tz.match_intrinsic(blk, ps.intrinsics.get(name))
    ps.intrinsics.register(name, ps.intrinsics.matmul.matmul_description(6, 16), six.implementation,
                           panel_axis="v_k", unit_stride=six.unit_stride, replace=True)
    assert tz.match_intrinsic(blk, ps.intrinsics.get(name))[0] == ["i_1", "j_1", "k_1"]
