"""``AnnealedMCMC``: Metropolis-Hastings over decision traces, the paper's figure.

The target is the prior of the design space tempered by the cost model,
``pi_T(x) ~ p(x) * exp(score(x) / T)``, with ``T`` lowered geometrically from ``t_start``
to ``t_end`` over ``steps`` (scores are first divided by their spread in the initial
chains, so the temperatures are in units of the model's own scale). Each of ``chains``
chains starts from a best measured record or a prior draw; a step re-proposes one site
(mutator drawn by weight, :mod:`.mutators`) through the ``mutate`` handler and accepts
with probability ``min(1, pi_T(x') q(x | x') / (pi_T(x) q(x' | x)))``: the score
difference, the prior's log-probability difference and the proposal's ``log_q_ratio``
recorded on the mutated site. (Sites that appear or vanish with the move are drawn from
the prior, whose terms the prior difference then approximately cancels.) The batch is the
best-scored unmeasured states visited, plus an ``eps_greedy`` share from the prior.

>>> import probsched as ps
>>> from probsched.search.candidate import SearchContext
>>> ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), seed=0)
>>> len(AnnealedMCMC(chains=4, steps=3).generate(ctx, 3))
3
"""

from __future__ import annotations

import math
from typing import Dict, List

import numpy as np

from .candidate import Candidate, SearchContext
from .mutators import MUTATORS, choose_site
from .strategy import SearchStrategy, best_then_prior, prior_candidates


def _log_q_ratio(c: Candidate) -> float:
    return float(sum(c.decisions[n].log_q_ratio or 0.0 for n in c.decisions if c.decisions[n].infer.get("mutated")))


class AnnealedMCMC(SearchStrategy):
    """Annealed Metropolis-Hastings chains scored by the cost model."""

    name = "mcmc"

    def __init__(
        self,
        chains: int = 64,
        steps: int = 20,
        t_start: float = 1.0,
        t_end: float = 0.05,
        init_measured_ratio: float = 0.5,
        eps_greedy: float = 0.05,
        mutators=None,
    ) -> None:
        self.chains = chains
        self.steps = steps
        self.t_start = t_start
        self.t_end = t_end
        self.init_measured_ratio = init_measured_ratio
        self.eps_greedy = eps_greedy
        self.mutators = MUTATORS if mutators is None else mutators
        self.accepted = 0
        self.proposed = 0

    def generate(self, ctx: SearchContext, n: int) -> List[Candidate]:
        if not ctx.model_trained:
            return prior_candidates(ctx, n)
        starts = [ctx.replay(d) for d in ctx.best_decisions(int(self.chains * self.init_measured_ratio))]
        starts += [ctx.draw() for _ in range(self.chains - len(starts))]
        state = [c for c in starts if c is not None]
        if not state:
            return []
        score = list(ctx.score(state))
        spread = float(np.std(score)) or 1.0
        visited: Dict[str, tuple] = {c.key: (s, c) for c, s in zip(state, score)}
        for step in range(self.steps):
            frac = step / max(1, self.steps - 1)
            temp = self.t_start * (self.t_end / self.t_start) ** frac
            proposals = []
            for c in state:
                site = choose_site(c.decisions, ctx.rng, self.mutators)
                proposals.append(ctx.mutate(c, [site]) if site is not None else None)
            live = [p for p in proposals if p is not None]
            new_scores = iter(ctx.score(live))
            for i, p in enumerate(proposals):
                if p is None:
                    continue
                s_new = float(next(new_scores))
                visited.setdefault(p.key, (s_new, p))
                self.proposed += 1
                log_alpha = (s_new - score[i]) / (spread * temp)
                log_alpha += p.decisions.log_prob() - state[i].decisions.log_prob() + _log_q_ratio(p)
                if math.log(max(ctx.rng.random(), 1e-300)) < log_alpha:
                    state[i], score[i] = p, s_new
                    self.accepted += 1
        ranked = [c for _, c in sorted(visited.values(), key=lambda t: -t[0])]
        return best_then_prior(ctx, ranked, n, self.eps_greedy)


__all__ = ["AnnealedMCMC"]
