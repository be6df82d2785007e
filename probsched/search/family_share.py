"""Each algorithm family's fair share of a task's first measurements.

A task with several algorithm families (:func:`.mutators.algorithm_family`: a convolution
computed directly or by Winograd's F(2x2) or F(4x4), a norm's rfactor forms, the write
cache) can only be decided between them by measuring each. A cost model that has not yet
seen a family on this machine, such as a transfer model trained on records without it,
ranks the families by what it guesses, and a cap on one family's share of a batch
(:class:`.EvolutionarySearch`'s ``max_family_share``) still lets the ``1 / share`` families
the model likes best fill every batch: with three families and a cap of one half, the
third is never measured.

So before the cap decides, every family present in the search's population is owed
``max(1, n // k)`` trials (``k`` families, ``n`` the batch's ranked part), less the trials
it has had: one batch's fair share, once. Two alternatives were weighed: one measured
candidate per family is too little evidence when a family's programs are spread wide (a
single badly tiled direct convolution says little against tuned Winograd ones), and a
permanent floor of ``1 / k`` per family would measure a slow family for ever. A family
met only later (by mutation) is owed its share when it appears; one the model keeps ranking
last after its share is measured is left to the cap and the ranking, so the search
converges to the best family.

>>> fair_share(["direct", "F2", "F4"], {"F2": 3}, 9)
{'direct': 3, 'F2': 0, 'F4': 3}
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Dict, Hashable, Iterable, Mapping

from handlers.trace_struct import Trace

from .candidate import SearchContext


def fair_share(present: Iterable[Hashable], trials: Mapping[Hashable, int], n: int) -> Dict[Hashable, int]:
    """Slots of a batch of ``n`` each family of ``present`` is owed: ``max(1, n // k)`` for
    ``k`` families, less its ``trials`` so far (never below 0).

    >>> fair_share(["a"], {}, 4), fair_share(["a", "b", "c"], {"a": 5}, 2)
    ({'a': 4}, {'a': 0, 'b': 1, 'c': 1})
    """
    families = list(dict.fromkeys(present))
    if n < 0:
        raise ValueError(f"fair_share: n must be >= 0, got {n}")
    share = max(1, n // len(families)) if families else 0
    return {f: max(0, share - trials.get(f, 0)) for f in families}


def recorded_trials(ctx: SearchContext, family: Callable[[Trace], Hashable]) -> Counter:
    """Trials by family among the task's measured records
    (:meth:`SearchContext.recorded_decisions`): what a resumed run, or the shipped seeds,
    measured before this search counted its own.

    >>> import probsched as ps
    >>> ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), seed=0)
    >>> recorded_trials(ctx, lambda tr: 0)
    Counter()
    """
    return Counter(family(tr) for tr in ctx.recorded_decisions())


__all__ = ["fair_share", "recorded_trials"]
