"""A second ``ps.compile`` of the same network and records loads the compiled network
(:mod:`probsched.tuning.network_cache`): nothing is chosen, replayed or built again, the
weights are the graph's own, and anything that changes what the compile would choose
(a new record, another space) compiles again."""

import logging

import numpy as np
import pytest

import jax

import probsched as ps
from probsched.database import Database, TuningRecord
from probsched.errors import ModelFileError
from probsched.measure import MeasureResult
from probsched.tuning import compile_network, network_cache

X = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)


def net(w):
    def fn(x):
        return jax.nn.relu(x @ w)

    return fn


W1 = np.random.default_rng(2).standard_normal((8, 16)).astype(np.float32)
W2 = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)


@pytest.fixture
def entries(tmp_path, monkeypatch):
    """This test's own folder of network entries (the kernels' caches stay shared)."""
    folder = tmp_path / "networks"
    folder.mkdir()
    monkeypatch.setattr(network_cache, "_path", lambda key: str(folder / f"{key}.psm"))
    return folder


def nothing_built(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the network was built again")

    monkeypatch.setattr(compile_network, "_build_tasks", boom)


def test_a_second_compile_loads_the_network_and_builds_nothing(entries, monkeypatch):
    first = ps.compile(net(W1), X, candidates=2, progress=None)
    assert len(list(entries.iterdir())) == 1
    nothing_built(monkeypatch)
    again = ps.compile(net(W1), X, candidates=2, progress=None)
    np.testing.assert_array_equal(again(X), first(X))
    assert [(c.task.name, c.source) for c in again.choices] == [(c.task.name, c.source) for c in first.choices]
    # the schedule is replayed when asked for, to the program the first compile chose
    assert again.choices[0].schedule.mod.structural_hash() == first.choices[0].schedule.mod.structural_hash()
    assert again.graph is not None and "predicted" in again.summary()


def test_other_weights_of_the_same_network_are_used_not_the_cached_ones(entries, monkeypatch):
    ps.compile(net(W1), X, candidates=2, progress=None)
    nothing_built(monkeypatch)  # the same structure: a hit
    model = ps.compile(net(W2), X, candidates=2, progress=None)
    np.testing.assert_allclose(model(X), np.maximum(X @ W2, 0), rtol=1e-5, atol=1e-5)


def test_a_new_record_compiles_again_with_it(entries, tmp_path):
    db = tmp_path / "t.db"
    Database(str(db)).close()
    first = ps.compile(net(W1), X, database=str(db), candidates=2, progress=None)
    assert [c.source for c in first.choices] == ["predicted"]
    (task,) = ps.from_jax(net(W1), X).tasks()
    with Database(str(db)) as d:
        key = d.commit_workload(task.workload)
        d.commit_record(TuningRecord.from_result(key, ps.Schedule(task.func), MeasureResult((1e-6,) * 3)))
    again = ps.compile(net(W1), X, database=str(db), candidates=2, progress=None)
    assert [c.source for c in again.choices] == ["database"] and len(list(entries.iterdir())) == 2
    np.testing.assert_allclose(again(X), first(X), rtol=1e-5, atol=1e-5)


def test_a_damaged_entry_is_compiled_again_and_replaced(entries, monkeypatch, caplog):
    first = ps.compile(net(W1), X, candidates=2, progress=None)
    (entry,) = entries.iterdir()
    entry.write_bytes(b"PK\x03\x04 not the rest of a zip archive")
    with caplog.at_level(logging.WARNING, logger="probsched.compile"):
        again = ps.compile(net(W1), X, candidates=2, progress=None)
    assert "does not load" in caplog.text and str(entry) in caplog.text
    np.testing.assert_array_equal(again(X), first(X))
    nothing_built(monkeypatch)  # written anew, and it loads
    np.testing.assert_array_equal(ps.compile(net(W1), X, candidates=2, progress=None)(X), first(X))


def test_a_space_the_cache_cannot_name_is_not_cached(entries):
    def my_space(sch):  # a user's space: its rules are not known by name
        return sch

    model = ps.compile(net(W1), X, space=my_space, candidates=2, progress=None)
    np.testing.assert_allclose(model(X), np.maximum(X @ W1, 0), rtol=1e-5, atol=1e-5)
    assert list(entries.iterdir()) == []


def test_an_entry_is_not_a_model_file(entries):
    ps.compile(net(W1), X, candidates=2, progress=None)
    (entry,) = entries.iterdir()
    with pytest.raises(ModelFileError, match="compile-cache entry without the model's weights"):
        ps.load(str(entry))


def test_a_model_loaded_from_the_cache_saves_as_the_compiled_one(entries, tmp_path):
    import json
    import zipfile

    def saved(model, name):
        model.save(str(tmp_path / name))
        with zipfile.ZipFile(tmp_path / name) as zf:
            manifest = json.loads(zf.read("probsched-model.json"))
            return manifest["modules"], sorted(n for n in zf.namelist() if n.startswith(("kernels/", "modules/")))

    w = np.random.default_rng(4).standard_normal((64, 64)).astype(np.float32)
    x = np.random.default_rng(5).standard_normal((16, 64)).astype(np.float32)
    first = ps.compile(net(w), x, candidates=8, progress=None)
    again = ps.compile(net(w), x, candidates=8, progress=None)  # from the cache
    assert saved(again, "again.psm") == saved(first, "first.psm")
    np.testing.assert_array_equal(ps.load(str(tmp_path / "again.psm"))(x), first(x))
