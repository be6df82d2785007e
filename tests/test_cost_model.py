"""Cost models: interface, persistence, determinism, incremental updates, and learning a
known ranking of real schedules."""

import math

import numpy as np
import pytest
from scripts import load_script

import probsched as ps
from handlers import seed, trace
from probsched import cost_model as cm


def _matmul():
    A = ps.placeholder((64, 64), name="A")
    B = ps.placeholder((64, 64), name="B")
    k = ps.reduce_axis(64, name="k")
    C = ps.compute((64, 64), lambda i, j: ps.sum(A[i, k] * B[k, j], axis=k), name="C")
    return ps.create_func([A, B, C], name="mm")


def _program(sch):
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=16))
    j0, j1 = sch.split(j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=64))
    sch.reorder(i0, j0, k, i1, j1)
    if sch.sample_categorical([True, False], name="vec"):
        sch.vectorize(j1)


@pytest.fixture(scope="module")
def synthetic():
    """Real schedules with a synthetic time that is a known function of their decisions:
    fastest with an inner j tile of 16, an inner i tile of 4, and vectorized."""
    func = _matmul()
    schs, secs = [], []
    for i in range(260):
        sch = ps.Schedule(func)
        tr = trace(seed(_program, i)).get_trace(sch)
        i1, j1, vec = tr["C/i/tile"].value[-1], tr["C/j/tile"].value[-1], tr["vec"].value
        secs.append(1.0 + abs(math.log2(j1) - 4) + 0.5 * abs(math.log2(i1) - 2) + (0.0 if vec else 1.5))
        schs.append(sch)
    feats = cm.extract_batch(schs)
    return schs, feats, secs


def _split(data, n_train=160):
    schs, feats, secs = data
    return (feats[:n_train], secs[:n_train]), (feats[n_train:], secs[n_train:])


def _small_mlp(seed=0, epochs=40):
    # one batch size for every test: the compiled training step is shared
    return cm.MLPModel(seed=seed, hidden=(64, 64), epochs=epochs, lr=2e-3, batch=64)


def test_mlp_learns_known_ranking_and_beats_random(synthetic):
    (ftr, ttr), (fte, tte) = _split(synthetic)
    g = ["mm"] * len(ftr)
    untrained = _small_mlp(epochs=0).fit_features(ftr, ttr, g)
    model = _small_mlp().fit_features(ftr, ttr, g)
    acc = cm.pairwise_accuracy(model.predict_features(fte), tte)
    acc0 = cm.pairwise_accuracy(untrained.predict_features(fte), tte)
    acc_random = cm.pairwise_accuracy(cm.RandomModel(0).fit_features(ftr, ttr, g).predict_features(fte), tte)
    assert acc >= 0.85 and acc > acc0 + 0.1 and acc > acc_random + 0.2, (acc, acc0, acc_random)
    assert cm.top_k_recall(model.predict_features(fte), tte, k=10, within=50) >= 0.6


def test_ridge_beats_random(synthetic):
    (ftr, ttr), (fte, tte) = _split(synthetic)
    ridge = cm.RidgeModel(alpha=1.0).fit_features(ftr, ttr, ["mm"] * len(ftr))
    assert cm.pairwise_accuracy(ridge.predict_features(fte), tte) > 0.7


def test_schedule_level_fit_predict_and_groups(synthetic):
    schs, _, secs = synthetic
    model = cm.RidgeModel().fit(schs[:40], secs[:40])
    scores = model.predict(schs[40:50])
    assert scores.shape == (10,) and scores.dtype == np.float64
    assert cm.group_of(schs[0]) == schs[0].func.structural_hash()
    with pytest.raises(ValueError, match="groups"):
        model.fit(schs[:3], secs[:3], groups=["a"])


def test_mlp_deterministic_under_seed(synthetic):
    (ftr, ttr), (fte, _) = _split(synthetic, 64)
    g = ["mm"] * len(ftr)
    a = _small_mlp(seed=3, epochs=5).fit_features(ftr, ttr, g).predict_features(fte)
    b = _small_mlp(seed=3, epochs=5).fit_features(ftr, ttr, g).predict_features(fte)
    c = _small_mlp(seed=4, epochs=5).fit_features(ftr, ttr, g).predict_features(fte)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


