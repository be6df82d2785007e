"""Measurement in worker processes: results, crash isolation, timeouts, checks, recycling."""

import dataclasses
import logging
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import probsched as ps
from probsched.database import Database
from probsched.measure import (
    COMPILE,
    CRASH,
    RUNTIME,
    TIMEOUT,
    WRONG_RESULT,
    LocalMeasurer,
    MeasureError,
    MeasureResult,
)

W = ps.workloads.small("GMM")


def schedule(f: int, func=None, g: int = 1) -> ps.Schedule:
    """Distinct candidates: i (extent 4) split by f, j (extent 6) split by g."""
    sch = ps.Schedule(func or W.func)
    _, i, j, _ = sch.get_loops(sch.get_block("Z"))
    sch.split(i, [f, 4 // f])
    sch.split(j, [g, 6 // g])
    return sch


@pytest.fixture(scope="module")
def measurer():
    # these tests count and interrupt compiles: builds loaded from the program cache would not be ones
    saved = os.environ.get("PROBSCHED_PROGRAM_CACHE")
    os.environ["PROBSCHED_PROGRAM_CACHE"] = "0"
    # short timeouts keep the fault tests quick; small GMM compiles in ~0.2 s. Timing early stop
    # off: these tests count repeats, and 1 ms repeats on a loaded machine can differ by 2x
    # (early stop has its own tests in test_throughput.py)
    try:
        with LocalMeasurer(
            workers=2, compile_timeout=5.0, run_timeout=3.0, repeat=3, min_repeat_ms=1.0, max_compiles_per_worker=6,
            early_stop=None,
        ) as m:
            yield m
    finally:
        if saved is None:
            del os.environ["PROBSCHED_PROGRAM_CACHE"]
        else:
            os.environ["PROBSCHED_PROGRAM_CACHE"] = saved


def test_results_in_input_order_with_progress_callback(measurer):
    seen = []
    scheds = [schedule(1), schedule(2), schedule(4), schedule(2)]
    results = measurer.measure(W, scheds, on_result=lambda i, r: seen.append((i, r)))
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3]
    assert [r for _, r in sorted(seen, key=lambda x: x[0])] == results
    for r in results:
        assert r.ok and r.error_kind is None and len(r.run_seconds) == 3
        assert 0 < r.median < 1.0 and r.compile_seconds >= 0
    assert MeasureResult.from_json(results[0].to_json()) == results[0]
    stats = measurer.stats
    assert stats.candidates >= 4 and stats.worker_starts >= 2 and stats.run_seconds > 0
    assert stats.compile_seconds >= stats.build_seconds > 0 and stats.memory[-1][2] > 50  # MiB


def test_instruction_logs_and_bare_functions(measurer):
    sch = schedule(2)
    results = measurer.measure(W, [sch.instructions, sch.instructions.to_json()])
    assert all(r.ok for r in results)
    # a bare PrimFunc: the reference is the unscheduled program, built and run in a worker
    func = W.func.replace(name="mm_bare")
    bare = measurer.measure(func, [schedule(1, func), schedule(2, func)], _faults={1: "wrong"})
    assert bare[0].ok and bare[1].error_kind == WRONG_RESULT
    with pytest.raises(ValueError, match="another function"):
        measurer.measure(W, [schedule(2, func)])
    with pytest.raises(TypeError, match="Workload or a PrimFunc"):
        measurer.measure("GMM", [sch])
    assert measurer.measure(W, []) == []


def test_crash_isolation_segfault_hang_raise(measurer, caplog):
    faults = {1: "segfault", 2: "hang", 3: "raise", 4: "wrong", 5: "compile_error"}
    t = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="probsched.measure"):
        results = measurer.measure(W, [schedule(2) for _ in range(7)], _faults=faults)
    assert time.monotonic() - t < 60
    kinds = [r.error_kind for r in results]
    assert kinds == [None, CRASH, TIMEOUT, RUNTIME, WRONG_RESULT, COMPILE, None]
    assert results[0].ok and results[6].ok  # the batch went on around the failures
    assert "SIGSEGV" in results[1].error_message and "Segmentation fault" in results[1].error_message
    assert "run exceeded the 3 s timeout" in results[2].error_message
    assert "RuntimeError: injected fault: the kernel raised" in results[3].error_message
    assert "output Z: 1 of 48 elements differ" in results[4].error_message
    assert "BuildError" in results[5].error_message and "undefined_name_planted" in results[5].error_message
    for r in results[1:6]:
        assert not r.ok and r.run_seconds == () and math.isinf(r.median)
    assert any("WRONG RESULT" in rec.message and "candidate 4" in rec.message for rec in caplog.records)
    # the replaced workers measure the next batch normally
    assert all(r.ok for r in measurer.measure(W, [schedule(1), schedule(4)]))


def test_compile_timeout(measurer):
    (r,) = measurer.measure(W, [schedule(2)], _faults={0: "compile_hang"})
    assert r.error_kind == TIMEOUT and "compile exceeded the 5 s timeout" in r.error_message


def test_wrong_reference_is_a_wrong_result_unless_unchecked(measurer):
    bad = dataclasses.replace(W, reference_fn=lambda x, y: tuple(2 * z for z in W.reference(x, y)))
    results = measurer.measure(bad, [schedule(1), schedule(2)])
    assert [r.error_kind for r in results] == [WRONG_RESULT, WRONG_RESULT]
    assert all(r.ok for r in measurer.measure(W, [schedule(1)]))  # the good reference is still in use


def test_recycling_and_overlap(measurer):
    before = measurer.workers_started
    measurer.overlap_builds = True  # compiles go on while a kernel is timed
    measurer.max_compiles_per_worker = min(w.compiles for w in measurer._workers) + 2
    try:
        results = measurer.measure(W, [schedule(f, g=g) for f in (1, 2) for g in (2, 3)])
    finally:
        measurer.overlap_builds, measurer.max_compiles_per_worker = False, 6
    assert all(r.ok for r in results)
    assert measurer.workers_started > before  # the worker with fewer compiles reached the limit


def test_settle_waits_for_a_recycled_worker_to_start(measurer):
    measurer.settle()  # the fixture's workers may still be starting
    assert measurer.workers_starting == 0
    # the worker that measures is replaced after its result
    limit, measurer.max_compiles_per_worker = measurer.max_compiles_per_worker, 0
    try:
        (r,) = measurer.measure(W, [schedule(2)])
    finally:
        measurer.max_compiles_per_worker = limit
    assert r.ok
    assert measurer.workers_starting == 1  # its replacement spends seconds importing numba
    measurer.settle()
    assert measurer.workers_starting == 0
    assert all(w.state == "idle" for w in measurer._workers)


def test_measure_together_times_members_interleaved_and_fails_them_alone(measurer, caplog):
    scheds = [schedule(1), schedule(2), schedule(4), schedule(2, g=3)]
    with caplog.at_level(logging.ERROR, logger="probsched.measure"):
        results = measurer.measure_together(W, scheds, rounds=4, _faults={1: "wrong", 2: "compile_error"})
    assert [r.error_kind for r in results] == [None, WRONG_RESULT, COMPILE, None]
    assert [len(r.run_seconds) for r in results] == [4, 0, 0, 4]  # one mean per round
    assert all(0 < r.median < 1.0 for r in (results[0], results[3]))
    assert "undefined_name_planted" in results[2].error_message
    assert any("WRONG RESULT" in rec.message and "candidate 1" in rec.message for rec in caplog.records)
    assert measurer.measure_together(W, []) == []
    with pytest.raises(ValueError, match="rounds"):
        measurer.measure_together(W, scheds, rounds=0)


def test_measure_together_a_crash_or_hang_fails_the_group(measurer):
    crashed = measurer.measure_together(W, [schedule(1), schedule(2)], rounds=2, _faults={1: "segfault"})
    assert [r.error_kind for r in crashed] == [CRASH, CRASH] and "SIGSEGV" in crashed[0].error_message
    t = time.monotonic()
    hung = measurer.measure_together(W, [schedule(1), schedule(2)], rounds=2, _faults={0: "hang"})
    # the run budget is the members' (3 s each) plus their rounds, not unbounded
    assert [r.error_kind for r in hung] == [TIMEOUT, TIMEOUT] and time.monotonic() - t < 30
    assert all(r.ok for r in measurer.measure_together(W, [schedule(1), schedule(4)], rounds=2))


def test_closed_measurer():
    m = LocalMeasurer(workers=1)
    m.close()
    assert m.closed
    with pytest.raises(MeasureError, match="closed"):
        m.measure(W, [schedule(1)])


def test_argument_checks():
    with pytest.raises(ValueError, match=">= 1"):
        LocalMeasurer(workers=0)
    with pytest.raises(ValueError, match="error_kind"):
        MeasureResult(error_kind="segfault")


TUNER = textwrap.dedent(
    """
    import sys, probsched as ps
    from handlers import seed, trace
    from probsched.database import Database, TuningRecord
    from probsched.measure import LocalMeasurer

    def main():
        w = ps.workloads.small("GMM")
        db = Database(sys.argv[1])
        key = db.commit_workload(w)
        scheds = []
        for i in range(int(sys.argv[2])):
            sch = ps.Schedule(w.func)
            trace(seed(ps.space.default(), i)).get_trace(sch)
            if not db.has_candidate(key, sch.mod.structural_hash()) and all(s.mod != sch.mod for s in scheds):
                scheds.append(sch)
        with LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1.0) as m:
            print("workers", *[x.proc.pid for x in m._workers], flush=True)
            def commit(i, r):
                db.commit_record(TuningRecord.from_result(key, scheds[i], r, space="default"))
                print("committed", i, flush=True)
            m.measure(w, scheds, on_result=commit)
        print("done", len(scheds), flush=True)

    if __name__ == "__main__":
        main()
    """
)


@pytest.mark.slow(rotation=3)  # a rotation of its own: the three networks have the others (tests/conftest.py)
def test_sigkill_of_a_real_tuner_then_resume(tmp_path):
    script = tmp_path / "tuner.py"
    script.write_text(TUNER)
    path = str(tmp_path / "tune.db")
    proc = subprocess.Popen([sys.executable, str(script), path, "8"], stdout=subprocess.PIPE, text=True)
    workers = [int(p) for p in proc.stdout.readline().split()[1:]]
    committed = [proc.stdout.readline() for _ in range(3)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert all(line.startswith("committed") for line in committed)
    with Database(path) as db:
        assert len(db.records(W)) >= 3  # every record committed before the kill is there
        first = len(db.candidate_hashes(W))
    deadline = time.monotonic() + 10  # the orphaned worker notices and exits
    while any(os.path.exists(f"/proc/{p}") for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(os.path.exists(f"/proc/{p}") and "Z" not in open(f"/proc/{p}/stat").read().split()[2] for p in workers)
    out = subprocess.run([sys.executable, str(script), path, "8"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    with Database(path) as db:
        total = len(db.candidate_hashes(W))
        assert len(db.records(W)) == total  # nothing measured twice
    assert int(out.stdout.split()[-1]) == total - first


def test_interleaved_timing_rotates_and_keeps_one_mean_per_round():
    from probsched.measure.timer import time_interleaved

    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b"), "c": lambda: order.append("c")}
    t = time_interleaved(fns, rounds=3, min_repeat_ms=0.0, settle_s=0.0)
    assert [len(t[n].means) for n in "abc"] == [3, 3, 3] and all(t[n].number == 1 for n in "abc")
    # after the warm-ups and calibrations (2 calls each), each round warms then times each
    # implementation (2 calls), starting with a different one every round
    rounds = order[6:]
    firsts = [rounds[i * 6] for i in range(3)]
    assert firsts == ["a", "b", "c"], order


def test_reference_arrays_are_cache_line_aligned(tmp_path):
    import numpy as np

    from probsched.measure.reference import Reference, from_workload

    w = ps.workloads.small("GMM")
    ref = from_workload(w)
    ref.save(str(tmp_path / "ref.npz"))
    kernel = ps.build(w.func)
    for r in (ref, Reference.load(str(tmp_path / "ref.npz"))):
        assert all(a.ctypes.data % 64 == 0 for a in r.inputs.values())
        outs = r.empty_outputs(kernel)
        assert all(a.ctypes.data % 64 == 0 and np.isnan(a).all() for a in outs.values())
        args = r.arguments(kernel, outs)
        assert [a is outs.get(b.name, r.inputs.get(b.name)) for b, a in zip(kernel.params, args)] == [True] * 3


UNGUARDED = textwrap.dedent(
    """
    # a plain script, no `if __name__ == "__main__":` guard: the measuring workers must not
    # import it (a spawned child would run this tune again, recursively)
    import os, probsched as ps
    from probsched.measure import LocalMeasurer

    print("script ran in", os.getpid(), flush=True)
    result = ps.tune("GMM:small", trials=2, strategy="replay", cost_model=None, retime_top=0, seed=0)
    print("tuned", len(result.history), result.best is not None, flush=True)
    with LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1.0) as m:
        (r,) = m.measure(ps.workloads.small("GMM"), [ps.Schedule(ps.workloads.small("GMM").func)])
        pids = [w.proc.pid for w in m._workers]
    print("measured", r.ok, flush=True)
    """
)


@pytest.mark.slow(rotation=5)  # a spawned script; the measuring path is the same in every run's tests
def test_an_unguarded_script_measures(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(UNGUARDED)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert len([x for x in lines if x.startswith("script ran in")]) == 1, out.stdout  # never re-run by a worker
    assert "tuned 2 True" in lines and "measured True" in lines, out.stdout
    assert "RuntimeWarning" not in out.stderr, out.stderr[-3000:]


def test_worker_runs_from_the_package_entry_point(measurer):
    measurer.settle()
    with open(f"/proc/{measurer._workers[0].proc.pid}/cmdline") as fh:
        argv = fh.read().split("\0")
    assert argv[1:3] == ["-m", "probsched.measure.worker"], argv


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_host_lock_waits_for_another_timing_and_pauses_compiles_meanwhile(tmp_path, monkeypatch):
    import threading

    from probsched.measure.hostlock import HostLock

    monkeypatch.setenv("PROBSCHED_PROGRAM_CACHE", "0")  # the worker must be compiling, not loading a cached build

    path = str(tmp_path / "timing.lock")
    other = HostLock(path)  # another measurer on this machine, timing a kernel
    with LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1.0, host_lock=path) as m:
        m.settle()
        assert other.try_acquire()
        out = []
        thread = threading.Thread(target=lambda: out.append(m.measure(W, [schedule(2)])))
        thread.start()
        pid = m._workers[0].proc.pid
        time.sleep(3.0)
        # its worker was stopped (SIGSTOP) in the middle of its compile, within one poll
        assert thread.is_alive() and not out
        assert _proc_state(pid) == "T" and m._workers[0].state == "compiling"
        other.release()
        thread.join(60)
        assert out and out[0][0].ok
        assert not m._host_lock.held and other.try_acquire()  # released after its timing
        other.release()
    other.close()



def test_another_timing_that_starts_as_a_batch_ends_does_not_hold_the_next_batch(tmp_path):
    """The hang a CI run met on a Dask host: another measurer started timing just as this one's
    last result came in; this one paused for it with every worker idle, and its next batch
    waited for ever (no worker busy, so no look at the lock would ever release the pause)."""
    import threading

    from probsched.measure.hostlock import HostLock

    path = str(tmp_path / "timing.lock")
    other = HostLock(path)
    with LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1.0, host_lock=path) as m:
        # the callback runs inside the measurer's step, before it looks at the lock
        first = m.measure(W, [schedule(2)], on_result=lambda i, r: other.try_acquire())
        assert first[0].ok and other.held
        other.release()  # that timing ends while this measurer waits for nothing
        out = []
        thread = threading.Thread(target=lambda: out.append(m.measure(W, [schedule(4)])), daemon=True)
        thread.start()
        thread.join(60)
        assert out and out[0][0].ok, "the second batch never ran"
    other.close()


def test_two_measurers_on_one_host_each_finish_every_batch(tmp_path):
    """Two measurers sharing the host lock (two Dask workers' measuring threads on one
    machine) time and pause each other batch after batch: every batch of both ends, every
    candidate measured, however their phases interleave."""
    import threading

    path = str(tmp_path / "timing.lock")
    variants = [schedule(f, g=g) for f in (1, 2, 4) for g in (1, 2, 3, 6)]
    done, errors = [], []

    def run(seed: int) -> None:
        try:
            with LocalMeasurer(workers=1, repeat=1, min_repeat_ms=0.5, host_lock=path) as m:
                for batch in range(6):
                    picks = [variants[(seed * 5 + batch * 3 + k) % len(variants)] for k in range(3)]
                    # a caller's callback takes a while (a Dask worker hands the result on):
                    # the other measurer's timing may start meanwhile
                    results = m.measure(W, picks, on_result=lambda i, r: time.sleep(0.01))
                    assert all(r.ok for r in results), [r.error_message for r in results if not r.ok]
                    done.append((seed, batch))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(seed,), daemon=True) for seed in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:1]
    assert sorted(done) == [(s, b) for s in (0, 1) for b in range(6)], f"batches that ended: {sorted(done)}"


PAUSED_CALLER = textwrap.dedent(
    """
    import sys, probsched as ps
    from probsched.measure import LocalMeasurer

    w = ps.workloads.small("GMM")
    m = LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1.0, host_lock=sys.argv[1])
    m.settle()
    print(m._workers[0].proc.pid, flush=True)
    sys.stdin.readline()  # the test holds the host lock now
    m.measure(w, [ps.Schedule(w.func)])
    """
)


@pytest.mark.slow(rotation=5)  # a process tree killed; the host lock's waits are checked in every run
def test_a_worker_stopped_for_another_timing_dies_with_its_caller(tmp_path):
    from probsched.measure.hostlock import HostLock

    path = str(tmp_path / "timing.lock")
    script = tmp_path / "caller.py"
    script.write_text(PAUSED_CALLER)
    other = HostLock(path)
    env = dict(os.environ, PROBSCHED_PROGRAM_CACHE="0")  # the worker must compile (what the lock pauses), not load a build
    proc = subprocess.Popen([sys.executable, str(script), path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        pid = int(proc.stdout.readline())
        assert other.try_acquire()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 30
        while _proc_state(pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _proc_state(pid) == "T"  # stopped: its own watchdog cannot run
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        deadline = time.monotonic() + 10  # orphaned with a stopped member: the kernel sends SIGHUP
        while os.path.exists(f"/proc/{pid}") and _proc_state(pid) not in "ZX" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{pid}") or _proc_state(pid) in "ZX"
    finally:
        proc.kill()
        other.close()


def test_results_say_where_they_were_measured_and_records_keep_it(measurer):
    import dataclasses as dc

    from probsched.database import TuningRecord
    from probsched.measure.result import LOST

    (r,) = measurer.measure(W, [schedule(2)])
    assert r.target == ps.Target.host().to_json()
    elsewhere = dc.replace(ps.Target.host(), cores=99).to_json()
    rec = TuningRecord.from_result(W, schedule(2), dc.replace(r, target=elsewhere))
    assert rec.target == elsewhere  # filed under the machine that measured it, not this one
    lost = MeasureResult.failure(LOST, "the Dask worker was lost")
    assert MeasureResult.from_json(lost.to_json()) == lost and not lost.ok


def test_a_background_thread_can_drive_the_measurer(measurer):
    import threading

    out, seen = [], []

    def run() -> None:  # what a tuner that generates its next batch meanwhile would do
        out.extend(measurer.measure(W, [schedule(1), schedule(4)], lambda i, r: seen.append(threading.current_thread())))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(120)
    assert len(out) == 2 and all(r.ok for r in out)
    assert seen == [thread, thread]  # on_result runs in the thread that measures


def test_cold_weights_flush_a_network_task_s_laid_out_weights_before_each_timed_call():
    import jax

    from probsched.measure.cold_weights import ColdWeightsCall, cold_weights_call

    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    (task,) = ps.from_jax(lambda x: jax.nn.relu(x @ w), np.ones((8, 64), np.float32)).tasks()
    kernel = ps.build(ps.Schedule(task.func))
    x, y = np.ones((8, 64), np.float32), np.zeros((8, 32), np.float32)
    call = cold_weights_call(kernel, (x, w, y))
    assert isinstance(call, ColdWeightsCall) and call.weight_bytes == w.nbytes
    for _ in range(3):  # flushing changes no value
        y[:] = 0
        call.before()
        call()
        np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
    with LocalMeasurer(workers=1, cold_weights=True) as m:
        (alone,) = m.measure(task.workload, [ps.Schedule(task.func)])
    with LocalMeasurer(workers=1) as m:  # the measurer's default, overridden for one re-timing
        together = m.measure_together(task.workload, [ps.Schedule(task.func)] * 2, rounds=2, cold_weights=True)
    assert alone.ok and all(r.ok for r in together), (alone, together)


def test_a_callable_s_before_runs_ahead_of_each_call_outside_the_timed_span():
    from probsched.measure.timer import time_callable, time_interleaved

    class Prepared:
        calls = befores = 0

        def before(self):
            self.befores += 1
            time.sleep(0.002)

        def __call__(self):
            self.calls += 1

    fn = Prepared()
    t = time_callable(fn, repeat=3, min_repeat_ms=1)
    assert t.median < 0.001 and fn.befores == fn.calls - 1  # each timed call (not the warm-up)
    assert time_interleaved({"a": Prepared()}, rounds=2, min_repeat_ms=1, settle_s=0)["a"].median < 0.001


def test_a_slow_before_shortens_the_repeat_instead_of_stretching_it():
    from probsched.measure.timer import time_callable

    class Flushing:  # a large table flushed ahead of a short gather
        calls = 0

        def before(self):
            time.sleep(0.005)

        def __call__(self):
            self.calls += 1

    fn = Flushing()
    start = time.perf_counter()
    t = time_callable(fn, repeat=3, min_repeat_ms=20)
    assert t.number <= 8 and time.perf_counter() - start < 1.0 and t.median < 0.001, t
