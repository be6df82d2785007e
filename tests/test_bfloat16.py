"""bfloat16 programs: the IR type, code generation against the interpreter, the precision
rewrite, workloads, the tolerance, references and records."""

from __future__ import annotations

import platform
import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import probsched as ps
import probsched.workloads as wl
from probsched.database import Database, TuningRecord
from probsched.errors import KernelArgumentError, ProbschedError
from probsched.ir.interpreter import evaluate
from probsched.measure import MeasureResult
from probsched.measure.reference import Reference, from_func, from_workload
from probsched.precision import canonical, convert, precision_of

BF16 = ml_dtypes.bfloat16


def rounding_program(n: int):
    """``D = bf16(A * s)``: every output a rounding of a float32 product to bfloat16."""
    A = ps.placeholder((n,), "float32", name="A")
    S = ps.placeholder((n,), "bfloat16", name="S")
    D = ps.compute((n,), lambda i: A[i] * S[i], name="D", dtype="bfloat16")
    return ps.create_func([A, S, D], name="round_bf16")


@pytest.fixture(scope="module")
def rounding_kernel():
    return ps.build(rounding_program(64))


finite = st.floats(allow_nan=False, width=32)
edge = st.sampled_from([0.0, -0.0, np.inf, -np.inf, 3.4028235e38, -3.4028235e38, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1e-40])


@settings(max_examples=30, deadline=None)
@given(values=st.lists(st.one_of(finite, edge), min_size=64, max_size=64), scales=st.lists(st.sampled_from([1.0, -0.5, 3.0, 2.0**-130]), min_size=64, max_size=64))
def test_compiled_rounding_matches_ml_dtypes_and_the_interpreter(rounding_kernel, values, scales):
    a = np.array(values, np.float32)
    s = np.array(scales, np.float32).astype(BF16)
    (got,) = rounding_kernel.run(a, s)
    with np.errstate(all="ignore"):
        expected = (a * s.astype(np.float32)).astype(BF16)
    (interpreted,) = evaluate(rounding_kernel.func, a, s)
    assert got.dtype == BF16
    assert np.array_equal(got.view(np.uint16), expected.view(np.uint16))
    assert np.array_equal(interpreted.view(np.uint16), expected.view(np.uint16))


def test_nan_stays_nan_through_a_bfloat16_store(rounding_kernel):
    a = np.full(64, np.nan, np.float32)
    (got,) = rounding_kernel.run(a, np.ones(64, BF16))
    assert np.isnan(got.astype(np.float32)).all()


def test_the_store_rounding_agrees_with_its_plain_form_on_every_float32():
    """``codegen.bf16.bits`` is written for the vectorizer; the plain form (a branch for NaN,
    the rest rounded to nearest even) must give the same bits for all 2**32 inputs."""
    import numba
    from probsched.codegen.bf16 import bits
    from probsched.codegen.mathlib import bitcast

    u32 = np.uint32

    @numba.njit
    def plain(x):
        u = bitcast(x, np.uint32)
        if x != x:
            return np.uint16((u >> u32(16)) | u32(0x40))
        return np.uint16((u + u32(0x7FFF) + ((u >> u32(16)) & u32(1))) >> u32(16))

    @numba.njit
    def disagreements():
        n = 0
        for i in range(2**32):
            x = bitcast(np.uint32(i), np.float32)
            n += bits(x) != plain(x)
        return n

    assert disagreements() == 0


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86-64 assembly")
def test_a_loop_of_bfloat16_stores_is_vectorized():
    """Eight stores in a row (a vectorized loop of a schedule) become vector instructions,
    not eight 16-bit scalar stores: with a branch for NaN in the rounding they did not, and
    a depthwise convolution writing bfloat16 ran 3.7x slower than one writing float32."""
    import numba
    from probsched.codegen.bf16 import bits
    from probsched.codegen.compile import compile_options

    @numba.njit(**compile_options())
    def store(y, x):
        for j in range(0, x.size, 8):
            for i in range(8):
                y[j + i] = bits(x[j + i])

    x = np.linspace(-3, 3, 64, dtype=np.float32)
    y = np.zeros(64, np.uint16)
    store(y, x)
    assert np.array_equal(y, x.astype(BF16).view(np.uint16))
    asm = "\n".join(store.inspect_asm().values())
    scalar_stores = re.findall(r"\bmovw\s+%\w+, ", asm)
    assert not scalar_stores, f"{len(scalar_stores)} scalar 16-bit stores"


def test_arithmetic_on_bfloat16_is_float32():
    A = ps.placeholder((4,), "bfloat16", name="A")
    e = A[0] * A[1] + 0.1
    assert e.dtype == "float32"
    assert str(e) == "float32(A[0]) * float32(A[1]) + 0.1"
    assert ps.exp(A[0]).dtype == "float32"
    assert ps.if_then_else(A[0] > 0.0, A[0], 0.0).dtype == "bfloat16"
    assert ps.cast("bfloat16", 1.00390625).value == 1.0  # a bfloat16 constant is rounded: ties to even


def test_kernel_takes_and_returns_ml_dtypes_arrays():
    w = wl.small("GMM", "bf16")
    kern = ps.build(w.func)
    x, y = w.random_inputs(np.random.default_rng(0))
    assert x.dtype == BF16 and np.abs(x.astype(np.float32)).min() >= 0.5
    (z,) = kern.run(x, y)
    w.check(z, w.reference(x, y))
    with pytest.raises(KernelArgumentError, match=r"parameter X .* expected shape \(2, 4, 5\) bfloat16, got shape \(2, 4, 5\) float32"):
        kern.run(x.astype(np.float32), y)


