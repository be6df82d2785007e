"""The search-strategy protocol.

A strategy is an inference algorithm over the decision traces of a design space. The tuner
calls it in rounds::

    batch = strategy.generate(ctx, n)     # up to n new candidates to measure
    ...measure them, record them...
    strategy.observe(ctx, batch, results) # what they measured (MeasureResult per candidate)

``ctx`` is a :class:`~probsched.search.candidate.SearchContext`: it makes candidates
(``draw``, ``replay``, ``mutate``), scores them with the cost model (``score``) and knows
what was measured (``is_new``). ``generate`` must return candidates that are new by
structural hash and distinct from each other; it may return fewer than ``n`` when the
space is exhausted. Any object with these two methods and a ``name`` is a strategy; one
that never calls ``ctx.score`` says so with ``uses_cost_model = False``, and the tuner then
trains no model for it.

>>> class Prior(SearchStrategy):
...     name = "prior"
...     def generate(self, ctx, n):
...         return new_candidates(ctx, (ctx.draw() for _ in range(4 * n)), n)
>>> import probsched as ps
>>> from probsched.search.candidate import SearchContext
>>> ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), seed=0)
>>> len(Prior().generate(ctx, 3))
3
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import islice
from typing import Callable, Hashable, Iterable, Iterator, List, Mapping, Optional, Sequence

from .candidate import Candidate, SearchContext
from .family_share import fair_share


class SearchStrategy:
    """Base class of strategies: ``generate`` is required, ``observe`` optional.
    ``uses_cost_model = False`` tells the tuner not to train a model the strategy never asks
    (a transfer-trained MLP costs seconds per training)."""

    name = "strategy"
    uses_cost_model = True

    def generate(self, ctx: SearchContext, n: int) -> List[Candidate]:
        raise NotImplementedError

    def observe(self, ctx: SearchContext, candidates: Sequence[Candidate], results: Sequence) -> None:
        """Learn from measured results (the tuner already updated ``ctx`` and the model)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _fresh(ctx: SearchContext, stream: Iterable[Optional[Candidate]]) -> Iterator[Candidate]:
    """The candidates of ``stream`` that are valid, unmeasured and distinct, lazily."""
    keys, hashes = set(), set()
    for c in stream:
        if c is None or c.key in keys:
            continue
        keys.add(c.key)
        if not ctx.is_new(c) or c.hash in hashes:
            continue
        hashes.add(c.hash)
        yield c


def new_candidates(ctx: SearchContext, stream: Iterable[Optional[Candidate]], n: int) -> List[Candidate]:
    """The first ``n`` candidates of ``stream`` that are valid, unmeasured and distinct."""
    return list(islice(_fresh(ctx, stream), max(n, 0)))


def prior_candidates(ctx: SearchContext, n: int, exclude: Iterable[str] = ()) -> List[Candidate]:
    """Up to ``n`` new candidates drawn from the prior (``8 n`` draws at most), none of whose
    structural hashes is in ``exclude``."""
    exclude = set(exclude)
    stream = (c for c in (ctx.draw() for _ in range(8 * max(n, 1))) if c is None or c.hash not in exclude)
    return new_candidates(ctx, stream, n) if n > 0 else []


def best_then_prior(
    ctx: SearchContext,
    ranked: Iterable[Optional[Candidate]],
    n: int,
    eps_greedy: float,
    family: Optional[Callable[[Candidate], Hashable]] = None,
    max_family_share: float = 1.0,
    trials: Optional[Mapping[Hashable, int]] = None,
) -> List[Candidate]:
    """A batch of ``n``: the first new candidates of ``ranked`` (best first), leaving an
    ``eps_greedy`` share, and any slots the ranking could not fill, to prior draws.

    With ``family`` (a key of a candidate's structural decisions) and ``max_family_share``
    below 1, no family takes more than that share of the ranked part while candidates of
    other families are left in ``ranked``: the ones over the cap are taken last.
    With ``trials`` too (family -> candidates measured so far), each family in ``ranked``
    first gets its best new candidates up to the fair share it is still owed
    (:func:`.family_share.fair_share`), and the cap counts them. The ranked part of the
    batch is in rank order.

    >>> import probsched as ps
    >>> from probsched.search.candidate import SearchContext
    >>> ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), seed=0)
    >>> ranked = [ctx.draw() for _ in range(8)]
    >>> same = best_then_prior(ctx, ranked, 4, 0.0, family=lambda c: 0, max_family_share=0.5)
    >>> [c.key for c in same] == [c.key for c in new_candidates(ctx, ranked, 4)]
    True
    >>> last = lambda c: c is ranked[-1]
    >>> best_then_prior(ctx, ranked, 2, 0.0, family=last, max_family_share=0.5, trials={})[-1] is ranked[-1]
    True
    """
    n_explore = int(round(eps_greedy * n))
    n_best = n - n_explore
    if family is None or max_family_share >= 1.0:
        best = new_candidates(ctx, ranked, n_best)
    else:
        ranked = [c for c in ranked if c is not None]
        order = {id(c): i for i, c in enumerate(ranked)}
        counts: Counter = Counter()
        owed = fair_share(map(family, ranked), trials, n_best) if trials is not None else {}
        best = _owed(ctx, ranked, n_best, family, owed, counts)
        taken = {c.hash for c in best}
        cap = max(1, math.ceil(max_family_share * n_best))
        over: List[Candidate] = []

        def under_cap() -> Iterator[Candidate]:
            # the family is checked before _fresh hashes a candidate: one family may fill
            # most of ``ranked``, and its over-cap members are hashed only if they are needed
            for c in ranked:
                if counts[family(c)] >= cap:
                    over.append(c)
                else:
                    yield c
            yield from over

        for c in _fresh(ctx, under_cap()):
            if len(best) >= n_best:
                break
            if c.hash in taken:
                continue
            counts[family(c)] += 1
            best.append(c)
        best.sort(key=lambda c: order[id(c)])
    return best + prior_candidates(ctx, n - len(best), exclude={c.hash for c in best})


def _owed(
    ctx: SearchContext,
    ranked: Sequence[Candidate],
    n: int,
    family: Callable[[Candidate], Hashable],
    owed: Mapping[Hashable, int],
    counts: Counter,
) -> List[Candidate]:
    """The best new candidates of each family of ``owed``, up to what it is owed and ``n``
    in all, in rank order; ``counts`` counts them by family."""
    if not any(v > 0 for v in owed.values()):
        return []
    out: List[Candidate] = []
    wanted = (c for c in ranked if counts[family(c)] < owed.get(family(c), 0))
    for c in _fresh(ctx, wanted):  # lazily: ``wanted`` sees the counts of those taken before
        if len(out) >= n:
            break
        counts[family(c)] += 1
        out.append(c)
    return out


__all__ = ["SearchStrategy", "new_candidates", "prior_candidates", "best_then_prior"]
