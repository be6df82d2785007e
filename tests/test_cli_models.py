"""``probsched import`` and ``probsched tune-model``: a real run on a tiny network in a
subprocess, the task table, and mistakes (exit 2, one message)."""

import json
import subprocess
import sys
import textwrap

import pytest

from probsched.cli import main

CLI = [sys.executable, "-m", "probsched.cli"]


def test_import_prints_the_task_table(capsys):
    assert main(["import", "resnet_tiny"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("resnet_tiny: ") and "distinct tasks" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "fused_" in line]
    assert len(rows) == 12
    shares = [float(line.rsplit("|", 2)[1].strip().rstrip("%")) for line in rows]
    assert sum(shares) == pytest.approx(100, abs=0.5)


def test_import_a_user_function(tmp_path, capsys):
    (tmp_path / "net.py").write_text(textwrap.dedent(
        """
        import numpy as np, jax

        W = np.ones((8, 4), np.float32)

        def model():
            return (lambda x: jax.nn.relu(x @ W)), (np.ones((2, 8), np.float32),)

        def not_a_model():
            return 3
        """
    ))
    assert main(["import", f"{tmp_path / 'net.py'}:model"]) == 0
    assert "fused_matmul_maximum" in capsys.readouterr().out
    assert main(["import", f"{tmp_path / 'net.py'}:not_a_model"]) == 2
    assert "expected (fn, example_args)" in capsys.readouterr().err


def test_unknown_model_is_one_message(capsys):
    assert main(["import", "resnet51"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'resnet51'" in err and "resnet50" in err
    assert main(["tune-model", "resnet51", "--trials", "1"]) == 2


@pytest.mark.slow(rotation=4)  # the CLI's tune-model runs in every run on an ONNX file (test_onnx_models)
def test_tune_model_on_a_tiny_network(tmp_path):
    db, out_json = tmp_path / "m.db", tmp_path / "m.json"
    run = subprocess.run(
        [*CLI, "tune-model", "bert_tiny", "--trials", "4", "--batch-size", "2", "--db", str(db),
         "--strategy", "replay", "--retime-top", "0", "--json", str(out_json)],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert "bert_tiny: 4 trials over 8 tasks (gradient)" in run.stdout
    assert "| jax.jit |" in run.stdout and "| probsched | " in run.stdout
    data = json.loads(out_json.read_text())
    assert data["trials"] == 4 and sum(t["trials"] for t in data["tasks"]) == 4
    assert set(data["compare_ms"]) == {"probsched", "jax.jit"}
