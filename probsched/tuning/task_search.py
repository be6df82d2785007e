"""One workload's search as a stepping object: the tuning loop (:mod:`.loop`) runs one for
every task of a network (``ps.tune``'s operator is a network of one task).

A :class:`TaskSearch` holds the state of searching one workload: its strategy and search
context, its key in the database, the trials it measured and its best time. A round is
:meth:`~TaskSearch.propose` (the strategy's next candidates, never one measured before),
measuring them (the caller's measurer, which may serve several searches), :meth:`~TaskSearch.record`
for each result as it arrives (committed to the database at once: a run killed mid-batch
loses nothing measured) and :meth:`~TaskSearch.observe` once the batch is done (the cost
model and the strategy learn from it). The cost model may be shared by several searches:
records are grouped by workload key, so its ranking loss pairs programs of one workload only.

>>> import probsched as ps
>>> from probsched.database import Database
>>> from probsched.measure import MeasureResult
>>> s = TaskSearch(ps.workloads.small("GMM"), Database(":memory:"), strategy="replay", seed=0)
>>> batch = s.propose(3)
>>> for i, c in enumerate(batch):
...     _ = s.record(batch, i, MeasureResult((1e-6 * (i + 1),), 0.1))
>>> s.observe(batch, [MeasureResult((1e-6,))] * 3)
>>> s.trials, s.best_seconds
(3, 1e-06)
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Tuple, Union

from ..database import Database, TuningRecord
from ..ir.stmt import PrimFunc
from ..measure.result import LOST
from ..search import Candidate, SearchContext, SearchStrategy
from ..search import get as get_strategy
from ..workloads import Workload, as_workload

if TYPE_CHECKING:
    from handlers.trace_struct import Trace

    from ..cost_model import CostModel
    from ..measure import MeasureResult

log = logging.getLogger("probsched.tune")


@dataclass(frozen=True)
class Trial:
    """One measured candidate of a run: its index, seconds (inf when it failed), error, best so far."""

    index: int
    seconds: float
    error: Optional[str]
    best_seconds: float
    compile_seconds: float = 0.0
    wall_seconds: float = 0.0  # since the start of the run


def features_of_records(records: Sequence[TuningRecord], func: PrimFunc) -> Tuple[list, list]:
    """(features, run seconds) of stored records replayed onto ``func`` (records of an older
    space that no longer replay are skipped)."""
    from ..cost_model import extract

    feats, times = [], []
    for rec in records:
        try:
            feats.append(extract(rec.schedule(func)))
        except Exception:
            continue
        times.append(rec.median)
    return feats, times


class TaskSearch:
    """The search state of one workload (see the module docstring).

    ``strategy`` is a name or a strategy object (its state is this search's: give each
    search its own);
    ``model`` a cost model shared with other searches or None; ``space`` the design space
    (default ``ps.space.default()``). ``start`` is the run's start (``time.perf_counter()``)
    that trials' wall times count from. Without records of its own, ``shipped``: the first
    candidates it proposes are the shipped best of this task (:mod:`.shipped`), the programs
    those records hold (replayed from their instructions: their decisions may make another
    program in a space changed since, 8x slower for ResNet-50's classifier), then evolved
    from their decisions;
    ``similar_tasks``: the search starts from those of similar tasks (:mod:`.similar_tasks`).
    ``seed_records`` (instead of the shipped ones): records of another program with the same
    blocks and loops, proposed first, replayed on this one (a narrowed task's base's best).
    """

    def __init__(
        self,
        workload: Union[Workload, PrimFunc],
        db: Database,
        *,
        space: Optional[Callable] = None,
        strategy: Union[str, SearchStrategy] = "evolutionary",
        model: Optional["CostModel"] = None,
        seed: Optional[int] = None,
        start: Optional[float] = None,
        similar_tasks: bool = False,
        shipped: bool = False,
        seed_records: Sequence[TuningRecord] = (),
    ) -> None:
        from .. import space as space_mod

        self.workload = workload
        self.func = as_workload(workload).func
        self.flops = getattr(workload, "flops", None)
        self.space = space or space_mod.default()
        self.strategy = get_strategy(strategy)
        self.strategy_name = getattr(self.strategy, "name", type(self.strategy).__name__)
        self.model = model
        self.db = db
        self.key = db.commit_workload(workload)
        self.past = db.records(self.key)
        # a candidate lost with a cluster's worker was never measured: a resumed run may propose it again
        measured = {r.candidate_hash for r in self.past if r.error_kind != LOST}
        self.ctx = SearchContext(workload, self.space, model, seed, measured=measured)
        self.ctx.records = db.best(self.key, k=64)
        #: records measured before the strategy's candidates (the shipped best of this very
        #: task), each with its decisions
        self.seeds: List[Tuple[TuningRecord, "Trace"]] = []
        if not any(r.ok for r in self.past):
            # another program's best, replayed on this one (a narrowed task starts from its
            # base's records: the same blocks and loops), or the shipped best of this task
            found = list(seed_records) or (self._shipped_seeds(db) if shipped else [])
            traced = ((r, r.decision_trace()) for r in found)
            self.seeds = [(r, d) for r, d in traced if d is not None]
            if similar_tasks:
                from .similar_tasks import similar_decisions

                self.ctx.transfer = similar_decisions(db, self.func, self.key)
            self.ctx.transfer = [d for _, d in self.seeds] + self.ctx.transfer
        self.best_seconds = min((r.median for r in self.past if r.ok), default=math.inf)
        self.history: List[Trial] = []
        self.start = time.perf_counter() if start is None else start
        self.exhausted = False  # the strategy found no new candidate

    def _shipped_seeds(self, db: Database) -> List[TuningRecord]:
        """The shipped best of this task, or else its twins' (the same program but for
        constants: a layer quantized with other scales), in ``db`` or shipped."""
        from .shipped import DEFAULT_TOP, shipped_database, shipped_records
        from .similar_tasks import twin_records

        return shipped_records(self.key) or twin_records(db, self.func, self.key, DEFAULT_TOP) \
            or twin_records(shipped_database(), self.func, self.key, DEFAULT_TOP)

    @property
    def name(self) -> str:
        """The workload's name."""
        return getattr(self.workload, "name", None) or self.func.name

    @property
    def trials(self) -> int:
        """Candidates measured by this search (not counting the database's earlier ones)."""
        return len(self.history)

    def past_features(self) -> Tuple[list, list, list]:
        """(features, seconds, groups) of the database's successful earlier records, to train
        a model on before the first round."""
        feats, times = features_of_records([r for r in self.past if r.ok], self.func)
        return feats, times, [self.key] * len(feats)

    # ------------------------------------------------------------------ a round
    def propose(self, n: int) -> List[Candidate]:
        """The strategy's next ``n`` (at most) new candidates; empty when it finds none.
        Candidates already in the database are never proposed, including those another
        process tuning the same workload into the same database committed since."""
        self.ctx.measured |= self.db.candidate_hashes(self.key)
        batch = self._seeded(n)
        batch += self.strategy.generate(self.ctx, n - len(batch)) if n > len(batch) else []
        if not batch:
            self.exhausted = True
            log.warning("%s: the strategy found no new candidate after %d trials", self.name, self.trials)
        for c in batch:  # in flight: never proposed twice, even before their results arrive
            self.ctx.measured.add(c.hash)
        return batch

    def _seeded(self, n: int) -> List[Candidate]:
        """Up to ``n`` candidates of :attr:`seeds` (consumed as proposed)."""
        out: List[Candidate] = []
        while self.seeds and len(out) < n:
            c = self._candidate_of(*self.seeds.pop(0))
            if c is not None and self.ctx.is_new(c) and all(c.hash != o.hash for o in out):
                out.append(c)
        return out

    def _candidate_of(self, record: TuningRecord, decisions: "Trace") -> Optional[Candidate]:
        """The program ``record`` holds, with its ``decisions`` (what the strategy evolves);
        where its instructions no longer replay, what its decisions make now."""
        try:
            return Candidate(record.schedule(self.func), decisions)
        except Exception as exc:  # noqa: BLE001 - an instruction of another version
            log.info("%s: a shipped record does not replay (%s): its decisions are replayed instead", self.name, exc)
            return self.ctx.replay(decisions)

    def record(self, batch: Sequence[Candidate], index: int, result: "MeasureResult") -> Trial:
        """Commit the result of ``batch[index]`` and note the trial."""
        cand = batch[index]
        rec = TuningRecord.from_result(
            self.key, cand.schedule, result, decisions=cand.decisions, space=self.space.name, strategy=self.strategy_name
        )
        self.db.commit_record(rec)
        self.ctx.measured.add(rec.candidate_hash)
        self.best_seconds = min(self.best_seconds, result.median)
        trial = Trial(
            len(self.history), result.median, result.error_kind, self.best_seconds, result.compile_seconds,
            time.perf_counter() - self.start,
        )
        self.history.append(trial)
        return trial

    def observe(self, batch: Sequence[Candidate], results: Sequence["MeasureResult"]) -> None:
        """Let the cost model and the strategy learn from a measured batch."""
        if self.model is not None and batch:
            self.model.update_features([c.features() for c in batch], [r.median for r in results], [self.key] * len(batch))
        self.ctx.records = self.db.best(self.key, k=64)
        self.strategy.observe(self.ctx, batch, results)


__all__ = ["TaskSearch", "Trial", "features_of_records"]
