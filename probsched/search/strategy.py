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
space is exhausted. Any object with these two methods and a ``name`` is a strategy.

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

from typing import Iterable, List, Optional, Sequence

from .candidate import Candidate, SearchContext


class SearchStrategy:
    """Base class of strategies: ``generate`` is required, ``observe`` optional."""

    name = "strategy"

    def generate(self, ctx: SearchContext, n: int) -> List[Candidate]:
        raise NotImplementedError

    def observe(self, ctx: SearchContext, candidates: Sequence[Candidate], results: Sequence) -> None:
        """Learn from measured results (the tuner already updated ``ctx`` and the model)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def new_candidates(ctx: SearchContext, stream: Iterable[Optional[Candidate]], n: int) -> List[Candidate]:
    """The first ``n`` candidates of ``stream`` that are valid, unmeasured and distinct."""
    out: List[Candidate] = []
    keys, hashes = set(), set()
    for c in stream:
        if len(out) >= n:
            break
        if c is None or c.key in keys:
            continue
        keys.add(c.key)
        if not ctx.is_new(c) or c.hash in hashes:
            continue
        hashes.add(c.hash)
        out.append(c)
    return out


__all__ = ["SearchStrategy", "new_candidates"]
