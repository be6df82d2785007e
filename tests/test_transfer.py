"""The cost model's transfer prior: the shipped records, how a model starts from them, and
how ``ps.tune`` uses them (never a workload's own records)."""

import logging

import numpy as np
import pytest

import probsched as ps
from probsched import cost_model as cm
from probsched.cost_model import transfer
from probsched.database import Database
from probsched.ir.stmt import PrimFunc
from probsched.measure import LocalMeasurer
from probsched.schedule import Schedule, ScheduleTrace
from probsched.search import EvolutionarySearch
from probsched.tuner import _resolve_model, _start_from_prior


@pytest.fixture(scope="module")
def prior():
    p = transfer.load_prior()
    assert p is not None, "the shipped prior is missing or stale: rebuild it (probsched/cost_model/transfer.py)"
    return p


def test_shipped_prior_holds_every_suite_workload_with_todays_features(prior):
    assert set(prior.names.values()) == {"GMM:2", "GMM:3", "C1D:0", "C2D:2", "DEP:0", "T2D:0", "CBR:1", "SFM:2", "NRM:2"}
    assert len(prior.samples) == len(prior.names)
    for s in prior.samples:
        sch = ScheduleTrace.from_json(s["instructions"]).apply(Schedule(PrimFunc.from_json(s["func"])))
        stored = prior.features[s["index"]]
        assert prior.groups[s["index"]] == s["group"]
        # a failure here means the features changed: rebuild the prior (module docstring)
        np.testing.assert_allclose(cm.extract(sch), stored, rtol=1e-5, atol=1e-5, err_msg=prior.names[s["group"]])
    assert np.all(np.isfinite(prior.seconds) & (prior.seconds > 0))


def test_load_prior_leaves_out_the_excluded_groups(prior):
    t2d = next(g for g, n in prior.names.items() if n == "T2D:0")
    rest = transfer.load_prior(exclude=[t2d])
    assert t2d not in rest.groups and "T2D:0" not in rest.names.values()
    assert len(rest) == len(prior) - prior.groups.count(t2d)
    assert all(s["group"] != t2d for s in rest.samples)


def test_a_missing_or_stale_prior_is_not_used_and_says_why(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="probsched.cost_model.transfer"):
        assert transfer.load_prior(str(tmp_path / "none.npz")) is None
    assert "missing" in caplog.text
    with np.load(transfer.PRIOR_PATH) as z:
        data = {k: z[k] for k in z.files}
    data["schema"] = np.asarray("0123456789abcdef")
    stale = tmp_path / "stale.npz"
    with open(stale, "wb") as fh:
        np.savez(fh, **data)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="probsched.cost_model.transfer"):
        assert transfer.load_prior(str(stale)) is None
    assert "other features" in caplog.text and "0123456789abcdef" in caplog.text


def _synthetic(rng, n, group):
    """Programs of 1-3 stores whose time grows with feature 0 (the same law in every group)."""
    feats = [rng.random((int(rng.integers(1, 4)), 6)).astype("float32") for _ in range(n)]
    return feats, [1.0 + 4.0 * float(f[:, 0].sum()) for f in feats], [group] * n


def test_a_model_with_a_prior_ranks_a_new_group_before_seeing_it():
    rng = np.random.default_rng(0)
    px, pt, pg = _synthetic(rng, 96, "other")
    x, t, g = _synthetic(rng, 64, "new")
    model = cm.MLPModel(seed=0, hidden=(32,), epochs=300)
    assert not model.trained
    model.set_prior(px, pt, pg)
    assert model.trained and model.n_prior == 96 and model.n_trained == 0
    assert cm.pairwise_accuracy(model.predict_features(x), t) > 0.8
    # own records count for the retraining schedule, prior ones do not
    assert model.update_features(x[:8], t[:8], g[:8]) and model.n_trained == 8
    assert not model.update_features(x[8:16], t[8:16], g[8:16]) and model.n_trained == 8
    assert model.update_features(x[16:], t[16:], g[16:]) and model.n_trained == 64
    # fit replaces the own records and keeps the prior
    model.fit_features(x[:10], t[:10], g[:10])
    assert model.n_trained == 10 and model.n_prior == 96


def test_tune_starts_the_default_model_from_the_other_workloads_only(prior):
    t2d = ps.workloads.get("T2D:0")
    key = t2d.func.structural_hash()
    assert key in prior.groups
    model, use_prior = _resolve_model("mlp", 0)
    assert use_prior and isinstance(model, cm.MLPModel)
    _start_from_prior(model, key)
    assert model.n_prior == len(prior) - prior.groups.count(key) and key not in model._prior_g
    scratch, use_prior = _resolve_model("mlp-scratch", 0)
    assert not use_prior and not scratch.trained
    with pytest.raises(ValueError, match="mlp-scratch"):
        _resolve_model("xgb", 0)


class _Spy(EvolutionarySearch):
    """Evolutionary search that notes whether the model could rank each batch."""

    def __init__(self):
        super().__init__(population=16, genetic_iters=1)
        self.ranked = []

    def generate(self, ctx, n):
        self.ranked.append(ctx.model_trained)
        return super().generate(ctx, n)


@pytest.mark.parametrize("cost_model, first_batch_ranked", [("mlp", True), ("mlp-scratch", False)])
def test_the_first_batch_is_ranked_only_with_the_prior(cost_model, first_batch_ranked, tmp_path):
    spy = _Spy()
    with LocalMeasurer(workers=1, repeat=1, min_repeat_ms=1) as m:
        ps.tune("GMM:small", trials=4, strategy=spy, cost_model=cost_model, database=str(tmp_path / "t.db"),
                measurer=m, seed=0, batch_size=2, retime_top=0)
    assert spy.ranked == [first_batch_ranked, True]
    with Database(str(tmp_path / "t.db")) as db:
        assert len(db.records(ps.workloads.small("GMM"))) == 4
