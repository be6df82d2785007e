"""Front end and IR: lowering, printing, equality, hashing, JSON, and clear errors on bad input."""

import gc
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import probsched as ps
from probsched.ir.expr import Const, Var, substitute
from probsched.ir.interpreter import evaluate


def matmul(n=4, m=3, k=5):
    A = ps.placeholder((n, k), name="A")
    B = ps.placeholder((k, m), name="B")
    r = ps.reduce_axis(k, name="k")
    C = ps.compute((n, m), lambda i, j: ps.sum(A[i, r] * B[r, j], axis=r), name="C")
    return ps.create_func([A, B, C], name="mm")


def test_lowering_makes_one_block_per_stage_with_iterators_and_init():
    f = matmul()
    (blk,) = f.blocks()
    assert [(it.var.name, it.extent, it.kind) for it in blk.iters] == [("v_i", 4, "S"), ("v_j", 3, "S"), ("v_k", 5, "R")]
    assert blk.init is not None and blk.init.value == Const(0.0, "float32")
    assert [b.name for b, _ in blk.reads()] == ["C", "A", "B"]
    assert [l.name for l in f.loops()] == ["i", "j", "k"]


def test_multi_stage_softmax_like_function_and_intermediates():
    A = ps.placeholder((3, 4), name="A")
    k = ps.reduce_axis(4, name="k")
    mx = ps.compute((3,), lambda i: ps.max(A[i, k], axis=k), name="mx")
    e = ps.compute((3, 4), lambda i, j: ps.exp(A[i, j] - mx[i]), name="e")
    f = ps.create_func([A, e])
    assert [b.name for b in f.allocs] == ["mx"] and [b.name for b in f.blocks()] == ["mx", "e"]
    a = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    (out,) = evaluate(f, a)
    np.testing.assert_allclose(out, np.exp(a - a.max(1, keepdims=True)), rtol=1e-6)


def test_reduce_axis_with_offset_and_where():
    A = ps.placeholder((6,), name="A")
    k = ps.reduce_axis((2, 5), name="k")
    S = ps.compute((1,), lambda i: ps.sum(A[k], axis=k, where=k < 4), name="S")
    a = np.arange(1, 7, dtype="float32")
    (out,) = evaluate(ps.create_func([A, S]), a)
    assert out[0] == a[2] + a[3]


def test_print_equality_hash_and_json_round_trip():
    f, g = matmul(), matmul()
    assert f == g and hash(f) == hash(g) and f.structural_hash() == g.structural_hash()
    assert f != matmul(4, 3, 6) and f.structural_hash() != matmul(4, 3, 6).structural_hash()
    text = str(f)
    assert text.startswith("def mm(A: float32[4, 5], B: float32[5, 3], C: float32[4, 3]):")
    assert 'with block("C", v_i=S(4, i), v_j=S(3, j), v_k=R(5, k)):' in text
    back = ps.PrimFunc.from_json(f.to_json())
    assert back == f and str(back) == text


@settings(max_examples=60, deadline=None)
@given(
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True, width=32),
        st.integers(-(2**40), 2**40),
    )
)
def test_constants_round_trip_exactly(value):
    A = ps.placeholder((2,), name="A")
    B = ps.compute((2,), lambda i: A[i] + ps.const(value, "float32" if isinstance(value, float) else "int64"), name="B")
    f = ps.create_func([A, B])
    back = ps.PrimFunc.from_json(f.to_json())
    assert back == f and back.structural_hash() == f.structural_hash()


def test_expression_folding_and_substitution():
    i, j = Var("i"), Var("j")
    assert str(i * 1 + 0) == "i"
    assert str((i + 2) * 3) == "(i + 2) * 3"
    assert str(substitute(i * 4 + j, {"i": Var("a") + 1})) == "(a + 1) * 4 + j"
    with pytest.raises(ps.IRError, match="use '//'"):
        i / 2
    with pytest.raises(ps.IRError, match="truth value"):
        bool(i < 3)
    nan = ps.const(math.nan)
    assert nan == ps.const(math.nan)  # structural identity, not IEEE equality


def test_intermediate_tensors_stay_alive():
    def padded(x):
        return ps.compute((6,), lambda i: ps.if_then_else(ps.all_of(i >= 1, i < 5), x[i - 1], 0.0), name="P")

    X = ps.placeholder((4,), name="X")
    Y = ps.compute((6,), lambda i: padded(X)[i] * 2.0, name="Y")  # the pad tensor is a temporary
    gc.collect()
    f = ps.create_func([X, Y])
    assert [b.name for b in f.blocks()] == ["P", "Y"]


def test_axis_names():
    A = ps.placeholder((2, 3), name="A")
    B = ps.compute((2, 3), lambda *idx: A[idx] + 1.0, name="B", axis_names=["row", "col"])
    assert [l.name for l in ps.create_func([A, B]).loops()] == ["row", "col"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda A, k: ps.compute((4,), lambda i: A[i], name="B"), "has 2 dimensions"),
        (lambda A, k: ps.compute((4,), lambda i: ps.sum(A[i, k]), name="B"), "needs its axis"),
        (lambda A, k: ps.compute((4,), lambda i: A[i, k], name="B"), "variable(s) ['k'] are used but are not axes"),
        (lambda A, k: ps.compute((4,), lambda i, j: A[i, j], name="B"), "takes 2 arguments"),
        (lambda A, k: ps.compute((4,), lambda i: ps.sum(A[i, k], axis=k) * 2.0, name="B"), "whole body"),
        (lambda A, k: ps.compute((4,), lambda i: A[i, k * 0.5], name="B"), "not an integer"),
        (lambda A, k: ps.placeholder((2, 2), "float16", name="H"), "dtype 'float16'"),
        (lambda A, k: ps.placeholder((2, 0), name="Z"), "non-positive"),
        (lambda A, k: ps.reduce_axis((3, 3), name="r"), "empty domain"),
        (lambda A, k: ps.compute((4,), lambda i: A[i, 0] < 1.0, name="B"), "boolean"),
    ],
)
def test_bad_front_end_input_is_one_clear_error(make, message):
    A = ps.placeholder((4, 5), name="A")
    k = ps.reduce_axis(5, name="k")
    with pytest.raises((ps.FrontEndError, ps.IRError)) as info:
        t = make(A, k)
        ps.create_func([A, t])
    assert message in str(info.value)


def test_create_func_errors():
    A = ps.placeholder((4,), name="A")
    B = ps.compute((4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(ps.FrontEndError, match="placeholder A is read by B but is not in the list"):
        ps.create_func([B])
    A2 = ps.placeholder((4,), name="A")
    C = ps.compute((4,), lambda i: A2[i] + B[i], name="C")
    with pytest.raises(ps.FrontEndError, match="named"):
        ps.create_func([A, A2, C])
    with pytest.raises(ps.FrontEndError, match="no computed tensor"):
        ps.create_func([A])


def test_bad_json():
    with pytest.raises(ps.IRError, match="not valid JSON"):
        ps.PrimFunc.from_json("{nope")
    with pytest.raises(ps.IRError, match="format"):
        ps.PrimFunc.from_json('{"format": 99}')
