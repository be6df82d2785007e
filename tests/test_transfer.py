"""The cost model's transfer records: the shipped file, how a model starts from them, and
how ``ps.tune`` uses them (never a workload's own records)."""

import dataclasses
import logging

import numpy as np
import pytest

import probsched as ps
from probsched import cost_model as cm
from probsched.cost_model import transfer
from probsched.database import Database, TuningRecord
from probsched.ir.stmt import PrimFunc
from probsched.measure import LocalMeasurer, MeasureResult
from probsched.schedule import InstructionLog, Schedule
from probsched.search import EvolutionarySearch
from probsched.tuning.warm_start import start_model_from_transfer


@pytest.fixture(scope="module")
def shipped():
    records = transfer.load_transfer()
    assert records is not None, "the shipped transfer records are missing or stale: rebuild them (probsched/cost_model/transfer.py)"
    return records


@pytest.mark.parametrize("width", sorted(transfer.TRANSFER_PATHS))
def test_shipped_records_hold_every_suite_workload_with_todays_features(width):
    shipped = transfer.load_transfer(transfer.TRANSFER_PATHS[width])
    assert shipped is not None, f"{transfer.TRANSFER_PATHS[width]} is missing or stale: rebuild it (probsched/cost_model/transfer.py)"
    benchmarked = {"GMM:2", "GMM:3", "C1D:0", "C2D:2", "DEP:0", "T2D:0", "CBR:1", "SFM:2", "NRM:2"}
    # and other shapes of the depthwise convolution, which has no relative among those
    siblings = {"DEP:1", "DEP:2", "DEP:3"}
    assert set(shipped.names.values()) == benchmarked | siblings
    assert len(shipped.samples) == len(shipped.names)
    for s in shipped.samples:
        sch = InstructionLog.from_json(s["instructions"]).apply(Schedule(PrimFunc.from_json(s["func"])))
        stored = shipped.features[s["index"]]
        assert shipped.groups[s["index"]] == s["group"]
        # a failure here means the features changed: rebuild the records (module docstring)
        np.testing.assert_allclose(cm.extract(sch), stored, rtol=1e-5, atol=1e-5, err_msg=shipped.names[s["group"]])
    assert np.all(np.isfinite(shipped.seconds) & (shipped.seconds > 0))


def test_load_transfer_leaves_out_the_excluded_groups(shipped):
    t2d = next(g for g, n in shipped.names.items() if n == "T2D:0")
    rest = transfer.load_transfer(exclude=[t2d])
    assert t2d not in rest.groups and "T2D:0" not in rest.names.values()
    assert len(rest) == len(shipped) - shipped.groups.count(t2d)
    assert all(s["group"] != t2d for s in rest.samples)
    # a sample still points at its own record after the records before it shifted
    assert len(rest.samples) == len(shipped.samples) - 1
    for s in rest.samples:
        full = next(f for f in shipped.samples if f["group"] == s["group"])
        assert rest.groups[s["index"]] == s["group"]
        np.testing.assert_array_equal(rest.features[s["index"]], shipped.features[full["index"]])


def test_transfer_path_takes_the_users_file_or_the_shipped_one_of_the_closest_vector_width(monkeypatch, tmp_path):
    from probsched.target import Target

    avx2, avx512 = Target(isa=("avx", "avx2", "fma")), Target(isa=("avx2", "avx512f", "fma"))
    monkeypatch.delenv("PROBSCHED_TRANSFER", raising=False)
    assert transfer.transfer_path(avx512) == transfer.TRANSFER_PATHS[64]
    assert transfer.transfer_path(Target(isa=("sse4_2",))) == transfer.transfer_path(avx2)
    only_512 = {64: transfer.TRANSFER_PATHS[64], 32: str(tmp_path / "absent.npz")}
    monkeypatch.setattr(transfer, "TRANSFER_PATHS", only_512)
    assert transfer.transfer_path(avx2) == only_512[64]  # no AVX2 file shipped: the other one
    monkeypatch.setenv("PROBSCHED_TRANSFER", str(tmp_path / "mine.npz"))
    assert transfer.transfer_path(avx512) == str(tmp_path / "mine.npz")
    assert transfer.load_transfer() is None  # the user's file, missing: no silent fallback


def test_missing_or_stale_records_are_not_used_and_say_why(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="probsched.cost_model.transfer"):
        assert transfer.load_transfer(str(tmp_path / "none.npz")) is None
    assert "missing" in caplog.text
    with np.load(transfer.transfer_path()) as z:
        data = {k: z[k] for k in z.files}
    data["schema"] = np.asarray("0123456789abcdef")
    stale = tmp_path / "stale.npz"
    with open(stale, "wb") as fh:
        np.savez(fh, **data)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="probsched.cost_model.transfer"):
        assert transfer.load_transfer(str(stale)) is None
    assert "other features" in caplog.text and "0123456789abcdef" in caplog.text


