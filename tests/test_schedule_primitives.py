"""Each schedule primitive: what it does (checked with the IR interpreter) and every precondition."""

import numpy as np
import pytest

import probsched as ps
from probsched.ir.interpreter import evaluate
from probsched.lowering import lower


def matmul_relu(n=10, m=9, k=12):
    A = ps.placeholder((n, k), name="A")
    B = ps.placeholder((k, m), name="B")
    r = ps.reduce_axis(k, name="k")
    C = ps.compute((n, m), lambda i, j: ps.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = ps.compute((n, m), lambda i, j: ps.maximum(C[i, j], 0.0), name="D")
    return ps.create_func([A, B, D], name="mm_relu")


def pad_conv1d():
    X = ps.placeholder((12, 3), name="X")
    W = ps.placeholder((3, 3, 4), name="W")
    P = ps.compute((14, 3), lambda l, c: ps.if_then_else(ps.all_of(l >= 1, l < 13), X[l - 1, c], 0.0), name="P")
    rl = ps.reduce_axis(3, name="rl")
    rc = ps.reduce_axis(3, name="rc")
    O = ps.compute((6, 4), lambda l, co: ps.sum(P[l * 2 + rl, rc] * W[rl, rc, co], axis=[rl, rc]), name="O")
    return ps.create_func([X, W, O], name="conv1d")


def conv1d_rows_in_pairs():
    """pad_conv1d's schedule with O's output rows split by 2: (schedule, (l0, l1, co, rl, rc))."""
    sch = ps.Schedule(pad_conv1d())
    l, co, rl, rc = sch.get_loops(sch.get_block("O"))
    l0, l1 = sch.split(l, [None, 2])
    return sch, (l0, l1, co, rl, rc)


def reference_of(func, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    inputs = [
        (rng.uniform(0.5, 1.5, b.shape) * rng.choice([-1, 1], b.shape)).astype(b.dtype) for b in func.input_buffers()
    ]
    return inputs, evaluate(func, *inputs)


def assert_same(sch):
    """The schedule computes what the unscheduled function does, as written and as compiled:
    lowered, with each compacted local buffer living one iteration of its loop."""
    inputs, expected = reference_of(sch.func)
    as_written = evaluate(sch.mod, *inputs)
    as_compiled = evaluate(lower(sch.mod), *inputs, lowered=True)
    for what, got in (("scheduled", as_written), ("lowered", as_compiled)):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=what)


def refuses(sch, fn, *fragments):
    before_mod, before_len = sch.mod, len(sch.instructions)
    with pytest.raises(ps.ScheduleError) as info:
        fn()
    for f in fragments:
        assert f in str(info.value), str(info.value)
    assert sch.mod is before_mod and len(sch.instructions) == before_len
    return str(info.value)


# ----------------------------------------------------------------------------- handles


def test_handles_and_queries():
    sch = ps.Schedule(matmul_relu())
    c, d = sch.get_block("C"), sch.get_block("D")
    assert [l.name for l in sch.get_loops(c)] == ["i", "j", "k"]
    assert sch.get_producers(d) == [c]
    assert sch.get_consumers(c) == [d]
    assert sch.get_child_blocks() == [c, d]
    assert sch.get_child_blocks(sch.get_loops(d)[0]) == [d]
    refuses(sch, lambda: sch.get_block("nope"), "get_block", "nope", "C", "D")


def test_copy_is_independent():
    sch = ps.Schedule(matmul_relu())
    other = sch.copy()
    sch.split(sch.get_loops(sch.get_block("C"))[0], [None, 4])
    assert other.mod == other.func and sch.mod != sch.func
    assert len(other.instructions) == 0


def test_replaying_primitives_meets_the_programs_it_made_before():
    # the search replays the same primitives on the same programs thousands of times: the
    # second schedule gets the first's very objects (and so compares by identity next)
    from probsched.schedule import schedule as schedule_mod

    func = matmul_relu()

    def steps(sch):
        c = sch.get_block("C")
        i, j, k = sch.get_loops(c)
        i0, i1 = sch.split(i, [None, 5])
        sch.reorder(i0, j, k, i1)
        sch.annotate(i0, "pragma_auto_unroll_max_step", 16)
        sch.annotate(j, "note", [1, 2])  # an unhashable value: applied, not memoized
        d = sch.get_block("D")
        sch.reverse_compute_at(d, sch.get_loops(c)[0])
        return sch.sample_compute_location(c, decision="root")

    first, second = ps.Schedule(func), ps.Schedule(func)
    steps(first)
    steps(second)
    # the unhashable annotation made a new program (equal to the first's, not the same
    # object: the memo goes by identity), so the primitive after it ran again
    assert second.mod == first.mod and second.mod is not first.mod
    fourth = ps.Schedule(func)
    c = fourth.get_block("C")
    i0, _ = fourth.split(fourth.get_loops(c)[0], [None, 5])
    fourth.annotate(i0, "pragma_auto_unroll_max_step", 16)
    again = ps.Schedule(func)
    c = again.get_block("C")
    i0, _ = again.split(again.get_loops(c)[0], [None, 5])
    again.annotate(i0, "pragma_auto_unroll_max_step", 16)
    assert again.mod is fourth.mod  # every step hashable: the very same objects
    assert second.get(second.get_loop("j")).annotation("note") in ([1, 2], (1, 2))
    schedule_mod._TRANSITIONS.clear()
    third = ps.Schedule(func)
    steps(third)
    assert third.mod == first.mod and third.mod is not first.mod
    assert str(third.instructions) == str(first.instructions)
    assert_same(third)
    # a failing primitive is not memoized: it fails again, and leaves the schedule as it was
    k = third.get_loops(third.get_block("C"))[2]
    for _ in range(2):
        refuses(third, lambda: third.parallel(k), "parallel", "reduction")


# ----------------------------------------------------------------------------- split / fuse / reorder


def test_split_divisible_and_guarded():
    sch = ps.Schedule(matmul_relu())
    i, j, k = sch.get_loops(sch.get_block("C"))
    outs = sch.split(i, [None, 4])  # 10 = 3 * 4 with a guard
    assert [sch.get(l).extent for l in outs] == [3, 4]
    assert "i_0 * 4 + i_1 < 10" in str(sch.mod)
    sch.split(k, [2, 3, 2])  # 12 = 2 * 3 * 2: no guard
    assert "k_0 * 6 + k_1 * 2 + k_2" in str(sch.mod) and "< 12" not in str(sch.mod)
    assert_same(sch)


def test_split_preconditions():
    sch = ps.Schedule(matmul_relu())
    i = sch.get_loops(sch.get_block("C"))[0]
    refuses(sch, lambda: sch.split(i, [4]), "split", "loop i", "at least two")
    refuses(sch, lambda: sch.split(i, [None, None]), "at most one factor may be None")
    refuses(sch, lambda: sch.split(i, [0, None]), "factor 0")
    refuses(sch, lambda: sch.split(i, [2, 4]), "multiply to 8, less than the extent 10")
    refuses(sch, lambda: sch.split("zz", [2, None]), "loop zz does not exist")


def test_fuse_and_preconditions():
    sch = ps.Schedule(matmul_relu())
    i, j, k = sch.get_loops(sch.get_block("C"))
    f = sch.fuse(i, j)
    assert sch.get(f).extent == 90
    assert_same(sch)
    i2, j2 = sch.get_loops(sch.get_block("D"))
    refuses(sch, lambda: sch.fuse(i2), "at least two loops")
    refuses(sch, lambda: sch.fuse(f, j2), "not directly nested")


def test_reorder_and_preconditions():
    sch = ps.Schedule(matmul_relu())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(k, i, j)
    assert [l.name for l in sch.get_loops(sch.get_block("C"))] == ["k", "i", "j"]
    assert_same(sch)
    i2, j2 = sch.get_loops(sch.get_block("D"))
    refuses(sch, lambda: sch.reorder(i, i), "listed twice")
    refuses(sch, lambda: sch.reorder(i, j2), "not in one loop nest")
    # an imperfect nest: after cache_write + reverse_compute_at, loop j holds two nests
    sch2 = ps.Schedule(matmul_relu())
    i, j, k = sch2.get_loops(sch2.get_block("C"))
    cw = sch2.cache_write(sch2.get_block("C"), 0, "local")
    sch2.reverse_compute_at(cw, j)
    refuses(sch2, lambda: sch2.reorder(k, i), "not perfectly nested")


def test_reorder_refuses_to_swap_pieces_of_a_loop_fusing_spatial_and_reduction_iterators():
    # Found by the invariant walks: after fuse(i, k) and a split that does not fall on k's
    # extent, swapping the pieces visits k = 3 of row 1 first, and the init (k == 0) later
    # discards the partial sum.
    sch = ps.Schedule(matmul_relu(n=4, m=3, k=5))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k, j)
    ik = sch.fuse(i, k)
    outer, inner = sch.split(ik, [5, 4])
    refuses(sch, lambda: sch.reorder(inner, outer), "both drive iterator", "spatial and reduction iterators at once",
            "block C")
    sch.reorder(j, outer, inner)  # j drives no iterator the pieces drive: the order per element is kept
    assert_same(sch)
    # pieces of a pure reduction loop still swap freely (every element starts from k = 0)
    sch2 = ps.Schedule(matmul_relu(n=4, m=3, k=6))
    k0, k1 = sch2.split(sch2.get_loops(sch2.get_block("C"))[2], [2, 3])
    sch2.reorder(k1, k0)
    assert_same(sch2)


