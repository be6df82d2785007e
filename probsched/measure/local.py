"""``LocalMeasurer``: compile, check and time candidates in local worker processes.

Nothing is compiled or run in the caller's process: each candidate's instruction log (JSON)
and its workload's function (JSON) go to a worker process (:mod:`.worker`) that replays the log,
builds the kernel with numba, checks it against the reference and times it with the
protocol of :mod:`.timer`. A worker that crashes (segfault, out of memory), hangs past a
timeout or raises yields a failed :class:`~.result.MeasureResult` with the error text; it
is replaced and the batch goes on.

Design choices (a few cores, shared with other work):

- **Workers** are fresh interpreters running the package's own entry point,
  ``python -m probsched.measure.worker`` (:mod:`.process`), connected by a socket pair:
  forking a process that has numba's threads is unsafe, and unlike ``multiprocessing``'s
  ``spawn`` they never import the caller's main module, so scripts, notebooks and REPLs
  measure without an ``if __name__ == "__main__":`` guard. A worker's start-up (numba's
  import and initialisation) costs seconds of CPU; it happens in the background.
- **One kernel timed at a time.** A worker that has compiled its kernel waits for the
  caller's go-ahead before it runs: the caller grants it to one worker at a time. (A
  lock shared between processes would stay locked forever when its holder is killed for
  a timeout; the caller sees every death and never has to trust a dead worker.) The run
  timeout starts at the go-ahead, so waiting for one's turn never counts as running.
- **Compiles never share the cores with a kernel being timed** (``overlap_builds=False``,
  the default). Workers compile in parallel, and a compiled kernel is timed as soon as no
  other kernel is; any worker still compiling (or starting) is stopped with SIGSTOP for
  the length of that timing and continued after it (its compile deadline waits with it;
  the running worker itself continues them when it is done, so a killed caller never
  leaves them stopped). numba compiles on one thread while kernels use every core, so a
  compile running beside a timing takes a core from the kernel: its median comes out
  slower by an amount that depends on what compiled when, which scrambles the ranking.
  Pausing costs a compile slot the length of each timing. ``overlap_builds=True`` is the
  choice when throughput matters more than the ranking's noise (or when kernels use fewer
  threads than there are cores).
- **Across measurers on one machine** (``host_lock=True``: the measuring threads of Dask
  workers, :mod:`.remote`), the go-ahead also needs the machine's
  :class:`~.hostlock.HostLock`, an ``flock`` the kernel releases when its holder dies; while
  another measurer holds it, this one's compiling and starting workers are stopped as for
  its own timings (polling the lock until it is free).
- **Workers are recycled** after ``max_compiles_per_worker`` fresh compiles, or when
  their resident memory passes ``max_worker_rss_mb``: numba never frees a compiled
  function, so a worker's memory grows with every kernel it builds
  (``python benchmarks/bench_measure.py --memory`` follows it).
- **Reference data** (inputs, expected outputs) is made once per workload and shared by
  workers through a file (:mod:`.reference`).
- **Timing stops early** for a candidate clearly slower than the best (``early_stop``, 2.0
  by default): after two repeats whose faster one is more than ``early_stop`` times the
  best median known, the worker stops and the result says ``stopped_early``. The best known
  is the faster of what this call has timed in full and the caller's ``best_seconds`` (the
  tuner passes its database's best of the task), never what the measurer timed for an
  earlier call: a measurer outlives a tuning run (a Dask worker serves every client), and a
  bound the caller never stored could leave its database without one candidate timed in
  full. Such a candidate cannot be the fastest of its run (one timed in full was at least
  twice as fast), the tuner never names it best without timing it in full
  (:mod:`probsched.tuning.selection`), and its record says it
  (``TuningRecord.stopped_early``; ``benchmarks/bench_throughput.py`` counts how many
  stop in a run). The calibration's last pass counts as the first repeat
  (``reuse_calibration``, :mod:`.timer`).
- **Candidates to compare with each other** go to one worker together
  (:meth:`LocalMeasurer.measure_together`): it builds them all, then times them interleaved
  round by round, so that the machine's drift between separate measurements does not rank
  them.

>>> import probsched as ps
>>> w = ps.workloads.small("GMM")
>>> sch = ps.Schedule(w.func)
>>> i = sch.get_loops(sch.get_block("Z"))[1]
>>> _ = sch.split(i, [2, 2])
>>> with LocalMeasurer(workers=1, repeat=3, min_repeat_ms=1) as m:
...     (r,) = m.measure(w, [sch])
...     m.settle()  # before timing kernels here: no worker may be starting beside them
...     starting = m.workers_starting
>>> r.ok, len(r.run_seconds), r.median > 0, starting
(True, 3, True, 0)
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import time
import weakref
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

from ..errors import ProbschedError
from ..ir.stmt import PrimFunc
from ..schedule import InstructionLog, Schedule
from ..workloads import Workload, as_workload
from ..target import Target
from .hostlock import HostLock
from .process import WorkerProcess
from .protocol import instruction_log_json
from .reference import from_workload
from .result import CRASH, TIMEOUT, WRONG_RESULT, MeasureResult
from .stats import MeasureStats

log = logging.getLogger("probsched.measure")

#: Fresh compiles a worker makes before it is replaced. Most kernels add little to a
#: worker's memory and a few large unrolled ones add much; this many keeps two workers and
#: the tuner within a small machine's memory, and a restart (seconds of CPU) is rare enough
#: not to matter. ``python benchmarks/bench_measure.py --memory`` measures the growth.
DEFAULT_MAX_COMPILES = 48
#: Resident MiB after which a worker is replaced even before :data:`DEFAULT_MAX_COMPILES`
#: (catches a streak of large kernels).
DEFAULT_MAX_RSS_MB = 768.0
#: ``min_repeat_ms`` of a :class:`LocalMeasurer` (and :class:`~.dask.DaskMeasurer`): one
#: repeat of a candidate lasts at least this long. Chosen as the shortest repeat that
#: ranks tuned candidates as well as twice as long a repeat does, within the pass-to-pass
#: noise (``python benchmarks/bench_throughput_levers.py protocol`` compares protocols);
#: the final re-timing of the best candidates (interleaved rounds) is what names the best.
DEFAULT_MIN_REPEAT_MS = 25.0
#: ``early_stop`` of a :class:`LocalMeasurer`: stop timing a candidate whose first two
#: repeats were both slower than this many times the best median known (see the module doc).
DEFAULT_EARLY_STOP = 2.0
#: ``together_warm_up`` of a :class:`LocalMeasurer`: before each timed repeat of a
#: :meth:`~LocalMeasurer.measure_together` round, a tenth of a repeat runs untimed (enough
#: to bring the candidate's data into cache and the threads awake; a whole repeat doubled
#: the re-timing and picked alike).
DEFAULT_TOGETHER_WARM_UP = 0.1

STARTING, IDLE, COMPILING, READY, RUNNING = "starting", "idle", "compiling", "ready", "running"
_STARTUP_TIMEOUT = 120.0
_HOST_POLL = 0.02  # seconds between looks at the host lock (see _follow_host)
_MAX_WAIT = 1.0  # the longest a measurer waits for its workers before it looks at them again
_MAX_STARTUP_FAILURES = 3


class MeasureError(ProbschedError):
    """The measurer itself cannot work (workers fail to start, closed measurer)."""


class _Worker:
    """The caller's handle on one worker process and the task it holds."""

    def __init__(self, log_dir: str, number: int) -> None:
        self.log_path = os.path.join(log_dir, f"worker-{number}.log")
        self.proc = WorkerProcess(self.log_path, name=f"probsched-measure-{number}")
        self.conn = self.proc.conn
        self.state = STARTING
        self.deadline: Optional[float] = time.monotonic() + _STARTUP_TIMEOUT
        self.index: Optional[int] = None
        self.compile_seconds = 0.0
        self.ready_since = 0.0
        self.phase_start = 0.0
        self.paused = 0.0  # seconds stopped during the current compile
        self.compiles = 0
        self.rss_mb = 0.0
        self.members = 1  # candidates in the task it holds (a group has several)
        self.func_key = ""  # the workload of the task it holds
        self.compile_budget = self.run_budget = 0.0  # the task's timeouts

    def send(self, msg: tuple) -> bool:
        try:
            self.conn.send(msg)
            return True
        except (OSError, ValueError):
            return False

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5.0)
        self.proc.close()

    def death_message(self) -> str:
        self.proc.join(1.0)
        if self.proc.is_alive():  # its end of the connection closed, yet it runs: end it
            self.proc.kill()
            self.proc.join(5.0)
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        try:
            with open(self.log_path, errors="replace") as fh:
                tail = fh.read()[-3000:].strip()
        except OSError:
            tail = ""
        return f"worker process {self.proc.pid} {how} while {self.state}" + (f"\n{tail}" if tail else "")


