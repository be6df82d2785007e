"""Layers of the shipped models, in plain ``jax.numpy``/``jax.lax``, with seeded weights.

Weights are numpy arrays drawn from a seeded generator (nothing is downloaded) and closed
over by the model function, so :func:`probsched.from_jax` sees them as constants. Scales
follow the usual initialisations (He for convolutions, Xavier for dense layers) so that
activations stay of order one through deep networks and the compiled network can be
compared with ``jax.jit`` elementwise. Batch norm is the inference form with random
statistics: ``(x - mean) / sqrt(var + eps) * gamma + beta``.

>>> import numpy as np
>>> p = Params(0)
>>> w = p.conv(3, 3, 4, 8)
>>> w.shape, w.dtype
((3, 3, 4, 8), dtype('float32'))
>>> y = conv2d(np.ones((1, 5, 5, 4), np.float32), w, stride=2)
>>> y.shape
(1, 3, 3, 8)
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np


class Params:
    """A seeded source of float32 weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def normal(self, shape: Tuple[int, ...], std: float) -> np.ndarray:
        """Normal weights with standard deviation ``std``."""
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def conv(self, kh: int, kw: int, ci: int, co: int) -> np.ndarray:
        """An HWIO convolution kernel (He initialisation)."""
        return self.normal((kh, kw, ci, co), float(np.sqrt(2.0 / (kh * kw * ci))))

    def dense(self, ci: int, co: int) -> np.ndarray:
        """A (ci, co) matrix (Xavier initialisation)."""
        return self.normal((ci, co), float(np.sqrt(2.0 / (ci + co))))

    def bias(self, n: int, scale: float = 0.1) -> np.ndarray:
        """A small bias vector."""
        return self.normal((n,), scale)

    def batch_norm(self, c: int) -> Dict[str, np.ndarray]:
        """Inference batch-norm parameters: gamma, beta, running mean and variance."""
        return {
            "gamma": self.rng.uniform(0.8, 1.2, c).astype(np.float32),
            "beta": self.normal((c,), 0.1),
            "mean": self.normal((c,), 0.1),
            "var": self.rng.uniform(0.8, 1.2, c).astype(np.float32),
        }

    def layer_norm(self, c: int) -> Dict[str, np.ndarray]:
        """Layer-norm scale and offset."""
        return {"gamma": self.rng.uniform(0.8, 1.2, c).astype(np.float32), "beta": self.normal((c,), 0.1)}


def conv2d(x, w, stride: int = 1, groups: int = 1, padding: str = "SAME"):
    """An NHWC/HWIO convolution (``groups == channels``: depthwise)."""
    import jax

    return jax.lax.conv_general_dilated(
        x, w, (stride, stride), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups
    )


def batch_norm(x, p: Dict[str, np.ndarray], eps: float = 1e-5):
    """Inference batch norm over the last axis."""
    import jax.numpy as jnp

    return (x - p["mean"]) / jnp.sqrt(p["var"] + eps) * p["gamma"] + p["beta"]


def layer_norm(x, p: Dict[str, np.ndarray], eps: float = 1e-12):
    """Layer norm over the last axis (BERT's epsilon)."""
    import jax
    import jax.numpy as jnp

    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * p["gamma"] + p["beta"]


def max_pool(x, window: int, stride: int, padding: str = "SAME"):
    """NHWC max pooling."""
    import jax
    import jax.numpy as jnp

    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, window, window, 1), (1, stride, stride, 1), padding)
