"""``probsched tune / show / bench / plot / vary``: real runs in subprocesses on a tiny workload,
argument errors through ``main([...])`` (exit 2, one message naming the bad thing), and
``show``/``plot`` on databases filled directly with TuningRecords (no measuring).

Two subprocess tunes (GMM:small, a few trials, one worker) dominate the time: ~30 s each
on a loaded 2-core machine.
"""

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

import probsched as ps
from probsched.cli import main
from probsched.cli.common import num
from probsched.cli.plot import best_so_far
from probsched.codegen.spin_pool import COUNTERS
from probsched.database import Database, TuningRecord
from probsched.measure import MeasureResult
from probsched.search import EvolutionarySearch

CLI = [sys.executable, "-m", "probsched.cli"]
USER_FILE = textwrap.dedent(
    """
    import probsched as ps

    def small_matmul():
        A = ps.placeholder((4, 5), "float32", name="A")
        B = ps.placeholder((5, 6), "float32", name="B")
        k = ps.reduce_axis(5, name="k")
        C = ps.compute((4, 6), lambda i, j: ps.sum(A[i, k] * B[k, j], axis=k), name="C")
        return ps.create_func([A, B, C], name="small_matmul")

    def not_a_func():
        return 42

    def broken():
        return 1 / 0
    """
)


