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

from typing import Optional, Union

from ..components import Registry
from .base import CostModel, group_of, normalized_throughput, pairwise_accuracy, top_k_recall  # noqa: F401
from .baselines import RandomModel, RidgeModel  # noqa: F401
from .features import N_FEATURES, extract, extract_batch, feature_docs, feature_names  # noqa: F401
from .mlp import MLPModel  # noqa: F401

#: Model classes by name (what ``CostModel.load`` reads back).
MODELS = {c.__name__: c for c in (MLPModel, RidgeModel, RandomModel)}

#: Cost models by the name ``ps.tune(cost_model=...)`` and ``--cost-model`` take, the default
#: first. A factory takes the run's ``seed`` and the model's own options. A model whose
#: ``wants_transfer`` is true starts from the shipped records of the other workloads
#: (:mod:`.transfer`), so it ranks the first round too.
COST_MODELS: Registry[CostModel] = Registry("cost model", required=("predict_features", "update_features", "fit_features"))


@COST_MODELS.register("mlp-transfer")
def _mlp_transfer(seed: Optional[int] = 0, **options) -> MLPModel:
    model = MLPModel(seed=seed or 0, **options)
    model.wants_transfer = True
    return model


COST_MODELS.register("mlp", lambda seed=0, **options: MLPModel(seed=seed or 0, **options))
COST_MODELS.register("ridge", lambda seed=0, **options: RidgeModel(**options))
COST_MODELS.register("random", lambda seed=0, **options: RandomModel(seed=seed or 0, **options))
DEFAULT_COST_MODEL = next(iter(COST_MODELS))


def get(model: Union[str, CostModel], seed: Optional[int] = 0, **options) -> CostModel:
    """A cost model from a name of :data:`COST_MODELS` (made with ``seed`` and ``options``),
    or ``model`` itself.

    >>> get("mlp-transfer").wants_transfer, get("mlp").wants_transfer
    (True, False)
    """
    return COST_MODELS.get(model, seed=seed, **options) if isinstance(model, str) else COST_MODELS.get(model, **options)

__all__ = [
    "CostModel",
    "MLPModel",
    "RidgeModel",
    "RandomModel",
    "MODELS",
    "COST_MODELS",
    "DEFAULT_COST_MODEL",
    "get",
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