# ----------------------------------------------------------------------------- loop kinds


def test_parallel_vectorize_unroll():
    sch = ps.Schedule(matmul_relu())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.reorder(i, k, j)
    sch.parallel(i)
    sch.vectorize(j)
    sch.unroll(k)
    kinds = [sch.get(l).kind for l in (i, k, j)]
    assert kinds == ["parallel", "unrolled", "vectorized"]
    assert_same(sch)


def test_loop_kind_preconditions():
    sch = ps.Schedule(matmul_relu())
    i, j, k = sch.get_loops(sch.get_block("C"))
    refuses(sch, lambda: sch.parallel(k), "parallel", "loop k", "reduction iterator of block C")
    refuses(sch, lambda: sch.vectorize(i), "vectorize", "not innermost")
    refuses(sch, lambda: sch.vectorize(k), "reduction iterator")
    # the checks alone (what the parallelizing postprocessor asks) agree and change nothing
    from probsched.schedule.loops import set_kind

    assert set_kind(sch.mod, "i", "parallel", check_only=True) is sch.mod
    for loop, kind, message in (("k", "parallel", "reduction iterator of block C"), ("i", "vectorized", "not innermost")):
        with pytest.raises(ps.ScheduleError, match=message):
            set_kind(sch.mod, loop, kind, check_only=True)


