"""MultiLevelTilingWithIntrin: which blocks it takes, and that its schedules stay correct."""

import numpy as np
import pytest

import probsched as ps
import probsched.workloads as wl
from handlers import condition, seed, trace
from probsched.ir.interpreter import evaluate
from probsched.space.intrin_tiling import MultiLevelTilingWithIntrin, kernel_candidates, kernel_weights, matmul_roles

def attention_scores(seq: int, heads: int, dim: int):
    """``C[h, i, j] = sum_k Q[0, i, h, k] * K[0, j, h, k]``: attention's Q @ K^T as an ONNX
    import fuses it, K read transposed (its columns ``j`` are not its last index)."""
    from probsched.workloads.workload import make_workload

    q, kk = ps.placeholder((1, seq, heads, dim), name="Q"), ps.placeholder((1, seq, heads, dim), name="K")
    k = ps.reduce_axis(dim, name="k")
    out = ps.compute((heads, seq, seq), lambda h, i, j: ps.sum(q[0, i, h, k] * kk[0, j, h, k], axis=k), name="C")

    def reference(a, b):
        return (np.einsum("ihk,jhk->hij", a[0].astype(np.float64), b[0].astype(np.float64)),)

    return make_workload("attention_scores", {"seq": seq, "heads": heads, "dim": dim}, ps.create_func([q, kk, out]),
                         flops=2 * heads * seq * seq * dim, reference=reference, reduction_length=dim)


# Reduced shapes whose N axis (output channels, columns) is a multiple of 8, so a
# micro-kernel applies; M axes are not multiples of the kernel heights (partial tiles).
FRIENDLY = {
    "GMM": lambda: wl.matmul(11, 16, 12, batch=2),
    "C1D": lambda: wl.conv1d_nwc(1, 9, 3, 8, 3, 2, 1),
    "C2D": lambda: wl.conv2d_nhwc(1, 6, 7, 3, 16, 3, 2, 1),
    "C3D": lambda: wl.conv3d_ndhwc(1, 4, 5, 5, 2, 8, 3, 2, 1),
    "DIL": lambda: wl.conv2d_nhwc(1, 8, 9, 3, 8, 3, 1, 1, dilation=2),
    "CAP": lambda: wl.conv2d_capsule_nhwc(1, 3, 3, 1, 8, 3, 2, 1, 4),
    "CBR": lambda: wl.conv2d_bn_relu(1, 6, 7, 3, 8, 3, 2, 1),
    "T2D": lambda: wl.conv2d_transpose_nhwc(1, 3, 3, 4, 16, 4, 2, 1),  # sub-pixel: M = 3 columns
    "TBG": lambda: wl.transpose_batch_matmul(1, 8, 2, 4),
    "ATT": lambda: attention_scores(16, 2, 8),  # K transposed: packed with its columns last
    # 4 groups of 8 output channels, each a matmul over its group's 4 input channels
    "GRP": lambda: wl.conv2d_nhwc(1, 6, 7, 16, 32, 3, 2, 1, dilation=1, groups=4),
}
_DATA: dict = {}


def data(name):
    if name not in _DATA:
        w = FRIENDLY[name]()
        x = w.random_inputs(np.random.default_rng(5))
        _DATA[name] = (w, x, w.reference(*x))
    return _DATA[name]


def draw(w, s, data_=None):
    sch = ps.Schedule(getattr(w, "func", w))
    program = seed(ps.space.default(), s)
    if data_:
        program = condition(program, data_)
    tr = trace(program).get_trace(sch)
    return sch, tr


def tensorized(sch):
    return [b for b in sch.mod.blocks() if b.annotation("tensorize")]


@pytest.mark.parametrize(
    "name, roles",
    [
        ("GMM", ("v_i", "v_j", "v_k", "X", "Y")),
        ("C2D", ("v_w", "v_co", "v_rc", "padded", "weight")),
        ("C1D", ("v_l", "v_co", "v_rc", "padded", "weight")),
        ("TBG", ("v_i", "v_j", "v_k", "query_T", "value_T")),
        ("DEP", None),  # A depends on the channel (N) axis
        ("GRP", ("v_w", "v_co", "v_rc", "padded", "weight")),  # per group of 3 output channels
        ("T2D", ("v_b", "v_co", "v_rc", "padded", "weight")),  # per phase, M is an output column
        ("NRM", None),
        ("SFM", None),
    ],
)
def test_matmul_roles(name, roles):
    w = wl.small(name)
    sch = ps.Schedule(w.func)
    found = [matmul_roles(sch, b.name) for b in w.func.blocks()]
    found = [(r.m, r.n, r.k, r.a, r.b) for r in found if r is not None]
    assert found == ([roles] if roles else [])


