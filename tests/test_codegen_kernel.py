"""The Kernel callable (argument checks, run, inspection), build()'s inputs, and Target."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import probsched as ps
from probsched.target import Target


@pytest.fixture(scope="module")
def kern():
    A = ps.placeholder((3, 4), name="A")
    B = ps.placeholder((4,), name="B")
    C = ps.compute((3, 4), lambda i, j: A[i, j] * B[j], name="C")
    return ps.build(ps.create_func([A, B, C], name="scale"))


@pytest.fixture
def arrays():
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    b = rng.uniform(0.5, 1.5, (4,)).astype(np.float32)
    return a, b, np.empty((3, 4), np.float32)


def test_call_writes_output_in_place(kern, arrays):
    a, b, c = arrays
    assert kern(a, b, c) is None
    np.testing.assert_allclose(c, a * b, rtol=1e-6)
    (c2,) = kern.run(a, b)
    np.testing.assert_allclose(c2, a * b, rtol=1e-6)


def test_bind_checks_once_like_a_call(kern, arrays):
    a, b, c = arrays
    with pytest.raises(ps.KernelArgumentError, match="parameter B .argument 2, input.: expected shape"):
        kern.bind(a, np.zeros(5, np.float32), c)
    with pytest.raises(ps.KernelArgumentError, match="must be C-contiguous"):
        kern.bind(a, b, np.zeros((4, 3), np.float32).T)
    a_view = a[:, ::-1]  # a non-contiguous input is copied at binding, as a call copies it
    run = kern.bind(a_view, b, c)
    assert run() is None
    np.testing.assert_allclose(c, a_view * b, rtol=1e-6)


def test_wrong_count(kern, arrays):
    a, b, c = arrays
    with pytest.raises(ps.KernelArgumentError, match=r"kernel scale: expected 3 arrays \(A, B, C\), got 2"):
        kern(a, b)
    with pytest.raises(ps.KernelArgumentError, match=r"run\(\) expected 2 input arrays \(A, B\), got 3"):
        kern.run(a, b, c)


def test_wrong_shape_names_parameter(kern, arrays):
    a, b, c = arrays
    with pytest.raises(
        ps.KernelArgumentError,
        match=r"parameter B \(argument 2, input\): expected shape \(4,\) float32, got shape \(5,\) float32",
    ):
        kern(a, np.ones(5, np.float32), c)
    with pytest.raises(ps.KernelArgumentError, match=r"parameter C \(argument 3, output\): expected shape \(3, 4\)"):
        kern(a, b, np.empty((4, 3), np.float32))


def test_wrong_dtype_names_parameter(kern, arrays):
    a, b, c = arrays
    with pytest.raises(ps.KernelArgumentError, match=r"parameter A .*expected shape \(3, 4\) float32, got shape \(3, 4\) float64"):
        kern(a.astype(np.float64), b, c)


def test_not_an_array(kern, arrays):
    a, b, c = arrays
    with pytest.raises(ps.KernelArgumentError, match=r"parameter B .*expected a numpy array.*got list"):
        kern(a, [1.0, 2.0, 3.0, 4.0], c)


def test_non_contiguous_output_rejected_input_copied(kern, arrays):
    a, b, c = arrays
    big = np.empty((3, 8), np.float32)
    with pytest.raises(ps.KernelArgumentError, match=r"parameter C \(argument 3, output\): must be C-contiguous"):
        kern(a, b, big[:, ::2])
    ro = np.empty((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ps.KernelArgumentError, match="parameter C .*read-only"):
        kern(a, b, ro)
    # inputs: Fortran order, strided and read-only views are copied
    a_f = np.asfortranarray(a)
    b_strided = np.repeat(b, 2)[::2]
    b_ro = b.copy()
    b_ro.flags.writeable = False
    kern(a_f, b_strided, c)
    np.testing.assert_allclose(c, a * b, rtol=1e-6)
    kern(a, b_ro, c)
    np.testing.assert_allclose(c, a * b, rtol=1e-6)


def test_kernel_errors_are_probsched_errors():
    assert issubclass(ps.KernelArgumentError, ps.ProbschedError)
    assert issubclass(ps.KernelArgumentError, TypeError)


def test_inspect_and_source(kern):
    asm = kern.inspect_asm()
    assert set(asm) == {"scale"} and "scale" in kern.dispatchers
    assert "def scale(A, B, C):" in kern.source
    assert kern.compile_seconds > 0 and kern.func.name == "scale"
    # the source is exactly what was compiled: it runs as plain Python too
    ns: dict = {}
    exec(kern.source, ns)
    a = np.ones(12, np.float32)
    b = np.full(4, 2, np.float32)
    c = np.empty(12, np.float32)
    ns["scale"](a, b, c)
    np.testing.assert_array_equal(c, 2)


def test_build_accepts_schedule_like_objects(kern):
    class Holder:
        mod = kern.func

    k2 = ps.build(Holder())
    assert k2.func is kern.func
    with pytest.raises(ps.BuildError, match="expected a PrimFunc or an object whose .mod is a PrimFunc"):
        ps.build(42)


def test_build_target_argument(kern):
    k = ps.build(kern.func, Target.host())
    assert k.target == Target.host()
    assert ps.build(kern.func, "cpu -threads=1").target.threads == 1
    with pytest.raises(ps.BuildError, match="unknown option"):
        ps.build(kern.func, "cpu -fast")
    with pytest.raises(ps.BuildError, match="expected 'cpu'"):
        ps.build(kern.func, "gpu")
    with pytest.raises(ps.BuildError, match="parallel form"):
        ps.build(kern.func, parallel="openmp")


# ----------------------------------------------------------------------------- Target


def test_target_host_describes_this_cpu():
    t = Target.host()
    assert t.kind == "cpu" and t.cores >= 1 and t.threads == t.cores
    assert t.model
    text = str(t)
    assert "\n" not in text and text.startswith("cpu: ") and f"{t.cores} cores" in text
    assert t.vector_bytes in (16, 32, 64)
    if t.has("avx512f"):
        assert t.vector_lanes("float32") == 16
    elif t.has("avx2"):
        assert t.vector_lanes("float32") == 8 and "avx2" in text


def test_target_json_round_trip():
    t = Target.from_str("cpu -threads=3")
    d = json.loads(t.to_json())
    assert d["threads"] == 3 and isinstance(d["isa"], list)
    assert Target.from_json(t.to_json()) == t
    assert Target.parse(None) == Target.host()
    assert Target.parse(t) is t
    assert Target.parse(t.options_str()) == t


def test_target_bad_strings():
    for bad in ("", "gpu", "cpu -threads=0", "cpu -threads=x", "cpu -mcpu=skylake"):
        with pytest.raises(ValueError):
            Target.from_str(bad)
    with pytest.raises(TypeError):
        Target.parse(3)


def test_build_cache_reuses_compiled_code(kern):
    again = ps.build(kern.func)
    assert again.from_cache and again.entry is kern.entry
    assert again.compile_seconds == kern.compile_seconds
    fresh = ps.build(kern.func, cache=False)
    assert not fresh.from_cache and fresh.entry is not kern.entry
    # equal structure, different object: still a hit, and kernel.func is the one passed
    copy = ps.PrimFunc.from_json(kern.func.to_json())
    k3 = ps.build(copy)
    assert k3.from_cache and k3.func is copy


def test_overlapping_arrays(kern, arrays):
    a, b, c = arrays
    # an input that is also the output: the kernel reads a snapshot of the input
    x = a.copy()
    kern(x, b, x)
    np.testing.assert_allclose(x, a * b, rtol=1e-6)


def test_overlapping_outputs_rejected():
    A = ps.placeholder((4,), name="A")
    B = ps.compute((4,), lambda i: A[i] + 1.0, name="B")
    C = ps.compute((4,), lambda i: A[i] + 2.0, name="C")
    k = ps.build(ps.create_func([A, B, C], name="two_out"))
    a = np.ones(4, np.float32)
    out = np.empty(4, np.float32)
    with pytest.raises(ps.KernelArgumentError, match="outputs B and C share memory"):
        k(a, out, out)


def test_arrays_are_declared_noalias(kern):
    from probsched.codegen.compile import noalias_enabled

    assert noalias_enabled()
    llvm = kern.inspect_llvm()["scale"]
    # the data pointer of each array argument (field 4 of numba's array struct)
    for name in ("A", "B", "C"):
        assert re.search(rf"ptr noalias [^%]*%arg\.{name}\.4\b", llvm), name


def test_intermediates_and_run_outputs_are_cache_line_aligned():
    # a two-stage function: its intermediate is allocated by the kernel wrapper
    A = ps.placeholder((37,), name="A")
    B = ps.compute((37,), lambda i: A[i] * 2.0, name="B")
    C = ps.compute((37,), lambda i: B[i] + 1.0, name="C")
    kern = ps.build(ps.create_func([A, C], name="two_stage"), cache=False)
    assert len(kern._intermediates) == 1 and kern._intermediates[0].ctypes.data % 64 == 0
    x = np.arange(37, dtype="float32")
    (out,) = kern.run(x)
    assert out.ctypes.data % 64 == 0 and np.array_equal(out, x * 2 + 1)


def test_stack_arrays_are_cache_line_aligned():
    # a tile read as 32-byte vectors must not straddle cache lines: the alloca says align 64
    from probsched.codegen.compile import compile_options, configure_numba
    from probsched.codegen.stackalloc import STACK_ALIGN, stack_empty

    numba = configure_numba()

    def tile_pick(x, k):
        t = stack_empty(24, np.float32)  # indexed by data: it stays memory, not registers
        for i in range(24):
            t[i] = x[i] * 2.0
        return t[k]

    f = numba.njit(**compile_options())(tile_pick)
    x = np.arange(24, dtype=np.float32)
    assert f(x, 5) == 10.0
    (llvm,) = f.inspect_llvm().values()
    allocas = re.findall(r"alloca \[24 x float\][^\n]*", llvm)
    assert allocas and all(f"align {STACK_ALIGN}" in a for a in allocas), allocas