def test_annotate_and_unannotate():
    sch = ps.Schedule(matmul_relu())
    c = sch.get_block("C")
    i = sch.get_loops(c)[0]
    sch.annotate(i, "pragma_auto_unroll_max_step", 64)
    sch.annotate(c, "meta_schedule.tiling_structure", "SSRSRS")
    assert sch.get(i).annotation("pragma_auto_unroll_max_step") == 64
    assert sch.get(c).annotation("meta_schedule.tiling_structure") == "SSRSRS"
    sch.unannotate(i, "pragma_auto_unroll_max_step")
    assert sch.get(i).annotations == ()
    refuses(sch, lambda: sch.unannotate(i, "nope"), "unannotate", "no annotation 'nope'")


# ----------------------------------------------------------------------------- compute location


def test_compute_at_shrinks_the_producer_region():
    sch, (l0, l1, co, rl, rc) = conv1d_rows_in_pairs()
    sch.compute_at(sch.get_block("P"), l0)
    # one l0 iteration needs rows l0*4 .. l0*4+4 of P (two outputs, stride 2, kernel 3)
    assert f'block("P", v_l=S(14, {l0.name} * 4 + ax0)' in str(sch.mod)
    assert sch.get(sch.get_loops(sch.get_block("P"))[1]).extent == 5
    assert_same(sch)


