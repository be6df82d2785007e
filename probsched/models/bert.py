"""A BERT encoder (Devlin et al. 2019): post-norm transformer layers, inference form.

The input is the embedded sequence ``(batch, seq, hidden)``; each layer is multi-head
self-attention (no mask), a residual add and layer norm, a feed-forward block with the exact
(erf) GELU, a residual add and layer norm. ``bert_base()`` is 12 layers, hidden 768, 12
heads, FFN 3072, sequence 128 (about 22.7 GFLOP); ``bert_tiny()`` two small layers for tests.

>>> fn, (x,) = bert_tiny()
>>> fn(x).shape
(1, 16, 32)
"""

from __future__ import annotations

from typing import Callable, Tuple

import numpy as np

from .layers import Params, layer_norm


def bert(
    layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128, batch: int = 1, seed: int = 0
) -> Tuple[Callable, Tuple[np.ndarray]]:
    """``(fn, (x,))``: a BERT encoder and an example embedded sequence."""
    import jax
    import jax.numpy as jnp

    if hidden % heads:
        raise ValueError(f"bert: hidden={hidden} is not a multiple of heads={heads}")
    p = Params(seed)
    dh = hidden // heads
    params = []
    for _ in range(layers):
        params.append({
            "wq": p.dense(hidden, hidden), "bq": p.bias(hidden),
            "wk": p.dense(hidden, hidden), "bk": p.bias(hidden),
            "wv": p.dense(hidden, hidden), "bv": p.bias(hidden),
            "wo": p.dense(hidden, hidden), "bo": p.bias(hidden),
            "ln1": p.layer_norm(hidden),
            "w1": p.dense(hidden, ffn), "b1": p.bias(ffn),
            "w2": p.dense(ffn, hidden), "b2": p.bias(hidden),
            "ln2": p.layer_norm(hidden),
        })
    scale = np.float32(1.0 / np.sqrt(dh))

    def heads_of(t):
        return t.reshape(batch, seq, heads, dh).transpose(0, 2, 1, 3)

    def forward(x):
        for lp in params:
            q = heads_of(x @ lp["wq"] + lp["bq"])
            k = heads_of(x @ lp["wk"] + lp["bk"])
            v = heads_of(x @ lp["wv"] + lp["bv"])
            scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * scale
            probs = jax.nn.softmax(scores, axis=-1)
            ctx = jnp.einsum("bhqk,bhkd->bhqd", probs, v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
            x = layer_norm(x + (ctx @ lp["wo"] + lp["bo"]), lp["ln1"])
            h = jax.nn.gelu(x @ lp["w1"] + lp["b1"], approximate=False)
            x = layer_norm(x + (h @ lp["w2"] + lp["b2"]), lp["ln2"])
        return x

    x = np.random.default_rng(seed + 1).standard_normal((batch, seq, hidden)).astype(np.float32)
    return forward, (x,)


def bert_base(seq: int = 128, batch: int = 1, seed: int = 0) -> Tuple[Callable, Tuple[np.ndarray]]:
    """BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072."""
    return bert(12, 768, 12, 3072, seq, batch, seed)


def bert_tiny(seed: int = 0) -> Tuple[Callable, Tuple[np.ndarray]]:
    """Two layers, hidden 32, 2 heads, FFN 64, sequence 16 (for tests)."""
    return bert(2, 32, 2, 64, 16, 1, seed)
