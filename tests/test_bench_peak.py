"""``benchmarks/bench_peak.py``: the FMA peak sized to the target, the kernels it times and
their L1 panels; ``benchmarks/bench_tuned_f32.py``: a stored best against numpy."""

import subprocess

import numpy as np
import pytest
from scripts import load_script

import probsched as ps
from probsched.database import Database, TuningRecord
from probsched.measure import MeasureResult

AVX2 = ps.Target(isa=("avx", "avx2", "fma"))
AVX512 = ps.Target(isa=("avx2", "avx512f", "fma"))


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/bench_peak.py")


def test_the_peak_keeps_enough_chains_in_the_registers(bench):
    # two FMA pipes of up to 5 cycles need 10 chains in flight; all of them and the two
    # operands must stay in registers (16 on AVX2, 32 on AVX-512)
    for target, registers in ((AVX2, 16), (AVX512, 32)):
        assert 10 <= bench.fma_chains(target) <= registers - 2


@pytest.mark.parametrize("dot", ["dot_quads_madd", "dot_quads_emulated", "dot_quads_maddubs"])
def test_the_int8_peak_loop_computes_every_product_it_counts(bench, dot):
    # the peak counts 16 lanes of 4 products per accumulator and step: after 3 steps each
    # lane holds 3 dot products, of its own A where the product is plain vector operations
    # (one product of one A and one B would be computed once for all accumulators)
    vectors = 2
    loop = bench._njit(bench._vnni_peak_loop(dot, vectors), 1)
    rng = np.random.default_rng(0)
    low = -64 if dot == "dot_quads_maddubs" else -128  # vpmaddubsw: the weights of reduced range
    xu, xs = rng.integers(0, 256, 4 * vectors).astype(np.uint8), rng.integers(low, -low, 64).astype(np.int8)
    xi = np.zeros(16 * vectors, np.int32)
    loop(xu, xs, xi, 3, 1, 0)
    b = xs.reshape(16, 4).astype(np.int64)
    for i in range(vectors):
        a = xu[4 * i : 4 * i + 4] if dot in bench.OWN_A else xu[:4]
        assert xi[16 * i : 16 * i + 16].tolist() == (3 * b @ a.astype(np.int64)).tolist()


def test_kernels_offered_by_the_target_and_their_l1_panels(bench):
    avx2, avx512 = bench.float32_kernels(AVX2), bench.float32_kernels(AVX512)
    assert "matmul_6x16" in avx2 and "matmul_12x32" not in avx2  # 24 accumulators do not fit 16 registers
    assert avx512[0] in ("matmul_12x32", "matmul_14x32", "matmul_6x64") and set(avx2) < set(avx512)
    l1 = bench.l1_data_bytes()
    for m, n in ((14, 32), (6, 64), (4, 8)):
        k = bench.l1_panel(m, n)
        assert k % 16 == 0 and 16 <= k <= 512 and (m + n) * k * 4 <= l1 * 3 // 4


def test_peak_and_kernel_rates_are_positive(bench):
    assert bench.vector_peak("fma", 1, reps=1000) > 0
    assert bench.kernel_peak("matmul_4x16", 1, k=32, reps=10) > 0


def test_tuned_f32_times_a_stored_best_beside_numpy(tmp_path, capsys):
    w = ps.workloads.get("GMM:0")
    path = str(tmp_path / "r.db")
    with Database(path) as db:
        key = db.commit_workload(w)
        db.commit_record(TuningRecord.from_result(key, ps.Schedule(w.func), MeasureResult((1e-5,) * 3, 0.1), strategy="replay"))
    script = load_script("benchmarks/bench_tuned_f32.py")
    script.main(["--db", path, "--workloads", w.name, "--rounds", "2"])
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {w.name} |"))
    ours, numpy = (float(x) for x in row.split("|")[2:4])
    assert ours > 0 and numpy > 0 and np.isfinite(ours)


def test_kernels_ab_reads_the_generator_of_a_revision():
    ab = load_script("benchmarks/bench_kernels_ab.py")
    try:
        source = ab.source_at("HEAD")
    except (subprocess.CalledProcessError, FileNotFoundError) as err:  # not a git checkout, or no git
        pytest.skip(f"no git history: {err}")
    text = source(4, 8)
    assert "def kernel(C, c_off, c_si, c_sj, A, a_off, a_si, a_sk, B, b_off, b_sj, b_sk, K):" in text
    mk = ps.intrinsics.get("matmul_4x8").kernel()
    assert ab.kernel_rate(mk, 4, 8, 32)() > 0