@pytest.mark.parametrize("make", [lambda: _small_mlp(epochs=3), lambda: cm.RidgeModel(0.5), lambda: cm.RandomModel(7)])
def test_save_load_round_trip(synthetic, tmp_path, make):
    (ftr, ttr), (fte, _) = _split(synthetic, 64)
    model = make().fit_features(ftr, ttr, ["mm"] * len(ftr))
    path = str(tmp_path / "model.npz")
    model.save(path)
    back = cm.CostModel.load(path)
    assert type(back) is type(model) and back.n_trained == model.n_trained == 64
    if isinstance(model, cm.RandomModel):  # same seed: the same stream from the start
        np.testing.assert_array_equal(cm.RandomModel(7).predict_features(fte), back.predict_features(fte))
    else:
        np.testing.assert_allclose(back.predict_features(fte), model.predict_features(fte), rtol=1e-6)
    assert len(back._data_x) == 64 and all((a == b).all() for a, b in zip(back._data_x, model._data_x))
    with pytest.raises(ValueError, match="not a"):
        (cm.RidgeModel if isinstance(model, cm.MLPModel) else cm.MLPModel).load(path)


def test_update_retrains_when_data_grew_enough(synthetic):
    _, feats, secs = synthetic
    g = ["mm"] * len(feats)
    model = cm.RidgeModel()
    assert model.update_features(feats[:40], secs[:40], g[:40]) and model.n_trained == 40
    assert not model.update_features(feats[40:50], secs[40:50], g[40:50])  # +10 < 32
    assert model.n_trained == 40
    assert model.update_features(feats[50:80], secs[50:80], g[50:80])  # +40 >= max(32, 20% of 40)
    assert model.n_trained == 80
    mlp = _small_mlp(epochs=2)
    assert mlp.update(synthetic[0][:64], secs[:64]) and mlp.n_trained == 64


def test_predict_reuses_compiled_buckets(synthetic):
    (ftr, ttr), _ = _split(synthetic, 64)
    model = _small_mlp(epochs=1).fit_features(ftr, ttr, ["mm"] * len(ftr))
    from probsched.cost_model.mlp import _jitted_scores

    model.predict_features(ftr[:10])
    before = _jitted_scores()._cache_size()
    for n in (3, 17, 40, 64):
        assert model.predict_features(ftr[:n]).shape == (n,)
    assert _jitted_scores()._cache_size() == before  # all in the 64-program bucket


def test_metrics_and_normalisation():
    t = [1.0, 2.0, None, 4.0]
    y = cm.normalized_throughput(t, ["a", "a", "a", "b"])
    np.testing.assert_allclose(y, [1.0, 0.5, 0.0, 1.0])
    assert cm.pairwise_accuracy(np.array([1.0, 0.0, 5.0, 0.0]), t, ["a", "a", "a", "b"]) == pytest.approx(1 / 3)  # only (t=1, t=2) is ordered right
    assert cm.top_k_recall(np.array([0.0, 1.0, 2.0]), [1.0, 2.0, 3.0], k=1, within=1) == 0.0


def test_benchmark_record_loader_is_tolerant(tmp_path):
    import gzip
    import json

    bench = _bench_module()
    w = ps.workloads.get("GMM:2")
    sch = ps.Schedule(w.func)
    sch.split(sch.get_loops(sch.get_block("Z"))[1], [None, 8])
    good = {"workload_hash": w.func.structural_hash(), "instructions": sch.instructions.to_json(), "run_seconds": [0.2, 0.1, 0.3]}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "error_kind": "timeout", "error_message": "run exceeded the 20 s timeout"}),
        json.dumps({**good, "error_kind": "compile", "run_seconds": []}),  # unknown speed: left out
        json.dumps({**good, "workload_hash": "unknown"}),
        json.dumps({**good, "instructions": "[]"}),  # does not replay
    ]
    p = tmp_path / "records.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write("\n".join(lines) + "\n")
    records, bad = bench.load_records(str(p))
    assert len(records) == 5 and bad == 1
    schs, secs, names = bench.rebuild(records, log=lambda s: None)
    assert secs == [0.2, float("inf")] and names == ["GMM:2", "GMM:2"]
    assert schs[0].mod == sch.mod


def _bench_module():
    return load_script("benchmarks/bench_cost_model.py")


