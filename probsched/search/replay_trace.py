"""``ReplayTrace``: prior sampling from the design space (MetaSchedule's replay-trace).

Every round draws fresh traces of the space and measures the first ``n`` new ones: random
search, the floor that model-guided strategies must beat.

>>> import probsched as ps
>>> from probsched.search.candidate import SearchContext
>>> ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), seed=0)
>>> batch = ReplayTrace().generate(ctx, 4)
>>> len(batch), len({c.hash for c in batch})
(4, 4)
"""

from __future__ import annotations

from typing import List

from .candidate import Candidate, SearchContext
from .strategy import SearchStrategy, new_candidates


class ReplayTrace(SearchStrategy):
    """Draw from the prior; ``max_draws_per_candidate`` bounds the attempts per slot."""

    name = "replay"
    uses_cost_model = False

    def __init__(self, max_draws_per_candidate: int = 8) -> None:
        self.max_draws_per_candidate = max_draws_per_candidate

    def generate(self, ctx: SearchContext, n: int) -> List[Candidate]:
        return new_candidates(ctx, (ctx.draw() for _ in range(n * self.max_draws_per_candidate)), n)


__all__ = ["ReplayTrace"]
