"""ps.compile with databases edited by hand: a record that no longer serves is skipped with a
warning naming the task, the record and the database, never a wrong model or a bare error."""

import json
import logging
import sqlite3

import numpy as np
import pytest

import jax

import probsched as ps
from handlers import seed
from probsched.database import Database, TuningRecord
from probsched.measure import MeasureResult

W = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
X = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)


def fn(x):
    return jax.nn.relu(x @ W)


def other(x):
    return jax.nn.sigmoid(x @ W[:, :12])


@pytest.fixture(scope="module")
def task():
    (t,) = ps.from_jax(fn, X).tasks()
    return t


def split_schedule(func, factors_seed: int = 0) -> ps.Schedule:
    """The unscheduled function with its last block's inner loop split by a sampled tile."""
    sch = ps.Schedule(func)
    loops = sch.get_loops(sch.get_block(func.blocks()[-1].name))

    def program(s):
        s.split(loops[1], s.sample_perfect_tile(loops[1], n=2))

    seed(program, factors_seed)(sch)
    return sch


def make_db(path, task, schedules_and_seconds) -> None:
    with Database(str(path)) as db:
        key = db.commit_workload(task.workload)
        for sch, sec in schedules_and_seconds:
            db.commit_record(TuningRecord.from_result(key, sch, MeasureResult((sec,) * 3)))


def edit(path, sql: str, *args) -> None:
    con = sqlite3.connect(str(path))
    with con:
        con.execute(sql, args)
    con.close()


def compile_and_check(path, caplog) -> ps.CompiledModel:
    with caplog.at_level(logging.WARNING):
        model = ps.compile(fn, X, database=str(path), candidates=2)
    np.testing.assert_allclose(model(X), np.asarray(jax.jit(fn)(X)), rtol=1e-5, atol=1e-5)
    return model


def _fastest(path) -> str:
    con = sqlite3.connect(str(path))
    (h,) = con.execute("SELECT candidate_hash FROM records ORDER BY median LIMIT 1").fetchone()
    con.close()
    return h


CORRUPTIONS = {
    "invalid JSON": ("UPDATE records SET instructions = ? WHERE candidate_hash = ?", "{not json"),
    "an unknown instruction": (
        "UPDATE records SET instructions = ? WHERE candidate_hash = ?",
        json.dumps({"format": 1, "instructions": [{"kind": "teleport", "inputs": [], "attrs": [], "outputs": []}]}),
    ),
}


@pytest.mark.parametrize("what", sorted(CORRUPTIONS))
def test_a_best_record_that_does_not_replay_falls_back_to_the_next(tmp_path, task, caplog, what):
    db = tmp_path / "t.db"
    make_db(db, task, [(split_schedule(task.func, 0), 1e-6), (ps.Schedule(task.func), 2e-6)])
    bad = _fastest(db)
    sql, value = CORRUPTIONS[what]
    edit(db, sql, value, bad)
    model = compile_and_check(db, caplog)
    (choice,) = model.choices
    assert choice.source == "database" and choice.seconds == pytest.approx(2e-6)  # the next record
    text = caplog.text
    assert task.name in text and bad[:12] in text and str(db) in text and "does not replay" in text
    caplog.clear()  # compiled again (a network that warned is not kept whole): it warns again
    compile_and_check(db, caplog)
    assert bad[:12] in caplog.text and "does not replay" in caplog.text


def test_a_decision_outside_its_support_falls_back_to_a_predicted_schedule(tmp_path, task, caplog):
    db = tmp_path / "t.db"
    make_db(db, task, [(split_schedule(task.func, 0), 1e-6)])
    con = sqlite3.connect(str(db))
    (text,) = con.execute("SELECT instructions FROM records").fetchone()
    con.close()
    log = json.loads(text)
    for ins in log["instructions"]:
        if ins["kind"] == "sample_perfect_tile":
            ins["decision"] = {"tuple": [3, 7]}  # 21 is not the loop's extent of 16
            ins["outputs"] = [{"tuple": [3, 7]}]
        if ins["kind"] == "split":
            ins["attrs"] = [["factors", [3, 7]]]
    edit(db, "UPDATE records SET instructions = ?", json.dumps(log))
    model = compile_and_check(db, caplog)
    assert [c.source for c in model.choices] == ["predicted"]
    assert task.name in caplog.text and "does not replay" in caplog.text


def test_a_record_filed_under_another_task_is_not_used(tmp_path, task, caplog):
    db = tmp_path / "t.db"
    (stranger,) = ps.from_jax(other, X).tasks()
    foreign = split_schedule(stranger.func, 1)
    make_db(db, task, [(ps.Schedule(task.func), 5e-6)])
    with Database(str(db)) as d:  # the other task's schedule, filed under this task's key
        key = d.commit_workload(task.workload)
        rec = TuningRecord.from_result(key, foreign, MeasureResult((1e-7,) * 3))
        d.commit_record(rec)
    model = compile_and_check(db, caplog)
    (choice,) = model.choices
    assert choice.source == "database" and choice.seconds == pytest.approx(5e-6)
    assert rec.candidate_hash[:12] in caplog.text


def test_run_seconds_that_are_not_json_skip_the_record_with_a_warning(tmp_path, task, caplog):
    db = tmp_path / "t.db"
    make_db(db, task, [(split_schedule(task.func, 0), 1e-6), (ps.Schedule(task.func), 2e-6)])
    bad = _fastest(db)
    edit(db, "UPDATE records SET run_seconds = 'oops' WHERE candidate_hash = ?", bad)
    model = compile_and_check(db, caplog)
    assert model.choices[0].seconds == pytest.approx(2e-6)
    assert "does not decode" in caplog.text and bad[:12] in caplog.text and str(db) in caplog.text
    with Database(str(db)) as d:  # the database still answers about the rest
        assert len(d.records(task.workload)) == 1


def scaled(c):
    """``fn`` with its epilogue scaled by ``c``: the same program but for one constant (as a
    quantized layer's requantizing scale is, calibrated on other inputs)."""
    return lambda x: jax.nn.relu(x @ W) * c


def test_a_task_without_records_takes_its_twins_records(tmp_path, caplog):
    (a,) = ps.from_jax(scaled(0.5), X).tasks()
    (b,) = ps.from_jax(scaled(0.25), X).tasks()
    assert a.key != b.key
    path = tmp_path / "twin.db"
    make_db(path, a, [(split_schedule(a.func, 3), 2e-6), (split_schedule(a.func, 4), 7e-6)])
    with caplog.at_level(logging.WARNING):
        model = ps.compile(scaled(0.25), X, database=str(path), candidates=2)
    (choice,) = model.choices
    assert (choice.source, choice.seconds) == ("database", pytest.approx(2e-6))  # the twin's fastest program
    assert not caplog.records
    np.testing.assert_allclose(model(X), np.asarray(jax.jit(scaled(0.25))(X)), rtol=1e-5, atol=1e-5)
    # another program (a different epilogue) is no twin: it is predicted
    (choice,) = ps.compile(other, X, database=str(path), candidates=2).choices
    assert choice.source == "predicted"
