"""Program features: shape, finiteness, determinism, and hand-computed values."""

import numpy as np
import pytest

import probsched as ps
from handlers import seed
from probsched.cost_model import features as F
from probsched.lowering import lower

NAMES = F.feature_names()


def value(x: np.ndarray, row: int, name: str) -> float:
    """The raw value of a log2(1 + x)-scaled feature (float32 logs: exact to ~1e-6 relative,
    so large values are rounded to integers)."""
    raw = 2.0 ** float(x[row, NAMES.index(name)]) - 1.0
    return round(raw, 2) if raw < 1000 else float(round(raw))


@pytest.fixture
def matmul():
    A = ps.placeholder((64, 32), name="A")
    B = ps.placeholder((32, 48), name="B")
    k = ps.reduce_axis(32, name="k")
    C = ps.compute((64, 48), lambda i, j: ps.sum(A[i, k] * B[k, j], axis=k), name="C")
    return ps.create_func([A, B, C], name="mm")


def tiled(func, vectorize=False, tensorize=False):
    sch = ps.Schedule(func)
    c = sch.get_block("C")
    i, j, kk = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, kk, i1, j1)
    sch.decompose_reduction(c, kk)
    if vectorize:
        sch.vectorize(j1)
    if tensorize:
        sch.tensorize(kk, "matmul_4x16")
    return sch


def test_names_and_docs():
    docs = F.feature_docs()
    assert len(NAMES) == F.N_FEATURES == len(docs) and 150 <= F.N_FEATURES <= 190
    assert len(set(NAMES)) == len(NAMES)
    assert all(doc and "\n" not in doc for _, doc in docs)


def test_matmul_store_hand_computed(matmul):
    x = F.extract(matmul)
    assert x.shape == (2, F.N_FEATURES) and x.dtype == np.float32
    # row 0: the init C[i, j] = 0 over i, j; row 1: the update over i, j, k
    assert value(x, 0, "nest.outer_prod") == 64 * 48
    assert value(x, 1, "nest.outer_prod") == 64 * 48 * 32
    assert value(x, 1, "nest.reduce_prod") == 32 and value(x, 1, "nest.spatial_prod") == 64 * 48
    assert value(x, 1, "ops.float_fma") == 64 * 48 * 32 and value(x, 1, "ops.float_mul") == 0
    assert value(x, 1, "ops.flops") == 2 * 64 * 48 * 32
    # buf0 = C (written first, read and written), buf1 = A, buf2 = B (same bytes: by name)
    assert value(x, 1, "buf0.acc_rw") == 1 and value(x, 1, "buf1.acc_read") == 1
    assert value(x, 1, "buf0.bytes") == 64 * 48 * 32 * 4 * 2  # a load and a store per execution
    assert value(x, 1, "buf0.unique_bytes") == 64 * 48 * 4
    assert value(x, 1, "buf1.unique_bytes") == 64 * 32 * 4
    # innermost loop k: A[i, k] moves by 1 element, B[k, j] by a row (48), C not at all (-> j)
    assert value(x, 1, "buf0.stride") == 1 and value(x, 1, "buf1.stride") == 1 and value(x, 1, "buf2.stride") == 48
    # reuse: C is invariant in k (32 uses), A in j (48), B in i (64, 48 * 32 iterations apart)
    assert value(x, 1, "buf0.reuse_loop") == 1 and value(x, 1, "buf0.reuse_ct") == 32
    assert value(x, 1, "buf1.reuse_ct") == 48 and value(x, 1, "buf2.reuse_ct") == 64
    assert value(x, 1, "buf2.reuse_dis_iter") == 48 * 32
    # cache lines: A is read in runs of 32 floats (2 lines) per (i, j); B's run hits a line per k
    assert value(x, 1, "buf1.lines") == 64 * 48 * 2 and value(x, 1, "buf2.lines") == 64 * 48 * 32
    assert value(x, 1, "buf3.bytes") == 0  # only three buffers


def test_vectorize_length(matmul):
    x = F.extract(tiled(matmul, vectorize=True))
    assert value(x, 1, "vectorized.len") == 16 and value(x, 1, "vectorized.num") == 1
    assert value(x, 1, "vectorized.pos_inner_spatial") == 1 and value(x, 1, "vectorized.pos_none") == 0
    assert value(x, 0, "vectorized.pos_none") == 1  # the init's inner loop stays serial
    assert value(x, 1, "parallel.num") == 0


