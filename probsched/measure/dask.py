"""``DaskMeasurer``: measure candidates on the machines of a ``dask.distributed`` cluster.

The same interface as :class:`~probsched.measure.LocalMeasurer` (``measure``,
``measure_together``, ``settle``, ``close``, ``stats``), so ``ps.tune``, the re-timing of
the best candidates and the CLI (``probsched tune ... --cluster tcp://HOST:8786``) work with
either. It needs the optional extra: ``pip install 'probsched[dask]'``.

What travels and where it runs (:mod:`.remote`):

- a candidate goes to the cluster as data: the workload's function (JSON) and the
  candidate's instruction log (JSON), one Dask task per candidate; the reference (inputs,
  expected outputs, tolerances) goes once per workload, as a task of its own that returns
  it (:func:`~probsched.measure.remote.reference_data`) and the candidates' tasks depend
  on. Not scattered: Dask cannot make scattered data again, so when the workers holding
  it die, every task that needs it is cancelled, those sent later too; a task's result it
  computes again from the task, on a worker that is alive. No closure of the caller's is
  pickled; the workers run ``probsched.measure.remote.measure_task`` from the probsched
  installed on them.
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
elsewhere, or on a worker that joins later (Dask reschedules them; after
``distributed.scheduler.allowed-failures`` deaths, 3 by default, a candidate fails with
kind ``"lost"``); a candidate whose task the cluster cancelled or lost otherwise is sent
again, at most :data:`MAX_RESENDS` times; a worker that cannot measure at all (its
measurer raises, probsched is missing) is refused and its candidates go elsewhere. While no
usable worker is alive a warning says what waits, for how long; when none came back within
``no_worker_timeout`` seconds, or the scheduler is gone, the remaining candidates fail as
``"lost"`` (and a resumed run measures them again). Nothing waits for ever.

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

import asyncio
import dataclasses
import logging
import queue
import threading
import time
import uuid
import warnings
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..ir.stmt import PrimFunc
from ..schedule import InstructionLog, Schedule
from ..target import Target
from ..workloads import Workload, as_workload
from .address import cluster_address, nothing_listens
from .local import DEFAULT_MAX_COMPILES, DEFAULT_MAX_RSS_MB, DEFAULT_MIN_REPEAT_MS, MeasureError
from .protocol import instruction_log_json
from .reference import from_workload
from .remote import host_description, measure_task, reference_data
from .result import LOST, WRONG_RESULT, MeasureResult
from .simulate import Simulation, simulated_task
from .stats import MeasureStats

log = logging.getLogger("probsched.measure")

#: Times a candidate is sent again after a worker refused it or could not measure it, and
#: (counted apart) after the cluster cancelled or lost its task.
MAX_RESENDS = 3
_WARN_EVERY = 30.0  # seconds between warnings while no worker can measure
#: seconds beyond the worst case of one task (its builds' and runs' timeouts, three times
#: over) without any result, workers alive, after which the batch sends its unfinished tasks
#: again: a task whose dependency (the reference) a worker failed to fetch waits on a live
#: worker that runs nothing (seen once in CI, from a race :mod:`.remote` now prevents); such
#: a task, whatever keeps it, is then lost, not hung
_STALL_SLACK = 120.0
_GATHER_TIMEOUT = 3.0  # seconds to fetch a finished task's result (a few kB) from its worker (then: sent again)
_CHECK_EVERY = 1.0  # seconds between looks at the cluster's workers while waiting


def _distributed():
    try:
        import distributed
    except ImportError:
        raise MeasureError("DaskMeasurer needs dask.distributed: pip install 'probsched[dask]'") from None
    return distributed


def _not_a_scheduler(distributed, address: str, timeout: float) -> Optional[str]:
    """Why ``address`` does not answer as a Dask scheduler within ``timeout`` seconds, or
    None when it does. ``distributed.Client`` waits for ever on a peer that accepts the
    connection and never speaks (a port of some other server); this asks for its identity
    under a deadline first, in a thread of its own (the caller may run an event loop)."""
    if not address.startswith("tcp://"):  # other transports need the Client's security settings
        return None

    async def identity():
        comm = await distributed.comm.connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    answer: list = []

    def ask() -> None:
        try:
            answer.append(asyncio.run(asyncio.wait_for(identity(), timeout)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            answer.append(exc)

    thread = threading.Thread(target=ask, name="probsched-dask-probe", daemon=True)
    thread.start()
    thread.join(timeout + 5.0)
    if not answer or isinstance(answer[0], (TimeoutError, asyncio.TimeoutError)):
        return f"no Dask scheduler answered within {timeout:g} s"
    if isinstance(answer[0], BaseException):
        return f"{type(answer[0]).__name__}: {answer[0]}"
    kind = answer[0].get("type") if isinstance(answer[0], dict) else None
    if kind != "Scheduler":
        return f"it answers as a {kind or 'something else'}, not a Dask scheduler (give the scheduler's address)"
    return None


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
    when the measurer starts). ``timeout``: seconds to reach the scheduler (an address
    is checked first, :func:`~probsched.measure.address.cluster_address`, and a refused
    connection fails at once). ``simulate``: a :class:`~probsched.measure.simulate.Simulation`
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
        cold_weights: bool = False,
        no_worker_timeout: float = 120.0,
        timeout: float = 30.0,
        simulate: Optional[Simulation] = None,
    ) -> None:
        if repeat < 1 or max_compiles_per_worker < 1:
            raise ValueError("DaskMeasurer: repeat and max_compiles_per_worker must be >= 1")
        if no_worker_timeout <= 0:
            raise ValueError(f"DaskMeasurer: no_worker_timeout must be > 0, got {no_worker_timeout}")
        if not timeout > 0:
            raise ValueError(f"DaskMeasurer: timeout must be > 0, got {timeout}")
        distributed = _distributed()
        self.options = {
            "compile_timeout": float(compile_timeout), "run_timeout": float(run_timeout), "repeat": int(repeat),
            "min_repeat_ms": float(min_repeat_ms), "flush_cache": bool(flush_cache),
            "max_compiles_per_worker": int(max_compiles_per_worker), "check": bool(check),
            "overlap_builds": bool(overlap_builds), "max_worker_rss_mb": float(max_worker_rss_mb),
            "cold_weights": bool(cold_weights),
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
        self._paused: set = set()  # alive workers Dask paused (memory): they run nothing meanwhile
        self._refs: Dict[int, tuple] = {}  # id(workload) -> (workload, key, future of its reference)
        self._no_worker_warned = 0.0  # when the last "no worker" warning was given (0: none since one was seen)
        self._closed = False
        self.client, self._own_client = self._connect(distributed, address_or_client, float(timeout))
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
        if isinstance(where, str):
            where = cluster_address(where)
            why = nothing_listens(where, timeout) or _not_a_scheduler(distributed, where, timeout)
            if why is not None:
                raise MeasureError(f"DaskMeasurer: cannot reach the Dask scheduler at {where}: {why}")
        if isinstance(where, str) or hasattr(where, "scheduler_address"):
            try:
                return distributed.Client(where, timeout=f"{timeout}s"), True
            except (OSError, TimeoutError) as exc:
                raise MeasureError(f"DaskMeasurer: cannot reach the Dask scheduler at {where} within {timeout:g} s: {exc}") from None
        raise TypeError(
            f"DaskMeasurer: expected a scheduler address ('tcp://HOST:8786'), a distributed.Client or a cluster, "
            f"got {type(where).__name__}"
        )

    def __enter__(self) -> "DaskMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Forget the references sent; close the client if this measurer opened it (the
        cluster keeps running)."""
        if self._closed:
            return
        self._closed = True
        running = self.client.status == "running"
        if running:
            for _, _, future in self._refs.values():
                future.release()
        self._refs.clear()
        if self._own_client:
            # without its scheduler the client is still trying to reconnect; closing cancels
            # that, which distributed logs as an error with a traceback: the run said it already
            client_log = logging.getLogger("distributed.client")
            level = client_log.level
            if not running:
                client_log.setLevel(logging.CRITICAL)
            try:
                self.client.close()
            finally:
                client_log.setLevel(level)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def settle(self) -> None:
        """Nothing to wait for here: the measuring processes run on the cluster's machines."""

    # ------------------------------------------------------------------ workers
    def _check_workers(self) -> List[str]:
        """Probe workers not seen yet; the usable ones (alive, running, same target), sorted.
        A worker Dask paused (its memory is above the pause threshold) runs nothing until it
        resumes: not usable meanwhile, so that a cluster of paused workers is waited for
        (with a warning, up to ``no_worker_timeout``) rather than for ever."""
        try:
            # a client without its scheduler answers from its last look: no worker is usable then
            info = self.client.scheduler_info(n_workers=-1)["workers"] if self.client.status == "running" else {}
        except Exception:  # the scheduler is unreachable just now: no usable worker
            info = {}
        alive = set(info)
        paused = {a for a, w in info.items() if str(w.get("status", "running")) != "running"}
        with self._lock:
            self._alive = alive
            self._paused = paused
            new = sorted(alive - set(self._accepted) - set(self._refused))
            if new:
                try:
                    answers = self.client.run(host_description, workers=new, on_error="return")
                except Exception as exc:
                    answers = {addr: exc for addr in new}
                for addr in new:
                    self._judge(addr, answers.get(addr))
            return sorted(a for a in alive - paused if a in self._accepted)

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
                why = "; ".join(f"{a}: {r}" for a, r in self._refused.items())
                if self._paused:
                    why += ("; " if why else "") + f"paused by Dask (memory above its pause threshold): {', '.join(sorted(self._paused))}"
                why = why or "the cluster has no worker"
                raise MeasureError(f"DaskMeasurer: no worker can measure for this run after {self.no_worker_timeout:g} s ({why})")
            time.sleep(0.2)

    # ------------------------------------------------------------------ inputs
    def _job(self, workload: Union[Workload, PrimFunc]) -> dict:
        w = as_workload(workload)
        return {"workload": w, "func": w.func, "name": w.name, "func_key": w.func.structural_hash(), "func_json": w.func.to_json()}

    def _reference(self, workload: Workload) -> tuple:
        """(key, future) of the workload's reference on the cluster, sent when needed (see
        the module doc: a task, which Dask can compute again, not scattered data); (None,
        None) for a bare function (the workers make its reference) and in simulation."""
        if not workload.has_reference or self.simulate is not None:
            return None, None
        with self._lock:
            entry = self._refs.get(id(workload))
            if entry is None or entry[2].status in ("error", "cancelled"):  # never sent, or the cluster gave it up
                key = entry[1] if entry else uuid.uuid4().hex
                data = from_workload(workload).to_data()
                with warnings.catch_warnings():  # "large object in the task graph": meant, it is sent once
                    warnings.simplefilter("ignore", UserWarning)
                    future = self.client.submit(reference_data, data, key=f"probsched-reference-{key}", pure=False)
                entry = self._refs[id(workload)] = (workload, key, future)
            return entry[1], entry[2]

    def _warn_no_worker(self, waiting: int, since: float) -> None:
        """Say that no worker can measure, what waits and until when (every ``_WARN_EVERY`` s)."""
        now = time.monotonic()
        with self._lock:
            if self._no_worker_warned and now - self._no_worker_warned < _WARN_EVERY:
                return
            self._no_worker_warned = now
        refused = f" (refused: {', '.join(self._refused)})" if self._refused else ""
        if self._paused:
            refused += f" (paused by Dask, their memory above its pause threshold: {', '.join(sorted(self._paused))})"
        what = "no worker of the cluster can measure"
        if self.client.status != "running":
            what = f"the cluster's scheduler does not answer (the client is {self.client.status})"
        log.warning(
            "DaskMeasurer: %s%s; %s, %.0f s more (no_worker_timeout %g s), then fail as lost", what, refused,
            f"{waiting} candidate waits" if waiting == 1 else f"{waiting} candidates wait",
            max(0.0, self.no_worker_timeout - (now - since)), self.no_worker_timeout,
        )

    def _worker_back(self) -> None:
        with self._lock:
            if not self._no_worker_warned:
                return
            self._no_worker_warned = 0.0
        log.warning("DaskMeasurer: a worker can measure again; the waiting candidates go to it")

    def _logs(self, schedules, func: PrimFunc) -> List[str]:
        return [instruction_log_json(s, func, i) for i, s in enumerate(schedules)]

    # ------------------------------------------------------------------ measuring
    def submit(
        self,
        workload: Union[Workload, PrimFunc],
        schedules: Sequence[Union[Schedule, InstructionLog]],
        *,
        rounds: Optional[int] = None,
        cold_weights: Optional[bool] = None,
        best_seconds: Optional[float] = None,
        _faults: Optional[Mapping[int, str]] = None,
    ) -> "DaskBatch":
        """Send the candidates to the cluster and return at once (see :class:`DaskBatch`).
        ``rounds``: measure them together in one task (:meth:`measure_together`);
        ``cold_weights``: this batch's, instead of the measurer's; ``best_seconds``: the
        caller's best of the workload, what a candidate's timing may stop early against
        (:meth:`LocalMeasurer.measure <probsched.measure.LocalMeasurer.measure>`)."""
        if self._closed:
            raise MeasureError("measure: this DaskMeasurer is closed")
        job = self._job(workload)
        if cold_weights is not None:
            job["options"] = {**self.options, "cold_weights": bool(cold_weights)}
        logs = self._logs(schedules, job["func"])
        faults = dict(_faults or {})
        if rounds is None:
            bound = {"best_seconds": float(best_seconds)} if best_seconds is not None else {}
            units = [{"logs": [t], "faults": {0: faults[i]} if i in faults else None, **bound} for i, t in enumerate(logs)]
        else:
            units = [{"logs": logs, "faults": faults or None, "rounds": int(rounds)}] if logs else []
        return DaskBatch(self, job, units, group=rounds is not None)

    def measure(
        self,
        workload: Union[Workload, PrimFunc],
        schedules: Sequence[Union[Schedule, InstructionLog]],
        on_result: Optional[Callable[[int, MeasureResult], None]] = None,
        *,
        best_seconds: Optional[float] = None,
        _faults: Optional[Mapping[int, str]] = None,
    ) -> List[MeasureResult]:
        """Measure every candidate on the cluster; results in input order. ``on_result(index,
        result)`` is called in this thread as each arrives (as with
        :meth:`LocalMeasurer.measure <probsched.measure.LocalMeasurer.measure>`, and
        ``best_seconds`` as there)."""
        return self.submit(workload, schedules, best_seconds=best_seconds, _faults=_faults).wait(on_result)

    def measure_together(
        self,
        workload: Union[Workload, PrimFunc],
        schedules: Sequence[Union[Schedule, InstructionLog]],
        rounds: int = 15,
        *,
        cold_weights: Optional[bool] = None,
        _faults: Optional[Mapping[int, str]] = None,
    ) -> List[MeasureResult]:
        """Build, check and time the candidates together, interleaved, in one measuring
        process of one worker (:meth:`LocalMeasurer.measure_together
        <probsched.measure.LocalMeasurer.measure_together>`, ``cold_weights`` as there);
        results in input order."""
        if rounds < 1:
            raise ValueError(f"measure_together: rounds must be >= 1, got {rounds}")
        batch = self.submit(workload, schedules, rounds=rounds, cold_weights=cold_weights, _faults=_faults)
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
        self._resends = [0] * len(units)  # after a refusal or a measurer that failed on its worker
        self._losses = [0] * len(units)  # after the cluster cancelled or lost the task
        self._allowed: Dict[int, set] = {}  # unit -> the workers its task is restricted to
        self._waiting: List[int] = []  # units with no usable worker to go to yet
        self._no_worker_since: Optional[float] = None
        self._last_check = self._last_result = time.monotonic()
        self._left = len(units)
        usable = self._restriction()
        for i in range(len(units)):
            self._send(i, usable)

    # ------------------------------------------------------------------ sending
    def _task(self, i: int) -> dict:
        m, unit = self._m, self._units[i]
        task = {
            "target": m.target, "options": self._job.get("options", m.options), "func_key": self._job["func_key"],
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
        task = self._task(i)
        key = f"probsched-measure-{self._job['name']}-{i}-{uuid.uuid4().hex[:12]}"
        try:
            task["ref_key"], ref = m._reference(self._job["workload"])
            future = m.client.submit(m._task_fn, task, ref, key=key, pure=False, workers=usable, allow_other_workers=False)
        except (OSError, TimeoutError, _distributed().client.ClosedClientError) as exc:
            # the scheduler is gone or unreachable just now: it waits, and fails as lost with
            # the others if the client does not get its scheduler back (_check_cluster)
            log.warning("DaskMeasurer: sending %s candidate %d failed (%s: %s); waiting", self._job["name"], i,
                        type(exc).__name__, exc)
            self._waiting.append(i)
            return
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

    def _stall_seconds(self) -> float:
        """How long the batch waits for any result, workers alive, before it sends its
        unfinished tasks again (:data:`_STALL_SLACK`)."""
        options = self._job.get("options", self._m.options)
        members = max(len(u["logs"]) for u in self._units)
        return 3 * members * (options["compile_timeout"] + options["run_timeout"]) + _STALL_SLACK

    def _finish(self, i: int, result) -> object:
        self._last_result = time.monotonic()
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

    def _resend(self, i: int, why: str, counts: Optional[List[int]] = None) -> Optional[object]:
        """Send unit ``i`` again (None), or fail it as lost after :data:`MAX_RESENDS` resends
        counted in ``counts`` (refusals by default) or when the client is gone."""
        counts = self._resends if counts is None else counts
        self._futures.pop(i, None)
        self._allowed.pop(i, None)
        counts[i] += 1
        if counts[i] > MAX_RESENDS:
            return self._lost(i, f"no worker of the cluster could measure it ({counts[i]} tries); the last: {why}")
        if self._m.client.status in ("closed", "closing"):
            return self._lost(i, f"the client lost its scheduler ({why})")
        log.info("DaskMeasurer: sending %s candidate %d again: %s", self._job["name"], i, why)
        self._send(i, self._restriction())
        return None

    def _settle(self, i: int, future) -> Optional[object]:
        """The result of unit ``i`` from its finished future, or None when it was sent again."""
        m = self._m
        status = future.status
        if status == "finished":
            try:
                # a result held by a worker that just died: Dask computes it again when a
                # worker is back, and result() would wait for that without end
                answer = future.result(timeout=_GATHER_TIMEOUT)
            except (TimeoutError, OSError) as exc:
                future.cancel()
                return self._resend(i, f"its result was lost with its worker ({type(exc).__name__})", self._losses)
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
        # cancelled, lost, or a connection's error: the cluster lost the task, not the
        # candidate (measure_task returns the candidate's own failures as results)
        what = f"{type(exc).__name__}: {exc}" if exc is not None else f"the task was {status}"
        return self._resend(i, f"the cluster lost it ({what})", self._losses)

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
            m._worker_back()
            # a task restricted to workers that are all gone would wait for ever: send it again
            stranded = [i for i, allowed in self._allowed.items() if not allowed & m._alive]
            for i in stranded:
                self._futures.pop(i).cancel()
                self._allowed.pop(i)
            waiting, self._waiting = self._waiting + stranded, []
            restriction = self._restriction()
            for i in waiting:
                self._send(i, restriction)
            out = []
            stall = self._stall_seconds()
            if self._futures and now - self._last_result > stall:
                self._last_result = now
                for i, future in list(self._futures.items()):
                    future.cancel()
                    res = self._resend(i, f"no result of the batch for {stall:.0f} s, workers alive", self._losses)
                    if res is not None:
                        out.append((i, res))
            return out
        if self._no_worker_since is None:
            self._no_worker_since = now
        gone = m.client.status in ("closed", "closing")
        if not gone and now - self._no_worker_since < m.no_worker_timeout:
            m._warn_no_worker(self._left, self._no_worker_since)
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
