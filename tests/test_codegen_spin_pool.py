"""The spinning worker pool behind parallel loops (probsched.codegen.spin_pool)."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import probsched as ps
from probsched.codegen import spin_pool

pytestmark = pytest.mark.skipif(
    not spin_pool.enabled() or spin_pool.spin_pool() is None or spin_pool.spin_pool().workers == 0,
    reason="the spin pool runs on x86-64 with 2+ numba threads",
)


def _compiled_body(body, kinds):
    import numba

    from probsched.codegen.compile import compile_options, numba_type
    from probsched.codegen.launch import function_address

    sig = (numba_type("int64"),) * 2 + tuple(numba_type(k) for k in kinds)
    disp = numba.njit(sig, **compile_options())(body)
    return disp, function_address(disp)


def _awake(pool, timeout=5.0):
    """Wake the pool and wait until every worker spins."""
    pool.wake()
    end = time.monotonic() + timeout
    while any(s != spin_pool.SPINNING for s in pool.states()):
        assert time.monotonic() < end, f"workers did not wake: states {pool.states()}"
        pool.wake()
        time.sleep(1e-4)


# after a launch a slot is SPINNING again, or already SLEEPING if a millisecond passed
_HANDED_BACK = {spin_pool.SPINNING, spin_pool.SLEEPING}


def _count_and_first(lo, hi, count, first):
    for i in range(lo, hi):
        count[i] += np.float32(1.0)
        first[i] = lo


@pytest.fixture(scope="module")
def counting():
    """A pool launcher and a body recording how often each index ran and its chunk's start."""
    from probsched.codegen.launch import launcher

    disp, address = _compiled_body(_count_and_first, ("array:float32",) * 2)
    return launcher(("array:float32",) * 2), address, disp


def test_awake_workers_run_chunks_and_every_index_once(counting):
    import numba

    launch, address, _ = counting
    pool = spin_pool.spin_pool()
    for extent in (2, 3, 7, 64):
        tries = []
        for _ in range(3):  # a worker descheduled past its idle millisecond sleeps: try again
            count, first = np.zeros(extent, np.float32), np.full(extent, -1, np.float32)
            _awake(pool)
            spin_pool.launch_counts(reset=True)
            launch(address, extent, count, first)
            tries.append(spin_pool.launch_counts())
            assert count.tolist() == [1.0] * extent
            starts = sorted(set(first.tolist()))
            assert len(starts) == min(numba.get_num_threads(), extent) and starts[0] == 0
            assert set(pool.states()) <= _HANDED_BACK
            if tries[-1]["launches"] == 1 and tries[-1]["fallbacks"] == tries[-1]["short"] == tries[-1]["wake_waits"] == 0:
                break
        else:
            raise AssertionError(f"no clean launch in {tries}")


def test_a_failing_chunk_on_a_worker_raises_in_the_caller():
    from probsched.codegen.launch import launcher

    def body(lo, hi, out, bad):
        for i in range(lo, hi):
            if i == bad[0]:
                raise MemoryError("no room for a scratch buffer")
            out[i] = np.float32(1.0)

    _, address = _compiled_body(body, ("array:float32",) * 2)
    launch = launcher(("array:float32",) * 2)
    pool = spin_pool.spin_pool()
    for bad in (0, 5):  # the caller's chunk, a worker's chunk
        _awake(pool)
        with pytest.raises(RuntimeError, match="parallel loop body failed"):
            launch(address, 6, np.zeros(6, np.float32), np.full(1, bad, np.float32))
        assert set(pool.states()) <= _HANDED_BACK
    out = np.zeros(6, np.float32)
    launch(address, 6, out, np.full(1, -1, np.float32))  # the pool still works
    assert out.tolist() == [1.0] * 6


def _set_affinities(masks):
    """Set each thread's CPU mask (``{thread id: cpus}``); returns the masks they had."""
    old = {}
    for tid, cpus in masks.items():
        try:
            old[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):  # a thread that just ended
            pass
    return old


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pins threads through /proc/self/task")
def test_launches_stay_fast_when_the_worker_shares_the_callers_core(counting):
    # On a loaded machine the worker can be queued on the launcher's own core. A wait that
    # only pauses then holds the core until the scheduler preempts it, a slice per launch:
    # with such waits these 1000 launches took over the 1 s asserted below (checked on
    # 2026-12-03 with the old waits). Waits that yield let the worker run at once.
    launch, address, _ = counting
    pool = spin_pool.spin_pool()
    count, first = np.zeros(64, np.float32), np.full(64, -1, np.float32)
    one_cpu = {min(os.sched_getaffinity(0))}
    old = _set_affinities({tid: one_cpu for tid in map(int, os.listdir("/proc/self/task"))})
    try:
        _awake(pool)
        start = time.perf_counter()
        for _ in range(1000):
            pool.wake()  # as a kernel call does: the worker sleeps after a millisecond idle
            launch(address, 64, count, first)
        elapsed = time.perf_counter() - start
    finally:
        _set_affinities(old)
    assert count.tolist() == [1000.0] * 64
    assert elapsed < 1.0, f"1000 launches took {elapsed:.2f} s with the worker on the caller's core"