def test_a_transposed_b_is_a_matmul_whose_panel_is_packed_with_n_last():
    w = FRIENDLY["ATT"]()
    roles = matmul_roles(ps.Schedule(w.func), "C")
    assert (roles.m, roles.n, roles.k, roles.a, roles.b, roles.b_n_dim) == ("v_i", "v_j", "v_k", "Q", "K", 1)
    for s in range(3):
        sch, tr = draw(w, s)
        assert "C/pack" not in tr  # not a choice for a transposed B
        (local,) = [b for b in sch.mod.allocs if b.name.startswith("K")]
        assert local.shape[-1] % int(ps.intrinsics.get(tr["C/intrin"].value).meta["N"]) == 0  # the columns last
        assert local.shape[-2] == 8  # then the panel of the reduction
        w.check(evaluate(sch.mod, *data("ATT")[1]), data("ATT")[2])


def test_a_transposed_b_in_bfloat16_is_packed_pair_interleaved_with_n_last():
    import ml_dtypes

    from probsched.precision import convert

    w = FRIENDLY["ATT"]()
    func = convert(w.func, "bf16")
    q, k = (x.astype(ml_dtypes.bfloat16) for x in data("ATT")[1])
    (expected,) = w.reference(q.astype(np.float32), k.astype(np.float32))
    for s in range(2):
        sch, tr = draw(func, s)
        (local,) = [b for b in sch.mod.allocs if b.name.startswith("K")]
        assert local.shape[-1] == 2 and "bf16" in tr["C/intrin"].value  # pairs of k, after the columns
        np.testing.assert_allclose(ps.build(sch).run(q, k)[0], expected, rtol=1e-5, atol=1e-5)


def test_grouped_convolution_is_a_matmul_per_group():
    sch = ps.Schedule(FRIENDLY["GRP"]().func)
    assert matmul_roles(sch, "conv2d").group == 8  # A reads input channel v_co // 8 * 4 + v_rc
    assert matmul_roles(ps.Schedule(wl.small("C2D").func), "conv2d").group is None
    # the small suite entry's groups of 3 output channels fit no kernel's N: left to MultiLevelTiling
    small = ps.Schedule(wl.small("GRP").func)
    before = small.mod
    MultiLevelTilingWithIntrin()(small, small.get_block("conv2d"))
    assert small.mod is before


def test_kernel_candidates_respect_n_and_registers():
    assert kernel_candidates(24, 8, 12) == ["matmul_4x24", "matmul_4x8", "matmul_8x8"]
    assert "matmul_8x32" not in kernel_candidates(64, 8, 12)  # 32 accumulators: spills on AVX2
    assert "matmul_8x32" in kernel_candidates(64, 16, 28)
    assert kernel_candidates(12, 8, 12) == []