def test_compute_at_shrinks_the_region_a_blockized_consumer_reads():
    # a tensorized consumer reads in its inner block's iterators (v_l = v_l_o + l_1): the
    # region must still be what one iteration reads, not the whole of P (which every
    # iteration of a parallel loop would then recompute)
    sch, (l0, l1, co, rl, rc) = conv1d_rows_in_pairs()
    sch.reorder(l0, co, rl, rc, l1)
    sch.blockize(l1)
    sch.compute_at(sch.get_block("P"), l0)
    assert f'block("P", v_l=S(14, {l0.name} * 4 + ax0)' in str(sch.mod)
    assert sch.get(sch.get_loops(sch.get_block("P"))[1]).extent == 5
    assert_same(sch)


def test_compute_at_preconditions():
    sch = ps.Schedule(matmul_relu())
    c, d = sch.get_block("C"), sch.get_block("D")
    i, j, k = sch.get_loops(c)
    refuses(sch, lambda: sch.compute_at(d, i), "compute_at", "block D has no consumer")
    refuses(sch, lambda: sch.compute_at(c, k), "already under loop k")
    sch2 = ps.Schedule(pad_conv1d())
    p, o = sch2.get_block("P"), sch2.get_block("O")
    p_loop, o_loop = sch2.get_loops(p)[0], sch2.get_loops(o)[0]
    refuses(sch2, lambda: sch2.compute_at(p, p_loop), "already under")
    refuses(sch2, lambda: sch2.reverse_compute_at(o, p_loop), "reads P[v_l * 2 + v_rl, v_rc]", "distinct spatial iterator")
    # the producer must come first: O's loop precedes nothing that P could be moved under
    refuses(sch2, lambda: sch2.compute_at(o, p_loop), "block O has no consumer")


def test_reverse_compute_at_and_preconditions():
    sch = ps.Schedule(matmul_relu())
    c, d = sch.get_block("C"), sch.get_block("D")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    sch.reverse_compute_at(d, i0)
    assert [l.name for l in sch.get_loops(d)][0] == "i_0"
    assert_same(sch)
    sch2 = ps.Schedule(matmul_relu())
    c, d = sch2.get_block("C"), sch2.get_block("D")
    i, j, k = sch2.get_loops(c)
    d_loop = sch2.get_loops(d)[0]
    refuses(sch2, lambda: sch2.reverse_compute_at(d, k), "reverse_compute_at", "loop k", "reduction iterator")
    refuses(sch2, lambda: sch2.reverse_compute_at(c, d_loop), "comes before loop")


def _strided_write_cache():
    """matmul_relu (8 rows) with i = 2 * i0 + i1, i1 outer, and C's local write cache:
    one iteration of i1 computes every other row. Returns (sch, cache, i0, i1)."""
    sch = ps.Schedule(matmul_relu(n=8))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [4, 2])
    sch.reorder(i1, i0)
    return sch, sch.cache_write(c, 0, "local"), i0, i1


