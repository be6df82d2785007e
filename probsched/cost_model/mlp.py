"""``MLPModel``: a per-store MLP summed per program, trained with a pairwise ranking loss.

Each store's (standardised) feature row goes through an MLP to one number; a program's score
is the sum over its stores (``jax.ops.segment_sum``), so programs of any number of stores
get one score. Training minimises the pairwise logistic loss ``log(1 + exp(s_j - s_i))`` over
pairs of programs of the same workload group where ``i`` is faster than ``j``, each pair
weighted by ``min(log2(t_j / t_i), 2)`` (LambdaRank-like: order big gaps first; pairs within
the measurement noise barely count), with optax's AdamW (Adam with decoupled weight decay).
The MetaSchedule model (XGBoost) uses the same per-store sum; a ranking loss fits the task
better than regression since only the order matters.

Shapes are padded to buckets (sizes ``2^k`` or ``3 * 2^(k-1)`` of programs and of stores) so
that scoring populations of varying size reuses a handful of compiled functions; the
training step is compiled once per configuration and store bucket and shared by models.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> feats = [rng.random((int(rng.integers(1, 4)), 6)).astype("float32") for _ in range(64)]
>>> secs = [1.0 + float(f[:, 0].sum()) for f in feats]
>>> m = MLPModel(seed=0, hidden=(32,), epochs=30).fit_features(feats, secs, ["g"] * 64)
>>> m.predict_features(feats).shape
(64,)
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Hashable, List, Sequence, Tuple

import numpy as np

from .base import CostModel, normalized_throughput

#: Smallest feature scale in standardisation (log2 units): a feature constant in the training
#: data (say exp counts, when no softmax was measured) must not blow up to thousands of
#: standard deviations on a new workload.
STD_FLOOR = 0.3
#: Largest weight of a training pair, in log2 units of their throughput ratio (a 4x gap).
PAIR_WEIGHT_CAP = 2.0
#: Normalised throughput of failed runs in the log targets (2^-10: slower than any timed one).
LOG_FLOOR = 2.0 ** -10
MIN_STORE_BUCKET = 256
MIN_PROGRAM_BUCKET = 64


def _bucket(n: int, minimum: int) -> int:
    """The smallest size >= max(n, minimum) of the form 2^k or 3 * 2^(k-1): few distinct
    shapes (so few compiles), at most a third of padding.

    >>> _bucket(300, 64), _bucket(3, 64), _bucket(1280, 256), _bucket(512, 64)
    (384, 64, 1536, 512)
    """
    b = minimum
    while b < n:
        if b * 3 // 2 >= n and (b * 3) % 2 == 0:
            return b * 3 // 2
        b *= 2
    return b


def _jax():
    # imported on first use: ``import probsched`` stays fast for code that never trains
    import jax
    import jax.numpy as jnp

    return jax, jnp


def _raw_scores(params, x, seg, num_segments: int):
    """Per-program scores: MLP per store row, summed per segment."""
    jax, jnp = _jax()
    h = x
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    s = (h @ w + b)[:, 0]
    return jax.ops.segment_sum(s, seg, num_segments=num_segments)


@lru_cache(maxsize=None)
def _jitted_scores():
    jax, _ = _jax()
    return jax.jit(_raw_scores, static_argnums=(3,))


def _pair_loss(params, x, seg, y, g, valid, num_programs: int):
    """Pairwise logistic loss over the batch's same-group pairs; ``y`` is log2 normalised
    throughput, and a pair weighs its gap in ``y`` capped at :data:`PAIR_WEIGHT_CAP`
    (LambdaRank-like: a 2x gap matters more than a 5% one, which is mostly noise)."""
    jax, jnp = _jax()
    s = _raw_scores(params, x, seg, num_programs + 1)[:num_programs]
    better = (y[:, None] > y[None, :]) & (g[:, None] == g[None, :]) & valid[:, None] & valid[None, :]
    m = better.astype(s.dtype) * jnp.minimum(y[:, None] - y[None, :], PAIR_WEIGHT_CAP)
    loss = jax.nn.softplus(-(s[:, None] - s[None, :]))
    return (loss * m).sum() / jnp.maximum(m.sum(), 1e-6)


@lru_cache(maxsize=None)
def _train_step(lr: float, weight_decay: float, num_programs: int):
    """(optimizer, jitted step) for one configuration: cached so that every model trained
    with it reuses the compiled step (one compile per store bucket)."""
    jax, _ = _jax()
    import optax

    opt = optax.adamw(lr, weight_decay=weight_decay)

    @jax.jit
    def step(params, opt_state, x, seg, y, g, valid):
        loss, grads = jax.value_and_grad(_pair_loss)(params, x, seg, y, g, valid, num_programs)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return opt, step


class MLPModel(CostModel):
    """Per-store MLP with a per-program sum, pairwise ranking loss, AdamW (see module doc).

    ``hidden``: hidden layer widths; ``epochs``: passes over the data per training;
    ``batch``: programs per step (pairs are formed inside a batch, within groups; 256 rather
    than 128 gives each step four times the pairs, for the same training time).
    Deterministic under ``seed`` (initialisation and batch order).
    """

    def __init__(
        self,
        seed: int = 0,
        hidden: Tuple[int, ...] = (256, 256),
        lr: float = 1e-3,
        epochs: int = 60,
        batch: int = 256,
        weight_decay: float = 1e-4,
    ) -> None:
        super().__init__()
        self.seed = int(seed)
        self.hidden = tuple(int(h) for h in hidden)
        self.lr = float(lr)
        self.epochs = int(epochs)
        self.batch = int(batch)
        self.weight_decay = float(weight_decay)
        self.params = None
        self.mean = self.std = None
        self.last_loss = float("nan")

    # ------------------------------------------------------------------ training
    def _init_params(self, n_features: int):
        # He initialisation drawn with numpy: deterministic under the seed, and no JAX
        # random kernels to compile (seconds on a busy machine)
        _, jnp = _jax()
        rng = np.random.default_rng(self.seed)
        sizes = (n_features,) + self.hidden + (1,)
        params = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)
            params.append((jnp.asarray(w, jnp.float32), jnp.zeros((fan_out,), jnp.float32)))
        return params

    lazy_training = True  # the base class trains before predict_features and save ask

    def _train(self, features: List[np.ndarray], times: List[float], groups: List[Hashable]) -> None:
        # A training on the transfer records alone (the first of every tuning run) is the
        # same in every run of a workload: it is read from the disk cache when one was
        # stored (seconds of training saved per run; :mod:`.trained_cache`).
        key = None
        if self.n_transfer and len(features) == self.n_transfer:
            from . import trained_cache

            key = trained_cache.key(self._config(), features, times, groups)
            hit = trained_cache.load(key)
            if hit is not None:
                self._set_state(hit)
                return
        self._fit(features, times, groups)
        if key is not None:
            trained_cache.store(key, self._predictor_state())

    def _fit(self, features: List[np.ndarray], times: List[float], groups: List[Hashable]) -> None:
        n_feat = next((x.shape[1] for x in features if x.ndim == 2), 0)
        rows = [x.reshape(-1, n_feat) for x in features]
        flat = np.concatenate(rows) if rows else np.zeros((0, n_feat), np.float32)
        self.mean = flat.mean(axis=0).astype(np.float32)
        self.std = np.maximum(flat.std(axis=0), STD_FLOOR).astype(np.float32)
        flat = (flat - self.mean) / self.std
        starts = np.cumsum([0] + [len(r) for r in rows])
        y = np.log2(np.maximum(normalized_throughput(times, groups), LOG_FLOOR)).astype(np.float32)
        gid = {g: i for i, g in enumerate(dict.fromkeys(groups))}
        g = np.array([gid[x] for x in groups], dtype=np.int32)

        n = len(rows)
        bp = min(self.batch, _bucket(n, 8))
        opt, step = _train_step(self.lr, self.weight_decay, bp)
        params = self._init_params(n_feat)
        opt_state = opt.init(params)
        rng = np.random.default_rng(self.seed + 1)  # batch order
        losses = []
        for _ in range(self.epochs):
            perm = rng.permutation(n)
            for lo in range(0, n, bp):
                idx = perm[lo : lo + bp]
                x, seg = self._pack([flat[starts[i] : starts[i + 1]] for i in idx], bp)
                yb = np.zeros(bp, np.float32)
                gb = np.full(bp, -1, np.int32)
                vb = np.zeros(bp, bool)
                yb[: len(idx)], gb[: len(idx)], vb[: len(idx)] = y[idx], g[idx], True
                params, opt_state, loss = step(params, opt_state, x, seg, yb, gb, vb)
                losses.append(loss)
        self.params = params
        self.last_loss = float(np.mean([float(v) for v in losses[-max(1, len(losses) // 10) :]])) if losses else float("nan")

    @staticmethod
    def _pack(blocks: List[np.ndarray], num_programs: int) -> Tuple[np.ndarray, np.ndarray]:
        """Stack programs' rows, padded to a store bucket; padding goes to segment ``num_programs``."""
        lengths = np.fromiter((len(b) for b in blocks), dtype=np.int64, count=len(blocks))
        total = int(lengths.sum())
        f = blocks[0].shape[1] if blocks else 0
        nb = _bucket(total, MIN_STORE_BUCKET)
        x = np.zeros((nb, f), np.float32)
        if total:
            x[:total] = np.concatenate(blocks)
        seg = np.full(nb, num_programs, np.int32)
        seg[:total] = np.repeat(np.arange(len(blocks), dtype=np.int32), lengths)
        return x, seg

    # ------------------------------------------------------------------ prediction
    def predict_features(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Scores of programs given as ``(n_stores, F)`` feature matrices (jit, bucketed)."""
        self._ensure_trained()
        if self.params is None:
            raise RuntimeError("MLPModel: fit it before predicting")
        n = len(features)
        if n == 0:
            return np.zeros(0)
        pb = _bucket(n, MIN_PROGRAM_BUCKET)
        f = self.mean.shape[0]
        x, seg = self._pack([np.asarray(x, np.float32).reshape(-1, f) for x in features], pb)
        x = (x - self.mean) / self.std  # padding rows are dropped by the segment sum anyway
        out = _jitted_scores()(self.params, x, seg, pb + 1)
        return np.asarray(out[:n], dtype=np.float64)

    # ------------------------------------------------------------------ persistence
    def _config(self) -> dict:
        return {
            "seed": self.seed,
            "hidden": list(self.hidden),
            "lr": self.lr,
            "epochs": self.epochs,
            "batch": self.batch,
            "weight_decay": self.weight_decay,
        }

    def _predictor_state(self) -> dict:
        """The trained predictor's arrays (standardisation, layers, last loss)."""
        state = {"mean": self.mean, "std": self.std, "last_loss": np.asarray(self.last_loss)}
        for i, (w, b) in enumerate(self.params):
            state[f"w{i}"] = np.asarray(w)
            state[f"b{i}"] = np.asarray(b)
        return state

    def _set_state(self, state: dict) -> None:
        """Inverse of :meth:`_predictor_state`."""
        _, jnp = _jax()
        self.mean, self.std = np.asarray(state["mean"]), np.asarray(state["std"])
        self.last_loss = float(state.get("last_loss", float("nan")))
        layers = len(self.hidden) + 1
        self.params = [(jnp.asarray(state[f"w{i}"]), jnp.asarray(state[f"b{i}"])) for i in range(layers)]

    def _state(self) -> dict:
        self._ensure_trained()
        if self.params is None:
            raise RuntimeError("MLPModel: nothing to save before fit")
        return {"config": json.dumps(self._config()), **self._predictor_state()}

    @classmethod
    def _from_state(cls, state: dict) -> "MLPModel":
        cfg = json.loads(str(state["config"]))
        cfg["hidden"] = tuple(cfg["hidden"])
        m = cls(**cfg)
        m._set_state(state)
        return m
