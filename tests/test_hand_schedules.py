"""The hand-written schedules of benchmarks/bench_schedules.py stay correct.

The same schedule functions (loop primitives only, and tensorized with the matmul
micro-kernels) applied to reduced shapes of the same structure: built, run, and checked
against the workload's numpy reference, with 1 and 2 threads of parallel chunks and with
partial tiles along the micro-kernel's M axis.
"""

import pytest
from scripts import load_script

import probsched as ps

bench = load_script("benchmarks/bench_schedules.py")


def _check(w, schedule, **kw):
    sch = ps.Schedule(w.func)
    schedule(sch, **kw)
    # the threads form: what the benchmark shapes get from "auto", and cheaper to compile
    # than the prange form "auto" picks for these small shapes
    kern = ps.build(sch, parallel="threads")
    ins = w.random_inputs(0)
    w.check(kern.run(*ins), w.reference(*ins))
    return sch


GMM_SMALL = [
    ps.workloads.matmul(64, 48, 40),  # 32 does not divide 48: the 4x16 kernel; kc -> 40
    ps.workloads.matmul(24, 64, 96),  # 3x32, 8 full row tiles, kc -> 96 (one panel)
    ps.workloads.matmul(20, 32, 48, batch=None),  # 3x32, 20 = 6*3 + 2: a partial row tile
]
C2D_SMALL = [
    ps.workloads.conv2d_nhwc(1, 6, 7, 16, 32, 3, 1, 1),  # w = 7 = 2*3 + 1: partial tile
    ps.workloads.conv2d_nhwc(1, 5, 9, 32, 64, 3, 1, 1),  # 9 = 3*3: full tiles, 2 co blocks
]


@pytest.mark.parametrize(
    "w, kw",
    [
        pytest.param(GMM_SMALL[0], dict(), id="64x48x40-default"),
        pytest.param(GMM_SMALL[2], dict(M=2, N=8, threads=1), id="20x32x48-nobatch-2x8-serial"),
    ],
)
def test_gmm_primitives(w, kw):
    sch = _check(w, bench.gmm_primitives, **kw)
    assert not bench.used_intrinsics(sch)


@pytest.mark.parametrize("w", GMM_SMALL, ids=lambda w: w.name)
@pytest.mark.parametrize("kw", [dict(), dict(parallel_axis="j"), dict(kc=16, threads=1)], ids=str)
def test_gmm_tensorized(w, kw):
    sch = _check(w, bench.gmm_tensorized, **kw)
    assert bench.used_intrinsics(sch)


@pytest.mark.parametrize("w", C2D_SMALL[:1], ids=lambda w: w.name)
def test_c2d_primitives(w):
    sch = _check(w, bench.c2d_primitives)
    assert not bench.used_intrinsics(sch)


@pytest.mark.parametrize("w", C2D_SMALL, ids=lambda w: w.name)
@pytest.mark.parametrize("kw", [dict(), dict(kc=8, threads=1), dict(padded="chunk")], ids=str)
def test_c2d_tensorized(w, kw):
    sch = _check(w, bench.c2d_tensorized, **kw)
    assert bench.used_intrinsics(sch)


def test_schedules_apply_to_the_benchmark_shapes():
    # scheduling (not building) the real shapes is cheap: the defaults fit them
    for kind, index in (("GMM", 2), ("C2D", 2)):
        w = ps.workloads.get(kind, index)
        for _, fn in bench.SCHEDULES[kind]:
            sch = ps.Schedule(w.func)
            fn(sch)


def test_im2col_baseline_matches_reference():
    w = C2D_SMALL[0]
    x, wt = w.random_inputs(1)
    w.check((bench.im2col_conv(x, wt, 1, 1),), w.reference(x, wt))