def test_reverse_compute_at_refuses_a_strided_tile():
    """A tile whose inner split part runs outside (i = 2 * i0 + i1, i1 outer) writes every
    other row of its write cache: a copy-out over the box would store rows no iteration of
    the loop computed (compiled, with the cache compacted per tile: garbage)."""
    sch, cache, i0, i1 = _strided_write_cache()
    refuses(sch, lambda: sch.reverse_compute_at(cache, i1), "reverse_compute_at", "strided tile", "holes")
    sch.reverse_compute_at(cache, i0)  # one row per iteration: dense
    assert_same(sch)
    inputs, expected = reference_of(sch.func)
    out = np.full(expected[0].shape, np.nan, np.float32)
    ps.build(sch)(*inputs, out)
    np.testing.assert_allclose(out, expected[0], rtol=1e-5, atol=1e-5)


def test_a_strided_tile_copy_out_interpreted_with_local_lifetimes():
    """The interpreted twin of the test above. Over the strided tile's box, an iteration of
    i1 copies out rows it did not compute: with a full-size write cache a later iteration
    copies them again, computed (the final output is right); lowered, the cache holds this
    iteration's tile only and those rows of it are NaN. reverse_compute_at must refuse, or
    produce a program that is right lowered."""
    sch, cache, i0, i1 = _strided_write_cache()
    try:
        sch.reverse_compute_at(cache, i1)
    except ps.ScheduleError:  # refused: the tile has holes (dense_box)
        sch.reverse_compute_at(cache, i0)
    assert_same(sch)


def test_a_copy_out_under_a_predicated_split_copies_what_was_computed():
    """Splitting an extent-1 loop (n = 3 * n_0 + n_1, where(n < 1)) leaves iterations n_1 = 1, 2
    that compute nothing. The copy-out moved under h used to be bound to row 0 in each (the
    region's start dropped because its extent equals the dimension): with a full-size cache
    that is row h again, right; lowered, the cache holds one row and the copy stored the
    previous iteration's row (compiled, every row of B became the last). Now it keeps the
    start, n_0 * 3 + n_1, under the guard n < 1."""
    A = ps.placeholder((1, 4, 3), name="A")
    B = ps.compute((1, 4, 3), lambda n, h, c: A[n, h, c] * 2.0, name="B")
    sch = ps.Schedule(ps.create_func([A, B]))
    blk = sch.get_block("B")
    n, h, c = sch.get_loops(blk)
    sch.split(n, [None, 3])
    sch.reverse_compute_at(sch.cache_write(blk, 0, "local"), h)
    assert_same(sch)
    a = np.random.default_rng(0).uniform(-1, 1, (1, 4, 3)).astype("float32")
    out = np.full((1, 4, 3), np.nan, np.float32)
    ps.build(sch)(a, out)
    np.testing.assert_allclose(out, a * 2, rtol=1e-6)


def test_reverse_compute_at_refuses_reads_no_one_range_covers():
    """C[i, j] = B[i, j] + B[j, i] under B's row tile i0: iterator i needs B's rows 2 * i0 ..
    (first read) and all of them (second). The whole of i would read rows later iterations
    compute; it used to be taken anyway (redundant and, with a compacted C, wrong)."""
    A = ps.placeholder((8, 8), name="A")
    B = ps.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = ps.compute((8, 8), lambda i, j: B[i, j] + B[j, i], name="C")
    sch = ps.Schedule(ps.create_func([A, C]))
    i, _ = sch.get_loops(sch.get_block("B"))
    i0, _ = sch.split(i, [None, 2])
    c = sch.get_block("C")
    refuses(sch, lambda: sch.reverse_compute_at(c, i0), "reverse_compute_at", "cannot be covered by one range")
    C2 = ps.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")  # one read: the tile's rows
    sch2 = ps.Schedule(ps.create_func([A, C2]))
    i, _ = sch2.get_loops(sch2.get_block("B"))
    i0, _ = sch2.split(i, [None, 2])
    sch2.reverse_compute_at(sch2.get_block("C"), i0)
    assert sch2.get(sch2.get_loops(sch2.get_block("C"))[1]).extent == 2
    assert_same(sch2)