def cli(*args, cwd=None, timeout=240):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def records_in(path):
    """Records committed to ``path`` so far (0 while the tuner has not created it)."""
    try:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One real `probsched tune GMM:small --trials 2` run: (directory, completed process).
    ``--cost-model mlp`` spares the default's training on the shipped transfer records
    (3-6 s per training, several per run; tests/test_transfer.py tunes with it)."""
    d = tmp_path_factory.mktemp("tuned")
    r = cli("tune", "GMM:small", "--trials", "2", "--workers", "1", "--batch-size", "2", "--seed", "0",
            "--cost-model", "mlp", "--db", "t.db", "--json", "out.json", cwd=d)
    return d, r


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "mm.py"
    path.write_text(USER_FILE)
    return path


def fill_db(path, workload, strategies=("replay", "evolutionary", "replay")):
    """A database with one record per strategy name, each a different split of the first loop."""
    func = getattr(workload, "func", workload)
    with Database(str(path)) as db:
        key = db.commit_workload(workload)
        for n, strategy in enumerate(strategies):
            sch = ps.Schedule(func)
            block = sch.get_block(func.blocks()[-1].name)
            loop = sch.get_loops(block)[0]
            extent = sch.get(loop).extent
            if n % 2 and extent % 2 == 0:
                sch.split(loop, [2, extent // 2])
            result = MeasureResult((1e-5 * (3 - n),) * 3, 0.1) if n != 1 else MeasureResult((4e-6,) * 3, 0.1)
            db.commit_record(TuningRecord.from_result(key, sch, result, strategy=strategy, space="default"))
        db.commit_record(TuningRecord.from_result(key, ps.Schedule(func), MeasureResult.failure("crash", "boom"), strategy="mcmc"))
    return key


# ------------------------------------------------------------------ real runs (subprocess)


def test_tune_prints_progress_summary_and_json(tuned):
    d, r = tuned
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "tuning GMM:small: 2 trials, evolutionary (max family share 0.5) search, mlp cost model, 1 worker" in r.stderr
    out = r.stdout
    assert "| probsched |" in out and "| numpy |" in out and "| jax |" in out
    assert "show the best: probsched show GMM:small --db t.db" in out
    data = json.loads((d / "out.json").read_text())
    assert data["workload"] == "GMM:small" and data["trials"] == 2 and len(data["history"]) == 2
    assert [row["implementation"] for row in data["compare"]] == ["probsched", "numpy", "jax"]
    # the table shows the numbers the JSON holds
    for row in data["compare"]:
        assert f"| {row['implementation']} | {num(row['median_us'])} |" in out
    assert data["best"]["median_us"] > 0 and data["best"]["gflops"] > 0
    assert data["best"]["retimed"] and data["best"]["search_median_us"] > 0  # the 2 trials were re-timed together
    with Database(str(d / "t.db")) as db:
        assert len(db.records(ps.workloads.small("GMM"))) == 2


def test_show_subprocess_holds_the_numbers(tuned):
    d, _ = tuned
    r = cli("show", "GMM:small", "--db", "t.db", "--source", cwd=d)
    assert r.returncode == 0, r.stderr
    data = json.loads((d / "out.json").read_text())
    assert f"{num(data['best']['median_us'])} µs" in r.stdout
    assert "# schedule (Python" in r.stdout and "sch.get_block" in r.stdout
    assert "# loop nest" in r.stdout and 'with block("Z"' in r.stdout
    assert "# generated source" in r.stdout and "def " in r.stdout


def vary_sites(db, capsys):
    """``probsched vary --list``, parsed: site -> (value, choices)."""
    assert main(["vary", "GMM:small", "--db", db, "--list"]) == 0
    sites = {}
    for line in capsys.readouterr().out.splitlines():
        name, _, rest = line.partition(" = ")
        value, _, choices = rest.partition("  choices: ")
        sites[name] = (json.loads(value), json.loads(choices) if choices else [])
    return sites


def test_vary_lists_sites_and_times_a_changed_decision(tuned, capsys):
    d, _ = tuned
    db = str(d / "t.db")
    sites = vary_sites(db, capsys)
    assert sites and all(value in choices for value, choices in sites.values() if choices)
    name, (value, choices) = next((n, vc) for n, vc in sites.items() if len(vc[1]) > 1)
    other = next(c for c in choices if c != value)
    assert main(["vary", "GMM:small", "--db", db, "--rounds", "1", "--set", f"{name}={json.dumps(other)}"]) == 0
    out = capsys.readouterr().out
    assert "| best | - |" in out and f"| variant 1 | {name}={json.dumps(other)} |" in out
    best_row = next(l for l in out.splitlines() if l.startswith("| best |"))
    assert float(best_row.split("|")[3]) > 0 and best_row.split("|")[5].strip() == "1.00"


def test_vary_bad_settings_exit_2(tuned, capsys):
    d, _ = tuned
    db = str(d / "t.db")
    name = next(iter(vary_sites(db, capsys)))
    for setting, needle in [
        ("Z/nope=1", f"site(s) Z/nope not sampled by this variant; its sites are: {name}"),
        (name, "expected SITE=VALUE"),
        (f"{name}=\"no such value\"", f"site '{name}': value 'no such value' is outside the support"),
    ]:
        assert main(["vary", "GMM:small", "--db", db, "--set", setting]) == 2, setting
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err


@pytest.mark.slow(rotation=3)  # probsched bench runs in every run (test_bench_* with the tuned fixture)
def test_bench_reuses_the_database_best(tuned, capsys):
    d, _ = tuned
    md, js = d / "bench.md", d / "bench.json"
    code = main(["bench", "--workloads", "GMM:small", "--trials", "0", "--db", str(d / "t.db"),
                 "--out-md", str(md), "--out-json", str(js), "--quiet"])
    assert code == 0, capsys.readouterr().err
    row = json.loads(js.read_text())["workloads"][0]
    assert row["workload"] == "GMM:small" and row["trials"] == 2
    assert row["ours_us"] > 0 and row["numpy_us"] > 0 and row["jax_us"] > 0
    assert sorted(row["launch_counts"]) == sorted(COUNTERS)  # how its parallel loops ran while timed
    table = md.read_text()
    assert f"| GMM:small | {num(row['ours_us'])} | {num(row['ours_worker_us'])} | {num(row['numpy_us'])} |" in table
    assert "| geomean |" in table
    assert table.strip() in capsys.readouterr().out
    assert row["tvm_us"] is None  # no --tvm: no TVM figures from another run or machine


def test_shipped_tvm_summary_covers_the_benchmark_workloads():
    from pathlib import Path

    from probsched.cli.bench import DEFAULT_WORKLOADS, load_tvm_times

    times = load_tvm_times(str(Path(__file__).parents[1] / "benchmarks" / "data" / "tvm_metaschedule.json"))
    assert sorted(times) == sorted(DEFAULT_WORKLOADS.split(","))
    assert all(0 < us < 1e6 for us in times.values())


def test_bench_suite_all_is_one_configuration_of_each_operator(capsys):
    from probsched.cli.bench import SUITES

    specs = SUITES["all"].split(",")
    assert sorted(s.split(":")[0] for s in specs) == sorted(ps.workloads.names())
    assert all(ps.workloads.get(s) for s in specs)  # each names a configuration that exists
    assert main(["bench", "--suite", "all", "--workloads", "GMM:2", "--trials", "0"]) == 2
    assert "--suite or --workloads" in capsys.readouterr().err


@pytest.mark.slow(rotation=4)  # an optional column
def test_bench_takes_tvm_times_measured_here(tuned, capsys):
    d, _ = tuned
    summary = d / "tvm_summary.json"  # as benchmarks/bench_tvm.py tune writes it
    summary.write_text(json.dumps({"_about": "how it was measured", "GMM:small": {"tvm_worker_us": 5000.0, "records": 128},
                                  "GMM:2": {"tvm_worker_us": None}}))
    js = d / "bench_tvm.json"
    code = main(["bench", "--workloads", "GMM:small", "--trials", "0", "--db", str(d / "t.db"), "--tvm", str(summary),
                 "--out-md", str(d / "bench_tvm.md"), "--out-json", str(js), "--quiet"])
    assert code == 0, capsys.readouterr().err
    data = json.loads(js.read_text())
    row = data["workloads"][0]
    assert row["tvm_us"] == 5000.0 and row["vs_tvm"] == pytest.approx(5000.0 / row["ours_worker_us"])
    with Database(str(d / "t.db")) as db:  # the worker's best median, not this run's timing
        (best,) = db.best(ps.workloads.small("GMM").func.structural_hash(), k=1)
    assert row["ours_worker_us"] == pytest.approx(best.median * 1e6)
    assert "MetaSchedule on this machine" in data["header"]


def tuner_tracebacks(stderr):
    """Tracebacks on ``stderr`` not printed by a measuring worker.

    A terminal's Ctrl-C reaches the workers too, and multiprocessing prints their
    KeyboardInterrupt under a ``Process probsched-measure-N:`` line; the parent kills and
    replaces them anyway, so only the tuner's own tracebacks count here.
    """
    lines = stderr.splitlines()
    return [i for i, line in enumerate(lines) if line.startswith("Traceback")
            and not (i and lines[i - 1].startswith("Process probsched-measure"))]


# Run the CLI as a terminal's foreground job has it: SIGINT at its default. A job started with
# ``&`` from a non-interactive shell (a CI script run in the background) inherits SIGINT
# ignored, and Python then installs no KeyboardInterrupt handler: the tuner would rightly go
# on measuring, and the test below would hang. The disposition is reset before an exec, which
# keeps it (a preexec_fn would make subprocess fork a process that runs JAX's threads).
AS_A_FOREGROUND_JOB = [
    sys.executable, "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
]


def test_ctrl_c_stops_cleanly_and_keeps_records(tmp_path, user_file):
    """SIGINT to the whole process group (what a terminal's Ctrl-C does) during a long run of
    a user's function: exit 130, one message, every committed record intact and resumable."""
    # It hung in CI runs whose test suite had been started in the background (SIGINT ignored,
    # inherited: see AS_A_FOREGROUND_JOB). A hang fails with the process group and every
    # thread's stack, so a next occurrence says where.
    db = tmp_path / "u.db"
    proc = subprocess.Popen(
        [*AS_A_FOREGROUND_JOB, "-m", "probsched.cli",
         "tune", f"{user_file}:small_matmul", "--trials", "500", "--strategy", "replay",
         "--cost-model", "random", "--workers", "1", "--batch-size", "1", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    try:
        deadline = time.monotonic() + 150
        while records_in(db) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert records_in(db) >= 2, "the tune never committed two records"
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            # say where it hangs: the process group, and every thread's stack (faulthandler on SIGABRT)
            group = subprocess.run(["ps", "-o", "pid,ppid,stat,etime,args", "-g", str(proc.pid)],
                                   capture_output=True, text=True).stdout
            os.kill(proc.pid, signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"no exit 60 s after SIGINT; process group:\n{group}\nstderr:\n{err}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "interrupted: " in err and "records of small_matmul are in" in err and not tuner_tracebacks(err), err
    with Database(str(db)) as d:
        (stored,) = d.workloads()
        records = d.records(stored.hash)
    assert stored.name == "small_matmul" and 2 <= len(records) < 500
    assert all(r.ok for r in records)  # the signal did not turn the candidate in flight into a "crash"
    # stored under the function's name: show and plot find it without the file
    assert main(["show", "small_matmul", "--db", str(db)]) == 0
    assert main(["plot", f"{user_file}:small_matmul", "--db", str(db), "-o", str(tmp_path / "u.png")]) == 0
    assert (tmp_path / "u.png").stat().st_size > 1000


# ------------------------------------------------------------------ show / plot on a filled database


def test_show_top_k_from_records(tmp_path, capsys):
    w = ps.workloads.small("GMM")
    fill_db(tmp_path / "f.db", w)
    assert main(["show", "GMM:small", "--db", str(tmp_path / "f.db"), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "4 records" in out and "3 ok" in out
    assert "## #1: 4.0 µs" in out and "## #2: 10.0 µs" in out
    assert "strategy evolutionary" in out and "sch.split" in out and "# loop nest" in out
    assert f"{num(w.flops / 4e-6 / 1e9)} GFLOP/s" in out


def test_show_names_the_re_timed_best_first(tmp_path, capsys):
    w = ps.workloads.small("GMM")
    fill_db(tmp_path / "f.db", w)
    with Database(str(tmp_path / "f.db")) as db:
        fast, second = db.best(w, k=2)  # 4 µs and 10 µs in the search; timed together, the second wins
        db.commit_retiming(w, [(fast.candidate_hash, MeasureResult((9e-6,))), (second.candidate_hash, MeasureResult((6e-6,)))])
    assert main(["show", "GMM:small", "--db", str(tmp_path / "f.db"), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "## #1: 6.0 µs" in out and "re-timed with the 2 best (search: 10.0 µs" in out
    assert "## #2: 9.0 µs" in out and "(search: 4.0 µs" in out


def test_plot_curves_per_strategy(tmp_path, capsys):
    w = ps.workloads.small("GMM")
    fill_db(tmp_path / "f.db", w)
    out_png = tmp_path / "curve.png"
    assert main(["plot", "GMM:small", "--db", str(tmp_path / "f.db"), "-o", str(out_png)]) == 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    assert "replay (2 trials" in text and "evolutionary (1 trials" in text and "mcmc (1 trials)" in text


def test_best_so_far_groups_in_commit_order(tmp_path):
    w = ps.workloads.small("GMM")
    key = fill_db(tmp_path / "f.db", w)
    with Database(str(tmp_path / "f.db")) as db:
        curves = best_so_far(db.records(key), None)
    assert list(curves) == ["replay", "evolutionary", "mcmc"]
    assert curves["replay"] == pytest.approx([30.0, 10.0]) and curves["evolutionary"] == pytest.approx([4.0])


# ------------------------------------------------------------------ mistakes: exit 2, one clear message


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["tune", "NOPE:1"], "unknown workload 'NOPE'"),
        (["tune", "GMM:9"], "GMM has no configuration '9'"),
        (["tune", "GMM"], "expected NAME:INDEX"),
        (["tune", "no/such/file.py:f"], "no such file: no/such/file.py"),
        (["tune", "no_such_module_xyz:f"], "no module named 'no_such_module_xyz'"),
        (["tune", "GMM:small", "--trials", "many"], "--trials"),
        (["tune", "GMM:small", "--trials", "-3"], "--trials"),
        (["tune", "GMM:small", "--strategy", "gradient"], "gradient"),
        (["tune", "GMM:small", "--cost-model", "xgb"], "xgb"),
        (["tune", "GMM:small", "--max-family-share", "0"], "--max-family-share"),
        (["tune", "GMM:small", "--max-family-share", "half"], "--max-family-share"),
        (["tune", "GMM:small", "--max-family-share", "0.5", "--strategy", "replay"],
         "--max-family-share applies to --strategy evolutionary, not replay"),
        (["tune", "GMM:small", "--workers", "0"], "--workers"),
        (["tune", "GMM:small", "--space", "no_such_module_xyz:space"], "--space no_such_module_xyz:space: no module named"),
        (["tune", "GMM:small", "--space", "no/such/file.py:space"], "--space no such file: no/such/file.py"),
        (["tune", "GMM:small", "--json", "/no/such/dir/out.json"], "--json"),
        (["bench", "--workloads", "GMM:small,BAD:0", "--trials", "0"], "BAD"),
        (["bench", "--workloads", "GMM:small", "--trials", "0", "--tvm", "/no/such/summary.json"], "--tvm /no/such/summary.json"),
        (["plot", "GMM:small", "--db", "/no/such/t.db"], "no database at /no/such/t.db"),
        (["vary", "GMM:small", "--db", "/no/such/t.db"], "no database at /no/such/t.db"),
    ],
)
def test_bad_input_exits_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_max_family_share_reaches_the_evolutionary_search(tmp_path, monkeypatch, capsys):
    seen = []

    def fake_tune(workload, *, trials, options, **kw):
        # the strategy the tuning loop makes of the options (sized to the round)
        seen.append(ps.search.get(options.strategy, batch=options.batch_for(trials, 1), **options.strategy_options))
        raise KeyboardInterrupt  # stop before measuring anything: the strategy is what is checked

    monkeypatch.setattr(ps.tuning, "tune", fake_tune)
    db = str(tmp_path / "t.db")
    assert main(["tune", "GMM:small", "--db", db, "--quiet", "--max-family-share", "0.25"]) == 130
    assert main(["tune", "GMM:small", "--db", db, "--quiet", "--max-family-share", "1"]) == 130
    assert main(["tune", "GMM:small", "--db", db, "--quiet"]) == 130
    assert main(["tune", "GMM:small", "--db", db, "--quiet", "--max-family-share", "1", "--batch-size", "16"]) == 130
    capped, plain, default, small_rounds = seen
    assert isinstance(capped, EvolutionarySearch) and capped.max_family_share == 0.25
    assert plain.max_family_share == 1.0  # MetaSchedule's top-k
    assert default.max_family_share == 0.5 and EvolutionarySearch().max_family_share == 0.5
    # the population is sized to the rounds (128 trials: rounds of 32)
    assert (plain.population, small_rounds.population) == (256, 128)


def test_tvm_summary_without_times_exits_2(tmp_path, capsys):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"_about": "tuning never finished", "GMM:2": {"tvm_worker_us": None}}))
    assert main(["bench", "--workloads", "GMM:small", "--trials", "0", "--tvm", str(summary)]) == 2
    err = capsys.readouterr().err
    assert f"--tvm {summary}: no workload with a tvm_worker_us" in err and "Traceback" not in err


def test_bad_user_functions_exit_2(user_file, capsys):
    for attr, needle in [("missing", "has no attribute 'missing'"), ("not_a_func", "returned a int"),
                         ("broken", "calling broken() failed: ZeroDivisionError")]:
        assert main(["tune", f"{user_file}:{attr}"]) == 2
        assert needle in capsys.readouterr().err
    assert main(["ir", f"{user_file}:small_matmul"]) == 0
    assert "def small_matmul(A: float32[4, 5]" in capsys.readouterr().out


def test_database_without_the_workload_exits_2(tmp_path, capsys):
    fill_db(tmp_path / "f.db", ps.workloads.small("GMM"))
    db = str(tmp_path / "f.db")
    assert main(["show", "C2D:small", "--db", db]) == 2
    err = capsys.readouterr().err
    assert "no records of C2D:small" in err and "GMM:small (4 records)" in err
    assert main(["bench", "--workloads", "C2D:small", "--trials", "0", "--db", db,
                 "--out-md", str(tmp_path / "b.md"), "--out-json", str(tmp_path / "b.json")]) == 2
    assert "no records of C2D:small" in capsys.readouterr().err


def test_progress_bar_says_when_it_re_times():
    import io

    from tqdm import tqdm

    from probsched.cli.progress import TrialBar
    from probsched.tuning import Trial

    progress = TrialBar(2, "GMM:small", None, quiet=True, retime_top=8)
    progress.bar = tqdm(total=2, desc="GMM:small", file=io.StringIO())  # a visible bar, off the terminal
    progress(Trial(0, 2e-6, None, 2e-6), None)
    assert "re-timing" not in progress.bar.desc and progress.bar.n == 1
    progress(Trial(1, math.inf, "crash", 2e-6), None)
    assert progress.bar.desc == "GMM:small (now re-timing the 8 best together)"
    assert "best 2.0 µs, 1 failed" in progress.bar.postfix