@pytest.mark.parametrize("target", [ps.Target(isa=("avx2", "fma")), ps.Target(isa=("avx2", "avx512f", "fma"))])
def test_float32_kernels_are_drawn_in_proportion_to_their_accumulators(target):
    w = wl.matmul(28, 64, 8, batch=None)
    sch = ps.Schedule(w.func)
    rule = MultiLevelTilingWithIntrin(target=target)
    tr = trace(seed(lambda s: rule(s, s.get_block("Z")), 0)).get_trace(sch)
    dist = tr["Z/intrin"].dist
    lanes = target.vector_lanes("float32")
    accumulators = {c: ps.intrinsics.get(c).meta["M"] * -(-ps.intrinsics.get(c).meta["N"] // lanes) for c in dist.candidates}
    assert max(accumulators.values()) == (12 if lanes == 8 else 28)  # the target's largest blocks are offered
    assert np.allclose(dist.probs, [accumulators[c] / sum(accumulators.values()) for c in dist.candidates])
    assert kernel_weights(["matmul_4x8", "matmul_8x8"], lanes) == pytest.approx([1 / 3, 2 / 3])


@pytest.mark.parametrize("name", sorted(FRIENDLY))
def test_twenty_tensorized_traces_per_workload_match_the_reference(name):
    w, x, expected = data(name)
    for s in range(20):
        sch, tr = draw(w, s)
        assert tensorized(sch), f"seed {s}: no tensorized block\n{tr}"
        w.check(evaluate(sch.mod, *x), expected)


@pytest.mark.parametrize("name", ["GMM", "C2D", "CBR", "T2D", "GRP", "ATT"])
def test_compiled_tensorized_traces_match_the_reference(name):
    w, x, expected = data(name)
    for s in range(2):
        sch, _ = draw(w, s)
        out = w.empty_outputs()
        ps.build(sch)(*x, *out)
        w.check(out, expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FRIENDLY))
def test_many_compiled_tensorized_traces(name, request):
    w, x, expected = data(name)
    count = 20 if request.config.getoption("--slow") == "all" else 3
    for s in range(100, 100 + count):
        sch, _ = draw(w, s)
        out = w.empty_outputs()
        ps.build(sch)(*x, *out)
        w.check(out, expected)


def test_condition_fixes_the_kernel_and_replay_rebuilds_the_program():
    w, x, expected = data("GMM")
    sch, tr = draw(w, 0, {"Z/intrin": "matmul_4x8", "Z/pack": True})
    (blk,) = tensorized(sch)
    assert blk.annotation("tensorize") == "matmul_4x8"
    assert any(b.name.startswith("Y_local") for b in sch.mod.blocks())
    again = ps.Schedule(w.func)
    ps.InstructionLog.from_json(sch.instructions.to_json()).apply(again)
    assert again.mod == sch.mod


def test_partial_rows_run_the_smaller_kernel():
    # 11 rows with 4-row kernels: tiles of 4, 4 and 3 rows; the 3-row one is a variant
    w, x, expected = data("GMM")
    sch, _ = draw(w, 0, {"Z/intrin": "matmul_4x8"})
    kernel = ps.build(sch)
    assert "matmul_4x8" in kernel.source and "if " in kernel.source
    out = w.empty_outputs()
    kernel(*x, *out)
    w.check(out, expected)


def test_a_change_that_breaks_a_tensorized_tile_is_refused():
    # inlining an elementwise producer that is not a plain copy into the A operand would
    # leave the micro-kernel computing something else: the schedule refuses it
    A = ps.placeholder((8, 4), name="A")
    B = ps.placeholder((4, 8), name="B")
    A2 = ps.compute((8, 4), lambda i, k: A[i, k] * 2.0, name="A2")
    r = ps.reduce_axis(4, name="k")
    C = ps.compute((8, 8), lambda i, j: ps.sum(A2[i, r] * B[r, j], axis=r), name="C")
    sch = ps.Schedule(ps.create_func([A, B, C]))
    tr = trace(condition(seed(lambda s: MultiLevelTilingWithIntrin()(s, s.get_block("C")), 0), {"C/intrin": "matmul_4x8"})).get_trace(sch)
    assert tensorized(sch)
    before = sch.mod
    with pytest.raises(ps.ScheduleError, match="breaks tensorized block"):
        sch.compute_inline(sch.get_block("A2"))
    assert sch.mod is before
    # so the compute-location site does not offer inlining (it would be "root" again), while
    # a trace that recorded "inline" before it was withheld still replays
    assert "inline" not in sch.compute_locations(sch.get_block("A2"))
    assert sch.sample_compute_location(sch.get_block("A2"), decision="inline") == "inline"
    with pytest.raises(ps.ScheduleError, match="decision 'nowhere' for site A2/again is outside the support"):
        sch.sample_compute_location(sch.get_block("A2"), name="A2/again", decision="nowhere")


@pytest.mark.parametrize(
    "w, block",
    [
        (wl.small("DEP"), "depthwise_conv2d"),  # not matmul-like
        (wl.small("T2D"), "phases"),  # 3 output channels: no kernel's N divides them
        # an odd output size keeps T2D in one stage, whose M axis (the batch) has one row
        (wl.conv2d_transpose_nhwc(1, 2, 3, 3, 16, 3, 2, 1), "conv2d_transpose"),
    ],
)
def test_rule_leaves_blocks_it_cannot_take_alone(w, block):
    sch = ps.Schedule(w.func)
    rule = MultiLevelTilingWithIntrin()
    before = sch.mod
    rule(sch, sch.get_block(block))
    assert sch.mod is before
