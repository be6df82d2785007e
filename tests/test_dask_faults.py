"""A real ``dask scheduler`` and ``dask worker`` (processes, as on a cluster): a worker
killed with SIGKILL in the middle of a tuning run, and restarted, loses no trial: its
candidates are measured again, on the worker that comes back (the nanny's, or one started
anew), and nothing the run sent depends on data held by the dead worker alone."""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

distributed = pytest.importorskip("distributed")

import probsched as ps  # noqa: E402
from probsched.database import Database  # noqa: E402
from probsched.measure import LOST, DaskMeasurer  # noqa: E402


def _start(args, log_path):
    return subprocess.Popen([sys.executable, "-m", *args], stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _wait_for_records(db, n: int, proc=None, seconds: float = 240) -> None:
    """Until ``db`` holds ``n`` records (or ``proc`` ended, or ``seconds`` passed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (proc is None or proc.poll() is None):
        try:
            with Database(str(db)) as d:
                if sum(len(d.records(x.hash)) for x in d.workloads()) >= n:
                    return
        except Exception:  # not created yet
            pass
        time.sleep(0.1)


@pytest.fixture
def scheduler(tmp_path):
    """A ``dask scheduler`` process: its address, and a function starting ``dask worker``s."""
    file = tmp_path / "scheduler.json"
    procs = [_start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(file)], tmp_path / "scheduler.log")]
    deadline = time.monotonic() + 60
    while not file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)  # written whole
    address = json.loads(file.read_text())["address"]

    def worker(nanny: bool):
        n = len(procs)
        procs.append(_start(["distributed.cli.dask_worker", address, "--nthreads", "1", "--name", f"w{n}",
                             "--nanny" if nanny else "--no-nanny", "--death-timeout", "60"], tmp_path / f"worker{n}.log"))
        return procs[-1]

    worker.process = procs[0]  # the scheduler's, to kill it
    try:
        yield address, worker
    finally:
        for p in reversed(procs):
            _stop(p)


# the nanny's restart in every run; a worker started anew (a while without any) in a rotation
# of the slow tests (tests/conftest.py), as the other real-cluster runs below
@pytest.mark.parametrize("nanny", [True, pytest.param(False, marks=pytest.mark.slow(rotation=4))], ids=["nanny", "no-nanny"])
def test_a_worker_killed_and_restarted_mid_run_loses_no_trial(scheduler, tmp_path, nanny, caplog):
    address, start_worker = scheduler
    start_worker(nanny)
    db = str(tmp_path / "run.db")
    w = ps.workloads.small("GMM")
    killed = threading.Event()

    with distributed.Client(address, timeout="60s") as client, \
            DaskMeasurer(address, repeat=2, min_repeat_ms=1.0, no_worker_timeout=120.0) as m:

        def kill_then_restart():
            _wait_for_records(db, 4)  # a few trials in: measuring is under way
            (pid,) = client.run(os.getpid).values()  # the worker process (the nanny's child, with one)
            os.kill(pid, signal.SIGKILL)
            killed.set()
            if not nanny:  # the nanny starts it again by itself
                time.sleep(6.0)  # no worker at all meanwhile: the run says so
                start_worker(nanny)

        killer = threading.Thread(target=kill_then_restart, daemon=True)
        killer.start()
        with caplog.at_level(logging.WARNING, logger="probsched.measure"):
            result = ps.tune(w, trials=16, measurer=m, database=db, strategy="replay", cost_model=None, seed=0,
                             batch_size=4, retime_top=0)
        killer.join(10)
    assert killed.is_set(), "the run ended before the worker could be killed"
    kinds = [t.error for t in result.history]
    assert len(kinds) == 16 and LOST not in kinds, kinds
    assert all(k is None for k in kinds), kinds  # every trial measured, on the worker that came back
    with Database(db) as d:
        assert len(d.records(w)) == 16 and all(r.ok for r in d.records(w))
    said = [r.getMessage() for r in caplog.records]
    if not nanny:  # no worker at all for a while: the run says what waits, and when a worker is back
        assert any("no worker of the cluster can measure" in t and "then fail as lost" in t for t in said), said
        assert any("a worker can measure again" in t for t in said), said


def test_a_resumed_run_measures_the_candidates_a_cluster_lost():
    from probsched.database import TuningRecord
    from probsched.measure import MeasureResult
    from probsched.tuning.task_search import TaskSearch

    w = ps.workloads.small("GMM")
    with Database(":memory:") as db:
        db.commit_workload(w)
        lost, crashed = ps.Schedule(w.func), ps.Schedule(w.func)
        _, i, j, _ = crashed.get_loops(crashed.get_block("Z"))
        crashed.split(i, [2, 2])
        db.commit_record(TuningRecord.from_result(w, lost, MeasureResult.failure(LOST, "the cluster lost it")))
        db.commit_record(TuningRecord.from_result(w, crashed, MeasureResult.failure("crash", "SIGSEGV")))
        search = TaskSearch(w, db, strategy="replay")
        search.propose(0)  # what it adds from the database before each round (another tuner's records)
    # a crash was measured (it crashes): not again; a lost candidate never was
    assert crashed.mod.structural_hash() in search.ctx.measured
    assert lost.mod.structural_hash() not in search.ctx.measured


@pytest.mark.slow(rotation=0)
def test_a_run_that_loses_trials_says_so_and_exits_1_and_the_next_run_measures_them(scheduler, tmp_path):
    """The worker killed for good: its candidates wait ``--no-worker-timeout`` seconds, with a
    warning, then fail as lost; the CLI says so at the end and exits 1; a second run, with a
    worker again, measures those candidates."""
    address, start_worker = scheduler
    worker = start_worker(False)
    db = tmp_path / "lost.db"
    argv = [sys.executable, "-m", "probsched.cli", "tune", "GMM:small", "--cluster", address, "--no-worker-timeout", "3",
            "--trials", "6", "--batch-size", "2", "--strategy", "replay", "--cost-model", "random", "--seed", "0",
            "--retime-top", "0", "--no-compare", "-q", "--db", str(db)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_records(db, 2, proc)
        _stop(worker)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert "no worker of the cluster can measure" in err and "trials were lost by the cluster" in err
    assert "Traceback" not in err, err
    w = ps.workloads.small("GMM")
    with Database(str(db)) as d:
        lost = {r.candidate_hash for r in d.records(w) if r.error_kind == LOST}
    assert lost
    start_worker(False)
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    with Database(str(db)) as d:
        measured = {r.candidate_hash for r in d.records(w) if r.ok}
    assert lost <= measured  # the candidates the cluster lost are measured now


@pytest.mark.slow(rotation=5)
def test_the_scheduler_killed_mid_run_ends_it_with_lost_trials_not_a_traceback(scheduler, tmp_path):
    """SIGKILL to the ``dask scheduler``: the client cannot submit any more (it raised
    ClosedClientError out of the tuner); the run waits its timeouts, says what it lost, exits 1."""
    address, start_worker = scheduler
    start_worker(True)
    db = tmp_path / "s.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "probsched.cli", "tune", "GMM:small", "--cluster", address, "--cluster-timeout", "5",
         "--no-worker-timeout", "3", "--trials", "8", "--batch-size", "2", "--strategy", "replay", "--cost-model",
         "random", "--retime-top", "0", "--no-compare", "-q", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_records(db, 2, proc)
        _stop(start_worker.process)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert "Traceback" not in err and "trials were lost by the cluster" in err, err
    assert "scheduler does not answer" in err or "no worker of the cluster can measure" in err, err