def test_idle_workers_sleep_and_a_launch_without_wake_uses_prange(counting):
    import numba

    launch, address, _ = counting
    pool = spin_pool.spin_pool()
    _awake(pool)
    end = time.monotonic() + 5.0
    while pool.states() != [spin_pool.SLEEPING] * pool.workers:  # ~1 ms of idle spinning
        assert time.monotonic() < end, f"workers kept spinning: {pool.states()}"
        time.sleep(0.01)
    count, first = np.zeros(8, np.float32), np.full(8, -1, np.float32)
    spin_pool.launch_counts(reset=True)
    launch(address, 8, count, first)  # nobody woke them: numba's prange runs the chunks
    assert count.tolist() == [1.0] * 8 and len(set(first.tolist())) == min(numba.get_num_threads(), 8)
    assert pool.states() == [spin_pool.SLEEPING] * pool.workers
    counts = spin_pool.launch_counts()
    assert counts["fallbacks"] == 1 and counts["launches"] == 0, counts


def test_a_worker_that_fell_asleep_while_the_caller_held_the_gil_is_woken(counting):
    # A worker goes to SLEEPING in nopython code and then needs the GIL to get back to its
    # wait. A caller that holds the GIL meanwhile (timing another library's kernel in
    # Python) and then runs a kernel must still wake it: before, wake() trusted a flag the
    # worker had not yet set, and the launch fell back to prange (a few per same-run timing).
    launch, address, _ = counting
    pool = spin_pool.spin_pool()
    count, first = np.zeros(8, np.float32), np.full(8, -1, np.float32)
    _awake(pool)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)  # this thread keeps the GIL through the busy loop
    try:
        end = time.perf_counter() + 0.02  # a worker sleeps after ~1 ms without a job
        while time.perf_counter() < end:
            pass
        asleep = pool.states()
        spin_pool.launch_counts(reset=True)
        pool.wake()  # as a kernel call does
        woken = pool.states()  # the worker cannot leave WAKING without the GIL
        launch(address, 8, count, first)
    finally:
        sys.setswitchinterval(old)
    assert asleep == [spin_pool.SLEEPING] * pool.workers  # the case under test happened
    assert woken == [spin_pool.WAKING] * pool.workers  # the old bug left them SLEEPING
    counts = spin_pool.launch_counts()
    # the launch ran with the worker, or waited for it (the old bug: no wait, at once to
    # prange); a worker still in nopython code when woken spins without the GIL and needs
    # no wait; without it the launch goes to prange only when a machine loaded by other
    # processes gave the worker no core within the wait (WAKE_WAIT_TICKS)
    assert counts["launches"] + counts["fallbacks"] == 1, counts
    assert counts["launches"] == 1 or counts["wake_waits"] == 1, counts
    assert count.tolist() == [1.0] * 8


def test_wake_keeps_spinning_workers_awake_and_idle_ones_still_sleep():
    # A kernel calls wake() just before its first parallel loop. A worker whose idle
    # millisecond ran out in between used to sleep anyway and send the loop to prange; now
    # wake() bumps a kick word that a worker reads before it sleeps. Calls every 0.2 ms for
    # 0.1 s: without the kick a worker naps about once a millisecond and is woken again
    # (as often as it gets the GIL back, hence the short switch interval).
    pool = spin_pool.spin_pool()
    _awake(pool)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    gaps = 0  # times this thread was descheduled long enough (0.5 ms) for a worker to nap legitimately
    try:
        spin_pool.launch_counts(reset=True)
        end = time.perf_counter() + 0.1
        last = time.perf_counter()
        while last < end:
            pool.wake()
            step = time.perf_counter() + 2e-4
            while time.perf_counter() < step:
                pass
            now = time.perf_counter()
            gaps += now - last > 5e-4
            last = now
        # a last wake() before the count: a worker that napped in a final gap (unwoken) is
        # counted now and must nap again to sleep below; one that spins naps once more
        pool.wake()
        naps = spin_pool.launch_counts()["naps"]
    finally:
        sys.setswitchinterval(old)
    # without the kick a worker naps about 100 times here; a loaded machine (another VM on the
    # core) deschedules the caller now and then, and a worker may nap in each such gap
    assert naps <= 3 + 2 * gaps, f"{naps} naps while wake() was called every 0.2 ms ({gaps} gaps over 0.5 ms)"
    deadline = time.monotonic() + 5.0
    while pool.states() != [spin_pool.SLEEPING] * pool.workers:  # without calls they do sleep
        assert time.monotonic() < deadline, f"workers kept spinning: {pool.states()}"
        time.sleep(0.01)
    assert spin_pool.launch_counts()["naps"] >= naps + pool.workers