def test_tensorized_block_gets_intrinsic_features(matmul):
    x = F.extract(tiled(matmul, tensorize=True))
    assert value(x, 1, "tensorize.flag") == 1 and value(x, 0, "tensorize.flag") == 0
    assert (value(x, 1, "tensorize.m"), value(x, 1, "tensorize.n"), value(x, 1, "tensorize.k")) == (4, 16, 32)
    assert value(x, 1, "tensorize.calls") == (64 // 4) * (48 // 16)
    assert value(x, 1, "tensorize.flops_per_call") == 2 * 4 * 16 * 32
    assert value(x, 1, "tensorize.bytes_per_call") == (4 * 32 + 32 * 16 + 4 * 16) * 4
    assert value(x, 1, "ops.flops") == 2 * 64 * 48 * 32
    # the micro-kernel runs its tile as vectors along N and unrolled along M
    assert value(x, 1, "vectorized.len") == 16 and value(x, 1, "unrolled.len") == 4


def test_compacted_local_buffer_matches_lowered():
    A = ps.placeholder((64,), name="A")
    B = ps.compute((64,), lambda i: A[i] * 2.0, name="B")
    sch = ps.Schedule(ps.create_func([A, B]))
    i0, _ = sch.split(sch.get_loops(sch.get_block("B"))[0], [None, 8])
    sch.compute_at(sch.cache_read(sch.get_block("B"), 0, "local"), i0)
    x = F.extract(sch)
    np.testing.assert_array_equal(x, F.extract(lower(sch.mod)))
    assert value(x, 0, "alloc.is_local") == 1 and value(x, 0, "alloc.bytes") == 8 * 4


def test_intermediate_computed_per_tile_is_featured_as_the_local_tile_lowering_makes():
    A = ps.placeholder((64,), name="A")
    B = ps.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = ps.compute((64,), lambda i: B[i] + 1.0, name="C")
    sch = ps.Schedule(ps.create_func([A, C]))
    i0, _ = sch.split(sch.get_loops(sch.get_block("C"))[0], [None, 8])
    root = F.extract(sch)
    assert value(root, 0, "alloc.is_local") == 0 and value(root, 0, "alloc.bytes") == 64 * 4
    sch.compute_at(sch.get_block("B"), i0)
    x = F.extract(sch)
    assert lower(sch.mod).buffer("B").shape == (8,)
    np.testing.assert_array_equal(x, F.extract(lower(sch.mod)))
    assert value(x, 0, "alloc.is_local") == 1 and value(x, 0, "alloc.bytes") == 8 * 4


def copy_rows(transposed: bool):
    """B[i, j] = A[i, j] over 64 rows of 4 KiB (one page each), row by row or column by column."""
    A = ps.placeholder((64, 1024), name="A")
    B = ps.compute((64, 1024), lambda i, j: A[i, j] * 2.0, name="B")
    sch = ps.Schedule(ps.create_func([A, B]))
    if transposed:
        i, j = sch.get_loops(sch.get_block("B"))
        sch.reorder(j, i)
    return F.extract(sch)


def test_traffic_hand_computed():
    # (float32 logs: large values compare to a relative 1e-6)
    x = copy_rows(transposed=False)
    # registers (512 B): the whole copy (512 KiB) does not fit, one row pair (8 KiB) does
    # not either: only the body (4 + 4 bytes) does, once per execution
    assert value(x, 0, "traffic.reg") == pytest.approx(8 * 64 * 1024, rel=1e-6)
    # L1 (32 KiB): a row of A and of B (2 x 64 lines) fits, 64 times
    assert value(x, 0, "traffic.l1") == pytest.approx(64 * 2 * 64 * 64, rel=1e-6)
    # L2 (1 MiB): the whole 512 KiB fits, brought in once
    assert value(x, 0, "traffic.l2") == pytest.approx(2 * 64 * 1024 * 4, rel=1e-6)
    # TLB (64 pages): the whole copy spans 128 pages; a row pair 2 pages, 64 times
    assert value(x, 0, "traffic.tlb") == pytest.approx(2 * 64, rel=1e-6)


def test_traffic_tlb_sees_a_column_walk():
    row, col = copy_rows(transposed=False), copy_rows(transposed=True)
    # column by column: the inner loop touches 64 pages of A and 64 of B (> 64 entries),
    # so only the body fits: 2 pages per execution
    assert value(col, 0, "traffic.tlb") == pytest.approx(2 * 64 * 1024, rel=1e-6)
    assert value(col, 0, "traffic.tlb") > 100 * value(row, 0, "traffic.tlb")
    # a column of A and B (64 lines each) fits L1: 2 x 64 lines per column, 1024 columns
    assert value(col, 0, "traffic.l1") == pytest.approx(1024 * 2 * 64 * 64, rel=1e-6)


def test_unroll_pragma_is_applied():
    A = ps.placeholder((64, 4), name="A")
    B = ps.compute((64, 4), lambda i, j: A[i, j] * 2.0, name="B")
    sch = ps.Schedule(ps.create_func([A, B]))
    i, _ = sch.get_loops(sch.get_block("B"))
    sch.annotate(i, "pragma_auto_unroll_max_step", 16)
    x = F.extract(sch)
    assert value(x, 0, "unrolled.len") == 4 and value(x, 0, "unroll.max_step") == 16


@pytest.mark.parametrize("name", ["GMM", "C2D", "DEP", "SFM", "NRM", "CBR"])
def test_default_space_candidates_finite_and_deterministic(name):
    w = ps.workloads.small(name)
    space = ps.space.default()
    for i in range(4):
        sch = ps.Schedule(w.func)
        seed(space, i)(sch)
        x = F.extract(sch)
        assert x.ndim == 2 and x.shape[1] == F.N_FEATURES and x.shape[0] >= len(sch.mod.blocks()) - 1
        assert np.isfinite(x).all() and (x >= 0).all()
        again = ps.Schedule(w.func)
        seed(space, i)(again)
        np.testing.assert_array_equal(F.extract(again), x)


def test_extract_batch_and_errors(matmul):
    xs = F.extract_batch([matmul, ps.Schedule(matmul)])
    np.testing.assert_array_equal(xs[0], xs[1])
    with pytest.raises(ps.ProbschedError, match="expected a PrimFunc"):
        F.extract(42)


def test_same_features_before_and_after_unroll_pass():
    from probsched.lowering import apply_unroll_pragmas

    w = ps.workloads.small("C2D")
    for i in range(6):
        sch = ps.Schedule(w.func)
        seed(ps.space.default(), i)(sch)
        np.testing.assert_array_equal(F.extract(sch), F.extract(apply_unroll_pragmas(sch.mod)))
