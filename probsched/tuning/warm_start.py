"""What the cost model learns before a run's first round: the shipped transfer records
(:mod:`probsched.cost_model.transfer`) and the database's earlier records of the run's tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from ..cost_model import CostModel
    from .task_search import TaskSearch


def start_model_from_transfer(model: "CostModel", exclude: Sequence[str]) -> None:
    """Give ``model`` the shipped records of other workloads (never those of ``exclude``)."""
    from ..cost_model.transfer import load_transfer

    records = load_transfer(exclude=list(exclude))
    if records is not None and len(records):
        model.set_transfer(records.features, records.seconds, records.groups, train=False)


def fit_on_past(model: Optional["CostModel"], searches: Sequence["TaskSearch"]) -> None:
    """Train ``model`` on the earlier records of every search (and its transfer records)."""
    if model is None:
        return
    feats, times, groups = [], [], []
    for s in searches:
        f, t, g = s.past_features()
        feats += f
        times += t
        groups += g
    if feats or getattr(model, "n_transfer", 0):
        model.fit_features(feats, times, groups)


def warm_start(model: Optional["CostModel"], searches: Sequence["TaskSearch"]) -> None:
    """Everything the model learns before the first round: the transfer records when it
    wants them, then the searches' earlier records."""
    if model is None:
        return
    if getattr(model, "wants_transfer", False):
        start_model_from_transfer(model, [s.key for s in searches])
    fit_on_past(model, searches)


__all__ = ["start_model_from_transfer", "fit_on_past", "warm_start"]
