"""What a Dask worker runs for :class:`~probsched.measure.DaskMeasurer`.

A task arrives as data: the workload's function (JSON), the candidates' instruction logs
(JSON), the measuring options, the run's target, and the reference (inputs, expected
outputs and tolerances: :meth:`~probsched.measure.reference.Reference.to_data`) sent
once per workload (:func:`reference_data`). Nothing of the caller's code travels: the functions here are found by
name in the package installed on the worker.

Each Dask worker thread that runs tasks owns a :class:`~probsched.measure.LocalMeasurer`
with one measuring process, so a task is compiled, checked and timed exactly as locally:
in an isolated process (a crashing kernel takes that process down, not the Dask worker),
with the same timeouts and error kinds. All of them use the machine's
:class:`~probsched.measure.hostlock.HostLock`: one kernel is timed at a time on a
machine however many Dask workers and threads run on it, and the others' compiles are
stopped meanwhile (as a local measurer's are), unless the run asked for ``overlap_builds``.

A task on a machine whose target differs from the run's is refused (the answer says so and
the caller sends it elsewhere): times from another CPU are not comparable with the run's.

>>> d = host_description()
>>> sorted(d), d["target"] == Target.host().to_json()
(['host', 'pid', 'target', 'worker'], True)
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
import traceback
from typing import Dict, Optional

# Every numpy type this process will ever register, registered now, on import: a Dask worker
# imports this module before it runs any task of ours (a client too, through .dask).
# Otherwise the first task imports ml_dtypes (which adds its types to numpy's sctypeDict) in
# the task thread while the worker's event loop sends the reference to another worker, and
# the first numpy data it sends imports numpy.ma, which iterates sctypeDict: "dictionary
# changed size during iteration", the fetch fails, and the task waiting for that reference
# waited for ever (a CI run's hung batch).
import ml_dtypes  # noqa: F401  (registers bfloat16 & co.)
import numpy.ma  # noqa: F401  (what distributed's numpy serializers import on first use)

from ..ir.stmt import PrimFunc
from ..target import Target
from .local import LocalMeasurer
from .reference import Reference

_lock = threading.Lock()
_threads = threading.local()  # .measurer, .options: this thread's LocalMeasurer
_funcs: Dict[str, PrimFunc] = {}  # function key -> decoded function
_refs: Dict[str, str] = {}  # reference key -> its file in _folder
_folder: Optional[str] = None


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):  # not in a Dask worker (a direct call, a doctest)
        return ""


def host_description() -> dict:
    """This machine as the caller checks it: target JSON, host name, process and Dask
    worker address (what :class:`~probsched.measure.DaskMeasurer` probes each worker for)."""
    return {"target": Target.host().to_json(), "host": socket.gethostname(), "pid": os.getpid(), "worker": _worker_address()}


def _measurer(options: dict) -> LocalMeasurer:
    """This thread's measurer, made (or remade, when the run's options changed) here."""
    m = getattr(_threads, "measurer", None)
    if m is None or m.closed or _threads.options != options:
        if m is not None:
            m.close()
        m = _threads.measurer = LocalMeasurer(workers=1, host_lock=True, **options)
        _threads.options = dict(options)
    return m


def _func(key: str, text: str) -> PrimFunc:
    with _lock:
        if key not in _funcs:
            _funcs[key] = PrimFunc.from_json(text)
        return _funcs[key]


def _reference_file(key: str, data: dict) -> str:
    """The reference's file on this machine, written once per key (the measuring processes load it)."""
    global _folder
    with _lock:
        if key not in _refs:
            if _folder is None:
                _folder = tempfile.mkdtemp(prefix="probsched-dask-")
            path = os.path.join(_folder, f"ref-{len(_refs)}.npz")
            Reference.from_data(data).save(path)
            _refs[key] = path
        return _refs[key]


def reference_data(data: dict) -> dict:
    """The reference's data, as the task that holds it on the cluster returns it: Dask
    computes a lost task's result again from the task (data scattered instead would be
    lost with the workers holding it)."""
    return data


def measure_task(task: dict, reference: Optional[dict]) -> dict:
    """Measure one task of a :class:`~probsched.measure.DaskMeasurer` here (see the module doc).

    ``task``: ``target``, ``options`` (LocalMeasurer keywords), ``func_key``, ``func_json``,
    ``ref_key``, ``logs`` (instruction-log JSON), optional ``rounds`` (measure them
    together), ``best_seconds`` (the caller's best: timing may stop early against it),
    ``faults`` (test hook). ``reference``: :meth:`Reference.to_data` of the
    workload, or None for a bare function (its unscheduled program is the reference, made here).
    Returns :func:`host_description` with ``results`` (``MeasureResult`` JSON each),
    ``start`` and ``end`` (this machine's clock), or with ``refused`` (another target) or
    ``error`` (the measurer itself failed here: the caller stops using this worker).
    """
    here = host_description()
    if here["target"] != task["target"]:
        return {**here, "refused": "its target differs from the run's"}
    start = time.time()
    try:
        m = _measurer(task["options"])
        func = _func(task["func_key"], task["func_json"])
        ref = None if reference is None else _reference_file(task["ref_key"], reference)
        faults = task.get("faults") or None
        if task.get("rounds"):
            results = m.measure_together(func, task["logs"], rounds=task["rounds"], reference=ref, _faults=faults)
        else:
            results = m.measure(func, task["logs"], reference=ref, best_seconds=task.get("best_seconds"), _faults=faults)
    except Exception:
        return {**here, "error": traceback.format_exc(limit=-6)}
    return {**here, "results": [r.to_json() for r in results], "start": start, "end": time.time()}


__all__ = ["measure_task", "host_description", "reference_data"]
