"""8-bit integer programs: the IR types, saturating conversions compiled against the
interpreter and numpy, the int8 precision rewrite, workloads, references and checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import probsched as ps
import probsched.workloads as wl
from probsched.errors import IRError, ProbschedError
from probsched.ir.dtypes import saturate
from probsched.ir.interpreter import evaluate
from probsched.precision import convert, precision_of


def requantize_program(n: int):
    """``Q = uint8(X * s + z)``, ``R = int8(I // 4)``: saturating conversions of a float and of
    an int32 to 8 bits, and int32 arithmetic on 8-bit values (``W = u * s8``)."""
    X = ps.placeholder((n,), "float32", name="X")
    S = ps.placeholder((n,), "float32", name="S")
    I = ps.placeholder((n,), "int32", name="I")
    U = ps.placeholder((n,), "uint8", name="U")
    V = ps.placeholder((n,), "int8", name="V")
    Q = ps.compute((n,), lambda i: X[i] * S[i] + 3.0, name="Q", dtype="uint8")
    R = ps.compute((n,), lambda i: I[i] // 4, name="R", dtype="int8")
    W = ps.compute((n,), lambda i: U[i] * V[i] - 7, name="W")
    return ps.create_func([X, S, I, U, V, Q, R, W], name="requantize")


@pytest.fixture(scope="module")
def requantize_kernel():
    return ps.build(requantize_program(64))


ties = st.sampled_from([0.5, 1.5, 2.5, -0.5, 254.5, 255.5, 127.5, -128.5, 1e9, -1e9, 0.0])
floats = st.floats(-400, 400, allow_nan=False, width=32)


@settings(max_examples=25, deadline=None)
@given(
    xs=st.lists(st.one_of(floats, ties), min_size=64, max_size=64),
    ints=st.lists(st.integers(-2**31, 2**31 - 1), min_size=64, max_size=64),
    us=st.lists(st.integers(0, 255), min_size=64, max_size=64),
    vs=st.lists(st.integers(-128, 127), min_size=64, max_size=64),
)
def test_saturating_conversions_agree_compiled_interpreted_and_numpy(requantize_kernel, xs, ints, us, vs):
    x, s = np.array(xs, np.float32), np.ones(64, np.float32)
    i, u, v = np.array(ints, np.int32), np.array(us, np.uint8), np.array(vs, np.int8)
    got = requantize_kernel.run(x, s, i, u, v)
    interpreted = evaluate(requantize_kernel.func, x, s, i, u, v)
    expected = (
        np.clip(np.rint(x + np.float32(3.0)), 0, 255).astype(np.uint8),  # ties to even, then the range
        np.clip(i.astype(np.int64) // 4, -128, 127).astype(np.int8),
        u.astype(np.int32) * v.astype(np.int32) - 7,  # int32, not wrapped to 8 bits
    )
    for g, t, e in zip(got, interpreted, expected):
        assert g.dtype == e.dtype and np.array_equal(g, e) and np.array_equal(t, e)


def test_arithmetic_on_8_bit_values_is_int32_and_conversions_saturate():
    U = ps.placeholder((4,), "uint8", name="U")
    V = ps.placeholder((4,), "int8", name="V")
    assert (U[0] * V[0]).dtype == "int32" and (U[0] + 1).dtype == "int32"
    assert str(U[0] * V[1]) == "int32(U[0]) * int32(V[1])"
    assert (U[0] * 0.5).dtype == "float32" and ps.rint(U[0]).dtype == "float32"
    assert ps.cast("uint8", 255.5).value == 255 and ps.cast("int8", -3.5).value == -4 and ps.cast("uint8", 2.5).value == 2
    assert saturate("int8", [200, -200, 1.5]).tolist() == [127, -128, 2]
    with pytest.raises(IRError, match="outside the range"):
        ps.const(256, "uint8")


def test_convert_to_int8_reads_activations_unsigned_and_weights_signed():
    f = convert(wl.small("CBR").func, "int8")
    dtypes = {b.name: b.dtype for b in f.params + f.allocs}
    assert dtypes == {
        "data": "uint8", "padded": "uint8", "kernel": "int8", "conv2d": "int32",  # the product, its padding
        "bias": "float32", "bn_scale": "float32", "bn_offset": "float32", "relu": "float32",
        "bias_add": "float32", "bn_mul": "float32", "bn_add": "float32",
    }
    assert precision_of(f) == "int8" and convert(f, "int8") == f
    with pytest.raises(ProbschedError, match="quantization cannot be undone"):
        convert(f, "float32")
    X = ps.placeholder((4, 4), name="X")
    k = ps.reduce_axis(4, name="k")
    square = ps.create_func([X, ps.compute((4, 4), lambda i, j: ps.sum(X[i, k] * X[k, j], axis=k), name="Y")])
    with pytest.raises(ProbschedError, match="read as both factors"):
        convert(square, "int8")


@pytest.mark.parametrize("op", ["GMM", "C2D", "CBR"])
def test_int8_workloads_compile_exactly(op):
    w = wl.small(op, "int8")
    x = w.random_inputs(np.random.default_rng(3))
    assert all(a.min() != 0 or a.dtype.kind == "f" for a in x)
    assert {a.dtype.name for a in x} >= {"uint8", "int8"} and int(x[0].max()) > 200  # the whole range
    expected = w.reference(*x)
    w.check(ps.build(w.func).run(*x), expected)
    w.check(evaluate(w.func, *x), expected)


def test_integer_outputs_are_checked_exactly_and_8_bit_ones_within_one_step():
    w = wl.small("GMM", "int8")
    x = w.random_inputs(np.random.default_rng(0))
    (z,) = w.reference(*x)
    assert z.dtype == np.int32
    off = z.copy()
    off[0, 0, 0] += 1
    with pytest.raises(AssertionError, match="integers must be exact"):
        w.check(off, z)
    exact = np.arange(200, dtype=np.uint8)
    one = exact.copy()
    one[3] += 1
    wl.workload.check_close("q", one, exact, 0, 0)  # a tie rounded the other way
    two = one.copy()
    two[4] += 2
    with pytest.raises(AssertionError, match="by one"):
        wl.workload.check_close("q", two, exact, 0, 0)
    with pytest.raises(AssertionError, match="elements differ"):
        wl.workload.check_close("q", exact + 1, exact, 0, 0)  # every element: not ties


def test_int8_workloads_have_their_own_name_and_records():
    w = wl.get("GMM:2:int8")
    assert w == wl.get("GMM", 2, precision="int8") and w.flops == wl.get("GMM:2").flops
    assert w.func.structural_hash() != wl.get("GMM:2").func.structural_hash()
    assert [b.dtype for b in w.func.params] == ["uint8", "int8", "int32"]
    # weights of reduced range: a type, so another program (other records), named on the command line alike
    from probsched.cli.common import resolve_workload

    r = resolve_workload("GMM:2:int8r")
    assert r.name == "GMM:2:int8r" and [b.dtype for b in r.func.params] == ["uint8", "int8r", "int32"]
    assert r.func.structural_hash() != w.func.structural_hash()
    weights = r.random_inputs(0)[1]
    assert weights.dtype == np.int8 and weights.min() == -64 and weights.max() == 64 and not (weights == 0).any()


def test_tuning_measures_int8_candidates_and_keeps_their_records_apart(tmp_path):
    from probsched.database import Database
    from probsched.measure import LocalMeasurer

    db = str(tmp_path / "t.db")
    with LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1.0) as m:
        result = ps.tune("GMM:small", trials=2, precision="int8", measurer=m, database=db, strategy="replay",
                         cost_model=None, retime_top=0)
    assert result.name == "GMM:small:int8" and all(t.error is None for t in result.history), result.history
    assert result.best.schedule(result.func).mod.params[2].dtype == "int32"
    with Database(db) as d:
        assert len(d.records(wl.small("GMM", "int8"))) == 2 and not d.records(wl.small("GMM"))
