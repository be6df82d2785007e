"""The measurement worker: a process that replays, compiles, checks and times candidates.

It runs as ``python -m probsched.measure.worker FD LOG_PATH NAME``, started by
:class:`~probsched.measure.process.WorkerProcess` for
:class:`~probsched.measure.local.LocalMeasurer`, which talks to it over the socket ``FD``
(a :class:`multiprocessing.connection.Connection`):

========================  ==============================================================
caller -> worker           worker -> caller
========================  ==============================================================
                           ``("ready", pid, rss_mb)`` once numba is initialised
``("task", dict)``         ``("compiled", seconds)`` when the kernel is built, or
                           ``("result", dict)`` when the build failed
``("go", pids)``           ``("result", dict)`` after checking and timing, having
                           sent SIGCONT to ``pids`` (workers the caller stopped)
``("exit",)``              (the worker returns)
========================  ==============================================================

Compiling never waits; running waits for ``("go", pids)`` so that the caller decides which
worker may use the cores (one at a time).

A task holds one candidate (``log_json``) or a group (``log_jsons``, ``rounds``): a
group's members are built, checked, then timed *together*, interleaved
(:func:`~probsched.measure.timer.time_interleaved`), so that their medians come from the
same stretch of time and can be compared with each other; its result holds one result dict
per member under ``"group"``. The worker never decides about timeouts: the
caller kills it. A watchdog thread ends the worker when the caller's process is gone, so a
worker stuck in a kernel never outlives a killed tuner.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from typing import Dict, Optional

from .result import COMPILE, RUNTIME, WRONG_RESULT


def rss_mb() -> float:
    """Resident memory of this process in MiB (Linux; 0.0 elsewhere).

    >>> rss_mb() > 0
    True
    """
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


class _State:
    """What a worker keeps between tasks: decoded functions and loaded reference data."""

    def __init__(self) -> None:
        self.funcs: Dict[str, object] = {}
        self.refs: Dict[str, object] = {}  # path -> Reference (the last two: bounded memory)
        self.compiles = 0

    def func(self, key: str, text: str):
        from ..ir.stmt import PrimFunc

        if key not in self.funcs:
            self.funcs[key] = PrimFunc.from_json(text)
        return self.funcs[key]

    def reference(self, path: str):
        from .reference import Reference

        if path not in self.refs:
            if not os.path.exists(path):
                return None
            if len(self.refs) >= 2:
                self.refs.pop(next(iter(self.refs)))
            self.refs[path] = Reference.load(path)
        return self.refs[path]


def _error_text(limit: int) -> str:
    """The exception's type and message first (what a user reads), then the innermost frames."""
    exc = sys.exc_info()[1]
    return f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc(limit=-limit)}"


def _result(error_kind: Optional[str] = None, message: str = "", compile_seconds: float = 0.0, run_seconds=(), state=None) -> dict:
    return {
        "run_seconds": list(run_seconds),
        "compile_seconds": compile_seconds,
        "error_kind": error_kind,
        "error_message": message,
        "compiles": state.compiles if state else 0,
        "rss_mb": rss_mb(),
        "stopped_early": False,
    }


def _with_phases(result: dict, check_seconds: float, timing_seconds: float) -> dict:
    """``result`` with the seconds its run spent checking and timing (the measurer's stats)."""
    result["check_seconds"], result["timing_seconds"] = check_seconds, timing_seconds
    return result


def _build(state: _State, task: dict, log_json: str, fault: Optional[str]):
    """Replay the instruction log, build the candidate (and the unscheduled reference if needed)."""
    from ..codegen import build
    from ..schedule import InstructionLog, Schedule

    func = state.func(task["func_key"], task["func_json"])
    sch = InstructionLog.from_json(log_json).apply(Schedule(func))
    mod = sch.mod
    if fault:
        from . import _faults

        mod = _faults.inject(mod, fault)
    ref_kernel = None
    if task["ref_mode"] == "func" and state.reference(task["ref_path"]) is None:
        ref_kernel = build(func)  # the unscheduled program is the reference of a bare function
        state.compiles += not ref_kernel.from_cache
    t = time.perf_counter()
    kernel = build(mod)
    seconds = time.perf_counter() - t
    state.compiles += not kernel.from_cache
    return func, kernel, ref_kernel, seconds