def test_convert_lowers_the_products_operands_and_what_only_moves_them():
    f = convert(wl.small("CBR").func, "bf16")
    dtypes = {b.name: b.dtype for b in f.params + f.allocs}
    assert dtypes == {
        "data": "bfloat16", "kernel": "bfloat16", "padded": "bfloat16",  # the product's operands, the padding
        "bias": "float32", "bn_scale": "float32", "bn_offset": "float32", "relu": "float32",  # epilogue stays float32
        "conv2d": "float32", "bias_add": "float32", "bn_mul": "float32", "bn_add": "float32",
    }
    assert convert(f, "bf16") == f and convert(f, "fp32") == wl.small("CBR").func
    assert precision_of(f) == "bfloat16"
    softmax = wl.small("SFM")
    assert convert(softmax.func, "bf16") == softmax.func and softmax.with_precision("bf16") is softmax
    with pytest.raises(ProbschedError, match="unknown precision 'int4'"):
        canonical("int4")


def test_workload_names_and_the_precision_suffix():
    w = wl.get("C2D:2:bf16")
    assert w.name == "C2D:2:bf16" and w == wl.get("C2D", 2, precision="bf16")
    assert w.flops == wl.get("C2D:2").flops
    with pytest.raises(ValueError, match="disagree"):
        wl.get("C2D:2:bf16", precision="float32")
    with pytest.raises(ValueError, match="make the float32 workload from the float32 one"):
        w.with_precision("float32")


def test_tolerance_is_derived_from_the_bfloat16_significand():
    rtol32, atol32 = wl.tolerance(2304)
    rtol, atol = wl.tolerance(2304, "bf16")
    assert rtol == 2 * 2.0**-8 and atol == atol32 and rtol32 == 1e-4
    # a bfloat16 output rounded by another accumulation order passes the bfloat16 rule only
    exact = np.random.default_rng(0).uniform(1, 2, 1000)
    below, above = np.nextafter(exact.astype(BF16), -np.inf), exact.astype(BF16)
    for got in (below, above):
        wl.workload.check_close("bf16", got, exact, rtol, atol)
    with pytest.raises(AssertionError):
        wl.workload.check_close("f32", below, exact, rtol32, atol32)


def test_a_dropped_product_fails_the_bfloat16_check():
    w = wl.small("C2D", "bf16")
    x, wt = w.random_inputs(np.random.default_rng(1))
    expected = w.reference(x, wt)
    dropped = wt.astype(np.float32)
    dropped[0, 0, 0, 0] = 0  # one product of each output of channel 0 left out
    with pytest.raises(AssertionError, match="elements differ"):
        w.check(w.reference(x, dropped.astype(BF16)), expected)


def test_reference_files_keep_bfloat16_arrays(tmp_path):
    w = wl.small("GMM", "bf16")
    ref = from_workload(w, seed=0)
    path = str(tmp_path / "ref.npz")
    ref.save(path)
    again = Reference.load(path)
    assert again.inputs["X"].dtype == BF16 and np.array_equal(again.inputs["X"], ref.inputs["X"])
    assert (again.rtol, again.atol) == (ref.rtol, ref.atol) == (w.rtol, w.atol)
    bare = from_func(w.func)  # a bare function: the unscheduled program's outputs, bf16 inputs
    assert bare.inputs["Y"].dtype == BF16 and (bare.rtol, bare.atol) == wl.tolerance(5, "bf16")


def test_records_of_the_two_precisions_never_mix():
    f32, bf16 = wl.small("GMM"), wl.small("GMM", "bf16")
    assert f32.func.structural_hash() != bf16.func.structural_hash()
    with Database(":memory:") as db:
        for w in (f32, bf16):
            db.commit_workload(w)
            db.commit_record(TuningRecord.from_result(w, ps.Schedule(w.func), MeasureResult((1.0,), 0.1)))
        assert len(db.records(f32)) == len(db.records(bf16)) == 1
        assert db.best(bf16)[0].schedule(bf16.func).mod == bf16.func


def test_the_command_line_names_bfloat16_workloads_by_a_suffix():
    from probsched.cli.common import resolve_workload

    assert resolve_workload("GMM:2:bf16") == wl.get("GMM:2:bf16")
    assert resolve_workload("C2D:small:bf16") == wl.small("C2D", "bf16")
    assert resolve_workload("GMM:2:fp32") == wl.get("GMM:2")


def test_a_bfloat16_local_kept_as_scalars_holds_widened_values():
    w = wl.matmul(8, 16, 4, batch=None).with_precision("bf16")
    sch = ps.Schedule(w.func)
    z = sch.get_block("Z")
    i, j, k = sch.get_loops(z)
    copy = sch.cache_read(z, 0, "local")
    sch.compute_at(copy, j)
    for loop in sch.get_loops(copy)[2:] + [k]:
        sch.unroll(loop)
    kern = ps.build(sch)
    assert "X_local_3 = _ps_bf16_widen(X[" in kern.source  # a scalar: widened once, read as a float32
    x = w.random_inputs(np.random.default_rng(0))
    w.check(kern.run(*x), w.reference(*x))


def test_tune_takes_a_precision_and_keeps_the_records_apart(tmp_path):
    from probsched.measure import LocalMeasurer

    db = str(tmp_path / "t.db")
    with LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1.0) as m:
        result = ps.tune("C2D:small", trials=2, precision="bf16", measurer=m, database=db, strategy="replay",
                         cost_model=None, retime_top=0)
    assert result.name == "C2D:small:bf16" and result.best is not None
    assert result.best.schedule(result.func).mod.params[0].dtype == "bfloat16"
    with Database(db) as d:
        assert len(d.records(wl.small("C2D", "bf16"))) == 2 and not d.records(wl.small("C2D"))
