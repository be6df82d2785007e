"""A network in bfloat16: products read bfloat16; between tasks, bfloat16 only where every
reader rounds the value anyway (the results as with float32 between tasks)."""

import numpy as np
import pytest

import jax

import probsched as ps
from probsched.graph.precision import narrow_between_tasks

RNG = np.random.default_rng(3)
W1, W2, W3, W4 = (RNG.standard_normal(s).astype(np.float32) / 6 for s in ((32, 48), (48, 48), (48, 32), (32, 16)))


def residual_mlp(x):
    # h feeds a product and a float32 add (a residual): it stays float32; g and k feed
    # products only (each task distinct: a task shared by two calls narrows for both or neither)
    h = jax.nn.relu(x @ W1)
    g = jax.nn.relu(h @ W2) + h
    k = jax.nn.relu(g @ W3)
    return k @ W4


@pytest.fixture(scope="module")
def bert_bf16():
    fn, args = ps.models.get("bert_tiny")
    return fn, args, ps.compile(fn, *args, candidates=4, precision="bf16", progress=None)


@pytest.mark.slow(rotation=1)  # a network compile; bf16 tasks and kernels are checked in every run
def test_a_bf16_network_is_close_to_float32_and_keeps_float32_at_its_edges(bert_bf16):
    fn, args, model = bert_bf16
    x = np.random.default_rng(5).standard_normal(args[0].shape).astype(np.float32)
    got, want = model(x), np.asarray(jax.jit(fn)(x))
    assert got.dtype == np.float32
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert 0 < rel < 3e-2, rel  # rounded where products read (bf16 keeps 8 bits), not exact
    half = [c for c in model.choices if c.task.name.endswith(":bf16")]
    assert half and all(c.task.precision == "bfloat16" for c in half)
    for c in half:  # weights read in bfloat16; activations taken as float32, rounded inside
        params = {b.name: b.dtype for b in c.task.func.input_buffers()}
        allocs = {b.name: b.dtype for b in c.task.func.allocs}
        assert "bfloat16" in set(params.values()) | set(allocs.values())
        assert all(params[x] == "float32" for x in c.task.rounded)


def test_bf16_tasks_have_records_of_their_own(tmp_path):
    fn, args = ps.models.get("bert_tiny")
    graph = ps.from_jax(fn, *args)
    float_keys = {t.key for t in graph.tasks()}
    half_keys = {t.in_precision("bf16").key for t in graph.tasks()}
    products = [t for t in graph.tasks() if t.in_precision("bf16").precision == "bfloat16"]
    assert products and not {t.in_precision("bf16").key for t in products} & float_keys
    assert len(half_keys) == len(float_keys)


@pytest.mark.slow(rotation=1)  # a network compile; bf16 tasks and kernels are checked in every run
def test_a_saved_bf16_model_loads_with_its_bfloat16_weights(bert_bf16, tmp_path):
    fn, args, model = bert_bf16
    model.save(str(tmp_path / "b.psm"))
    again = ps.load(str(tmp_path / "b.psm"))
    np.testing.assert_array_equal(again(*args), model(*args))


def _record(db, task, seconds):
    from probsched.database import TuningRecord
    from probsched.measure import MeasureResult

    key = db.commit_workload(task.workload)
    db.commit_record(TuningRecord.from_result(key, ps.Schedule(task.func), MeasureResult((seconds,) * 3)))


@pytest.mark.parametrize("float32_faster", [True, False])
def test_a_bf16_compile_runs_a_task_in_float32_where_its_float32_record_is_faster(tmp_path, float32_faster):
    from probsched.database import Database

    w = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    fn = lambda x: jax.nn.relu(x @ w)  # noqa: E731
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    (task,) = ps.from_jax(fn, x).tasks()
    half = task.in_precision("bf16")
    with Database(str(tmp_path / "t.db")) as db:
        _record(db, task, 1e-6 if float32_faster else 3e-6)
        _record(db, half, 2e-6)
    model = ps.compile(fn, x, database=str(tmp_path / "t.db"), precision="bf16", progress=None)
    (choice,) = model.choices
    assert choice.task.precision == ("float32" if float32_faster else "bfloat16") and choice.source == "database"
    exact = np.maximum(x @ w, 0)
    if float32_faster:  # float32 throughout: no bfloat16 rounding
        np.testing.assert_allclose(model(x), exact, rtol=1e-5, atol=1e-5)
    else:
        assert 0 < np.linalg.norm(model(x) - exact) / np.linalg.norm(exact) < 3e-2


