"""The operator suite: structure, FLOPs, references, tolerances, and interpretation at small shapes."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

import probsched as ps
import probsched.workloads as wl
from probsched.ir.expr import BinOp, Select, walk
from probsched.ir.interpreter import evaluate
from probsched.ir.stmt import Block, Loop, PrimFunc

SUITE = ["C1D", "C2D", "C3D", "GMM", "GRP", "DIL", "DEP", "T2D", "CAP", "NRM", "SFM", "CBR", "TBG"]
SLOW = {("C3D", 0)}  # reference takes ~3 s (13 GFLOP in float64)
ALL_CONFIGS = [
    pytest.param(n, i, marks=pytest.mark.slow) if (n, i) in SLOW else pytest.param(n, i)
    for n in SUITE
    for i in range(4)
]


def test_names_lists_the_suite_in_table_order():
    assert wl.names() == SUITE


# ------------------------------------------------------------------ lookup
def test_get_by_string_equals_get_by_index():
    a, b = wl.get("GMM:2"), wl.get("GMM", 2)
    assert a == b and hash(a) == hash(b)
    assert a.func == b.func and a.func.structural_hash() == b.func.structural_hash()
    assert (a.name, a.func.name, a.params) == ("GMM:2", "GMM", (1, 512, 512, 512))
    assert wl.get("gmm", "2") == a
    assert a != wl.get("GMM", 1)


@pytest.mark.parametrize(
    "args, match",
    [
        (("XYZ", 0), "unknown workload 'XYZ'; the suite has C1D, C2D, .*, TBG"),
        (("XYZ:1",), "unknown workload"),
        (("GMM", 4), r"GMM has no configuration 4; configurations \(B, N, M, K\) are 0: \(1, 128, 128, 128\)"),
        (("GMM", -1), "GMM has no configuration -1"),
        (("GMM:x",), "GMM has no configuration 'x'"),
        (("GMM", 1.5), "GMM has no configuration 1.5"),
        (("GMM", True), "GMM has no configuration True"),
        (("GMM",), r"give a configuration index, e.g. get\('GMM', 2\)"),
    ],
)
def test_bad_names_and_indices_raise_clear_errors(args, match):
    with pytest.raises(ValueError, match=match):
        wl.get(*args)


def test_structural_hash_is_stable_across_processes():
    code = (
        "import probsched.workloads as wl;"
        "print(wl.get('CBR', 1).func.structural_hash(), wl.small('T2D').func.structural_hash())"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True) for _ in range(2)]
    here = f"{wl.get('CBR', 1).func.structural_hash()} {wl.small('T2D').func.structural_hash()}"
    assert runs[0].stdout.strip() == runs[1].stdout.strip() == here


# ------------------------------------------------------------------ every suite configuration
@pytest.mark.parametrize("name", SUITE)
def test_every_configuration_builds(name):
    for i, config in enumerate(wl.configs(name)):
        w = wl.get(name, i)
        assert (w.name, w.func.name, w.params) == (f"{name}:{i}", name, config)
        assert isinstance(w.func, PrimFunc) and w.flops > 0
        assert len(w.inputs) >= 1 and len(w.outputs) == 1
        assert 0 < w.rtol < 0.01 and 0 < w.atol < 0.5


@pytest.mark.parametrize(
    "key, flops",
    [
        ("GMM:2", 2 * 512**3),
        ("GMM:1", 2 * 512 * 32 * 512),
        ("C1D:0", 2 * 128 * 128 * 3 * 64),
        ("C2D:0", 2 * 112 * 112 * 64 * 7 * 7 * 3),
        ("C3D:1", 2 * 16 * 56 * 56 * 64 * 64),
        ("GRP:0", 2 * 28 * 28 * 128 * 3 * 3 * 16),
        ("DIL:0", 2 * 109 * 109 * 64 * 7 * 7 * 3),
        ("DEP:1", 2 * 56 * 56 * 64 * 3 * 3),
        ("T2D:0", 2 * 8 * 8 * 256 * 4 * 4 * 512),  # counts the inserted zeros, like the paper
        ("CAP:0", 2 * 8 * 8 * 4 * 4 * 32 * 3 * 3 * 4 * 32),
        ("NRM:3", 2 * 4096 * 1024 + 1),
        ("SFM:0", 5 * 256 * 256),
        ("CBR:3", 2 * 7 * 7 * 512 * 3 * 3 * 512 + 4 * 7 * 7 * 512),
        ("TBG:0", 2 * 12 * 128 * 128 * 64),
    ],
)
def test_flops_match_hand_formulas(key, flops):
    assert wl.get(key).flops == flops


def _perturbation(name: str, expected: np.ndarray):
    """Index and size of the smallest error a wrong kernel would make at that element."""
    flat = np.abs(expected).ravel()
    idx = np.unravel_index(int(np.argmax(flat)), expected.shape)  # where rtol helps most
    e = float(expected[idx])
    if name == "SFM":
        return idx, 1e-3 * e  # a 0.1% wrong probability
    if name == "NRM":
        return idx, 0.05 * e  # one scalar over millions of terms: only gross errors are visible
    if name == "CBR":
        return idx, 0.125  # one product (>= 0.25) times a bn scale (>= 0.5)
    return idx, 0.25  # one missing product of two inputs with |x| >= 0.5


@pytest.mark.parametrize("name, index", ALL_CONFIGS)
def test_reference_runs_and_tolerance_catches_one_wrong_term(name, index):
    w = wl.get(name, index)
    inputs = w.random_inputs(np.random.default_rng(index))
    assert [a.shape for a in inputs] == [b.shape for b in w.inputs]
    for a in inputs:
        assert a.dtype == np.float32 and a.flags.c_contiguous and np.all(a != 0) and np.isfinite(a).all()
    t0 = time.perf_counter()
    expected = w.reference(*inputs)
    elapsed = time.perf_counter() - t0
    assert elapsed < 10 or (name, index) in SLOW
    assert tuple(o.shape for o in expected) == w.output_shapes
    assert all(o.dtype == np.float32 and np.isfinite(o).all() for o in expected)
    w.check(expected, expected)
    idx, delta = _perturbation(name, expected[0])
    wrong = expected[0].copy()
    wrong[idx] += np.float32(delta)
    with pytest.raises(AssertionError, match=r"worst at index"):
        w.check((wrong,), expected)


# ------------------------------------------------------------------ small shapes, interpreted
@pytest.fixture(scope="module", params=SUITE)
def small_case(request):
    w = wl.small(request.param)
    inputs = w.random_inputs(np.random.default_rng(7))
    return w, inputs, w.reference(*inputs)


def test_small_workload_interpreted_matches_reference(small_case):
    w, inputs, expected = small_case
    t0 = time.perf_counter()
    got = evaluate(w.func, *inputs)
    assert time.perf_counter() - t0 < 5.0  # ~0.2 s at most on an idle machine
    w.check(got, expected)


def _drop_last_reduction_term(func: PrimFunc) -> PrimFunc:
    """The same program with the innermost reduction loop of its last reduction block one short."""
    target = [b for b in func.blocks() if b.is_reduction][-1]

    def rewrite(s):
        if isinstance(s, tuple):
            return tuple(rewrite(x) for x in s)
        if not isinstance(s, Loop):
            return s
        if s.body == (target,):
            pos = next(i for i, b in enumerate(target.bindings) if b == s.var)
            iters = list(target.iters)
            assert iters[pos].kind == "R" and iters[pos].extent == s.extent > 1
            iters[pos] = iters[pos].replace(extent=s.extent - 1)
            return s.replace(extent=s.extent - 1, body=(target.replace(iters=tuple(iters)),))
        return s.replace(body=rewrite(s.body))

    return func.replace(body=rewrite(func.body))


def test_check_catches_a_kernel_missing_reduction_terms(small_case):
    w, inputs, expected = small_case
    with pytest.raises(AssertionError, match=r"elements differ"):
        w.check(evaluate(_drop_last_reduction_term(w.func), *inputs), expected)


# ------------------------------------------------------------------ structure
def _stages(w) -> list:
    return [b.name for b in w.func.blocks()]


def test_stage_structure_follows_topi():
    assert _stages(wl.small("C2D")) == ["padded", "conv2d"]
    assert _stages(wl.small("C1D")) == ["padded", "conv1d"]
    assert _stages(wl.small("C3D")) == ["padded", "conv3d"]
    assert _stages(wl.small("CBR")) == ["padded", "conv2d", "bias_add", "bn_mul", "bn_add", "relu"]
    assert _stages(wl.small("SFM")) == ["T_softmax_maxelem", "T_softmax_exp", "T_softmax_expsum", "T_softmax_norm"]
    assert _stages(wl.small("NRM")) == ["sum_sq", "l2_norm"]
    assert _stages(wl.small("TBG")) == ["query_T", "value_T", "C"]
    assert _stages(wl.small("GMM")) == ["Z"]
    cbr = wl.get("CBR", 0)
    assert [b.name for b in cbr.func.params] == ["data", "kernel", "bias", "bn_offset", "bn_scale", "relu"]
    assert cbr.input_shapes[2:] == ((64,), (64,), (64,))


def _block(w, name) -> Block:
    return next(b for b in w.func.blocks() if b.name == name)


def _ops(block: Block) -> set:
    return {x.op for s in block.stores() for x in walk(s.value) if isinstance(x, BinOp)}


def test_padding_is_a_select_and_t2d_tests_the_stride_inside_the_reduction():
    c2d = wl.get("C2D", 0)
    pad = _block(c2d, "padded")
    assert any(isinstance(x, Select) for s in pad.stores() for x in walk(s.value))
    assert [it.var.name for it in _block(c2d, "conv2d").iters] == ["v_n", "v_h", "v_w", "v_co", "v_rh", "v_rw", "v_rc"]
    t2d = _block(wl.get("T2D", 0), "phases")
    # the suite's T2D reduces over the taps that meet real inputs (2x2 of the 4x4 kernel),
    # one convolution per output phase (h % 2, w % 2), then interleaves the phases
    assert t2d.is_reduction and {"mod", "floordiv"} <= _ops(t2d) and "eq" not in _ops(t2d)
    assert [it.extent for it in t2d.iters if it.kind == "R"] == [2, 2, 512]
    assert [it.extent for it in t2d.iters if it.kind == "S"] == [1, 2, 2, 4, 4, 256]
    interleave = _block(wl.get("T2D", 0), "conv2d_transpose")
    assert not interleave.is_reduction and {"mod", "floordiv"} <= _ops(interleave)
    # an output size the stride does not divide keeps the one-stage gather form
    odd = wl.conv2d_transpose_nhwc(1, 2, 3, 3, 2, 3, 2, 1)
    assert [b.name for b in odd.func.blocks()] == ["padded", "conv2d_transpose"]
    assert [it.extent for it in _block(odd, "conv2d_transpose").iters if it.kind == "R"] == [2, 2, 3]
    dilated = _block(wl.conv2d_transpose_nhwc(1, 4, 4, 512, 256, 4, 2, 1, skip_zeros=False), "conv2d_transpose")
    assert {"mod", "eq", "floordiv"} <= _ops(dilated)
    assert [it.extent for it in dilated.iters if it.kind == "R"] == [4, 4, 512]
    assert "floordiv" in _ops(_block(wl.get("GRP", 0), "conv2d"))  # group of the output channel
    assert "floordiv" not in _ops(_block(wl.get("C2D", 0), "conv2d"))


def test_inputs_of_the_suite_have_the_documented_shapes():
    assert wl.get("GRP", 0).input_shapes == ((1, 56, 56, 64), (3, 3, 16, 128))
    assert wl.get("DEP", 0).input_shapes == ((1, 112, 112, 32), (3, 3, 32))
    assert wl.get("CAP", 0).input_shapes == ((1, 16, 16, 4, 4, 32), (3, 3, 4, 4, 32, 32))
    assert wl.get("T2D", 3).output_shapes == ((1, 64, 64, 3),)
    assert wl.get("TBG", 2).output_shapes == ((1, 12, 64, 64),)
    assert wl.get("NRM", 3).output_shapes == ((1,),)


# ------------------------------------------------------------------ factories and Workload API
def test_factories_have_descriptive_names():
    w = wl.conv2d_nhwc(1, 6, 6, 4, 4, kernel=3, stride=2, pad=1)
    assert w.name == "conv2d_nhwc(n=1, h=6, w=6, ci=4, co=4, kernel=3, stride=2, pad=1, dilation=1, groups=1)"
    assert w.func.name == "conv2d_nhwc" and w.params == (1, 6, 6, 4, 4, 3, 2, 1, 1, 1)
    assert wl.matmul(4, 3, 5).output_shapes == ((1, 4, 3),)
    plain = wl.matmul(4, 3, 5, batch=None)
    assert plain.input_shapes == ((4, 5), (5, 3)) and plain.output_shapes == ((4, 3),)
    x, y = plain.random_inputs(0)
    plain.check(evaluate(plain.func, x, y), plain.reference(x, y))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: wl.matmul(0, 2, 2), "n=0 must be a positive integer"),
        (lambda: wl.conv2d_nhwc(1, 6, 6, 6, 4, 3, groups=4), "groups=4 must divide ci=6 and co=4"),
        (lambda: wl.conv2d_nhwc(1, 2, 2, 4, 4, 5), "smaller than the dilated kernel 5"),
        (lambda: wl.conv1d_nwc(1, 8, 4, 4, 3, pad=-1), "pad=-1 must be a non-negative integer"),
        (lambda: wl.conv2d_transpose_nhwc(1, 4, 4, 2, 2, 3, 2, pad=3), "pad=3 must be at most kernel - 1 = 2"),
        (lambda: wl.softmax(4, 2.5), "n=2.5 must be a positive integer"),
    ],
)
def test_factories_validate_parameters(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_check_reports_nan_shape_and_count_mismatches():
    w = wl.small("GMM")
    x, y = w.random_inputs(1)
    expected = w.reference(x, y)
    with pytest.raises(AssertionError, match=r"worst at index \(0, 0, 0\): got nan"):
        w.check(w.empty_outputs(), expected)
    with pytest.raises(AssertionError, match="shape"):
        w.check((expected[0][:1],), expected)
    with pytest.raises(AssertionError, match="expected 1 output arrays"):
        w.check((), expected)
    bad = expected[0].copy()
    bad[1, 2, 3] += 1.0
    with pytest.raises(AssertionError, match=r"1 of 48 elements differ .* worst at index \(1, 2, 3\).*max abs err 1"):
        w.check(bad, expected)


def test_random_inputs_are_reproducible_and_sensible():
    w = wl.get("SFM", 0)
    (a,) = w.random_inputs(np.random.default_rng(3))
    (b,) = w.random_inputs(np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    assert 0.05 <= np.abs(a).min() and np.abs(a).max() <= 4.0
    (c,) = wl.small("C2D").random_inputs(5)[:1]
    assert np.abs(c).min() >= 0.5 and (c < 0).any() and (c > 0).any()


def test_reference_validates_its_inputs():
    w = wl.small("GMM")
    x, y = w.random_inputs(0)
    with pytest.raises(ValueError, match="takes 2 inputs"):
        w.reference(x)
    with pytest.raises(ValueError, match="input Y has shape"):
        w.reference(x, x)


@pytest.mark.parametrize("args", [(1, 3, 4, 4, 3, 4, 2, 1), (1, 4, 4, 5, 3, 3, 2, 1), (1, 5, 3, 2, 3, 5, 3, 2)])
def test_t2d_zero_skipping_form_computes_the_transposed_convolution(args):
    # stride 2 dividing the kernel, stride 2 not dividing it (a guarded tap), stride 3 and pad 2;
    # the second form is the paper's dilated one. Compiled: the gather form's index
    # "-(q % 2) * 48" once printed as "-q % 2 * 48" and read out of bounds.
    for skip in (True, False):
        w = wl.conv2d_transpose_nhwc(*args, skip_zeros=skip)
        inputs = w.random_inputs(0)
        outputs = w.empty_outputs()
        ps.build(w.func)(*inputs, *outputs)
        w.check(outputs, w.reference(*inputs))


def test_as_workload_keeps_a_workload_and_wraps_a_bare_function():
    w = wl.small("GMM")
    assert ps.as_workload(w) is w and w.has_reference
    bare = ps.as_workload(w.func)
    assert (bare.name, bare.func, bare.flops, bare.params, bare.has_reference) == ("GMM", w.func, 0, (), False)
    assert bare == ps.as_workload(w.func)  # structural, like every Workload
    with pytest.raises(ValueError, match="no numpy reference"):
        bare.reference(*w.random_inputs(0))


@pytest.mark.parametrize("bad", ["GMM:2", 3, None])
def test_entry_points_refuse_what_is_not_a_workload_with_one_message(bad):
    from probsched.database import Database
    from probsched.database.record import workload_key
    from probsched.search import SearchContext

    name = type(bad).__name__
    with pytest.raises(TypeError, match=f"expected a Workload or a PrimFunc, got {name}"):
        ps.as_workload(bad)
    if bad is None:
        return
    with pytest.raises(TypeError, match=f"got {name}"):
        ps.Schedule(bad)
    with pytest.raises(TypeError, match=f"got {name}"):
        SearchContext(bad, ps.space.default())
    with Database(":memory:") as db:
        with pytest.raises(TypeError, match=f"got {name}"):
            db.commit_workload(bad)
    if not isinstance(bad, str):  # a str is a structural hash to the database
        with pytest.raises(TypeError, match=f"got {name}"):
            workload_key(bad)


def test_entry_points_treat_a_workload_and_its_bare_function_alike_where_they_should():
    from probsched.database import Database
    from probsched.database.record import workload_key
    from probsched.search import SearchContext

    w = wl.small("GMM")
    assert workload_key(w) == workload_key(w.func) == w.func.structural_hash()
    assert SearchContext(w.func, ps.space.default()).func is w.func
    assert ps.Schedule(w).func is ps.Schedule(w.func).func is w.func
    with Database(":memory:") as db:
        assert db.commit_workload(w.func) == db.commit_workload(w)