def test_pairwise_accuracy_min_gap():
    t = [1.0, 1.05, 2.0, 4.0]
    s = np.array([0.0, 1.0, -1.0, -2.0])  # swaps only the pair 5% apart
    assert cm.pairwise_accuracy(s, t) == pytest.approx(5 / 6)
    assert cm.pairwise_accuracy(s, t, min_gap=0.1) == 1.0


def test_benchmark_sessions_and_noise_ceiling():
    bench = _bench_module()
    assert bench.sessions([{"timestamp": 10.0}, {"timestamp": 5000.0}, {"timestamp": 20.0}, {}]) == [0, 1, 0, -1]
    # repeats that always agree: the ceiling is 1; one record whose repeats straddle
    # another's median makes one of its three held-out orders wrong
    recs = [{"run_seconds": [1.0, 1.0, 1.0]}, {"run_seconds": [2.0, 2.0, 2.0]}, {"error_kind": "timeout", "error_message": "run timed out"}]
    assert bench.repeat_ceiling(recs, ["a"] * 3) == 1.0
    recs[0]["run_seconds"] = [1.0, 3.0, 1.0]
    acc = bench.repeat_ceiling(recs, ["a"] * 3)
    assert acc == pytest.approx((2 / 3 + 1 + 1) / 3)


def test_benchmark_duplicate_spread():
    bench = _bench_module()
    recs = [{"candidate_hash": h} for h in ("a", "a", "b", "a", "a", "c")]
    # session 0: program a timed at 1 and 3 (3x); session 1: a at 2 and 2.2, c once
    spread = bench.duplicate_spread(recs, [1.0, 3.0, 5.0, 2.0, 2.2, 1.0], [0, 0, 0, 1, 1, 1])
    assert spread[0] == (1, 3.0) and spread[1][0] == 1 and spread[1][1] == pytest.approx(1.1)


def test_benchmark_quality_skips_sessions_and_reports_per_workload(tmp_path):
    import json

    bench = _bench_module()
    w = ps.workloads.get("GMM:2")
    lines = []
    for k, f in enumerate((2, 4, 8, 16, 32, 64, 2, 4, 8, 16, 32, 64)):
        sch = ps.Schedule(w.func)
        sch.split(sch.get_loops(sch.get_block("Z"))[1], [None, f])
        stamp = k * 60.0 + (0.0 if k < 6 else 1e5)  # two sessions, 6 records each
        t = 1.0 / f if k >= 6 else 1.0  # the first session's times say nothing
        lines.append(json.dumps({"workload_hash": w.func.structural_hash(), "instructions": sch.instructions.to_json(),
                                 "run_seconds": [t], "timestamp": stamp, "candidate_hash": str(k)}))
    p = tmp_path / "records.jsonl"
    p.write_text("\n".join(lines) + "\n")
    logs = []
    res = bench.quality([str(p)], splits=1, skip_sessions=(0,), log=logs.append)
    assert any("left out sessions 0 (--skip-sessions): 6 records" in s for s in logs)
    assert any(s.startswith("6 records") for s in logs)
    per = res["same-workload split, per workload"]
    assert set(per) == {("MLP", "GMM:2"), ("Ridge", "GMM:2"), ("Random", "GMM:2")}
    assert per[("Ridge", "GMM:2")] == res["same-workload split"]["Ridge"][0]  # one workload: the same pairs


def test_benchmark_transfer_later_compares_the_two_models_on_later_records():
    from probsched.cost_model.transfer import TransferRecords

    bench = _bench_module()
    rng = np.random.default_rng(0)
    feats = [rng.random((int(rng.integers(1, 4)), 6)).astype("float32") for _ in range(90)]
    secs = np.array([1.0 + 4.0 * float(f[:, 0].sum()) for f in feats])  # one law in every group
    groups = [f"g{i % 3}" for i in range(90)]
    records = TransferRecords(feats, secs, groups, {f"g{i}": f"W{i}" for i in range(3)}, [])
    lines = []
    out = bench.transfer_later(records, own=(4,), k=4, seeds=1, log=lines.append)
    assert set(out) == {(4, "mlp"), (4, "mlp-transfer")}
    # with 4 own records, the 60 of the other groups that follow the same law carry the ranking
    assert out[(4, "mlp-transfer")][0] > 0.8 and out[(4, "mlp-transfer")][0] > out[(4, "mlp")][0]
    assert all(ratio >= 1.0 for _, ratio in out.values())
    assert any(line.startswith("| 4 | mlp-transfer |") for line in lines)