def _record_db(path, workload, splits, failed=0):
    """A database of ``workload`` with one successful record per first-loop split factor in
    ``splits`` (run time = the factor, in µs), then ``failed`` crashed ones; no measuring."""
    func = workload.func
    with Database(str(path)) as db:
        key = db.commit_workload(workload)
        for n, factor in enumerate(list(splits) + [None] * failed):
            sch = Schedule(func)
            loop = sch.get_loops(sch.get_block(func.blocks()[-1].name))[0]
            if factor is None:
                db.commit_record(TuningRecord.from_result(key, sch, MeasureResult.failure("crash", "boom"), strategy="t"))
                continue
            sch.split(loop, [None, factor])
            db.commit_record(TuningRecord.from_result(key, sch, MeasureResult((factor * 1e-6,) * 3, 0.1), strategy="t"))
    return key


def _assert_samples_replay(records):
    """Each sample of ``records`` replays to the features stored for its record."""
    for sample in records.samples:
        sch = InstructionLog.from_json(sample["instructions"]).apply(Schedule(PrimFunc.from_json(sample["func"])))
        np.testing.assert_allclose(cm.extract(sch), records.features[sample["index"]], rtol=1e-6)


def test_build_transfer_caps_each_workload_across_databases(tmp_path):
    gmm, sfm = ps.workloads.small("GMM"), ps.workloads.small("SFM")
    g = _record_db(tmp_path / "a.db", gmm, [2, 4, 8], failed=1)
    _record_db(tmp_path / "b.db", gmm, [16, 32])
    s = _record_db(tmp_path / "c.db", sfm, [2])
    out = tmp_path / "t.npz"
    built = transfer.build_transfer([str(tmp_path / n) for n in ("a.db", "b.db", "c.db")], str(out), per_workload=4)
    assert built.groups == [g] * 4 + [s] and built.names == {g: gmm.name, s: sfm.name}
    np.testing.assert_allclose(built.seconds, [2e-6, 4e-6, 8e-6, 16e-6, 2e-6])  # the first four, in order
    loaded = transfer.load_transfer(str(out))
    assert loaded.groups == built.groups and [x["index"] for x in loaded.samples] == [0, 4]
    _assert_samples_replay(loaded)
    assert transfer.load_transfer(str(out), exclude=[g]).groups == [s]


def test_build_transfer_on_a_base_adds_workloads_and_replaces_the_ones_it_holds(tmp_path):
    gmm, sfm, nrm = ps.workloads.small("GMM"), ps.workloads.small("SFM"), ps.workloads.small("NRM")
    g = _record_db(tmp_path / "a.db", gmm, [2, 4])
    s = _record_db(tmp_path / "a.db", sfm, [8])
    base = tmp_path / "base.npz"
    transfer.build_transfer([str(tmp_path / "a.db")], str(base))
    _record_db(tmp_path / "b.db", gmm, [16])
    n = _record_db(tmp_path / "b.db", nrm, [32, 64])
    out = tmp_path / "t.npz"
    built = transfer.build_transfer([str(tmp_path / "b.db")], str(out), base=str(base))
    # base's SFM stays; GMM's records are the new database's; NRM is added
    assert built.groups == [s, g, n, n] and built.names == {s: sfm.name, g: gmm.name, n: nrm.name}
    np.testing.assert_allclose(built.seconds, [8e-6, 16e-6, 32e-6, 64e-6])
    loaded = transfer.load_transfer(str(out))
    assert sorted((x["group"], x["index"]) for x in loaded.samples) == sorted([(s, 0), (g, 1), (n, 2)])
    _assert_samples_replay(loaded)
    with pytest.raises(ValueError, match="missing"):
        transfer.build_transfer([str(tmp_path / "b.db")], str(out), base=str(tmp_path / "none.npz"))
    with pytest.raises(ValueError, match="in both"):
        built.concat(built)


def test_build_transfer_command(tmp_path, capsys):
    """``probsched build-transfer`` builds what build_transfer builds; a bad base is exit code 2."""
    from probsched.cli import main

    g = _record_db(tmp_path / "a.db", ps.workloads.small("GMM"), [2, 4, 8])
    out = tmp_path / "t.npz"
    assert main(["build-transfer", str(tmp_path / "a.db"), "--out", str(out), "--per-workload", "2"]) == 0
    assert f"{out}: 2 records" in capsys.readouterr().out
    assert transfer.load_transfer(str(out)).groups == [g, g]
    assert main(["build-transfer", str(tmp_path / "a.db"), "--out", str(out), "--base", str(tmp_path / "none.npz")]) == 2
    assert "probsched build-transfer: build_transfer: base" in capsys.readouterr().err