def test_a_cold_re_timing_of_the_bf16_task_does_not_hand_it_to_a_float32_record_timed_hot(tmp_path):
    # the bf16 task's best was re-timed with its weights cold (slower than hot); the float32
    # task's record was timed hot only: the two compare by their hot times, as tuned
    from probsched.database import Database
    from probsched.measure import MeasureResult

    w = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    fn = lambda x: jax.nn.relu(x @ w)  # noqa: E731
    x = np.ones((4, 8), np.float32)
    (task,) = ps.from_jax(fn, x).tasks()
    half = task.in_precision("bf16")
    with Database(str(tmp_path / "t.db")) as db:
        _record(db, task, 3e-6)
        _record(db, half, 2e-6)
        (rec,) = db.records(half.func)
        db.commit_retiming(half.workload, [(rec.candidate_hash, MeasureResult((4e-6,) * 3))])
    model = ps.compile(fn, x, database=str(tmp_path / "t.db"), precision="bf16", progress=None)
    assert model.choices[0].task.precision == "bfloat16" and model.choices[0].seconds == 4e-6


def test_only_values_every_reader_rounds_are_stored_in_bfloat16():
    x = np.ones((8, 32), np.float32)
    graph = ps.from_jax(residual_mlp, x)
    tasks, values = narrow_between_tasks([t.in_precision("bf16") for t in graph.tasks()], keep=graph.outputs)
    produced = {v: t for t in tasks for c in t.calls for v in c.outputs}
    read_by = {}
    for t in tasks:
        for c in t.calls:
            for v in c.inputs:
                read_by.setdefault(v, []).append(t)
    between = {v for v in produced if v in read_by}
    assert len(values) == 2 and len(between) == 3  # g and k (read by products only) narrow; h (read by an add too) does not
    for v in between:
        stored = v in values
        assert all((name in t.narrowed) == stored for t in read_by[v] for c in t.calls
                   for name, u in zip([b.name for b in t.func.input_buffers()], c.inputs) if u == v)
    assert not values & set(graph.outputs) and not values & set(graph.inputs)
    assert [t.key for t in narrow_between_tasks(tasks, exclude=range(len(tasks)))[0]] == [t.key for t in tasks]


def test_a_network_storing_bfloat16_between_tasks_computes_what_float32_between_computes():
    x = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    narrow = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="exact", progress=None)
    wide = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow=False, progress=None)
    stored = {v for v, t in narrow.interface.types.items() if t.dtype == "bfloat16"}
    assert stored and not any(t.dtype == "bfloat16" for t in wide.interface.types.values())
    assert narrow(x).dtype == np.float32
    # the same rounding, once at the writer instead of at each reader
    np.testing.assert_allclose(narrow(x), wide(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(narrow(x), np.asarray(jax.jit(residual_mlp)(x)), rtol=3e-2, atol=3e-2)
    assert narrow.peak_bytes <= wide.peak_bytes


def test_narrowing_every_value_stores_the_residual_too_and_stays_within_bfloat16s_error():
    x = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    graph = ps.from_jax(residual_mlp, x)
    tasks, values = narrow_between_tasks([t.in_precision("bf16") for t in graph.tasks()], keep=graph.outputs, every=True)
    between = {v for t in tasks for c in t.calls for v in c.outputs} - set(graph.outputs)
    assert len(between) == 3 and values == between  # h, read by the residual add too, as well
    every = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="all", progress=None)
    exact = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="exact", progress=None)
    stored = {v for v, t in every.interface.types.items() if t.dtype == "bfloat16"}
    assert stored == between and len(stored) > sum(t.dtype == "bfloat16" for t in exact.interface.types.values())
    got, want = every(x), np.asarray(jax.jit(residual_mlp)(x))
    assert got.dtype == np.float32 and not np.array_equal(got, exact(x))  # h rounded once more
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2)
    with pytest.raises(ps.ProbschedError, match="narrow='some'"):
        ps.compile(residual_mlp, x, precision="bf16", narrow="some", progress=None)


