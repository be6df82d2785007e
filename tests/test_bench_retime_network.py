"""``benchmarks/retime_network.py``: re-timing a tuned network's database as the tuner's end of
run does (weights cold, each family's fastest), every task and precision with records."""

import importlib
import sys

import numpy as np
import onnx  # the test extra installs it
from onnx import TensorProto, helper
from scripts import ROOT

import probsched as ps
from probsched.database import Database, TuningRecord
from probsched.measure import MeasureResult


def test_every_task_with_records_is_retimed_cold_and_named_by_that(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    script = importlib.import_module("retime_network")
    w = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph), str(path))
    (task,) = ps.from_onnx(str(path)).tasks()
    with Database(str(tmp_path / "mm.db")) as db:
        key = db.commit_workload(task.workload)
        db.commit_record(TuningRecord.from_result(key, ps.Schedule(task.func), MeasureResult((1.0,))))  # a lucky hot time
    script.main(["--onnx", str(path), "--db", str(tmp_path / "mm.db"), "--out", str(tmp_path / "re.db"), "--precisions", "float32"])
    out = capsys.readouterr().out
    assert f"{task.name}:" in out and "re-timed in" in out
    with Database(str(tmp_path / "re.db")) as db:
        assert len({r.session for r in db.latest_retiming(task.workload)}) == 1
        assert db.latest_retiming(task.workload)[0].median < 1.0  # measured again, not the stored second
    with Database(str(tmp_path / "mm.db")) as db:  # the original is left as it was
        assert db.latest_retiming(task.workload) == []
