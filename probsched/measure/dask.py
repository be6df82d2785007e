"""``DaskMeasurer``: measure candidates on the machines of a ``dask.distributed`` cluster.

The same interface as :class:`~probsched.measure.LocalMeasurer` (``measure``,
``measure_together``, ``settle``, ``close``, ``stats``), so ``ps.tune``, the re-timing of
the best candidates and the CLI (``probsched tune ... --cluster tcp://HOST:8786``) work with
either. It needs the optional extra: ``pip install 'probsched[dask]'``.

What travels and where it runs (:mod:`.remote`):

- a candidate goes to the cluster as data: the workload's function (JSON) and the
  candidate's instruction log (JSON), one Dask task per candidate; the reference (inputs,
  expected outputs, tolerances) is scattered to the workers once per workload. No closure
  of the caller's is pickled; the workers run ``probsched.measure.remote.measure_task`` from
  the probsched installed on them.
- on the worker it is compiled, checked and timed by a local measurer in an isolated
  process, with the same timeouts and error kinds as locally; one kernel is timed at a time
  per machine (:mod:`.hostlock`) however many Dask workers run there, and compiles pause
  meanwhile unless ``overlap_builds``.
- results come back to this process, which stays the only writer of the database:
  ``on_result`` is called here, in the thread that waits.

Machines whose target differs from the run's (this machine's :class:`~probsched.target.Target`:
CPU model, LLVM CPU, usable cores, ISA, threads) are **refused**: no candidate is measured
there, and a warning names them. Their records could not join the run's (a time from
another CPU does not rank this one's candidates), and keeping them under their own target
would spend the cluster on records this run never reads: ``ps.tune`` resumes from, trains
on and names the best among the records of its own target. Run the tuner on a machine like
the workers (or start workers only on such machines).

Lost machines: a Dask worker that dies mid-measurement has its candidates run again
elsewhere (Dask reschedules them; after ``distributed.scheduler.allowed-failures`` deaths,
3 by default, a candidate fails with kind ``"lost"``); a worker that cannot measure at all
(its measurer raises, probsched is missing) is refused and its candidates go elsewhere; when
no usable worker is left for ``no_worker_timeout`` seconds, or the scheduler is gone, the
remaining candidates fail as ``"lost"``. Nothing waits for ever.

Beside the blocking calls, :meth:`DaskMeasurer.submit` returns a :class:`DaskBatch` at once
(``poll``, ``done``, ``wait``), so a caller can generate the next batch while this one is
measured, and queue it before this one ends.

>>> from distributed import LocalCluster  # doctest: +SKIP
>>> import probsched as ps
>>> with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, \\
...      DaskMeasurer(cluster, repeat=3, min_repeat_ms=1) as m:  # doctest: +SKIP
...     w = ps.workloads.small("GMM")
...     (r,) = m.measure(w, [ps.Schedule(w.func)])
>>> r.ok, r.target == ps.Target.host().to_json()  # doctest: +SKIP
(True, True)
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
import uuid
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..ir.stmt import PrimFunc
from ..schedule import InstructionLog, Schedule
from ..target import Target
from ..workloads import Workload, as_workload
from .local import DEFAULT_MAX_COMPILES, DEFAULT_MAX_RSS_MB, DEFAULT_MIN_REPEAT_MS, MeasureError
from .protocol import instruction_log_json
from .reference import from_workload
from .remote import host_description, measure_task
from .result import LOST, WRONG_RESULT, MeasureResult
from .simulate import Simulation, simulated_task
from .stats import MeasureStats

log = logging.getLogger("probsched.measure")

#: Times a candidate is sent again after a worker refused it or could not measure it.
MAX_RESENDS = 3
_CHECK_EVERY = 1.0  # seconds between looks at the cluster's workers while waiting


def _distributed():
    try:
        import distributed
    except ImportError:
        raise MeasureError("DaskMeasurer needs dask.distributed: pip install 'probsched[dask]'") from None
    return distributed


def _describe(target_json: str) -> str:
    try:
        return str(Target.from_json(target_json))
    except (ValueError, TypeError, KeyError):
        return target_json


class DaskMeasurer:
    """Measure candidates on a Dask cluster (a context manager; see the module doc).

    ``address_or_client``: the scheduler's address (``"tcp://HOST:8786"``), a
    ``distributed.Client`` (left open by :meth:`close`), or a cluster object such as a
    ``LocalCluster``. The measuring options are :class:`~probsched.measure.LocalMeasurer`'s,
    applied on every worker. ``no_worker_timeout``: seconds without a usable worker after
    which the candidates still waiting fail as ``"lost"`` (and the wait for a first worker
    when the measurer starts). ``simulate``: a :class:`~probsched.measure.simulate.Simulation`
    makes the workers sleep instead of measuring (scale experiments only: SIMULATED results).
    ``stats`` counts candidates and compile seconds; ``busy`` lists ``(worker, start, end)``
    of every task (the worker's clock), from which :meth:`busy_fraction` is computed.
    """

    def __init__(
        self,
        address_or_client,
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
        no_worker_timeout: float = 120.0,
        simulate: Optional[Simulation] = None,
    ) -> None:
        if repeat < 1 or max_compiles_per_worker < 1:
            raise ValueError("DaskMeasurer: repeat and max_compiles_per_worker must be >= 1")
        if no_worker_timeout <= 0:
            raise ValueError(f"DaskMeasurer: no_worker_timeout must be > 0, got {no_worker_timeout}")
        distributed = _distributed()
        self.options = {
            "compile_timeout": float(compile_timeout), "run_timeout": float(run_timeout), "repeat": int(repeat),
            "min_repeat_ms": float(min_repeat_ms), "flush_cache": bool(flush_cache),
            "max_compiles_per_worker": int(max_compiles_per_worker), "check": bool(check),
            "overlap_builds": bool(overlap_builds), "max_worker_rss_mb": float(max_worker_rss_mb),
        }
        self.no_worker_timeout = float(no_worker_timeout)
        self.simulate = simulate
        self.target = Target.host().to_json()
        self.stats = MeasureStats()
        self.busy: List[Tuple[str, float, float]] = []
        self._task_fn = measure_task if simulate is None else simulated_task
        self._lock = threading.RLock()
        self._accepted: Dict[str, dict] = {}  # worker address -> its host description
        self._refused: Dict[str, str] = {}  # worker address -> why
        self._alive: set = set()
        self._refs: Dict[int, tuple] = {}  # id(workload) -> (workload, key, future of its reference)
        self._closed = False
        self.client, self._own_client = self._connect(distributed, address_or_client, min(30.0, self.no_worker_timeout))
        try:
            self._wait_for_workers()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ lifecycle
    @staticmethod
    def _connect(distributed, where, timeout: float) -> tuple:
        if isinstance(where, distributed.Client):
            return where, False
        if isinstance(where, str) or hasattr(where, "scheduler_address"):
            try:
                return distributed.Client(where, timeout=f"{timeout}s"), True
            except (OSError, TimeoutError) as exc:
                raise MeasureError(f"DaskMeasurer: cannot reach the Dask scheduler at {where}: {exc}") from None
        raise TypeError(
            f"DaskMeasurer: expected a scheduler address ('tcp://HOST:8786'), a distributed.Client or a cluster, "
            f"got {type(where).__name__}"
        )

    def __enter__(self) -> "DaskMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Forget the scattered references; close the client if this measurer opened it
        (the cluster keeps running)."""
        if self._closed:
            return
        self._closed = True
        for _, _, future in self._refs.values():
            future.release()
        self._refs.clear()
        if self._own_client:
            self.client.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def settle(self) -> None:
        """Nothing to wait for here: the measuring processes run on the cluster's machines."""

    # ------------------------------------------------------------------ workers
    def _check_workers(self) -> List[str]:
        """Probe workers not seen yet; the usable ones (alive, same target), sorted."""
        try:
            alive = set(self.client.nthreads())
        except Exception:  # the scheduler is unreachable just now: no usable worker
            alive = set()
        with self._lock:
            self._alive = alive
            new = sorted(alive - set(self._accepted) - set(self._refused))
            if new:
                try:
                    answers = self.client.run(host_description, workers=new, on_error="return")
                except Exception as exc:
                    answers = {addr: exc for addr in new}
                for addr in new:
                    self._judge(addr, answers.get(addr))
            return sorted(a for a in alive if a in self._accepted)

    def _judge(self, addr: str, answer) -> None:
        if isinstance(answer, BaseException) or not isinstance(answer, dict):
            self.refuse(addr, f"probing it failed: {type(answer).__name__}: {answer}")
        elif answer["target"] != self.target:
            self.refuse(
                addr, f"its target ({_describe(answer['target'])}, host {answer['host']}) differs from the run's "
                f"({_describe(self.target)})"
            )
        else:
            self._accepted[addr] = answer

    def refuse(self, addr: str, why: str) -> None:
        """Send nothing more to worker ``addr`` (its candidates go to the others)."""
        with self._lock:
            self._accepted.pop(addr, None)
            if addr not in self._refused:
                self._refused[addr] = why
                log.warning("DaskMeasurer: not measuring on worker %s: %s", addr, why)

    @property
    def workers(self) -> List[str]:
        """Addresses of the workers measuring for this run (alive, same target)."""
        return self._check_workers()

    @property
    def refused(self) -> Dict[str, str]:
        """Workers refused, and why."""
        return dict(self._refused)

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.no_worker_timeout
        while not self._check_workers():
            if time.monotonic() > deadline:
                why = "; ".join(f"{a}: {r}" for a, r in self._refused.items()) or "the cluster has no worker"
                raise MeasureError(f"DaskMeasurer: no worker can measure for this run after {self.no_worker_timeout:g} s ({why})")
            time.sleep(0.2)

    # ------------------------------------------------------------------ inputs
    def _job(self, workload: Union[Workload, PrimFunc]) -> dict:
        w = as_workload(workload)
        return {"workload": w, "func": w.func, "name": w.name, "func_key": w.func.structural_hash(), "func_json": w.func.to_json()}

    def _reference(self, workload: Workload) -> tuple:
        """(key, future) of the workload's reference on the cluster, scattered when needed;
        (None, None) for a bare function (the workers make its reference) and in simulation."""
        if not workload.has_reference or self.simulate is not None:
            return None, None
        with self._lock:
            entry = self._refs.get(id(workload))
            if entry is None or entry[2].status != "finished":  # never sent, or every copy was lost with its workers
                data = from_workload(workload).to_data()
                # in a list: a dict given alone is scattered value by value
                (future,) = self.client.scatter([data], broadcast=True, hash=False, timeout=self.no_worker_timeout)
                entry = self._refs[id(workload)] = (workload, entry[1] if entry else uuid.uuid4().hex, future)
            return entry[1], entry[2]

    def _logs(self, schedules, func: PrimFunc) -> List[str]:
        return [instruction_log_json(s, func, i) for i, s in enumerate(schedules)]

    # ------------------------------------------------------------------ measuring
    def submit(
        self,
        workload: Union[Workload, PrimFunc],
        schedules: Sequence[Union[Schedule, InstructionLog]],
        *,
        rounds: Optional[int] = None,
        _faults: Optional[Mapping[int, str]] = None,
    ) -> "DaskBatch":
        """Send the candidates to the cluster and return at once (see :class:`DaskBatch`).
        ``rounds``: measure them together in one task (:meth:`measure_together`)."""
        if self._closed:
            raise MeasureError("measure: this DaskMeasurer is closed")
        job = self._job(workload)
        logs = self._logs(schedules, job["func"])
        faults = dict(_faults or {})
        if rounds is None:
            units = [{"logs": [t], "faults": {0: faults[i]} if i in faults else None} for i, t in enumerate(logs)]
        else:
            units = [{"logs": logs, "faults": faults or None, "rounds": int(rounds)}] if logs else []
        return DaskBatch(self, job, units, group=rounds is not None)

    def measure(
        self,
        workload: Union[Workload, PrimFunc],
        schedules: Sequence[Union[Schedule, InstructionLog]],
        on_result: Optional[Callable[[int, MeasureResult], None]] = None,
        *,
        _faults: Optional[Mapping[int, str]] = None,
    ) -> List[MeasureResult]:
        """Measure every candidate on the cluster; results in input order. ``on_result(index,
        result)`` is called in this thread as each arrives (as with
        :meth:`LocalMeasurer.measure <probsched.measure.LocalMeasurer.measure>`)."""
        return self.submit(workload, schedules, _faults=_faults).wait(on_result)

    def measure_together(
        self,
        workload: Union[Workload, PrimFunc],
        schedules: Sequence[Union[Schedule, InstructionLog]],
        rounds: int = 15,
        *,
        _faults: Optional[Mapping[int, str]] = None,
    ) -> List[MeasureResult]:
        """Build, check and time the candidates together, interleaved, in one measuring
        process of one worker (:meth:`LocalMeasurer.measure_together
        <probsched.measure.LocalMeasurer.measure_together>`); results in input order."""
        if rounds < 1:
            raise ValueError(f"measure_together: rounds must be >= 1, got {rounds}")
        batch = self.submit(workload, schedules, rounds=rounds, _faults=_faults)
        out = batch.wait()
        return list(out[0]) if out else []

    def busy_fraction(self, since: float, until: float) -> float:
        """Share of ``[since, until]`` (``time.time()`` seconds) that the usable workers'
        threads spent measuring (:func:`busy_fraction` of :attr:`busy`)."""
        try:
            threads = self.client.nthreads()
        except Exception:
            threads = {}
        slots = sum(n for addr, n in threads.items() if addr in self._accepted)
        return busy_fraction(self.busy, max(1, slots), since, until)


def busy_fraction(busy: Sequence[Tuple[str, float, float]], slots: int, since: float, until: float) -> float:
    """Share of ``slots`` x ``[since, until]`` covered by the ``(worker, start, end)``
    intervals of ``busy`` (worker clocks: exact on one machine, as in a simulation; across
    machines, their clocks must agree).

    >>> busy_fraction([("a", 0.0, 4.0), ("b", 1.0, 3.0), ("b", 3.5, 9.0)], 2, 0.0, 4.0)
    0.8125
    """
    if until <= since or slots < 1:
        return 0.0
    spent = sum(max(0.0, min(end, until) - max(start, since)) for _, start, end in busy)
    return spent / (slots * (until - since))


class DaskBatch:
    """Candidates sent to the cluster by :meth:`DaskMeasurer.submit`.

    :meth:`poll` returns the ``(index, result)`` pairs finished since the last call (waiting
    up to ``timeout`` seconds for one), :meth:`done` whether all are, :meth:`wait` blocks
    until all are (calling ``on_result`` for each) and returns the results in input order.
    One thread at a time drives a batch; several batches may be out at once.
    """

    def __init__(self, measurer: DaskMeasurer, job: dict, units: List[dict], group: bool) -> None:
        self._m = measurer
        self._job = job
        self._units = units
        self._group = group
        self.results: List[Optional[object]] = [None] * len(units)
        self._arrived: "queue.Queue" = queue.Queue()
        self._futures: Dict[int, object] = {}
        self._resends = [0] * len(units)
        self._allowed: Dict[int, set] = {}  # unit -> the workers its task is restricted to
        self._waiting: List[int] = []  # units with no usable worker to go to yet
        self._no_worker_since: Optional[float] = None
        self._last_check = time.monotonic()
        self._left = len(units)
        usable = self._restriction()
        for i in range(len(units)):
            self._send(i, usable)

    # ------------------------------------------------------------------ sending
    def _task(self, i: int) -> dict:
        m, unit = self._m, self._units[i]
        task = {
            "target": m.target, "options": m.options, "func_key": self._job["func_key"],
            "func_json": self._job["func_json"], **unit,
        }
        if m.simulate is not None:
            task["simulate"] = m.simulate.to_data()
        return task

    def _restriction(self) -> Optional[List[str]]:
        """The workers a task may go to: any (None) until some worker is refused (the
        scheduler then balances the tasks from its queue, and new workers get them without a
        probe: each task checks the target itself), else the usable ones."""
        m = self._m
        return m._check_workers() if m._refused else None

    def _send(self, i: int, usable: Optional[List[str]]) -> None:
        m = self._m
        if usable == []:
            self._waiting.append(i)
            return
        try:
            ref_key, ref = m._reference(self._job["workload"])
        except (OSError, TimeoutError) as exc:  # no worker to hold it just now
            log.warning("DaskMeasurer: scattering the reference of %s failed (%s); waiting for workers", self._job["name"], exc)
            self._waiting.append(i)
            return
        task = self._task(i)
        task["ref_key"] = ref_key
        key = f"probsched-measure-{self._job['name']}-{i}-{uuid.uuid4().hex[:12]}"
        future = m.client.submit(m._task_fn, task, ref, key=key, pure=False, workers=usable, allow_other_workers=False)
        self._futures[i] = future
        if usable is not None:
            self._allowed[i] = set(usable)
        future.add_done_callback(lambda f, i=i: self._arrived.put((i, f)))

    # ------------------------------------------------------------------ receiving
    def done(self) -> bool:
        """Whether every candidate has its result."""
        return self._left == 0

    def poll(self, timeout: float = 0.0) -> List[Tuple[int, object]]:
        """The ``(index, result)`` pairs finished since the last call, waiting up to
        ``timeout`` seconds for the first one; also where lost workers and refusals are
        handled, so a caller that polls is never left waiting for ever."""
        out: List[Tuple[int, object]] = []
        deadline = time.monotonic() + timeout
        while not out and not self.done():
            try:
                i, future = self._arrived.get(timeout=max(0.0, min(_CHECK_EVERY, deadline - time.monotonic())))
            except queue.Empty:
                i = future = None
            if future is not None and self._futures.get(i) is future:
                res = self._settle(i, future)
                if res is not None:
                    out.append((i, res))
            while True:  # everything else that has arrived
                try:
                    i, future = self._arrived.get_nowait()
                except queue.Empty:
                    break
                if self._futures.get(i) is future:
                    res = self._settle(i, future)
                    if res is not None:
                        out.append((i, res))
            out.extend(self._check_cluster())
            if time.monotonic() >= deadline:
                break
        return out

    def wait(self, on_result: Optional[Callable[[int, object], None]] = None) -> list:
        """Block until every candidate has its result; results in input order."""
        while not self.done():
            for i, res in self.poll(timeout=_CHECK_EVERY):
                if on_result is not None:
                    on_result(i, res)
        return list(self.results)

    def cancel(self) -> None:
        """Stop measuring what has not finished (those results stay None)."""
        for i, future in list(self._futures.items()):
            future.cancel()
        self._futures.clear()
        self._waiting.clear()
        self._left = 0

    def _finish(self, i: int, result) -> object:
        self._futures.pop(i, None)
        self._allowed.pop(i, None)
        self.results[i] = result
        self._left -= 1
        for member, r in enumerate(result if self._group else [result]):
            if r.error_kind == WRONG_RESULT:
                which = member if self._group else i
                log.error("WRONG RESULT (a compiler bug?) for %s candidate %d: %s", self._job["name"], which, r.error_message)
        return result

    def _lost(self, i: int, message: str) -> object:
        n = len(self._units[i]["logs"])
        failed = MeasureResult.failure(LOST, message)
        return self._finish(i, [failed] * n if self._group else failed)

    def _resend(self, i: int, why: str) -> Optional[object]:
        self._futures.pop(i, None)
        self._allowed.pop(i, None)
        self._resends[i] += 1
        if self._resends[i] > MAX_RESENDS:
            return self._lost(i, f"no worker of the cluster could measure it ({self._resends[i]} tries); the last: {why}")
        self._send(i, self._restriction())
        return None

    def _settle(self, i: int, future) -> Optional[object]:
        """The result of unit ``i`` from its finished future, or None when it was sent again."""
        m = self._m
        status = future.status
        if status == "finished":
            answer = future.result()
            worker = answer.get("worker", "")
            if "refused" in answer or "error" in answer:
                why = answer.get("refused") or f"its measurer raised:\n{answer['error']}"
                if "refused" in answer:
                    why = f"{why} ({_describe(answer['target'])} on host {answer['host']})"
                m.refuse(worker, why)
                return self._resend(i, why)
            results = [dataclasses.replace(MeasureResult.from_json(r), target=answer["target"]) for r in answer["results"]]
            with m._lock:
                m.busy.append((worker, answer["start"], answer["end"]))
                m.stats.candidates += len(results)
                m.stats.build_seconds += sum(r.compile_seconds for r in results)
            return self._finish(i, results if self._group else results[0])
        exc = future.exception() if status == "error" else None
        if isinstance(exc, _distributed().KilledWorker):
            return self._lost(i, f"the Dask worker measuring it was lost, as often as the cluster retries a task: {exc}")
        ref = m._refs.get(id(self._job["workload"]))
        if ref is not None and ref[2].status != "finished":  # its reference went down with a worker
            return self._resend(i, "its reference data was lost with a worker")
        what = f"{type(exc).__name__}: {exc}" if exc is not None else f"the task was {status}"
        return self._lost(i, f"the cluster lost it ({what})")

    def _check_cluster(self) -> List[Tuple[int, object]]:
        """Send waiting units to workers that appeared; fail what is left as lost when no
        usable worker was seen for ``no_worker_timeout`` seconds or the client is closed."""
        now = time.monotonic()
        if now - self._last_check < _CHECK_EVERY or self.done():
            return []
        self._last_check = now
        m = self._m
        usable = m._check_workers()
        if usable:
            self._no_worker_since = None
            # a task restricted to workers that are all gone would wait for ever: send it again
            stranded = [i for i, allowed in self._allowed.items() if not allowed & m._alive]
            for i in stranded:
                self._futures.pop(i).cancel()
                self._allowed.pop(i)
            waiting, self._waiting = self._waiting + stranded, []
            restriction = self._restriction()
            for i in waiting:
                self._send(i, restriction)
            return []
        if self._no_worker_since is None:
            self._no_worker_since = now
        gone = m.client.status in ("closed", "closing")
        if not gone and now - self._no_worker_since < m.no_worker_timeout:
            return []
        why = "the client lost its scheduler" if gone else f"no usable worker for {m.no_worker_timeout:g} s"
        out = []
        for i in [*self._futures, *self._waiting]:
            future = self._futures.get(i)
            if future is not None:
                future.cancel()
            out.append((i, self._lost(i, f"the cluster lost it ({why})")))
        self._waiting.clear()
        return out


__all__ = ["DaskMeasurer", "DaskBatch", "busy_fraction", "MAX_RESENDS"]
