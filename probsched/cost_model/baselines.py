"""Baselines behind the :class:`~probsched.cost_model.base.CostModel` interface.

- :class:`RandomModel`: uniform random scores (what search without a model does).
- :class:`RidgeModel`: ridge regression of the normalised throughput on the program's
  features summed over its stores (standardised), closed form.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> feats = [rng.random((2, 4)).astype("float32") for _ in range(40)]
>>> secs = [1.0 + float(f[:, 0].sum()) for f in feats]   # slower when feature 0 is large
>>> m = RidgeModel(alpha=1e-3).fit_features(feats, secs, ["g"] * 40)
>>> from probsched.cost_model.base import pairwise_accuracy
>>> pairwise_accuracy(m.predict_features(feats), secs) > 0.9
True
"""

from __future__ import annotations

from typing import Hashable, List, Sequence

import numpy as np

from .base import CostModel, normalized_throughput
from .mlp import STD_FLOOR


def program_sums(features: Sequence[np.ndarray]) -> np.ndarray:
    """``(n_programs, F)``: each program's features summed over its stores."""
    if not features:
        return np.zeros((0, 0))
    f = features[0].shape[1]
    return np.stack([x.sum(axis=0) if len(x) else np.zeros(f) for x in features]).astype(np.float64)


class RandomModel(CostModel):
    """Uniform random scores, reproducible from ``seed`` (and the sequence of calls)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)

    def _train(self, features, times, groups) -> None:
        pass

    def predict_features(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Uniform scores in [0, 1)."""
        return self._rng.random(len(features))

    def _state(self) -> dict:
        return {"seed": self.seed}

    @classmethod
    def _from_state(cls, state: dict) -> "RandomModel":
        return cls(int(state["seed"]))


class RidgeModel(CostModel):
    """Ridge regression (penalty ``alpha``) on standardised per-program feature sums."""

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = float(alpha)
        self.mean = self.scale = self.coef = None
        self.intercept = 0.0

    def _train(self, features: List[np.ndarray], times: List[float], groups: List[Hashable]) -> None:
        x = program_sums(features)
        y = normalized_throughput(times, groups)
        self.mean = x.mean(axis=0)
        self.scale = np.maximum(x.std(axis=0), STD_FLOOR)
        z = (x - self.mean) / self.scale
        self.intercept = float(y.mean())
        a = z.T @ z + self.alpha * np.eye(z.shape[1])
        self.coef = np.linalg.solve(a, z.T @ (y - self.intercept))

    def predict_features(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Predicted normalised throughput."""
        if self.coef is None:
            raise RuntimeError("RidgeModel: fit it before predicting")
        if not len(features):
            return np.zeros(0)
        return ((program_sums(features) - self.mean) / self.scale) @ self.coef + self.intercept

    def _state(self) -> dict:
        return {"alpha": self.alpha, "mean": self.mean, "scale": self.scale, "coef": self.coef, "intercept": self.intercept}

    @classmethod
    def _from_state(cls, state: dict) -> "RidgeModel":
        m = cls(float(state["alpha"]))
        m.mean, m.scale, m.coef = state["mean"], state["scale"], state["coef"]
        m.intercept = float(state["intercept"])
        return m