def test_build_transfer_leaves_out_records_that_replay_to_another_program(tmp_path, caplog):
    # a record whose trace today gives another program than the one it timed (the
    # primitives changed since) would label that other program with its time
    gmm = ps.workloads.small("GMM")
    key = _record_db(tmp_path / "a.db", gmm, [2, 4])
    with Database(str(tmp_path / "a.db")) as db:
        first = db.records(key)[0]
        db.commit_record(dataclasses.replace(first, candidate_hash="0" * len(first.candidate_hash), run_seconds=(9e-6,) * 3))
    with caplog.at_level(logging.WARNING, logger="probsched.cost_model.transfer"):
        built = transfer.build_transfer([str(tmp_path / "a.db")], str(tmp_path / "t.npz"))
    np.testing.assert_allclose(built.seconds, [2e-6, 4e-6])
    assert "replays to another program" in caplog.text


def _synthetic(rng, n, group):
    """Programs of 1-3 stores whose time grows with feature 0 (the same law in every group)."""
    feats = [rng.random((int(rng.integers(1, 4)), 6)).astype("float32") for _ in range(n)]
    return feats, [1.0 + 4.0 * float(f[:, 0].sum()) for f in feats], [group] * n


def test_a_model_with_transfer_records_ranks_a_new_group_before_seeing_it():
    rng = np.random.default_rng(0)
    px, pt, pg = _synthetic(rng, 96, "other")
    x, t, g = _synthetic(rng, 64, "new")
    model = cm.MLPModel(seed=0, hidden=(32,), epochs=300)
    assert not model.trained
    model.set_transfer(px, pt, pg)
    assert model.trained and model.n_transfer == 96 and model.n_trained == 0
    assert cm.pairwise_accuracy(model.predict_features(x), t) > 0.8
    # own records count for the retraining schedule, transfer ones do not
    assert model.update_features(x[:8], t[:8], g[:8]) and model.n_trained == 8
    assert not model.update_features(x[8:16], t[8:16], g[8:16]) and model.n_trained == 8
    assert model.update_features(x[16:], t[16:], g[16:]) and model.n_trained == 64
    # every training keeps the transfer records: not the model the own records alone make
    alone = cm.MLPModel(seed=0, hidden=(32,), epochs=300).fit_features(x, t, g)
    assert not np.allclose(model.predict_features(x), alone.predict_features(x))
    # fit replaces the own records and keeps the transfer ones
    model.fit_features(x[:10], t[:10], g[:10])
    assert model.n_trained == 10 and model.n_transfer == 96


def test_tune_starts_mlp_transfer_from_the_other_workloads_only(shipped):
    t2d = ps.workloads.get("T2D:0")
    key = t2d.func.structural_hash()
    assert key in shipped.groups
    model = cm.get("mlp-transfer", seed=0)
    assert model.wants_transfer and isinstance(model, cm.MLPModel)
    start_model_from_transfer(model, [key])
    assert model.n_transfer == len(shipped) - shipped.groups.count(key) and key not in model._transfer_g
    scratch = cm.get("mlp", seed=0)
    assert not scratch.wants_transfer and not scratch.trained
    with pytest.raises(ValueError, match="mlp-transfer"):
        cm.get("xgb", seed=0)


def test_mlp_transfer_is_the_default_of_tune_and_the_command_line():
    from probsched.cli import build_parser

    assert ps.TuningOptions().cost_model == "mlp-transfer" == ps.cost_model.DEFAULT_COST_MODEL
    for command in (["tune", "GMM:2"], ["bench"], ["tune-model", "bert_tiny"]):
        assert build_parser().parse_args(command).cost_model == "mlp-transfer", command


class _Spy(EvolutionarySearch):
    """Evolutionary search that notes whether the model could rank each batch."""

    def __init__(self):
        super().__init__(population=16, genetic_iters=1)
        self.ranked = []

    def generate(self, ctx, n):
        self.ranked.append(ctx.model_trained)
        return super().generate(ctx, n)


@pytest.fixture
def sixteen_per_workload(monkeypatch):
    """``load_transfer`` cut to 16 records per workload: ``ps.tune`` takes the same path and
    the model trains on an eighth of the records (seconds instead of half a minute)."""
    load = transfer.load_transfer

    def few(*args, **kwargs):
        records = load(*args, **kwargs)
        keep, taken = [], {}
        for i, g in enumerate(records.groups):
            taken[g] = taken.get(g, 0) + 1
            if taken[g] <= 16:
                keep.append(i)
        return records.take(keep)

    monkeypatch.setattr(transfer, "load_transfer", few)


@pytest.mark.parametrize("cost_model, first_batch_ranked", [("mlp-transfer", True), ("mlp", False)])
def test_the_first_batch_is_ranked_only_with_transfer_records(cost_model, first_batch_ranked, tmp_path, sixteen_per_workload):
    spy = _Spy()
    with LocalMeasurer(workers=1, repeat=1, min_repeat_ms=1) as m:
        ps.tune("GMM:small", trials=4, strategy=spy, cost_model=cost_model, database=str(tmp_path / "t.db"),
                measurer=m, seed=0, batch_size=2, retime_top=0)
    assert spy.ranked == [first_batch_ranked, True]
    with Database(str(tmp_path / "t.db")) as db:
        assert len(db.records(ps.workloads.small("GMM"))) == 4