def test_kernel_calls_wake_the_pool_and_concurrent_kernels_stay_correct():
    n = 4096
    A = ps.placeholder((n,), name="A")
    B = ps.compute((n,), lambda i: A[i] * 3.0 + 1.0, name="B")
    sch = ps.Schedule(ps.create_func([A, B], name="spin_axpb"))
    sch.parallel(sch.get_loops(sch.get_block("B"))[0])
    kern = ps.build(sch)
    assert kern.parallel_form == "prange"
    pool = spin_pool.spin_pool()
    end = time.monotonic() + 5.0
    while spin_pool.SPINNING in pool.states():
        assert time.monotonic() < end
        time.sleep(0.01)
    a = np.arange(n, dtype=np.float32)
    want = a * 3.0 + 1.0
    out = np.zeros(n, np.float32)
    kern(a, out)  # wakes the workers; the launch waits for them or falls back
    np.testing.assert_array_equal(out, want)
    errors = []

    def hammer(seed):  # two threads race for the one worker: the loser runs its loop alone
        rng = np.random.default_rng(seed)
        try:
            for _ in range(300):
                x = rng.integers(-1000, 1000, n).astype(np.float32)  # exact: FMA or not
                y = np.empty(n, np.float32)
                kern(x, y)
                np.testing.assert_array_equal(y, x * np.float32(3.0) + np.float32(1.0))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and not errors


_CHILD = r"""
import os, sys, numpy as np, probsched as ps
from probsched.codegen import spin_pool
n = 1024
A = ps.placeholder((n,), name="A")
B = ps.compute((n,), lambda i: A[i] + 1.0, name="B")
sch = ps.Schedule(ps.create_func([A, B], name="forked_inc"))
sch.parallel(sch.get_loops(sch.get_block("B"))[0])
kern = ps.build(sch)
a, out = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
kern(a, out)
assert spin_pool.spin_pool().workers >= 1
pid = os.fork()
if pid == 0:  # no worker thread exists here: launches must not wait for one
    out[:] = 0
    for _ in range(50):
        kern(a, out)
    ok = np.array_equal(out, a + 1) and set(spin_pool.spin_pool().states()) == {spin_pool.ABSENT}
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
kern(a, out)
print("child", os.waitstatus_to_exitcode(status), "parent", bool(np.array_equal(out, a + 1)))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_runs_parallel_kernels_without_workers_and_the_process_exits():
    # A subprocess: forking this multi-threaded test runner is what the test is about, in
    # a process of its own; that it exits at all checks the pool's stop at exit. numba's
    # libgomp layer kills any child forked after it started ("fork() called from a process
    # already using GNU OpenMP"), with or without the pool, so this runs on its workqueue layer.
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "child 0 parent True"


_LOADS_LAUNCHER = r"""
import json
import numba
import numpy as np
from probsched.codegen import launch, spin_pool
from probsched.codegen.compile import compile_options, counting_compiles, numba_type

kinds = ("array:float32",) * 2
with counting_compiles() as compiled:
    run = launch.launcher(kinds)
source = launch.launcher_sources()[kinds]
sig = (numba_type("int64"),) * 2 + tuple(numba_type(k) for k in kinds)

def body(lo, hi, count, bad):
    for i in range(lo, hi):
        if i == bad[0]:
            raise MemoryError("no room for a scratch buffer")
        count[i] = lo

with counting_compiles() as compiled_body:
    address = launch.function_address(numba.njit(sig, **compile_options())(body))
pool = spin_pool.spin_pool()
results = []
for bad in (-1, 7):  # none, a worker's chunk
    pool.wake()
    while any(s != spin_pool.SPINNING for s in pool.states()):
        pool.wake()
    spin_pool.launch_counts(reset=True)
    first = np.full(8, -1, np.float32)
    try:
        run(address, 8, first, np.full(1, bad, np.float32))
        results.append(sorted(set(first.tolist())))
    except RuntimeError as exc:
        results.append(str(exc))
    results.append(spin_pool.launch_counts()["launches"])
