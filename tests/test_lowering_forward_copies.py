"""Lowering drops a whole copy of an input that changes nothing (probsched.lowering.forward_copies)."""

import ml_dtypes
import numpy as np
import pytest

import probsched as ps
from probsched.ir.interpreter import evaluate
from probsched.lowering import forward_identity_copies, lower


def _scaled(shift=0):
    A = ps.placeholder((4, 64), name="A", dtype="bfloat16")
    B = ps.compute((4, 64 - shift), lambda i, j: ps.cast("float32", A[i, j + shift]) * 2.0, name="B")
    return ps.Schedule(ps.create_func([A, B]))


def _inputs(func):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(b.shape).astype(ml_dtypes.bfloat16 if b.dtype == "bfloat16" else b.dtype)
            for b in func.input_buffers()]


@pytest.mark.parametrize("shift", [0, 8])  # the reader at the copy's indices, or at others
def test_a_root_copy_of_an_input_in_its_own_type_is_not_made_and_computes_the_same(shift):
    sch = _scaled(shift)
    sch.cache_read(sch.get_block("B"), 0, "global")
    func = sch.mod
    out = forward_identity_copies(func)
    assert [b.name for b in func.allocs] == ["A_global"] and not out.allocs
    assert [b.name for b in out.blocks()] == ["B"] and "A_global" not in str(out)
    args = _inputs(func)
    np.testing.assert_array_equal(evaluate(lower(func), *args, lowered=True)[0], evaluate(func, *args)[0])
    np.testing.assert_array_equal(ps.build(func).run(*args)[0], evaluate(func, *args)[0])


def test_copies_that_round_pack_a_tile_or_move_elements_are_kept():
    # float32 rounded to bfloat16 (a network task's copy of a float32 activation): it changes values
    A = ps.placeholder((4, 64), name="A")
    R = ps.compute((4, 64), lambda i, j: ps.cast("bfloat16", A[i, j]), name="R")
    B = ps.compute((4, 64), lambda i, j: ps.cast("float32", R[i, j]) * 2.0, name="B")
    rounding = ps.create_func([A, B])
    assert [(b.name, b.dtype) for b in rounding.allocs] == [("R", "bfloat16")]
    # computed at a loop of its reader: a tile's pack (made local and compact by lowering)
    sch = _scaled()
    copy = sch.cache_read(sch.get_block("B"), 0, "global")
    sch.compute_at(copy, sch.get_loops(sch.get_block("B"))[0])
    packed = sch.mod
    # a stage moving elements (reversed here; a padding or a window alike) is not an alias of its input
    A = ps.placeholder((4, 64), name="A", dtype="bfloat16")
    R = ps.compute((4, 64), lambda i, j: A[i, 63 - j], name="R")
    B = ps.compute((4, 64), lambda i, j: ps.cast("float32", R[i, j]) * 2.0, name="B")
    moved = ps.create_func([A, B])
    assert [b.name for b in moved.allocs] == ["R"]
    for func in (rounding, packed, moved):
        assert forward_identity_copies(func) is func


@pytest.mark.parametrize("dtype", ["bfloat16", "uint8", "float32"])
def test_the_copy_goes_whatever_the_type_it_keeps(dtype):
    A = ps.placeholder((4, 64), name="A", dtype=dtype)
    B = ps.compute((4, 64), lambda i, j: ps.cast("float32", A[i, j]) + 1.0, name="B")
    sch = ps.Schedule(ps.create_func([A, B]))
    sch.cache_read(sch.get_block("B"), 0, "global")
    out = forward_identity_copies(sch.mod)
    assert not out.allocs
    rng = np.random.default_rng(1)
    a = rng.integers(0, 255, (4, 64)).astype(dtype) if dtype == "uint8" else rng.standard_normal((4, 64)).astype(
        ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    np.testing.assert_array_equal(evaluate(lower(sch.mod), a, lowered=True)[0], evaluate(sch.mod, a)[0])
