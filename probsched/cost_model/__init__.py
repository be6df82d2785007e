"""Program features and cost models: ``ps.cost_model``.

- :mod:`.features` — per-store features of a scheduled function (:func:`extract`), built on
  :mod:`.nest` (stores with their loops and linear accesses), :mod:`.ops` (operation counts)
  and :mod:`.access` (per-buffer footprints, lines, strides, reuse);
- :mod:`.base` — the :class:`CostModel` interface, normalised throughput, ranking metrics;
- :mod:`.mlp` — :class:`MLPModel`, the JAX/optax per-store MLP with a ranking loss;
- :mod:`.baselines` — :class:`RandomModel` and :class:`RidgeModel`.

>>> import probsched as ps
>>> from probsched import cost_model
>>> w = ps.workloads.small("GMM")
>>> schs = [ps.Schedule(w.func) for _ in range(3)]
>>> for s, f in zip(schs[1:], (4, 8)):
...     _ = s.split(s.get_loops(s.get_block("Z"))[2], [None, f])
>>> model = cost_model.RidgeModel().fit(schs, [3.0, 2.0, 1.0])
>>> model.predict(schs).shape
(3,)
"""

from .base import CostModel, group_of, normalized_throughput, pairwise_accuracy, top_k_recall  # noqa: F401
from .baselines import RandomModel, RidgeModel  # noqa: F401
from .features import N_FEATURES, extract, extract_batch, feature_docs, feature_names  # noqa: F401
from .mlp import MLPModel  # noqa: F401

#: Model classes by name (what ``CostModel.load`` reads back).
MODELS = {c.__name__: c for c in (MLPModel, RidgeModel, RandomModel)}

__all__ = [
    "CostModel",
    "MLPModel",
    "RidgeModel",
    "RandomModel",
    "MODELS",
    "extract",
    "extract_batch",
    "feature_names",
    "feature_docs",
    "N_FEATURES",
    "group_of",
    "normalized_throughput",
    "pairwise_accuracy",
    "top_k_recall",
]