print(json.dumps({"source": source, "compiled": compiled, "compiled_body": compiled_body, "results": results}))
"""


def test_a_launcher_compiled_in_one_process_is_loaded_and_runs_in_another(counting, tmp_path):
    import json

    from probsched.codegen import launch, program_cache, shared

    # this process's launcher (compiled here or loaded itself: either way made by a process
    # other than the child) is the only one in the child's program cache
    name = launch.launcher_name(("array:float32",) * 2)
    env = dict(os.environ, PROBSCHED_CACHE_DIR=str(tmp_path), NUMBA_NUM_THREADS=str(spin_pool.spin_pool().workers + 1))
    saved = os.environ.get("PROBSCHED_CACHE_DIR")
    os.environ["PROBSCHED_CACHE_DIR"] = str(tmp_path)
    try:
        assert program_cache.write(program_cache.shared_key(name), shared.export(name))
        assert program_cache.write(program_cache.shared_key(spin_pool.serve_name()), shared.export(spin_pool.serve_name()))
    finally:
        if saved is None:
            del os.environ["PROBSCHED_CACHE_DIR"]
        else:
            os.environ["PROBSCHED_CACHE_DIR"] = saved
    done = subprocess.run([sys.executable, "-c", _LOADS_LAUNCHER], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["source"] == "program cache"
    assert out["compiled"] == {} and out["compiled_body"] == {"body": 1}  # no launcher, trampoline or pool loop
    threads = spin_pool.spin_pool().workers + 1
    chunks, launched, failure, launched_again = out["results"]
    # every chunk ran; a worker took the posted one, unless, descheduled on a busy machine, it
    # let the caller take it back (launches 0: the take-back this pool is built on)
    assert chunks == [i * 8 // threads for i in range(threads)] and launched in (0, 1)
    assert "parallel loop body failed" in failure and launched_again in (0, 1)


def test_a_launcher_made_for_another_machine_or_pool_is_not_loaded(counting, monkeypatch):
    from probsched.codegen import launch, program_cache, shared

    name = launch.launcher_name(("array:float32",) * 2)
    data = shared.export(name)
    assert data is not None and shared.offer(data) == name  # a copy of this process's own: taken
    monkeypatch.setattr(program_cache, "identity", lambda: "another CPU or code generator")
    assert shared.offer(data) is None
    monkeypatch.undo()
    # the pool's size is in the name a launcher is asked for by, and only that name loads
    done = subprocess.run(
        [sys.executable, "-c", "from probsched.codegen import launch; print(launch.launcher_name(('array:float32',) * 2))"],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, NUMBA_NUM_THREADS=str(spin_pool.spin_pool().workers + 2)),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    other = done.stdout.strip().splitlines()[-1]
    assert other != name and f"pool{spin_pool.spin_pool().workers + 1} " in other


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2+ cores to choose from")
def test_a_woken_worker_is_placed_off_the_wakers_core(counting):
    # Linux wakes a thread on its waker's core and moves it only at the next load balance,
    # 10-15 ms on: meanwhile the launcher took back most of the worker's jobs (34 of 58 per
    # MobileNet-V2 inference after a 0.2 s pause). A woken worker now moves itself off it.
    launch, address, _ = counting
    pool = spin_pool.spin_pool()
    _awake(pool)
    deadline = time.monotonic() + 5.0
    while pool.states() != [spin_pool.SLEEPING] * pool.workers:
        assert time.monotonic() < deadline, f"workers kept spinning: {pool.states()}"
        time.sleep(0.01)
    _awake(pool)
    # the core the waker ran on when it woke them, as the pool read it (the caller may move
    # between its own sched_getcpu and the wake: CI once saw it so)
    waker, allowed = pool.last_waker
    aimed = [{spin_pool.SpinPool.core_for(k, waker, allowed)} for k in range(pool.workers)]
    assert all(waker not in c for c in aimed), (waker, allowed, aimed)
    # a worker says it spins before it moves (a launcher never waits for the move)
    moved = time.monotonic() + 1.0
    cores = [os.sched_getaffinity(t.native_id) for t in pool._threads]
    while cores != aimed and time.monotonic() < moved:
        time.sleep(1e-3)
        cores = [os.sched_getaffinity(t.native_id) for t in pool._threads]
    assert cores == aimed, (waker, allowed, cores)
    count, first = np.zeros(64, np.float32), np.full(64, -1, np.float32)
    pool.wake()
    launch(address, 64, count, first)
    assert count.tolist() == [1.0] * 64
