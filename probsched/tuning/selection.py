"""Naming the best schedule of a workload: re-time the fastest candidates together, pick by that.

A search measures each candidate once, in its own few hundred milliseconds, and keeps the
fastest. On a shared 2-vCPU machine two things make that minimum a poor name for "the best
kernel":

- the machine's speed drifts over seconds and minutes, so candidates measured minutes apart
  are not ranked by their code alone;
- the minimum over many noisy measurements is biased low (the winner's curse): the
  candidate that ranks first is often the one measured in a lucky moment.

``benchmarks/bench_retime.py`` measures both on tuned workloads.

:func:`retime` measures the ``top`` stored candidates again *together* in one worker,
interleaved round by round (:meth:`~probsched.measure.LocalMeasurer.measure_together`), and
stores them as one session; :func:`best_schedule` then ranks by that session (when it holds
the stored fastest candidate, i.e. no faster record came after it) and reports its median.

>>> import probsched as ps
>>> from probsched.database import Database, TuningRecord
>>> from probsched.measure import MeasureResult
>>> w = ps.workloads.small("GMM")
>>> db = Database(":memory:")
>>> key = db.commit_workload(w)
>>> fast, slow = ps.Schedule(w.func), ps.Schedule(w.func)
>>> _ = slow.split(slow.get_loops(slow.get_block("Z"))[1], [2, 2])
>>> db.commit_record(TuningRecord.from_result(key, fast, MeasureResult((1e-6,))))  # a lucky moment
>>> db.commit_record(TuningRecord.from_result(key, slow, MeasureResult((2e-6,))))
>>> best_schedule(db, w).seconds  # nothing re-timed yet: the stored fastest
1e-06
>>> _ = db.commit_retiming(w, [(fast.mod.structural_hash(), MeasureResult((5e-6,))),
...                            (slow.mod.structural_hash(), MeasureResult((3e-6,)))])
>>> best = best_schedule(db, w)
>>> best.record.candidate_hash == slow.mod.structural_hash(), best.seconds, best.search_seconds
(True, 3e-06, 2e-06)
"""

from __future__ import annotations

import logging
import statistics
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Tuple, Union

from handlers.trace_struct import Trace

from ..database import Database, TuningRecord
from ..database.record import WorkloadRef
from ..ir.stmt import PrimFunc
from ..measure.protocol import takes_keyword
from ..measure.result import MeasureResult
from ..schedule import InstructionLog, Schedule
from ..workloads import Workload, as_workload
from .options import DEFAULT_RETIME_ROUNDS, RETIME_TOP_ONE_TASK

if TYPE_CHECKING:
    from ..measure import Measurer

log = logging.getLogger("probsched.tune")

#: Candidates :func:`retime` measures again by default (:mod:`.options` sets a run's).
DEFAULT_RETIME_TOP = RETIME_TOP_ONE_TASK


@dataclass
class BestSchedule:
    """The best record of a workload, readable; ``retimed``: its run seconds in the latest
    re-timing session (empty when it was not re-timed)."""

    record: TuningRecord
    flops: Optional[float]
    retimed: Tuple[float, ...] = ()

    @property
    def seconds(self) -> float:
        """Median run time in seconds: of the re-timing when there is one, else of the search."""
        return statistics.median(self.retimed) if self.retimed else self.record.median

    @property
    def search_seconds(self) -> float:
        """Median run time as measured during the search (biased low: see the module doc)."""
        return self.record.median

    @property
    def gflops(self) -> Optional[float]:
        """Throughput (None when the workload's FLOP count is unknown)."""
        return None if not self.flops else self.flops / self.seconds / 1e9

    @property
    def instructions(self) -> InstructionLog:
        """The instruction log: ``print(best.instructions)`` shows it as Python."""
        return self.record.instruction_log()

    @property
    def trace(self) -> InstructionLog:
        """Deprecated name of :attr:`instructions` (:attr:`decisions` is the handlers ``Trace``)."""
        warnings.warn("BestSchedule.trace is deprecated; use BestSchedule.instructions", DeprecationWarning, stacklevel=2)
        return self.record.instruction_log()

    @property
    def decisions(self) -> Optional[Trace]:
        """The decision trace (None for records written without one)."""
        return Trace.from_json(self.record.decisions) if self.record.decisions else None

    def schedule(self, func: PrimFunc) -> Schedule:
        """The scheduled program, replayed onto ``func``."""
        return self.record.schedule(func)


