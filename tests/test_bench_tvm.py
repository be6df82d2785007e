"""``benchmarks/bench_tvm.py seeds``: both tuners over several seeds, from their files
(TVM itself is not needed: ``tune`` and ``compare`` need it and are run by hand)."""

import doctest
import json

import pytest
from scripts import load_script


@pytest.fixture(scope="module")
def bench_tvm():
    return load_script("benchmarks/bench_tvm.py")


def test_its_doctests_pass(bench_tvm):
    result = doctest.testmod(bench_tvm)
    assert result.attempted >= 2 and result.failed == 0


def test_seeds_reads_our_bench_and_tvm_summaries_and_takes_medians(bench_tvm, tmp_path, capsys):
    def ours(name, gmm, dep):
        path = tmp_path / name
        path.write_text(json.dumps({"workloads": [{"workload": "GMM:2", "ours_worker_us": gmm},
                                                   {"workload": "DEP:0", "ours_worker_us": dep}]}))
        return str(path)

    def tvm(name, **times):
        path = tmp_path / name
        path.write_text(json.dumps({"_about": "note", **{k.replace("_", ":"): {"tvm_worker_us": v} for k, v in times.items()}}))
        return str(path)

    out = tmp_path / "seeds.md"
    code = bench_tvm.main([
        "seeds",
        "--run", "0", ours("o0.json", 100.0, 10.0), tvm("t0.json", GMM_2=200.0, DEP_0=10.0),
        "--run", "1", ours("o1.json", 120.0, 20.0), tvm("t1.json", GMM_2=180.0, DEP_0=999.0), tvm("t1b.json", DEP_0=10.0),
        "--run", "2", ours("o2.json", 90.0, 5.0), tvm("t2.json", GMM_2=270.0, DEP_0=15.0),
        "--out", str(out),
    ])
    assert code == 0
    data = json.loads((tmp_path / "seeds.json").read_text())
    gmm, dep = data["rows"]
    assert gmm["workload"] == "GMM:2" and gmm["ratio_1"] == pytest.approx(1.5)
    assert dep["tvm_1"] == 10.0  # the later summary of seed 1 replaced the earlier one's DEP:0
    assert gmm["ours_median"] == 100.0 and gmm["tvm_median"] == 200.0 and dep["ratio_of_medians"] == pytest.approx(1.0)
    assert data["geomean_of_medians"] == pytest.approx(2.0 ** 0.5)
    assert data["geomean"]["0"] == pytest.approx(2.0 ** 0.5)
    assert "| GMM:2 | 100.0 | 200.0 | 2.00x |" in capsys.readouterr().out and out.read_text().startswith("| workload |")


def test_seeds_without_a_tvm_summary_says_so(bench_tvm, tmp_path):
    with pytest.raises(SystemExit, match="give at least one TVM summary"):
        bench_tvm.main(["seeds", "--run", "0", str(tmp_path / "o.json")])