def _make_reference(func, ref_kernel, path: str):
    from .reference import from_func

    ref = from_func(func, ref_kernel)
    ref.save(path)
    return ref


def _reference(state: _State, task: dict, func, ref_kernel):
    """The workload's reference (made here from the unscheduled program for a bare function),
    or a failed result dict."""
    ref = state.reference(task["ref_path"])
    if ref is None:
        try:
            ref = state.refs[task["ref_path"]] = _make_reference(func, ref_kernel, task["ref_path"])
        except Exception:
            text = "making the reference (running the unscheduled program) failed: " + _error_text(3)
            return _result(RUNTIME, text, state=state)
    return ref


def _checked_arguments(state: _State, task: dict, ref, func, kernel, compile_seconds: float):
    """Run the kernel once on the reference inputs and check its outputs: its bound
    arguments, or a failed result dict."""
    try:
        outputs = ref.empty_outputs(kernel)
        args = ref.arguments(kernel, outputs)
        kernel(*args)
    except Exception:
        return _result(RUNTIME, _error_text(3), compile_seconds, state=state)
    if task["check"]:
        try:
            ref.check(kernel.func, outputs)  # the scheduled program: its algorithm sets the tolerance
        except AssertionError as exc:
            return _result(WRONG_RESULT, str(exc), compile_seconds, state=state)
    return args


def _bound(task: dict, kernel, args):
    """What the timer calls: ``kernel`` bound to ``args``, its weights cold if asked."""
    if task.get("cold_weights"):
        from .cold_weights import cold_weights_call

        return cold_weights_call(kernel, args)
    return kernel.bind(*args)


def _run(state: _State, task: dict, func, kernel, ref_kernel, compile_seconds: float) -> dict:
    """Check the kernel against the reference, then time it (the caller said "go")."""
    from .timer import time_callable

    start = time.perf_counter()
    ref = _reference(state, task, func, ref_kernel)
    if isinstance(ref, dict):
        return ref
    args = _checked_arguments(state, task, ref, func, kernel, compile_seconds)
    checked = time.perf_counter()
    if isinstance(args, dict):
        return _with_phases(args, checked - start, 0.0)
    try:
        timing = time_callable(
            _bound(task, kernel, args),  # checked once; the timed calls run the compiled code only
            repeat=task["repeat"],
            min_repeat_ms=task["min_repeat_ms"],
            flush_cache=task["flush_cache"],
            reuse_calibration=task.get("reuse_calibration", False),
            stop_above=task.get("stop_above"),
        )
    except Exception:
        return _result(RUNTIME, _error_text(3), compile_seconds, state=state)
    result = _result(None, "", compile_seconds, timing.means, state=state)
    result["stopped_early"] = timing.stopped_early
    return _with_phases(result, checked - start, time.perf_counter() - checked)


def _build_group(state: _State, task: dict) -> tuple:
    """Build every member of a group task: (func, ref_kernel, [(kernel, seconds) or a failed
    result dict])."""
    func, ref_kernel, members = state.func(task["func_key"], task["func_json"]), None, []
    faults = task.get("faults") or [None] * len(task["log_jsons"])
    for log_json, fault in zip(task["log_jsons"], faults):
        start = time.perf_counter()
        try:
            _, kernel, built_ref, seconds = _build(state, task, log_json, fault)
            members.append((kernel, seconds))
            ref_kernel = ref_kernel or built_ref
        except Exception:
            members.append(_result(COMPILE, _error_text(4), time.perf_counter() - start, state=state))
    return func, ref_kernel, members


