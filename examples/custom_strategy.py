"""A new search strategy in one short file: Thompson sampling over a bootstrap ensemble.

Each round draws a pool of candidates (prior samples and one-site mutations of the best
measured ones), fits K ridge models on bootstrap resamples of what was measured, and fills
each slot of the batch with the favourite of one randomly chosen model: exploration comes
from the models' disagreement. Run it:

    python examples/custom_strategy.py GMM:small 8
"""

import sys

import numpy as np

import probsched as ps
from probsched.cost_model import RidgeModel
from probsched.search import SearchStrategy, choose_site, new_candidates


class ThompsonEnsemble(SearchStrategy):
    name = "thompson"
    uses_cost_model = False  # its own ensemble ranks candidates: the tuner trains no model

    def __init__(self, models: int = 5, pool: int = 64):
        self.models, self.pool = models, pool
        self.features, self.seconds = [], []

    def generate(self, ctx, n):
        parents = [ctx.replay(d) for d in ctx.best_decisions(8)]
        pool = [ctx.draw() for _ in range(self.pool)]
        for p in (p for p in parents if p is not None):
            pool += [ctx.mutate(p, [site]) for site in (choose_site(p.decisions, ctx.rng) for _ in range(4)) if site]
        pool = new_candidates(ctx, pool, len(pool))
        if len(self.seconds) < 4:  # too little data to fit anything: explore
            return pool[:n]
        feats = [c.features() for c in pool]
        chosen, taken = [], set()
        for _ in range(min(n, len(pool))):
            idx = ctx.rng.integers(len(self.seconds), size=len(self.seconds))  # a bootstrap resample
            model = RidgeModel().fit_features([self.features[i] for i in idx],
                                              [self.seconds[i] for i in idx], ["w"] * len(idx))
            scores = model.predict_features(feats)
            best = next(i for i in np.argsort(-scores) if i not in taken)
            taken.add(best)
            chosen.append(pool[best])
        return chosen

    def observe(self, ctx, candidates, results):
        for c, r in zip(candidates, results):
            self.features.append(c.features())
            self.seconds.append(r.median)


if __name__ == "__main__":
    spec, trials = (sys.argv[1:] + ["GMM:small", "8"])[:2]
    result = ps.tune(spec, trials=int(trials), strategy=ThompsonEnsemble(), seed=0, batch_size=4)
    print(result.summary(compare=False))
