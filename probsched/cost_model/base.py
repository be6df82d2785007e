"""The cost-model interface, its training-data bookkeeping, and ranking metrics.

A cost model scores scheduled programs, higher = predicted faster. It learns from measured
run times, compared only *within a workload group*: the group of a schedule is the
structural hash of its unscheduled function (``sch.func``), and its target is the
normalised throughput ``best time in group / its time`` (1 for the group's fastest, 0 for a
failed run), so workloads of different sizes can share one model.

Every model implements :class:`CostModel`: ``fit``/``update``/``predict`` take schedules,
and ``fit_features``/``predict_features`` the same on feature matrices (from
:func:`~probsched.cost_model.features.extract`) so that a search can cache features.

``update`` accumulates data and retrains (from scratch, so the model stays a deterministic
function of its data and seed) once the data has grown by ``retrain_fraction`` (20%) of
what the model was last trained on, and by at least ``retrain_min`` (32) records.

``set_transfer`` gives a model records of *other* workloads to start from (see
:mod:`.transfer`): it is trained on them at once, so a search can rank its first batch,
and every later training sees them beside the workload's own records (pairs stay within a
group). The retraining schedule counts the own records only.

>>> import numpy as np
>>> normalized_throughput([2.0, 1.0, 4.0, float("inf"), 1.0], ["a", "a", "a", "a", "b"]).tolist()
[0.5, 1.0, 0.25, 0.0, 1.0]
>>> pairwise_accuracy(np.array([3.0, 2.0, 1.0]), np.array([1.0, 2.0, 3.0]))
1.0
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Hashable, List, Optional, Sequence

import numpy as np

from .features import extract_batch

if TYPE_CHECKING:
    from ..schedule import Schedule


def _time(t) -> float:
    try:
        t = float(t)
    except (TypeError, ValueError):
        return math.inf
    return t if t > 0 and math.isfinite(t) else math.inf


def normalized_throughput(run_seconds: Sequence[float], groups: Sequence[Hashable]) -> np.ndarray:
    """``min time of the group / time`` per record (0 for failed or missing times)."""
    times = np.array([_time(t) for t in run_seconds], dtype=np.float64)
    groups = list(groups)
    out = np.zeros(len(times))
    best: dict = {}
    for g, t in zip(groups, times):
        if math.isfinite(t):
            best[g] = min(best.get(g, math.inf), t)
    for i, (g, t) in enumerate(zip(groups, times)):
        if math.isfinite(t):
            out[i] = best[g] / t
    return out


def group_of(sch: "Schedule") -> str:
    """The workload group of a schedule: the structural hash of its unscheduled function."""
    func = getattr(sch, "func", None)
    if func is None:
        raise ValueError(
            f"cannot tell the workload group of a {type(sch).__name__}; pass groups= explicitly"
        )
    return func.structural_hash()


def pairwise_accuracy(
    scores: np.ndarray, run_seconds: Sequence[float], groups: Optional[Sequence] = None, min_gap: float = 0.0
) -> float:
    """Fraction of same-group pairs with different times that ``scores`` order correctly
    (higher score = faster); ties in score count half. Failed runs count as slowest.

    ``min_gap`` > 0 keeps only pairs whose slower time exceeds the faster by more than that
    fraction: pairs closer than the measurement noise are coin flips for any model.

    >>> pairwise_accuracy(np.array([2.0, 3.0, 1.0]), [1.0, 1.05, 2.0], min_gap=0.1)  # (1, 1.05) left out
    1.0
    """
    times = np.array([_time(t) for t in run_seconds])
    scores = np.asarray(scores, dtype=np.float64)
    groups = np.zeros(len(times)) if groups is None else np.asarray([hash(g) for g in groups])
    right = total = 0.0
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        t, s = times[idx], scores[idx]
        faster = t[:, None] * (1.0 + min_gap) < t[None, :]  # i faster than j (by min_gap)
        total += faster.sum()
        right += ((s[:, None] > s[None, :]) & faster).sum() + 0.5 * ((s[:, None] == s[None, :]) & faster).sum()
    return float(right / total) if total else float("nan")


def top_k_recall(scores: np.ndarray, run_seconds: Sequence[float], k: int = 10, within: int = 50, groups: Optional[Sequence[Hashable]] = None) -> float:
    """Mean over groups of |true top-``k`` ∩ predicted top-``within``| / k.

    >>> top_k_recall(np.arange(5.0), [5, 4, 3, 2, 1], k=2, within=2)
    1.0
    """
    times = np.array([_time(t) for t in run_seconds])
    scores = np.asarray(scores, dtype=np.float64)
    groups = np.zeros(len(times)) if groups is None else np.asarray([hash(g) for g in groups])
    recalls = []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        kk = min(k, len(idx))
        true_top = set(idx[np.argsort(times[idx], kind="stable")[:kk]])
        pred_top = set(idx[np.argsort(-scores[idx], kind="stable")[:within]])
        recalls.append(len(true_top & pred_top) / kk)
    return float(np.mean(recalls)) if recalls else float("nan")


class CostModel(ABC):
    """Scores scheduled programs; higher = predicted faster (see the module docstring).

    Subclasses implement :meth:`fit_features`, :meth:`predict_features`, :meth:`_state`
    and :meth:`_from_state`; the schedule-level methods and ``update`` come from here.
    """

    retrain_fraction = 0.2
    retrain_min = 32
    #: Train when the model is next asked (a prediction, ``save``), not when the data
    #: grew: on the data it had when it decided to, so the result is the same, and a
    #: training nothing asks for (the tuner's update after its last batch) is never paid.
    #: A subclass that sets it calls :meth:`_ensure_trained` before it reads its predictor.
    lazy_training = False
    #: Whether a tuning run starts the model from the shipped transfer records (the
    #: ``"mlp-transfer"`` entry of :data:`probsched.cost_model.COST_MODELS` sets it).
    wants_transfer = False

    def __init__(self) -> None:
        self._data_x: List[np.ndarray] = []
        self._data_t: List[float] = []
        self._data_g: List[Hashable] = []
        self.n_trained = 0  # own records (not transfer ones) the current model was trained on
        self._transfer_x: List[np.ndarray] = []
        self._transfer_t: List[float] = []
        self._transfer_g: List[Hashable] = []
        self._pending: Optional[tuple] = None  # (features, times, groups) of a deferred training

    @property
    def n_transfer(self) -> int:
        """Records of other workloads the model starts from (see :meth:`set_transfer`)."""
        return len(self._transfer_x)

    @property
    def trained(self) -> bool:
        """Whether the predictor has learnt anything (from transfer or own records)."""
        return self.n_trained > 0 or self.n_transfer > 0

    def set_transfer(
        self, features: Sequence[np.ndarray], run_seconds: Sequence[float], groups: Sequence, train: bool = True
    ) -> "CostModel":
        """Start from measured records of other workloads (transfer) and train on them with
        the own records so far (``train=False``: at the next ``fit``). Their groups should
        differ from the workload's own: pairs are formed within groups."""
        if not (len(features) == len(run_seconds) == len(groups)):
            raise ValueError(f"set_transfer: {len(features)} programs, {len(run_seconds)} times, {len(groups)} groups")
        self._transfer_x = list(features)
        self._transfer_t = [_time(t) for t in run_seconds]
        self._transfer_g = [str(g) for g in groups]
        if train:
            self._retrain()
        return self

    def _retrain(self) -> None:
        """Train from scratch on the transfer records and the own ones (now, or before the
        next prediction with :attr:`lazy_training`)."""
        if self._transfer_x or self._data_x:
            # new lists: records added later are not part of this training
            data = (self._transfer_x + self._data_x, self._transfer_t + self._data_t, self._transfer_g + self._data_g)
            if self.lazy_training:
                self._pending = data
            else:
                self._train(*data)
        self.n_trained = len(self._data_x)

    def _ensure_trained(self) -> None:
        """Run the training :meth:`_retrain` deferred, if any."""
        if self._pending is not None:
            data, self._pending = self._pending, None
            self._train(*data)

    # ------------------------------------------------------------------ schedule level
    @staticmethod
    def _groups(schedules, groups) -> list:
        if groups is not None:
            groups = list(groups)
            if len(groups) != len(schedules):
                raise ValueError(f"{len(groups)} groups for {len(schedules)} schedules")
            return groups
        return [group_of(s) for s in schedules]

    def fit(self, schedules: Sequence, run_seconds: Sequence[float], groups: Optional[Sequence] = None) -> "CostModel":
        """Train on scheduled programs and their measured seconds (replaces earlier data)."""
        groups = self._groups(schedules, groups)
        return self.fit_features(extract_batch(schedules), run_seconds, groups)

    def update(self, schedules: Sequence, run_seconds: Sequence[float], groups: Optional[Sequence] = None) -> bool:
        """Add measured programs; retrain when the data grew enough. Returns whether it did."""
        groups = self._groups(schedules, groups)
        return self.update_features(extract_batch(schedules), run_seconds, groups)

    def predict(self, schedules: Sequence) -> np.ndarray:
        """Scores (float64, higher = predicted faster) of scheduled programs."""
        return self.predict_features(extract_batch(schedules))

    # ------------------------------------------------------------------ feature level
    def fit_features(self, features: Sequence[np.ndarray], run_seconds: Sequence[float], groups: Sequence) -> "CostModel":
        """:meth:`fit` on feature matrices (one ``(n_stores, F)`` array per program)."""
        if not (len(features) == len(run_seconds) == len(groups)):
            raise ValueError(f"fit: {len(features)} programs, {len(run_seconds)} times, {len(groups)} groups")
        self._data_x = list(features)
        self._data_t = [_time(t) for t in run_seconds]
        self._data_g = [str(g) for g in groups]  # str: what save() can store
        self._retrain()
        return self

    def update_features(self, features: Sequence[np.ndarray], run_seconds: Sequence[float], groups: Sequence) -> bool:
        """:meth:`update` on feature matrices."""
        if not (len(features) == len(run_seconds) == len(groups)):
            raise ValueError(f"update: {len(features)} programs, {len(run_seconds)} times, {len(groups)} groups")
        self._data_x += list(features)
        self._data_t += [_time(t) for t in run_seconds]
        self._data_g += [str(g) for g in groups]
        new = len(self._data_x) - self.n_trained
        if self.n_trained and new < max(self.retrain_min, self.retrain_fraction * self.n_trained):
            return False
        if not self.n_trained and new < min(self.retrain_min, 2):
            return False
        self._retrain()
        return True

    @abstractmethod
    def _train(self, features: List[np.ndarray], times: List[float], groups: List[Hashable]) -> None:
        """Fit the model to all accumulated data."""

    @abstractmethod
    def predict_features(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Scores of programs given as feature matrices."""

    # ------------------------------------------------------------------ persistence
    @abstractmethod
    def _state(self) -> dict:
        """Arrays (and JSON-able scalars) that restore the trained predictor."""

    @classmethod
    @abstractmethod
    def _from_state(cls, state: dict) -> "CostModel":
        """Inverse of :meth:`_state`."""

    def save(self, path: str) -> None:
        """Write the model to an ``.npz`` file: the trained predictor and the accumulated
        training data, so a loaded model predicts the same and ``update`` goes on as it would
        have (groups are stored as strings). Transfer records are not written: a loaded model
        retrains on its own records only unless it is given them again."""
        state = {k: np.asarray(v) for k, v in self._state().items()}
        f = self._data_x[0].shape[1] if self._data_x else 0
        data = {
            "__kind__": np.asarray(type(self).__name__),
            "__n_trained__": np.asarray(self.n_trained),
            "__data_x__": np.concatenate(self._data_x) if self._data_x else np.zeros((0, f), np.float32),
            "__data_len__": np.asarray([len(x) for x in self._data_x], dtype=np.int64),
            "__data_t__": np.asarray(self._data_t, dtype=np.float64),
            "__data_g__": np.asarray([str(g) for g in self._data_g]),
        }
        with open(path, "wb") as fh:  # a file object: numpy would append ".npz" to a str
            np.savez(fh, **data, **state)

    @classmethod
    def load(cls, path: str) -> "CostModel":
        """Read a model written by :meth:`save` (``CostModel.load`` picks the class)."""
        from . import MODELS

        with np.load(path, allow_pickle=False) as z:
            state = {k: z[k] for k in z.files}
        kind = str(state.pop("__kind__"))
        model_cls = MODELS.get(kind)
        if model_cls is None or not issubclass(model_cls, cls):
            raise ValueError(f"{path}: holds a {kind}, not a {cls.__name__}")
        n_trained = int(state.pop("__n_trained__", 0))
        x, lengths = state.pop("__data_x__", None), state.pop("__data_len__", None)
        times, groups = state.pop("__data_t__", None), state.pop("__data_g__", None)
        model = model_cls._from_state(state)
        model.n_trained = n_trained
        if x is not None and lengths is not None:
            model._data_x = list(np.split(x, np.cumsum(lengths)[:-1])) if len(lengths) else []
            model._data_t = [float(t) for t in times]
            model._data_g = [str(g) for g in groups]
        return model
