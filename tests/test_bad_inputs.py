"""A user's mistakes and old files get one clear message (issue #60's smaller cases): an
older database schema, a pytree input to ``ps.from_jax``, ``--trials 0``, a stored name
that is not in the database."""

import sqlite3

import numpy as np
import pytest

import probsched as ps
from probsched.cli import main
from probsched.database import Database, DatabaseError, TuningRecord
from probsched.measure import MeasureResult

W = ps.workloads.small("GMM")


def _filled(path) -> None:
    with Database(str(path)) as db:
        db.commit_workload(W)
        db.commit_record(TuningRecord.from_result(W, ps.Schedule(W.func), MeasureResult((1e-5,) * 3, 0.1)))


@pytest.mark.parametrize("table, column", [("records", "decisions"), ("workloads", "func_json"), ("retimings", "session")])
def test_a_database_missing_a_column_names_the_schema_and_what_to_do(tmp_path, table, column, capsys):
    path = tmp_path / "old.db"
    _filled(path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    with pytest.raises(DatabaseError) as err:
        Database(str(path))
    text = str(err.value)
    assert f"{table}.{column}" in text and "schema version 1" in text and "reads version 1" in text
    assert "export" in text and "new database" in text and str(path) in text
    assert main(["show", "GMM:small", "--db", str(path)]) == 2  # the CLI: one line, no traceback
    out = capsys.readouterr().err
    assert f"{table}.{column}" in out and "Traceback" not in out and out.count("\n") == 1


def test_a_database_missing_a_table_says_so(tmp_path):
    path = tmp_path / "old.db"
    _filled(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("DROP TABLE records")
    with pytest.raises(DatabaseError, match="no table records"):
        Database(str(path))


@pytest.mark.parametrize(
    "arg, path",
    [({"a": np.ones((2, 3), np.float32)}, r"argument 0\['a'\]"), ((np.ones(3, np.float32),) * 2, r"argument 0\[0\]"),
     ([np.ones(3, np.float32)], r"argument 0\[0\]")],
)
def test_a_pytree_input_is_refused_naming_its_leaves_not_its_dtype(arg, path):
    with pytest.raises(ps.FrontEndError, match=path) as err:
        ps.from_jax(lambda t: t, arg)
    assert "object" not in str(err.value) and "separate arguments" in str(err.value)


def test_none_as_an_input_is_named_as_none():
    with pytest.raises(ps.FrontEndError, match="argument 1 is None"):
        ps.from_jax(lambda a, b: a, np.ones(3, np.float32), None)


def test_a_compiled_model_called_with_a_pytree_says_what_it_takes():
    x = np.ones((2, 3), np.float32)
    model = ps.compile(lambda a: a * 2.0, x, candidates=1)
    with pytest.raises(ps.KernelArgumentError, match=r"argument 0 \(input0\) is a dict; .* takes arrays, one per argument"):
        model({"a": x})


def test_show_a_stored_name_not_in_the_database_lists_close_names(tmp_path, capsys):
    path = tmp_path / "t.db"
    with Database(str(path)) as db:
        for name in ("net/00_fused_matmul_add", "net/01_fused_softmax"):
            func = W.func.replace(name=name.split("/")[1])
            key = db.commit_workload(ps.workloads.workload.as_workload(func).__class__(name, func, 0, (), reference_fn=None))
            db.commit_record(TuningRecord.from_result(key, ps.Schedule(func), MeasureResult((1e-5,) * 3, 0.1)))
    assert main(["show", "net/09_nope", "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no workload named 'net/09_nope' in this database" in err and "net/00_fused_matmul_add" in err
    assert "expected NAME:INDEX" not in err and err.count("\n") == 1
    assert main(["show", "net/00_fused_matmul_add", "--db", str(path)]) == 0


def test_trials_0_means_no_new_trial_in_tune_and_tune_model(tmp_path, capsys):
    # tune: the database holds nothing to report: one line, exit 1, no measuring worker started
    db = str(tmp_path / "t.db")
    assert main(["tune", "GMM:small", "--trials", "0", "--db", db, "-q"]) == 1
    err = capsys.readouterr().err
    assert "--trials 0 measures nothing new" in err and "no successful record of GMM:small" in err
    _filled(tmp_path / "t.db")  # with a record: it is reported (as bench --trials 0 does)
    assert main(["tune", "GMM:small", "--trials", "0", "--db", db, "-q", "--no-compare", "--retime-top", "0"]) == 0
    assert "best after 0 new trials" in capsys.readouterr().out


@pytest.mark.slow(rotation=0)  # --trials 0 of tune and tune-model is checked in every run (test_trials_0_means_no_new_trial...)
def test_tune_model_with_trials_0_compiles_without_a_per_trial_time(tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "net.py").write_text(
        "import numpy as np\n"
        "def model():\n"
        "    w = np.full((4, 3), 0.5, np.float32)\n"
        "    return (lambda x: x @ w), (np.ones((2, 4), np.float32),)\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "probsched.cli", "tune-model", f"{tmp_path / 'net.py'}:model", "--trials", "0",
         "--db", str(tmp_path / "m.db"), "--no-compare", "--json", str(tmp_path / "m.json"), "-q"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "0 trials over 1 tasks" in run.stdout and "nothing measured" in run.stdout and "per trial" not in run.stdout
    assert json.loads((tmp_path / "m.json").read_text())["seconds_per_trial"] is None