def _measured_here(result, target: str):
    """``result`` (or a group's list of them) saying it was measured on ``target``."""
    if isinstance(result, list):
        return [dataclasses.replace(r, target=target) for r in result]
    return dataclasses.replace(result, target=target)


def _no_result(index: int, result) -> None:
    raise AssertionError(f"a result arrived with no task out (index {index})")


def _reap(procs: List[WorkerProcess]) -> List[WorkerProcess]:
    alive = []
    for p in procs:
        p.join(0)
        if p.is_alive():
            alive.append(p)
        else:
            p.close()
    return alive


def _shutdown(workers: List[_Worker], retired: list, tmpdir: str, host_lock: Optional[HostLock] = None) -> None:
    for w in workers:  # an idle worker exits when asked; a busy one is killed (it holds nothing of value)
        if w.state != IDLE or not w.send(("exit",)):
            w.proc.kill()
    deadline = time.monotonic() + 2.0
    for p in [w.proc for w in workers] + retired:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5.0)
        p.close()
    if host_lock is not None:
        host_lock.close()
    shutil.rmtree(tmpdir, ignore_errors=True)


class LocalMeasurer:
    """Measure candidates in ``workers`` local processes (a context manager; see the module doc).

    ``compile_timeout`` / ``run_timeout``: seconds for one candidate's replay and build,
    and for its check and timing (twice ``run_timeout`` for the run that also makes a bare
    function's reference). ``repeat``, ``min_repeat_ms``, ``flush_cache``: the timing
    protocol (:func:`~probsched.measure.timer.time_callable`); ``reuse_calibration``: the
    calibration's last pass is the first repeat; ``early_stop``: stop timing a candidate
    after two repeats slower than this many times the best median known (None: never; see
    the module doc); ``together_warm_up``: the part of a repeat each
    candidate of :meth:`measure_together` runs untimed before each timed one. ``cold_weights``:
    time a network task's kernels with their weights flushed from the caches before each
    call, as the network runs them (:mod:`.cold_weights`). ``check``: compare every
    kernel's outputs with the reference before timing it. ``max_compiles_per_worker``,
    ``max_worker_rss_mb``: when a worker is recycled. ``overlap_builds``: whether workers
    keep compiling while a kernel is timed (default: they are paused). ``host_lock``: also
    time one kernel at a time with every other measurer on this machine that uses it, and
    pause these workers' compiles while one of them times (:mod:`.hostlock`; True: the
    default lock file, or a path). ``stats`` (:class:`~probsched.measure.stats.MeasureStats`) says where
    the time and memory went.
    """

    def __init__(
        self,
        workers: int = 2,
        compile_timeout: float = 30.0,
        run_timeout: float = 10.0,
        repeat: int = 5,
        min_repeat_ms: float = DEFAULT_MIN_REPEAT_MS,
        flush_cache: bool = False,
        max_compiles_per_worker: int = DEFAULT_MAX_COMPILES,
        check: bool = True,
        *,
        overlap_builds: bool = False,
        max_worker_rss_mb: float = DEFAULT_MAX_RSS_MB,
        host_lock: Union[bool, str] = False,
        early_stop: Optional[float] = DEFAULT_EARLY_STOP,
        reuse_calibration: bool = True,
        together_warm_up: float = DEFAULT_TOGETHER_WARM_UP,
        cold_weights: bool = False,
    ) -> None:
        if workers < 1 or repeat < 1 or max_compiles_per_worker < 1:
            raise ValueError("LocalMeasurer: workers, repeat and max_compiles_per_worker must be >= 1")
        if early_stop is not None and not early_stop > 1.0:
            raise ValueError(f"LocalMeasurer: early_stop must be None or > 1, got {early_stop}")
        self.compile_timeout = float(compile_timeout)
        self.run_timeout = float(run_timeout)
        self.repeat = int(repeat)
        self.min_repeat_ms = float(min_repeat_ms)
        self.flush_cache = bool(flush_cache)
        self.max_compiles_per_worker = int(max_compiles_per_worker)
        self.check = bool(check)
        self.overlap_builds = bool(overlap_builds)
        self.max_worker_rss_mb = float(max_worker_rss_mb)
        self.early_stop = None if early_stop is None else float(early_stop)
        self.reuse_calibration = bool(reuse_calibration)
        self.together_warm_up = float(together_warm_up)
        self.cold_weights = bool(cold_weights)
        self._best: Dict[str, float] = {}  # func key -> this call's best median timed in full (or the caller's)
        self._tmpdir = tempfile.mkdtemp(prefix="probsched-measure-")
        self._startup_failures = 0
        self._refs: Dict[int, tuple] = {}  # id(workload) -> (workload, reference file)
        self._workers: List[_Worker] = []
        self._retired: list = []
        self._paused: list = []  # (worker, its phase, seconds it had left) stopped while a kernel is timed
        self._paused_at = 0.0
        self._host_lock = HostLock(host_lock if isinstance(host_lock, str) else None) if host_lock else None
        self._paused_for_host = False  # self._paused holds workers stopped for another measurer's timing
        self._target = Target.host().to_json()  # the workers run here: every result says so
        self.stats = MeasureStats()
        for _ in range(workers):
            self._workers.append(self._new_worker())
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._retired, self._tmpdir, self._host_lock)

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "LocalMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (killing busy ones, and idle ones that do not exit within 2 s); remove temp files."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return not self._finalizer.alive

    @property
    def workers_started(self) -> int:
        """Worker processes started so far (replacements and recycling included)."""
        return self.stats.worker_starts

    @property
    def workers_starting(self) -> int:
        """Workers started but not ready yet (a replacement warming numba up)."""
        return sum(w.state == STARTING for w in self._workers)

    def settle(self) -> None:
        """Return once no worker is starting.

        A worker replaced after a batch (recycled, or after a crash) starts at once, and its
        start-up compiles numba's warm-up kernels: seconds of one core. The measurer pauses it
        while it times a kernel itself, but not while its caller does. A caller about to time
        kernels in its own process (:meth:`~probsched.tuning.TuneResult.compare`) settles
        the measurer first; :func:`~probsched.tune` does before it returns, so the wait
        (at most one start-up) is paid once per tune.
        """
        if self.closed:
            return
        while self.workers_starting:
            self._step(_no_result)

    def _new_worker(self) -> _Worker:
        self.stats.worker_starts += 1
        return _Worker(self._tmpdir, self.stats.worker_starts)

    def _replace(self, w: _Worker, kill: bool) -> None:
        if kill:
            w.kill()
        else:
            w.send(("exit",))
            w.conn.close()
            self._retired.append(w.proc)
        self._retired[:] = _reap(self._retired)
        self._workers[self._workers.index(w)] = self._new_worker()

    # ------------------------------------------------------------------ inputs
    def _job(self, workload: Union[Workload, PrimFunc], reference: Optional[str] = None) -> dict:
        w = as_workload(workload)
        func = w.func
        if reference is not None:
            if not os.path.isfile(reference):
                raise ValueError(f"measure: reference {reference!r} is not a file (Reference.save writes one)")
            ref_path, ref_mode, name = reference, "file", w.name or func.name
        elif w.has_reference:
            entry = self._refs.get(id(w))
            if entry is None:  # keyed by identity: two workloads may share a function, not a reference
                path = os.path.join(self._tmpdir, f"ref-{len(self._refs)}.npz")
                from_workload(w).save(path)
                entry = self._refs[id(w)] = (w, path)
            ref_path, ref_mode, name = entry[1], "file", w.name
        else:  # a bare function: a worker makes the expected outputs from the unscheduled program
            ref_path = os.path.join(self._tmpdir, f"func-{func.structural_hash()}.npz")
            ref_mode, name = "func", func.name
        return {
            "func": func,
            "name": name,
            "func_key": func.structural_hash(),
            "func_json": func.to_json(),
            "ref_path": ref_path,
            "ref_mode": ref_mode,
            "check": self.check,
            "repeat": self.repeat,
            "min_repeat_ms": self.min_repeat_ms,
            "flush_cache": self.flush_cache,
            "reuse_calibration": self.reuse_calibration,
            "cold_weights": self.cold_weights,
        }

    # ------------------------------------------------------------------ measuring
    def measure(
        self,
        workload: Union[Workload, PrimFunc],
        schedules: Sequence[Union[Schedule, InstructionLog]],
        on_result: Optional[Callable[[int, MeasureResult], None]] = None,
        *,
        reference: Optional[str] = None,
        best_seconds: Optional[float] = None,
        _faults: Optional[Mapping[int, str]] = None,
    ) -> List[MeasureResult]:
        """Measure every candidate; results in input order.

        ``on_result(index, result)`` is called in this process as each candidate finishes
        (in completion order). ``reference``: the path of a
        :class:`~probsched.measure.reference.Reference` file (``Reference.save``) to check
        against instead of the workload's own (how a Dask worker, which receives the function
        and the reference as data, measures). ``best_seconds``: the fastest median the caller
        holds for this workload, timed in full; with ``early_stop`` a candidate clearly slower
        than it stops early (see the module doc). ``_faults`` is the test hook of :mod:`._faults`.
        """
        job, logs, faults = self._inputs(workload, schedules, _faults, reference)
        units = [{"log_json": t, "fault": faults.get(i)} for i, t in enumerate(logs)]
        return self._measure_units(job, units, on_result, best_seconds)  # type: ignore[return-value]

    def measure_together(
        self,
        workload: Union[Workload, PrimFunc],
        schedules: Sequence[Union[Schedule, InstructionLog]],
        rounds: int = 15,
        *,
        reference: Optional[str] = None,
        cold_weights: Optional[bool] = None,
        _faults: Optional[Mapping[int, str]] = None,
    ) -> List[MeasureResult]:
        """Build and check every candidate in one worker, then time them *interleaved*:
        ``rounds`` rounds, each one repeat of every candidate
        (:func:`~probsched.measure.timer.time_interleaved`). Their medians come from the same
        stretch of time, so they rank the candidates against each other where separate
        measurements (minutes apart, the machine's speed drifting) cannot: what the tuner
        uses to re-time its best candidates before it names one. Results in input order,
        ``run_seconds`` one mean per round; a candidate that fails fails alone, a worker that
        crashes or times out fails the group. ``reference``: as for :meth:`measure`.
        ``cold_weights``: this time, whether the weights are timed cold (None: as the measurer
        was made; :mod:`.cold_weights`).
        """
        if rounds < 1:
            raise ValueError(f"measure_together: rounds must be >= 1, got {rounds}")
        job, logs, faults = self._inputs(workload, schedules, _faults, reference)
        if cold_weights is not None:
            job = {**job, "cold_weights": bool(cold_weights)}
        if not logs:
            return []
        unit = {
            "log_jsons": logs,
            "faults": [faults.get(i) for i in range(len(logs))],
            "rounds": int(rounds),
            "warm_up": self.together_warm_up,
        }
        (out,) = self._measure_units(job, [unit], None)
        return list(out) if isinstance(out, list) else [out] * len(logs)

    def _inputs(self, workload, schedules, faults, reference=None) -> tuple:
        """(job, instruction-log JSON per candidate, faults by index) of a measuring call."""
        if self.closed:
            raise MeasureError("measure: this LocalMeasurer is closed")
        job = self._job(workload, reference)
        return job, [instruction_log_json(s, job["func"], i) for i, s in enumerate(schedules)], dict(faults or {})

    def _budget(self, unit: dict) -> tuple:
        """(compile, run) timeouts of a task: a group's members each get the single budgets,
        and the run budget also covers the interleaved rounds (an untimed and a timed
        repeat of every member per round, with room to spare)."""
        members = unit.get("log_jsons")
        if members is None:
            return self.compile_timeout, self.run_timeout
        per_round = 4 * self.min_repeat_ms / 1000.0
        return self.compile_timeout * len(members), (self.run_timeout + unit["rounds"] * per_round) * len(members)

    def _measure_units(self, job: dict, units: List[dict], on_result, best_seconds: Optional[float] = None) -> list:
        """Run every task (a candidate or a group) through the workers; results in input order."""
        known = best_seconds is not None and math.isfinite(best_seconds) and best_seconds > 0
        self._best = {job["func_key"]: float(best_seconds)} if known else {}  # this call's bound only
        results: list = [None] * len(units)
        pending = collections.deque(range(len(units)))
        remaining = [len(units)]

        def finish(index: int, result) -> None:
            result = _measured_here(result, self._target)
            results[index] = result
            remaining[0] -= 1
            for member, r in enumerate(result if isinstance(result, list) else [result]):
                if r.error_kind == WRONG_RESULT:
                    which = index if not isinstance(result, list) else member
                    log.error("WRONG RESULT (a compiler bug?) for %s candidate %d: %s", job["name"], which, r.error_message)
            if on_result is not None:
                self.stats.tick(time.monotonic(), "caller")  # the workers wait for the caller's dispatch
                on_result(index, result)

        try:
            while remaining[0]:
                self._dispatch(pending, job, units)
                self._tick()
                self._step(finish)
                self._tick()
        except BaseException:
            self.stats.tick(time.monotonic(), None)
            self._resume()
            self._paused_for_host = False
            self._release_host()
            for w in list(self._workers):  # a worker holding a task of this batch is in an unknown state
                if w.index is not None:
                    self._replace(w, kill=True)
            raise
        self.stats.tick(time.monotonic(), None)
        return results

    def _tick(self) -> None:
        """Charge the wall time since the last tick to what the workers were doing (stats.wall)."""
        states = {w.state for w in self._workers}
        mode = "run" if RUNNING in states else "compile" if COMPILING in states else "start" if STARTING in states else "idle"
        self.stats.tick(time.monotonic(), mode)

    def _dispatch(self, pending: collections.deque, job: dict, units: List[dict]) -> None:
        running = any(w.state == RUNNING for w in self._workers)
        ready = [w for w in self._workers if w.state == READY]
        if ready and not running and self._take_host():
            w = min(ready, key=lambda x: x.ready_since)
            now = time.monotonic()
            pause = [] if self.overlap_builds else [x for x in self._workers if x.state in (COMPILING, STARTING)]
            if not w.send(("go", [x.proc.pid for x in pause])):
                self._release_host()  # it died: the next step notices and replaces it
            else:
                self._pause(pause, now)
                self.stats.wait_seconds += now - w.ready_since
                # the first run of a bare function also runs its unscheduled reference
                first = job["ref_mode"] == "func" and not os.path.exists(job["ref_path"])
                w.state, w.deadline, w.phase_start = RUNNING, now + w.run_budget * (1 + first), now
                running = True
        if (running or self._paused_for_host) and not self.overlap_builds:
            return  # a compile started now would share the cores with the kernel being timed
        for w in self._workers:
            if w.state == IDLE and pending:
                index = pending.popleft()
                task = {k: v for k, v in job.items() if k not in ("func", "name")}
                task.update(units[index])
                best = self._best.get(job["func_key"])
                if self.early_stop is not None and best is not None and "log_jsons" not in task:
                    task["stop_above"] = self.early_stop * best  # a group is always timed in full
                w.func_key = job["func_key"]
                if w.send(("task", task)):
                    w.state, w.index, w.phase_start, w.paused = COMPILING, index, time.monotonic(), 0.0
                    w.members = len(units[index].get("log_jsons", [None]))
                    w.compile_budget, w.run_budget = self._budget(units[index])
                    w.deadline = w.phase_start + w.compile_budget
                else:
                    pending.appendleft(index)  # it died: the next step notices and replaces it

    def _pause(self, workers: List[_Worker], now: float) -> None:
        """Stop (SIGSTOP) compiling and starting workers while a kernel is timed; their
        deadlines wait with them."""
        self._paused, self._paused_at = [], now
        for x in workers:
            try:
                os.kill(x.proc.pid, signal.SIGSTOP)
            except OSError:  # already gone: the next step sees its death
                continue
            self._paused.append((x, x.state, None if x.deadline is None else x.deadline - now))
            x.deadline = None

    def _resume(self) -> None:
        """Continue the paused workers with the time they had left."""
        now = time.monotonic()
        for x, state, left in self._paused:
            try:
                os.kill(x.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            if x.state != state or x not in self._workers:
                continue  # it said "compiled" or "ready" just before it stopped: its phase is over
            x.deadline = None if left is None else now + left
            x.phase_start += now - self._paused_at  # stopped time is not compile time
            x.paused += now - self._paused_at
        self._paused = []

    def _step(self, finish: Callable[[int, MeasureResult], None]) -> None:
        """Wait for one event (a message, a death, a deadline) and handle what happened."""
        now = time.monotonic()
        deadlines = [w.deadline for w in self._workers if w.deadline is not None]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        if self._host_lock is not None and not self._host_lock.held and (
            self._paused_for_host or any(w.state != IDLE for w in self._workers)
        ):
            # another measurer's timing starts or ends unannounced: look again soon. Paused
            # for it with every worker idle, this measurer holds its tasks back (_dispatch)
            # and only a look at the lock (_follow_host) lets them go
            timeout = _HOST_POLL if timeout is None else min(timeout, _HOST_POLL)
        # a wait is never unbounded: a state this loop did not foresee costs a look a second,
        # not a hung tuner
        timeout = _MAX_WAIT if timeout is None else min(timeout, _MAX_WAIT)
        waitables = {}
        for w in self._workers:
            waitables[w.conn] = w
            if w.proc.sentinel is not None:
                waitables[w.proc.sentinel] = w
        ready = multiprocessing.connection.wait(list(waitables), timeout)
        handled = set()
        for obj in ready:
            w = waitables[obj]
            if id(w) in handled:
                continue
            handled.add(id(w))
            self._receive(w, finish)
        now = time.monotonic()
        for w in list(self._workers):
            if w in self._workers and w.deadline is not None and now > w.deadline:
                self._timeout(w, finish)
        self._follow_host()

    def _take_host(self) -> bool:
        """Whether this measurer may time a kernel now: always, or once it holds the host lock."""
        if self._host_lock is None:
            return True
        if not self._host_lock.try_acquire():
            return False
        if self._paused_for_host:  # the other timing is over; ours pauses whom it needs to
            self._resume()
            self._paused_for_host = False
        return True

    def _release_host(self) -> None:
        if self._host_lock is not None:
            self._host_lock.release()

    def _follow_host(self) -> None:
        """Stop the compiling and starting workers while another measurer on this machine
        times a kernel (the host lock is held elsewhere); continue them when it is done."""
        lock = self._host_lock
        if lock is None or lock.held or self.overlap_builds:
            return
        busy = lock.held_elsewhere()
        if busy and not self._paused_for_host:
            self._pause([x for x in self._workers if x.state in (COMPILING, STARTING)], time.monotonic())
            self._paused_for_host = True
        elif not busy and self._paused_for_host:
            self._resume()
            self._paused_for_host = False

    def _receive(self, w: _Worker, finish) -> None:
        closed = False
        try:
            while w.conn.poll():
                self._handle(w, w.conn.recv(), finish)
                if w not in self._workers:
                    return
        except (EOFError, OSError):
            closed = True  # the worker holds the only other end: it is gone or going
        if (closed or not w.proc.is_alive()) and w in self._workers:
            self._died(w, finish)

    def _handle(self, w: _Worker, msg: tuple, finish) -> None:
        kind = msg[0]
        if kind == "ready":
            w.state, w.deadline, w.rss_mb = IDLE, None, msg[2]
            self._startup_failures = 0
        elif kind == "compiled":
            w.state, w.deadline, w.ready_since = READY, None, time.monotonic()
            seen = w.ready_since - w.phase_start  # stopped time already left out
            # the worker's clock ran while it was stopped; the stop as timed here can be a
            # signal's latency short of it, so the build never counts more than was seen here
            w.compile_seconds = min(max(0.0, msg[1] - w.paused), seen)
            self.stats.compile_seconds += seen
            self.stats.build_seconds += w.compile_seconds
        elif kind == "result":
            d = msg[1]
            if w.state == COMPILING:  # the build failed
                w.compile_seconds = max(0.0, d["compile_seconds"] - w.paused)
            self._account(w)
            index, w.index = w.index, None
            w.state, w.deadline, w.compiles, w.rss_mb = IDLE, None, d["compiles"], d["rss_mb"]
            self.stats.memory.append((w.proc.pid, w.compiles, w.rss_mb))
            self.stats.check_seconds += d.get("check_seconds", 0.0)
            self.stats.timing_seconds += d.get("timing_seconds", 0.0)
            if "group" in d:
                result = [MeasureResult(tuple(m["run_seconds"]), m["compile_seconds"], m["error_kind"], m["error_message"]) for m in d["group"]]
            else:
                early = bool(d.get("stopped_early"))
                result = MeasureResult(tuple(d["run_seconds"]), w.compile_seconds, d["error_kind"], d["error_message"], stopped_early=early)
                self.stats.stopped_early += early
                if result.ok and not early:
                    self._best[w.func_key] = min(self._best.get(w.func_key, math.inf), result.median)
            if w.compiles >= self.max_compiles_per_worker or w.rss_mb > self.max_worker_rss_mb:
                log.info("recycling measure worker %d after %d compiles (%.0f MiB)", w.proc.pid, w.compiles, w.rss_mb)
                self._replace(w, kill=False)
            finish(index, result)

    def _account(self, w: _Worker) -> None:
        """Add the time of the phase ``w`` ends now to the stats."""
        spent = time.monotonic() - w.phase_start
        if w.state == RUNNING:
            self._resume()
            self._release_host()
            self.stats.run_seconds += spent
        elif w.state == COMPILING:
            self.stats.compile_seconds += spent
        if w.index is not None:
            self.stats.candidates += w.members

    def _died(self, w: _Worker, finish) -> None:
        self._account(w)
        message = w.death_message()
        index, state = w.index, w.state
        self._replace(w, kill=True)
        if index is not None:
            finish(index, MeasureResult.failure(CRASH, message, w.compile_seconds if state != COMPILING else 0.0))
        elif state == STARTING:
            self._startup_failed(message)

    def _timeout(self, w: _Worker, finish) -> None:
        self._account(w)
        index, state = w.index, w.state
        self._replace(w, kill=True)
        if state == STARTING:
            self._startup_failed(f"worker did not start within {_STARTUP_TIMEOUT:.0f} s")
            return
        if state == COMPILING:
            msg, spent = f"compile exceeded the {w.compile_budget:g} s timeout (replay + build)", w.compile_budget
            finish(index, MeasureResult.failure(TIMEOUT, msg, spent))
        else:
            msg = f"run exceeded the {w.run_budget:g} s timeout (check + timing)"
            finish(index, MeasureResult.failure(TIMEOUT, msg, w.compile_seconds))

    def _startup_failed(self, message: str) -> None:
        self._startup_failures += 1
        if self._startup_failures >= _MAX_STARTUP_FAILURES:
            raise MeasureError(
                f"measure workers fail to start ({self._startup_failures} in a row): {message}\n"
                f"(each worker is `{sys.executable} -m probsched.measure.worker`; its own error is "
                "printed on stderr above)"
            )