def test_narrow_auto_keeps_the_mode_its_paired_timing_finds_faster_and_remembers_it(tmp_path, monkeypatch):
    from probsched.tuning import narrow_choice

    monkeypatch.setenv("PROBSCHED_CACHE_DIR", str(tmp_path))  # no decision from an earlier run
    x = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    stored = lambda m: {v for v, t in m.interface.types.items() if t.dtype == "bfloat16"}  # noqa: E731
    every = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="all", progress=None)
    exact = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="exact", progress=None)
    timed = []

    def paired(a, b, **kw):  # "all" (a) over "exact" (b): the ratio each case below scripts
        timed.append((a(), b()))
        return ratio

    monkeypatch.setattr(narrow_choice, "paired", paired)
    for ratio, want in ((0.995, exact), (0.9, every)):
        monkeypatch.setenv("PROBSCHED_CACHE_DIR", str(tmp_path / str(ratio)))
        auto = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="auto", progress=None)
        assert stored(auto) == stored(want) and np.array_equal(auto(x), want(x))
        # "all"'s and "exact"'s outputs, in that order, on the inputs it made
        a, b = timed[-1]
        assert a.shape == b.shape == (8, 16) and not np.array_equal(a, b)
    assert len(timed) == 2
    again = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="auto", progress=None)
    assert len(timed) == 2 and stored(again) == stored(every)  # the decision kept on disk: not timed again
    # in float32 there is nothing to choose: no second network, no timing
    assert ps.compile(residual_mlp, x, candidates=2, narrow="auto", progress=None).interface.types == \
        ps.compile(residual_mlp, x, candidates=2, progress=None).interface.types and len(timed) == 2


def test_narrow_auto_keeps_exact_without_timing_when_all_moves_the_outputs_past_the_budget(tmp_path, monkeypatch):
    from probsched.tuning import narrow_choice

    monkeypatch.setenv("PROBSCHED_CACHE_DIR", str(tmp_path))
    x = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    every = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="all", progress=None)
    exact = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="exact", progress=None)
    apart = narrow_choice.departure(every(x), exact(x))
    assert 0 < apart <= narrow_choice.ERROR_BUDGET  # one more rounding of h: within the budget here
    monkeypatch.setattr(narrow_choice, "ERROR_BUDGET", apart / 2)  # a network that amplifies it
    monkeypatch.setattr(narrow_choice, "paired", lambda *a, **k: pytest.fail("timed although 'all' errs too much"))
    auto = ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="auto", progress=None)
    assert auto.interface.types == exact.interface.types and np.array_equal(auto(x), exact(x))


KEY_OF_A_TWO_ACTIVATION_PRODUCT = """
import jax, numpy as np, probsched as ps
g = ps.from_jax(lambda q, k: jax.nn.softmax(q @ k.T), np.ones((8, 16), np.float32), np.ones((8, 16), np.float32))
print([t.in_precision("bf16").key for t in g.tasks()])
"""


def test_a_bf16_task_reading_two_activations_has_one_key_in_every_process():
    # its copy stages were added in a set's order, which string hashing changes per process:
    # attention's Q @ K got another database key in every other process, its records lost
    import os
    import subprocess
    import sys

    keys = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", KEY_OF_A_TWO_ACTIVATION_PRODUCT], env=env, capture_output=True,
                             text=True, check=True)
        keys.add(out.stdout.strip().splitlines()[-1])
    assert len(keys) == 1


def test_the_reference_rounds_an_input_where_a_product_reads_it_and_nowhere_else():
    # task 01 reads h twice: its product rounds it (its copy stage), its residual add does not
    import ml_dtypes

    graph = ps.from_jax(residual_mlp, np.ones((8, 32), np.float32))
    task = next(t for t in graph.tasks() if "add" in t.name).in_precision("bf16")
    h = np.random.default_rng(1).standard_normal((8, 48)).astype(np.float32)
    w = W2.astype(ml_dtypes.bfloat16)
    (got,) = task.workload.reference(h, w)
    rounded = h.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(got, np.maximum(rounded @ w.astype(np.float32), 0) + h, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, np.maximum(rounded @ w.astype(np.float32), 0) + rounded, rtol=1e-6, atol=1e-7)