def best_schedule(db: Database, workload: WorkloadRef, flops: Optional[float] = None) -> Optional[BestSchedule]:
    """The best schedule of ``workload`` (a Workload, PrimFunc or structural hash) in ``db``
    on this machine: the fastest of the latest re-timing session if that session holds the
    stored fastest candidate, else the stored fastest; None without a successful record.
    ``flops`` defaults to the workload's own."""
    flops = flops if flops is not None else getattr(workload, "flops", None)
    top = _fastest_fully_timed(db, workload)
    if top is None:
        return None
    session = db.latest_retiming(workload)
    if not any(r.candidate_hash == top.candidate_hash for r in session):
        return BestSchedule(top, flops)
    for r in session:  # fastest first (every member timed in full); one whose records are gone is skipped
        rec = db.best(workload, k=1, candidate_hash=r.candidate_hash) if r.median is not None else []
        if rec:
            return BestSchedule(rec[0], flops, r.run_seconds)
    return BestSchedule(top, flops)


def _fastest_fully_timed(db: Database, workload: WorkloadRef) -> Optional[TuningRecord]:
    """The stored fastest candidate whose timing was not stopped early.

    A stopped candidate was at least twice as slow as one timed in full before it
    (:mod:`probsched.measure.timer`), so it is never first in a tuner's own database; this
    keeps the rule (never named best on a partial timing) for any database.
    """
    k = 8
    while True:
        records = db.best(workload, k=k)
        for rec in records:
            if not rec.stopped_early:
                return rec
        if len(records) < k:
            return None
        k *= 4


def retime(
    workload: Union[Workload, PrimFunc],
    db: Database,
    measurer: "Measurer",
    *,
    top: int = DEFAULT_RETIME_TOP,
    rounds: int = DEFAULT_RETIME_ROUNDS,
    cold_weights: bool = False,
    families: bool = False,
) -> List[Tuple[TuningRecord, MeasureResult]]:
    """Measure the ``top`` fastest stored candidates of ``workload`` again, together
    (``measurer.measure_together``), and commit them to ``db`` as one session; returns
    (record, its re-timing) pairs, fastest re-timing first (failed ones last). ``measurer``: a
    :class:`~probsched.measure.LocalMeasurer`, a :class:`~probsched.measure.DaskMeasurer` (one
    worker re-times them all), anything with ``measure_together``.

    ``cold_weights``: time the weights cold (:mod:`probsched.measure.cold_weights`), as a
    network runs its tasks, where the measurer can (its ``measure_together`` takes the
    keyword). ``families``: also the fastest candidate of each algorithm family
    (:func:`~probsched.search.mutators.algorithm_family`: direct or Winograd, vector or tile
    unit) not among the ``top``: timed hot, a family that reads more weight bytes can lead
    where it loses in the network, so the choice between families is made by this timing."""
    if top < 1:
        raise ValueError(f"retime: top must be >= 1, got {top}")
    name = as_workload(workload).name
    records = db.best(workload, k=top)
    if not records:
        return []
    if families:
        records += _family_leaders(db.best(workload, k=FAMILY_POOL), records)
    extra = {"cold_weights": True} if cold_weights and takes_keyword(measurer.measure_together, "cold_weights") else {}
    log.info("re-timing the %d best candidates of %s together (%d rounds%s)", len(records), name, rounds,
             ", weights cold" if extra else "")
    results: List[MeasureResult] = measurer.measure_together(workload, [r.instruction_log() for r in records], rounds=rounds,
                                                             **extra)
    db.commit_retiming(workload, [(r.candidate_hash, res) for r, res in zip(records, results)])
    return sorted(zip(records, results), key=lambda pair: pair[1].median)


#: Stored candidates :func:`retime` looks through for each algorithm family's fastest
FAMILY_POOL = 256


def _family_leaders(pool: List[TuningRecord], chosen: List[TuningRecord]) -> List[TuningRecord]:
    """The fastest record of ``pool`` (fastest first) of each algorithm family that none of
    ``chosen`` belongs to (records without decisions: no family known, none added)."""
    from ..search.mutators import algorithm_family

    def family(r: TuningRecord):
        return algorithm_family(Trace.from_json(r.decisions)) if r.decisions else None

    seen = {family(r) for r in chosen}
    out = []
    for r in pool:
        f = family(r)
        if f is not None and f not in seen:
            seen.add(f)
            out.append(r)
    return out


__all__ = ["BestSchedule", "best_schedule", "retime", "DEFAULT_RETIME_TOP", "DEFAULT_RETIME_ROUNDS", "FAMILY_POOL"]
