"""Search strategies: inference over the decision traces of a design space.

- :mod:`.strategy` — the protocol (``generate(ctx, n)``, ``observe(ctx, candidates, results)``);
- :mod:`.candidate` — :class:`Candidate` and :class:`SearchContext` (draw, replay, mutate, score);
- :mod:`.mutators` — MetaSchedule's mutators as weighted site selectors;
- :mod:`.family_share` — each algorithm family's fair share of a task's first measurements;
- :mod:`.replay_trace` — :class:`ReplayTrace` (prior sampling);
- :mod:`.evolutionary` — :class:`EvolutionarySearch` (MetaSchedule's default);
- :mod:`.mcmc` — :class:`AnnealedMCMC` (Metropolis-Hastings with annealing).

>>> list(STRATEGIES)
['evolutionary', 'replay', 'mcmc']
"""

from typing import Optional, Union

from ..components import Registry
from .candidate import Candidate, SearchContext  # noqa: F401
from .evolutionary import EvolutionarySearch  # noqa: F401
from .mcmc import AnnealedMCMC  # noqa: F401
from .mutators import MUTATORS, choose_site  # noqa: F401
from .replay_trace import ReplayTrace  # noqa: F401
from .strategy import SearchStrategy, best_then_prior, new_candidates, prior_candidates  # noqa: F401

#: Strategies by the name ``ps.tune(strategy=...)`` and ``probsched tune --strategy`` take.
#: A factory takes the round's ``batch`` (candidates measured per round; None when unknown)
#: and the strategy's own options; ``STRATEGIES.register("mine", factory)`` adds one.
STRATEGIES: Registry[SearchStrategy] = Registry("strategy", required=("generate",))


@STRATEGIES.register("evolutionary")
def _evolutionary(batch: Optional[int] = None, **options) -> EvolutionarySearch:
    # sized to the round: the population evolved per measured candidate stays the same
    return EvolutionarySearch.for_batch(batch, **options) if batch is not None else EvolutionarySearch(**options)


STRATEGIES.register("replay", lambda batch=None, **options: ReplayTrace(**options))
STRATEGIES.register("mcmc", lambda batch=None, **options: AnnealedMCMC(**options))


def get(strategy: Union[str, SearchStrategy], batch: Optional[int] = None, **options) -> SearchStrategy:
    """A strategy object from a name of :data:`STRATEGIES` (an object passes through).
    ``batch``: the candidates measured per round, to which the named evolutionary search
    sizes its population (:meth:`EvolutionarySearch.for_batch`, as ``ps.tune`` and
    ``ps.tune_model`` use it); ``options``: the strategy's own.

    >>> get("evolutionary", batch=16).population, get("evolutionary").population
    (128, 512)
    """
    if isinstance(strategy, str):
        return STRATEGIES.get(strategy, batch=batch, **options)
    return STRATEGIES.get(strategy, **options)


__all__ = [
    "Candidate",
    "SearchContext",
    "SearchStrategy",
    "ReplayTrace",
    "EvolutionarySearch",
    "AnnealedMCMC",
    "MUTATORS",
    "STRATEGIES",
    "choose_site",
    "get",
    "new_candidates",
]