RESIDUAL_MODEL = '''
import jax, numpy as np

def model():
    rng = np.random.default_rng(3)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) / 6 for s in ((32, 48), (48, 48)))
    def f(x):
        h = jax.nn.relu(x @ w1)
        return (jax.nn.relu(h @ w2) + h) @ w2
    return f, (np.ones((8, 32), np.float32),)
'''


def test_cli_compile_narrow_says_what_is_stored_in_bfloat16_between_tasks(tmp_path, capsys):
    from probsched.cli import main

    spec = tmp_path / "residual.py"
    spec.write_text(RESIDUAL_MODEL)
    stored = {}
    for mode in ("all", "exact"):
        out = str(tmp_path / f"{mode}.psm")
        assert main(["compile", f"{spec}:model", "--precision", "bf16", "--narrow", mode, "-o", out, "--quiet"]) == 0
        stored[mode] = sum(t.dtype == "bfloat16" for t in ps.load(out).interface.types.values())
    assert stored["all"] > stored["exact"]  # the residual input h, read by an add too
    capsys.readouterr()
    assert main(["compile", f"{spec}:model", "--precision", "bf16", "--narrow", "some", "-o", str(tmp_path / "x.psm")]) == 2
    assert "--narrow" in capsys.readouterr().err


def test_a_narrowed_task_runs_its_own_records_before_its_bases(tmp_path):
    # a task storing values in bfloat16 is another program: once tuned as itself (its own
    # records), the compile runs those, not its base's replayed
    from probsched.database import Database
    from probsched.tuning.compile_network import network_tasks

    x = np.ones((4, 32), np.float32)
    graph = ps.from_jax(residual_mlp, x)
    with Database(str(tmp_path / "t.db")) as db:
        for t in graph.tasks():
            _record(db, t.in_precision("bf16"), 5e-6)
        tasks, _, values = network_tasks(graph, db, "bf16", "exact")
        narrowed = [t for t in tasks if t.base is not None]
        assert narrowed and values
        _record(db, narrowed[0], 7e-6)
    model = ps.compile(residual_mlp, x, database=str(tmp_path / "t.db"), precision="bf16", narrow="exact", progress=None)
    seconds = {c.task.key: c.seconds for c in model.choices}
    assert seconds[narrowed[0].key] == 7e-6
    assert all(seconds[t.key] == 5e-6 for t in narrowed[1:])  # the others: their bases'
    np.testing.assert_allclose(model(x), ps.compile(residual_mlp, x, candidates=2, precision="bf16", narrow="exact",
                                                    progress=None)(x), rtol=1e-5, atol=1e-5)


def test_a_bf16_run_tunes_the_narrowed_tasks_from_their_bases_records(tmp_path):
    from probsched.database import Database
    from probsched.tuning import TuningOptions
    from probsched.tuning.tune_network import narrowed_label, narrowed_tasks

    from tests.test_tuning_loop import SlowInstant

    x = np.ones((4, 32), np.float32)
    graph = ps.from_jax(residual_mlp, x)
    options = TuningOptions(strategy="replay", cost_model=None, batch_size=2, retime_top=0, shipped=False)
    result = ps.tune_model(graph, trials=40, database=str(tmp_path / "t.db"), measurer=SlowInstant(), precision="bf16",
                           narrow="all", compile=False, options=options)
    with Database(str(tmp_path / "t.db")) as db:
        narrowed = narrowed_tasks(graph, db, "bf16", "all")
        assert narrowed
        for t in narrowed:
            own = db.records(t.func)
            assert own, t.name  # tuned as itself
            base_best = db.best(t.base.workload)[0]
            # its first candidate (records come in commit order): its base's best, replayed on it
            assert own[0].instructions == base_best.schedule(t.func).instructions.to_json()
    labels = [r.name for r in result.tasks]
    assert all(narrowed_label(t) in labels for t in narrowed)
    trials = sum(r.trials for r in result.tasks)
    assert trials == len(result.history) <= 40
    assert sum(r.trials for r in result.tasks if "[bfloat16" in r.name) >= 8  # the last fifth of the budget
    # each network task counts once in the estimate, by its fastest version
    assert result.history[-1].estimated_seconds == pytest.approx(result.estimated_seconds)
    assert sum(r.share for r in result.tasks) == pytest.approx(1.0)
    assert {result.tasks[e.task].name for e in result.history[-4:]} <= {narrowed_label(t) for t in narrowed}