def test_compute_inline_and_preconditions():
    sch = ps.Schedule(pad_conv1d())
    sch.compute_inline(sch.get_block("P"))
    assert "P" not in [b.name for b in sch.mod.allocs]
    assert sch.blocks() == ["O"]
    assert_same(sch)
    sch2 = ps.Schedule(matmul_relu())
    c, d = sch2.get_block("C"), sch2.get_block("D")
    refuses(sch2, lambda: sch2.compute_inline(c), "compute_inline", "block C is a reduction")
    refuses(sch2, lambda: sch2.compute_inline(d), "writes the function output D")
    # the check alone (what compute_locations asks for every candidate) agrees and changes nothing
    from probsched.schedule.compute_location import compute_inline

    func = pad_conv1d()
    assert compute_inline(func, "P", check_only=True) is func
    for block, message in (("C", "block C is a reduction"), ("D", "writes the function output D")):
        with pytest.raises(ps.ScheduleError, match=message):
            compute_inline(sch2.mod, block, check_only=True)


def test_reverse_compute_inline_and_preconditions():
    A = ps.placeholder((6, 5), name="A")
    B = ps.compute((6, 5), lambda i, j: A[i, j] * 2.0, name="B")
    C = ps.compute((6, 5), lambda i, j: ps.exp(B[i, j]) + 1.0, name="C")
    sch = ps.Schedule(ps.create_func([A, C]))
    sch.reverse_compute_inline(sch.get_block("C"))
    assert sch.blocks() == ["B"] and "exp(A[" in str(sch.mod)
    assert_same(sch)
    sch2 = ps.Schedule(matmul_relu())
    c, d = sch2.get_block("C"), sch2.get_block("D")
    refuses(sch2, lambda: sch2.reverse_compute_inline(d), "reverse_compute_inline", "block C is a reduction")
    refuses(sch2, lambda: sch2.reverse_compute_inline(c), "block C is a reduction")
    sch3 = ps.Schedule(ps.create_func([A, C]))
    b = sch3.get_block("B")
    refuses(sch3, lambda: sch3.reverse_compute_inline(b), "block B must read exactly one intermediate buffer")


# ----------------------------------------------------------------------------- caches


def _tiled_matmul_with_write_cache(fuse_tile_loops: bool):
    """matmul_relu with C in 4x3 tiles computed into a local write cache under the tile loop
    (the two tile loops fused into one when asked); returns (sch, C's block, cache, k loop)."""
    sch = ps.Schedule(matmul_relu())
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 3])
    sch.reorder(i0, j0, k, i1, j1)
    cw = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cw, sch.fuse(i0, j0) if fuse_tile_loops else j0)
    return sch, c, cw, k


def test_cache_read_write_with_compaction():
    from probsched.lowering.compact import compact_local_buffers

    sch, c, _, k = _tiled_matmul_with_write_cache(fuse_tile_loops=False)
    cr = sch.cache_read(c, 1, "local")
    sch.compute_at(cr, k)
    assert_same(sch)
    compact = compact_local_buffers(sch.mod)
    assert compact.buffer("C_local").shape == (4, 3)
    assert compact.buffer("B_local").shape == (1, 3)


