"""``EvolutionarySearch``: MetaSchedule's cost-model-guided genetic search over traces.

One round (``generate``):

1. **Population**: ``init_measured_ratio`` of ``population`` from the decisions of the
   best measured records (replayed onto the space), the rest drawn from the prior.
2. **Evolution**, ``genetic_iters`` times: score the population with the cost model;
   draw parents with probability proportional to their score; each child is, with
   probability ``mutate_prob``, the parent with one site re-proposed (the mutator drawn by
   weight, see :mod:`.mutators`, through the ``mutate`` handler), else the parent itself.
   Children with decisions already seen this round are replaced by their parent.
3. **Selection**: the best-scored unmeasured candidates seen in any generation, except an
   ``eps_greedy`` share of the batch drawn from the prior (exploration), shared among the
   algorithm families (``family``, by default :func:`.mutators.algorithm_family`: direct
   or Winograd convolution, the write cache and rfactor decisions). First, each family
   present in the population gets its best candidates up to one batch's fair share
   (``1 / k`` of the ranked part for ``k`` families) less those of it measured already
   (:mod:`.family_share`); then no family takes more than ``max_family_share`` of the
   ranked part while candidates of other families are ranked. This is where we depart
   from MetaSchedule's plain top-k (``max_family_share=1``, which turns both off): after
   one round the model tends to fill every batch with the family of the first good
   records, and on a norm (NRM) the search then often stayed in a slow rfactor family;
   with the cap it reaches the fast one. The cap alone still let the two families a
   transfer model liked (Winograd's F2 and F4) fill every batch of a 3x3 convolution, so
   direct was never measured; the fair share measures every family before the model and
   the cap choose, and only once, so a slow family is not measured for ever. Workloads
   with one algorithm family (the micro-kernel ones, softmax) search exactly as plain
   top-k.

Until the cost model has been trained (the first round of a new tuning run, unless the
model starts from other workloads' records: :mod:`probsched.cost_model.transfer`), the
batch is drawn from the prior. Defaults are MetaSchedule's: population 512, 20% from the
best records, 4 iterations, mutation probability 0.85, epsilon-greedy 0.05.
``ps.tune`` and ``ps.tune_model`` size the population to the round instead
(:meth:`EvolutionarySearch.for_batch`): MetaSchedule evolves 512 for a round of 64, 8 per
candidate measured, and the population's replays are the round's fixed cost.

>>> import probsched as ps
>>> from probsched.search.candidate import SearchContext
>>> ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), seed=0)
>>> len(EvolutionarySearch(population=16).generate(ctx, 4))
4
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Callable, Dict, Hashable, List, Optional

import numpy as np

from handlers.trace_struct import Trace

from .candidate import Candidate, SearchContext
from .family_share import recorded_trials
from .mutators import MUTATORS, algorithm_family, choose_site
from .strategy import SearchStrategy, best_then_prior, prior_candidates


#: Candidates evolved per candidate measured in a round (MetaSchedule: a population of 512
#: for rounds of 64). Twice this doubles the search's time per round for kernels no faster
#: (``python benchmarks/bench_throughput.py run --arm ...`` compares two code trees).
POPULATION_PER_MEASURED = 8


class EvolutionarySearch(SearchStrategy):
    """Genetic search scored by the cost model (see the module docstring)."""

    name = "evolutionary"

    def __init__(
        self,
        population: int = 512,
        init_measured_ratio: float = 0.2,
        genetic_iters: int = 4,
        mutate_prob: float = 0.85,
        eps_greedy: float = 0.05,
        mutators=None,
        max_family_share: float = 0.5,
        family: Optional[Callable[[Trace], Hashable]] = None,
    ) -> None:
        self.population = population
        self.init_measured_ratio = init_measured_ratio
        self.genetic_iters = genetic_iters
        self.mutate_prob = mutate_prob
        self.eps_greedy = eps_greedy
        self.mutators = MUTATORS if mutators is None else mutators
        if not 0 < max_family_share <= 1:
            raise ValueError(f"EvolutionarySearch: max_family_share must be in (0, 1], got {max_family_share}")
        self.max_family_share = max_family_share
        self.family = algorithm_family if family is None else family
        # candidates proposed, by family, per context: failures count as trials too, and
        # the records (which keep only successes) cannot say how many a family had
        self._proposed: "weakref.WeakKeyDictionary[SearchContext, Counter]" = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict:
        # a copy (pickled, or one per task) counts afresh: the contexts stay with the original
        return {k: v for k, v in self.__dict__.items() if k != "_proposed"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._proposed = weakref.WeakKeyDictionary()

    @classmethod
    def for_batch(cls, batch: int, per_measured: int = POPULATION_PER_MEASURED, **options) -> "EvolutionarySearch":
        """The search with its population sized to rounds of ``batch`` candidates:
        ``per_measured`` evolved per one measured, 64 to 512 (``options``: the other
        constructor arguments).

        >>> EvolutionarySearch.for_batch(64).population, EvolutionarySearch.for_batch(4).population
        (512, 64)
        """
        if batch < 1 or per_measured < 1:
            raise ValueError(f"EvolutionarySearch.for_batch: batch and per_measured must be >= 1, got {batch}, {per_measured}")
        return cls(population=int(min(512, max(64, per_measured * batch))), **options)

    def _initial(self, ctx: SearchContext) -> List[Candidate]:
        n_best = int(self.population * self.init_measured_ratio)
        pop = [ctx.replay(d) for d in ctx.best_decisions(n_best)]
        tries = 0
        while len(pop) < self.population and tries < 4 * self.population:
            pop.append(ctx.draw())
            tries += 1
        return [c for c in pop if c is not None]

    def _child(self, ctx: SearchContext, parent: Candidate) -> Candidate:
        if ctx.rng.random() >= self.mutate_prob:
            return parent
        site = choose_site(parent.decisions, ctx.rng, self.mutators)
        if site is None:
            return parent
        child = ctx.mutate(parent, [site])
        return child if child is not None else parent

    def generate(self, ctx: SearchContext, n: int) -> List[Candidate]:
        batch = self._generate(ctx, n)
        self._proposed.setdefault(ctx, Counter()).update(self.family(c.decisions) for c in batch)
        return batch

    def trials(self, ctx: SearchContext) -> Counter:
        """Candidates of ``ctx``'s task measured so far, by family: those this search
        proposed or the task's records hold, whichever is more.

        >>> import probsched as ps
        >>> ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), seed=0)
        >>> search = EvolutionarySearch(population=16, family=lambda tr: 0)
        >>> _ = search.generate(ctx, 3)
        >>> search.trials(ctx)
        Counter({0: 3})
        """
        return recorded_trials(ctx, self.family) | self._proposed.get(ctx, Counter())

    def _generate(self, ctx: SearchContext, n: int) -> List[Candidate]:
        if not ctx.model_trained:
            return prior_candidates(ctx, n)
        pop = self._initial(ctx)
        seen: Dict[str, Candidate] = {c.key: c for c in pop}
        scores: Dict[str, float] = {}

        def score(cands: List[Candidate]) -> np.ndarray:
            todo = [c for c in cands if c.key not in scores]
            for c, s in zip(todo, ctx.score(todo)):
                scores[c.key] = float(s)
            return np.array([scores[c.key] for c in cands])

        for _ in range(self.genetic_iters):
            if not pop:
                break
            s = score(pop)
            w = np.clip(s - s.min(), 0, None) + 1e-9  # scores are relative: shift to >= 0
            parents = ctx.rng.choice(len(pop), size=len(pop), p=w / w.sum())
            children = []
            for i in parents:
                child = self._child(ctx, pop[int(i)])
                if child.key in seen and seen[child.key] is not child:
                    child = pop[int(i)]
                seen.setdefault(child.key, child)
                children.append(child)
            pop = children
        everything = list(seen.values())
        s = score(everything)
        ranked = [everything[i] for i in np.argsort(-s, kind="stable")]
        return best_then_prior(
            ctx, ranked, n, self.eps_greedy,
            family=lambda c: self.family(c.decisions), max_family_share=self.max_family_share, trials=self.trials(ctx),
        )


__all__ = ["EvolutionarySearch"]