def _run_group(state: _State, task: dict, func, ref_kernel, members: list) -> dict:
    """Check every built member, then time the good ones interleaved (the caller said "go")."""
    from .timer import time_interleaved

    if all(isinstance(m, dict) for m in members):  # nothing built: nothing to check or time
        return {**_result(state=state), "group": members}
    ref = _reference(state, task, func, ref_kernel)
    if isinstance(ref, dict):
        return {**ref, "group": [ref for _ in members]}
    results: list = list(members)
    calls = {}
    start = time.perf_counter()
    for i, member in enumerate(members):
        if isinstance(member, dict):
            continue
        kernel, seconds = member
        args = _checked_arguments(state, task, ref, func, kernel, seconds)
        if isinstance(args, dict):
            results[i] = args
        else:
            calls[i] = _bound(task, kernel, args)
    checked = time.perf_counter()
    if calls:
        try:
            # no settling pause: it is there for numpy's spinning BLAS threads, absent here.
            # Many rounds without pauses pick among the same few candidates as fewer rounds
            # with pauses, in the same time, with lower medians (benchmarks/bench_retime.py
            # protocols compares them)
            timings = time_interleaved(
                calls, rounds=task["rounds"], min_repeat_ms=task["min_repeat_ms"], settle_s=0.0, warm_up=task.get("warm_up", 1.0)
            )
        except Exception:
            failed = _result(RUNTIME, _error_text(3), state=state)
            timings = {}
            for i in calls:
                results[i] = failed
        for i, t in timings.items():
            results[i] = _result(None, "", members[i][1], t.means, state=state)
    return _with_phases({**_result(state=state), "group": results}, checked - start, time.perf_counter() - checked)


def _resume(pids) -> None:
    """Continue the workers the caller stopped for this run: the caller does too, but if it was
    killed meanwhile they would stay stopped for ever."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass


def main(conn, log_path: str) -> None:
    """Serve the caller on ``conn`` until it says exit or goes away; faults go to ``log_path``."""
    # Ctrl-C in a terminal reaches the whole process group, and systemd's stop sends
    # SIGTERM to every process of the service: the caller stops and closes the workers
    # itself, so a worker ignores both (dying first, it would turn its candidate into a crash)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log = open(log_path, "w", buffering=1)
    faulthandler.enable(file=log)  # a segfault's Python stack ends up in the crash message
    # the parent is the caller: the worker is re-parented when the caller is gone
    parent = os.getppid()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    from ..codegen import warm_up

    warm_up(False)
    warm_up(True)
    state = _State()
    conn.send(("ready", os.getpid(), rss_mb()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] != "task":
            return
        task = msg[1]
        start = time.perf_counter()
        if "log_jsons" in task:
            func, ref_kernel, members = _build_group(state, task)
            seconds = sum(m[1] for m in members if not isinstance(m, dict))
        else:
            try:
                func, kernel, ref_kernel, seconds = _build(state, task, task["log_json"], task.get("fault"))
            except Exception:
                failed = _result(COMPILE, _error_text(4), time.perf_counter() - start, state=state)
                conn.send(("result", failed))
                continue
        conn.send(("compiled", seconds))
        try:
            go = conn.recv()
        except (EOFError, OSError):
            return
        if go[0] != "go":
            return
        if "log_jsons" in task:
            result = _run_group(state, task, func, ref_kernel, members)
        else:
            result = _run(state, task, func, kernel, ref_kernel, seconds)
        _resume(go[1])
        conn.send(("result", result))


def _cli(argv) -> None:
    """``python -m probsched.measure.worker FD LOG_PATH [NAME]``: serve on the inherited socket ``FD``."""
    from multiprocessing.connection import Connection

    fd, log_path = int(argv[0]), argv[1]
    main(Connection(fd), log_path)


if __name__ == "__main__":
    _cli(sys.argv[1:])