def test_compaction_sees_through_fused_outer_loops():
    # under the fused tile loop f the tile starts are f // 3 * 4 and f % 3 * 3: not affine
    # in f, but fixed per iteration of it
    from probsched.lowering.compact import compact_local_buffers

    sch, _, cw, _ = _tiled_matmul_with_write_cache(fuse_tile_loops=True)
    assert_same(sch)
    # the write-back copies one tile per iteration, not the whole buffer
    copy_loops = [sch.get(l).extent for l in sch.get_loops(cw)]
    assert copy_loops == [9, 4, 3], copy_loops
    compact = compact_local_buffers(sch.mod)
    assert compact.buffer("C_local").shape == (4, 3)
    inputs, expected = reference_of(sch.func)
    out = [np.empty_like(e) for e in expected]
    ps.build(compact)(*inputs, *out)
    for g, e in zip(out, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_an_intermediate_computed_per_tile_becomes_a_local_tile():
    # the padding computed at the consumer's outer tile loop: lowering keeps only the rows
    # one tile reads (2 outputs x stride 2 + a 3-tap window = 5 rows), as a local buffer
    # per iteration of that loop, and the compiled kernel still computes the convolution
    sch, (l0, l1, co, rl, rc) = conv1d_rows_in_pairs()
    sch.reorder(l0, co, l1, rl, rc)
    sch.compute_at(sch.get_block("P"), l0)
    sch.parallel(l0)
    assert_same(sch)
    lowered = lower(sch.mod)
    p = lowered.buffer("P")
    assert (p.shape, p.scope) == ((5, 3), "local")
    assert dict(lowered.attr("local_alloc_loops")) == {"P": sch.get(l0).name}
    inputs, expected = reference_of(sch.func)
    out = [np.empty_like(e) for e in expected]
    kernel = ps.build(sch)
    kernel(*inputs, *out)
    np.testing.assert_allclose(out[0], expected[0], rtol=1e-5, atol=1e-5)
    assert "local P: float32[5, 3], on the stack" in kernel.source


def test_an_intermediate_computed_at_the_root_stays_whole():
    from probsched.lowering.compact import compact_local_buffers

    sch = ps.Schedule(pad_conv1d())
    assert compact_local_buffers(sch.mod) == sch.mod
    l, co, rl, rc = sch.get_loops(sch.get_block("O"))
    sch.compute_at(sch.get_block("P"), l)
    assert compact_local_buffers(sch.mod, intermediates=False).buffer("P").scope == "global"


def test_cache_preconditions():
    sch = ps.Schedule(matmul_relu())
    c = sch.get_block("C")
    refuses(sch, lambda: sch.cache_read(c, 5, "local"), "cache_read", "block C reads 2 buffer(s)", "read_index 5")
    refuses(sch, lambda: sch.cache_read(c, 0, "shared"), "scope 'shared'")
    refuses(sch, lambda: sch.cache_write(c, 3, "local"), "cache_write", "write_index 3")


# ----------------------------------------------------------------------------- reductions


def test_rfactor_and_preconditions():
    sch = ps.Schedule(matmul_relu())
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    k0, k1 = sch.split(k, [None, 5])  # 12 = 3 * 5 with a guard: one slot is partly empty
    rf = sch.rfactor(k1, factor_axis=0)
    assert sch.mod.buffer("C_rf").shape == (5, 10, 9)
    sch.reorder(k1, sch.get_loops(rf)[0])
    sch.parallel(k1)
    assert_same(sch)
    sch2 = ps.Schedule(matmul_relu())
    i, j, k = sch2.get_loops(sch2.get_block("C"))
    refuses(sch2, lambda: sch2.rfactor(i), "rfactor", "loop i must drive exactly one reduction iterator")
    d_loop = sch2.get_loops(sch2.get_block("D"))[0]
    refuses(sch2, lambda: sch2.rfactor(d_loop), "block D is not a reduction")


def test_rfactor_slot_without_iterations_is_skipped():
    sch = ps.Schedule(matmul_relu())
    k = sch.get_loops(sch.get_block("C"))[2]
    k0, k1 = sch.split(k, [5, 5])  # slots k_0 = 3, 4 never run (12 < 15)
    sch.rfactor(k0)
    assert_same(sch)



def with_guard_on_c(func, guard):
    """``func`` with ``guard(block C)`` added to the predicate of block C."""
    from probsched.ir.expr import all_of
    from probsched.ir.stmt import map_blocks

    add = lambda b: b.replace(predicate=all_of(b.predicate, guard(b))) if b.name == "C" else b  # noqa: E731
    return func.replace(body=map_blocks(func.body, add))


@pytest.mark.parametrize("primitive", ["rfactor", "decompose_reduction"])
def test_a_guard_on_the_reduction_iterator_reads_its_binding_where_the_iterator_is_gone(primitive):
    """The rf block has new reduction iterators, the write-back and a decomposed init none of
    C's: a guard on C's reduction iterator (a sum over k < 7 only) reads its binding there."""
    sch = ps.Schedule(with_guard_on_c(matmul_relu(), lambda c: c.iters[2].var < 7))
    c = sch.get_block("C")
    k0, k1 = sch.split(sch.get_loops(c)[2], [None, 4])
    if primitive == "rfactor":
        sch.rfactor(k0)
    else:
        sch.decompose_reduction(c, k0)
    inputs, expected = reference_of(sch.func)
    assert not np.isnan(expected[0]).any()
    assert_same(sch)


def test_rfactor_refuses_a_guard_it_cannot_restate_on_the_write_back():
    sch = ps.Schedule(matmul_relu())
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [5, 2])
    from probsched.ir.expr import Var

    # the sum's length depends on the tile of rows, a loop the write-back does not have
    sch2 = ps.Schedule(with_guard_on_c(sch.mod, lambda c: c.iters[2].var < Var("i_0") * 2 + 4))
    k = sch2.get_loops(sch2.get_block("C"))[-1]
    refuses(sch2, lambda: sch2.rfactor(k), "rfactor", "guard", "of block C", "i_0")

