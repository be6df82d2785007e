"""Search strategies: inference over the decision traces of a design space.

- :mod:`.strategy` — the protocol (``generate(ctx, n)``, ``observe(ctx, candidates, results)``);
- :mod:`.candidate` — :class:`Candidate` and :class:`SearchContext` (draw, replay, mutate, score);
- :mod:`.mutators` — MetaSchedule's mutators as weighted site selectors;
- :mod:`.replay_trace` — :class:`ReplayTrace` (prior sampling);
- :mod:`.evolutionary` — :class:`EvolutionarySearch` (MetaSchedule's default);
- :mod:`.mcmc` — :class:`AnnealedMCMC` (Metropolis-Hastings with annealing).

>>> sorted(STRATEGIES)
['evolutionary', 'mcmc', 'replay']
"""

from typing import Optional, Union

from .candidate import Candidate, SearchContext  # noqa: F401
from .evolutionary import EvolutionarySearch  # noqa: F401
from .mcmc import AnnealedMCMC  # noqa: F401
from .mutators import MUTATORS, choose_site  # noqa: F401
from .replay_trace import ReplayTrace  # noqa: F401
from .strategy import SearchStrategy, best_then_prior, new_candidates, prior_candidates  # noqa: F401

#: Strategy classes by the name ``ps.tune(strategy=...)`` and ``probsched tune --strategy`` take.
STRATEGIES = {"replay": ReplayTrace, "evolutionary": EvolutionarySearch, "mcmc": AnnealedMCMC}


def get(strategy: Union[str, SearchStrategy], batch: Optional[int] = None) -> SearchStrategy:
    """A strategy object from a name of :data:`STRATEGIES` (an object passes through).
    ``batch``: the candidates measured per round, to which the named evolutionary search
    sizes its population (:meth:`EvolutionarySearch.for_batch`, as ``ps.tune`` and
    ``ps.tune_model`` use it).

    >>> get("evolutionary", batch=16).population, get("evolutionary").population
    (128, 512)
    """
    if isinstance(strategy, str):
        if strategy == "evolutionary" and batch is not None:
            return EvolutionarySearch.for_batch(batch)
        try:
            return STRATEGIES[strategy]()
        except KeyError:
            raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(sorted(STRATEGIES))}") from None
    if not hasattr(strategy, "generate"):
        raise TypeError(f"a strategy needs a generate(ctx, n) method; got {type(strategy).__name__}")
    return strategy


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
