"""Candidates and the search context every strategy works in.

A :class:`Candidate` is one scheduled program of the design space: the ``Schedule`` (its
loop nest and instruction log) and the handlers ``Trace`` of the decisions that produced
it. The :class:`SearchContext` is what a strategy sees: the workload, the space, the cost
model, a random generator, what was measured already, and the three ways to make
candidates (draw from the prior, replay decisions, mutate sites), each of which runs the
space program under handlers.

>>> import probsched as ps
>>> ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), seed=0)
>>> c = ctx.draw()
>>> c.decisions.choices() == ctx.replay(c.decisions).decisions.choices()
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Sequence, Set

import numpy as np

from handlers import mutate, replay, seed, trace
from handlers.trace_struct import Trace

from ..errors import ProbschedError
from ..ir.serialize import structural_hash
from ..schedule import Schedule
from ..workloads.workload import as_workload


@dataclass
class Candidate:
    """A scheduled program and the decisions that made it."""

    schedule: Schedule
    decisions: Trace
    _hash: Optional[str] = field(default=None, repr=False)
    _features: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def hash(self) -> str:
        """Structural hash of the scheduled program (what de-duplication compares)."""
        if self._hash is None:
            self._hash = structural_hash(self.schedule.mod)
        return self._hash

    @property
    def key(self) -> str:
        """The decisions as canonical JSON: a cheap identity within one search."""
        return json.dumps(self.decisions.choices(), sort_keys=True, default=repr)

    def features(self) -> np.ndarray:
        """Cost-model features of the program (computed once)."""
        if self._features is None:
            from ..cost_model import extract

            self._features = extract(self.schedule)
        return self._features


class SearchContext:
    """The state shared by a tuning run and its strategy (see the module docstring).

    ``measured`` holds the structural hashes of every candidate measured so far (from the
    database too); ``records`` the database's successful records, best first, refreshed
    by the tuner after each batch.
    """

    def __init__(
        self,
        workload,
        space,
        model=None,
        seed: Optional[int] = None,
        measured: Iterable[str] = (),
        records: Sequence = (),
    ) -> None:
        self.workload = workload
        self.func = as_workload(workload).func
        self.space = space
        self.model = model
        self.rng = np.random.default_rng(seed)
        self.measured: Set[str] = set(measured)
        self.records: List[Any] = list(records)
        #: decision traces of similar workloads (:mod:`probsched.tuning.similar_tasks`),
        #: replayed after the workload's own records to start a search
        self.transfer: List[Trace] = []
        self.failures = 0  # space runs that raised (a bad mutation, a rule bug)

    # ------------------------------------------------------------------ making candidates
    def _seed(self) -> int:
        return int(self.rng.integers(0, 2**31 - 1))

    def _run(self, program) -> Optional[Candidate]:
        sch = Schedule(self.func)
        try:
            tr = trace(program).get_trace(sch)
        except ProbschedError:
            self.failures += 1
            return None
        return Candidate(sch, tr)

    def draw(self) -> Optional[Candidate]:
        """A fresh sample from the design space (the prior)."""
        return self._run(seed(self.space, self._seed()))

    def replay(self, decisions: Trace) -> Optional[Candidate]:
        """The candidate these decisions give (sites they lack are drawn from the prior)."""
        return self._run(replay(seed(self.space, self._seed()), decisions, strict=False))

    def mutate(self, parent: Candidate, sites: Iterable[str]) -> Optional[Candidate]:
        """A candidate with ``sites`` of ``parent`` re-proposed by their distributions."""
        return self._run(mutate(self.space, parent.decisions, sites=sites, rng_seed=self._seed()))

    # ------------------------------------------------------------------ scoring
    @property
    def model_trained(self) -> bool:
        """Whether the cost model has learnt anything yet (else scores are all zero)."""
        # a CostModel says ``trained`` (transfer records count); other models, ``n_trained``
        return self.model is not None and bool(getattr(self.model, "trained", getattr(self.model, "n_trained", 0) > 0))

    def score(self, candidates: Sequence[Candidate]) -> np.ndarray:
        """Cost-model scores (higher = predicted faster); zeros without a trained model."""
        if not candidates or not self.model_trained:
            return np.zeros(len(candidates))
        return np.asarray(self.model.predict_features([c.features() for c in candidates]), dtype=np.float64)

    def is_new(self, candidate: Candidate) -> bool:
        """Not measured yet (by structural hash)."""
        return candidate.hash not in self.measured

    def recorded_decisions(self, k: Optional[int] = None) -> List[Trace]:
        """Decision traces of the (first ``k``) measured records, best first, of those that
        kept them."""
        out = []
        for rec in self.records:
            if k is not None and len(out) >= k:
                break
            if getattr(rec, "decisions", None):
                try:
                    out.append(Trace.from_json(rec.decisions))
                except Exception:  # a record written by another version: skip it
                    continue
        return out

    def best_decisions(self, k: int) -> List[Trace]:
        """Decision traces of the ``k`` best measured records (those that kept them), then
        of similar workloads (:attr:`transfer`) while fewer than ``k``."""
        out = self.recorded_decisions(k)
        return out + self.transfer[: max(0, k - len(out))]


__all__ = ["Candidate", "SearchContext"]