def test_reduction_loops_of_extent_one_do_not_count_as_driving():
    """A reduction tile of extent 1 outside the spatial tile runs once: the init may go below
    it and a write cache of the spatial tile is final there (a register tile of a 3x3 kernel
    tiled (1, 3))."""
    sch = ps.Schedule(matmul_relu(n=8, m=8, k=12))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    k0, k1 = sch.split(k, [1, 12])
    i0, i1 = sch.split(i, [2, 4])
    sch.reorder(i0, j, k0, i1, k1)
    cache = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(cache, j)  # k0 (extent 1) encloses j's body: still final
    init = sch.decompose_reduction(c, k1)  # below k0
    assert [l.name for l in sch.get_loops(init)][:3] == ["i_0", "j", "k_0"]
    assert_same(sch)
    inputs, expected = reference_of(sch.func)
    out = np.full(expected[0].shape, np.nan, np.float32)
    ps.build(sch)(*inputs, out)
    np.testing.assert_allclose(out, expected[0], rtol=1e-5, atol=1e-5)
    sch2 = ps.Schedule(matmul_relu(n=8, m=8, k=12))
    c2 = sch2.get_block("C")
    i, j, k = sch2.get_loops(c2)
    k0, k1 = sch2.split(k, [3, 4])
    sch2.reorder(i, k0, j, k1)
    refuses(sch2, lambda: sch2.decompose_reduction(c2, k1), "loop k_0 above k_1 drives a reduction iterator")
    cache2 = sch2.cache_write(c2, 0, "local")
    refuses(sch2, lambda: sch2.reverse_compute_at(cache2, j), "drives reduction iterator")


def test_decompose_reduction_and_preconditions():
    sch = ps.Schedule(matmul_relu())
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    init = sch.decompose_reduction(c, k)
    assert sch.get(c).init is None and init.name == "C_init"
    assert_same(sch)
    refuses(sch, lambda: sch.decompose_reduction(c, k), "decompose_reduction", "block C has no init")
    sch2 = ps.Schedule(matmul_relu())
    c = sch2.get_block("C")
    i, j, k = sch2.get_loops(c)
    sch2.reorder(k, i)
    d_loop = sch2.get_loops(sch2.get_block("D"))[0]
    refuses(sch2, lambda: sch2.decompose_reduction(c, i), "loop k above i drives a reduction iterator")
    refuses(sch2, lambda: sch2.decompose_reduction(c, d_loop), "is not around block C")
