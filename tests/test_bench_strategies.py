"""``benchmarks/bench_strategies.py``: the sweep's order and resume, and its summary (the
tuning itself is ``ps.tune``'s, tested in test_search.py; here it is replaced by a stub)."""

import doctest
import json
from types import SimpleNamespace

import pytest
from scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/bench_strategies.py")


def test_its_doctests_pass(bench):
    result = doctest.testmod(bench)
    assert result.attempted >= 1 and result.failed == 0


def test_one_run_tunes_from_scratch_without_retiming_and_keeps_the_best_so_far(bench, monkeypatch):
    calls = []

    def fake_tune(spec, **kw):
        calls.append((spec, kw))
        inf = float("inf")
        history = [SimpleNamespace(best_seconds=b, error=e) for b, e in [(inf, "build"), (2e-6, None), (1e-6, None)]]
        return SimpleNamespace(history=history)

    monkeypatch.setattr(bench.ps, "tune", fake_tune)
    evo = bench.one_run("NRM:2", "evolutionary", 3, 3)
    bench.one_run("NRM:2", "replay", 3, 3)
    assert evo["curve_us"] == [None, pytest.approx(2.0), pytest.approx(1.0)] and evo["failed"] == 1
    (_, evo_kw), (_, rnd_kw) = calls
    assert evo_kw["retime_top"] == 0 and evo_kw["seed"] == 3 and evo_kw["trials"] == 3
    assert evo_kw["cost_model"] == bench.ps.cost_model.DEFAULT_COST_MODEL and rnd_kw["cost_model"] is None


def test_run_alternates_which_strategy_goes_first_and_resumes(bench, monkeypatch, tmp_path):
    order = []

    def fake_run(spec, strategy, seed, trials):
        order.append((spec, strategy, seed))
        return {"workload": spec, "strategy": strategy, "seed": seed, "curve_us": [1.0] * trials,
                "failed": 0, "wall_s": 0.0, "finished": "now"}

    monkeypatch.setattr(bench, "one_run", fake_run)
    out = str(tmp_path / "s.json")
    assert bench.main(["run", "--workloads", "GMM:2,C1D:0", "--seeds", "0", "--trials", "2", "--out", out]) == 0
    assert order == [("GMM:2", "evolutionary", 0), ("GMM:2", "replay", 0), ("C1D:0", "replay", 0), ("C1D:0", "evolutionary", 0)]
    order.clear()
    assert bench.main(["run", "--workloads", "GMM:2,C1D:0", "--seeds", "0,1", "--trials", "2", "--out", out]) == 0
    assert order == [("GMM:2", "replay", 1), ("GMM:2", "evolutionary", 1), ("C1D:0", "evolutionary", 1), ("C1D:0", "replay", 1)]
    assert len(json.loads(open(out).read())["runs"]) == 8
    with pytest.raises(SystemExit, match="holds 2-trial runs, not 4"):
        bench.main(["run", "--workloads", "GMM:2", "--trials", "4", "--out", out])


def test_table_counts_wins_and_the_trial_where_evolutionary_reaches_replays_best(bench, tmp_path, capsys):
    def runs(spec, strategy, curves):
        return [{"workload": spec, "strategy": strategy, "seed": s, "curve_us": c} for s, c in enumerate(curves)]

    data = {"trials": 4, "host": "test host", "runs": (
        # GMM:2: evolutionary's median curve is [None, 9, 5, 5]; replay's median best is 6: hit at trial 3
        runs("GMM:2", "evolutionary", [[None, 9.0, 5.0, 5.0], [10.0, 9.0, 4.0, 4.0], [None, 9.0, 7.0, 7.0]])
        + runs("GMM:2", "replay", [[8.0, 8.0, 6.0, 6.0], [9.0, 9.0, 9.0, 5.0], [7.0, 7.0, 7.0, 7.0]])
        # C1D:0, listed before in the file but after in the suite: replay wins, never reached
        + runs("C1D:0", "evolutionary", [[3.0] * 4, [3.0] * 4, [3.0] * 4])
        + runs("C1D:0", "replay", [[2.0] * 4, [2.0] * 4, [2.0] * 4])
        + runs("DEP:0", "replay", [[1.0] * 4])  # one strategy only: left out
    )}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    rows = bench.summarise(data)
    assert list(rows) == ["GMM:2", "C1D:0"]
    assert rows["GMM:2"]["evolutionary"]["best"] == [5.0, 4.0, 7.0] and rows["GMM:2"]["replay"]["median"] == 6.0
    assert rows["GMM:2"]["hit_trial"] == 3 and rows["GMM:2"]["evo_over_replay"] == pytest.approx(5 / 6)
    assert rows["C1D:0"]["hit_trial"] is None
    assert bench.main(["table", str(path), "--out", str(tmp_path / "s.md")]) == 0
    text = capsys.readouterr().out
    assert "| GMM:2 | 5.0 / 4.0 / 7.0 | 6.0 / 5.0 / 7.0 | 5.0 | 6.0 | 0.83 | 3 |" in text and "| 1.50 | never |" in text
    assert "ahead on 1 of 2; reaches replay's best within 2 trials on 0 of 2" in text
    assert (tmp_path / "s.md").read_text() == text
