"""MobileNet-V2 (Sandler et al. 2018), NHWC, inference form.

Inverted residual blocks: a 1x1 expansion, a 3x3 depthwise convolution and a 1x1
projection, batch norm after each, ReLU6 after the first two, a residual add when the shape
allows. ``mobilenet_v2()`` is width 1.0 on 224x224 (about 0.6 GFLOP);
``mobilenet_tiny()`` a narrow four-block version on 32x32 for tests.

>>> fn, (x,) = mobilenet_tiny()
>>> fn(x).shape
(1, 10)
"""

from __future__ import annotations

from typing import Callable, Sequence, Tuple

import numpy as np

from .layers import Params, batch_norm, conv2d

#: (expansion t, channels c, repeats n, stride s) of each stage, the paper's table 2.
V2_CONFIG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet(
    config: Sequence[Tuple[int, int, int, int]] = V2_CONFIG,
    image: int = 224,
    classes: int = 1000,
    batch: int = 1,
    stem: int = 32,
    last: int = 1280,
    seed: int = 0,
) -> Tuple[Callable, Tuple[np.ndarray]]:
    """``(fn, (x,))``: a MobileNet-V2 and an example image batch (NHWC)."""
    import jax.numpy as jnp

    p = Params(seed)
    stem_w, stem_bn = p.conv(3, 3, 3, stem), p.batch_norm(stem)
    blocks = []
    ci = stem
    for t, c, n, s in config:
        for i in range(n):
            hidden = ci * t
            blk = {"stride": s if i == 0 else 1, "residual": (s if i == 0 else 1) == 1 and ci == c}
            if t != 1:
                blk["we"], blk["bne"] = p.conv(1, 1, ci, hidden), p.batch_norm(hidden)
            blk["wd"], blk["bnd"] = p.conv(3, 3, 1, hidden), p.batch_norm(hidden)
            blk["wp"], blk["bnp"] = p.conv(1, 1, hidden, c), p.batch_norm(c)
            blocks.append(blk)
            ci = c
    last_w, last_bn = p.conv(1, 1, ci, last), p.batch_norm(last)
    fc_w, fc_b = p.dense(last, classes), p.bias(classes)

    def relu6(x):
        return jnp.clip(x, 0.0, 6.0)

    def forward(x):
        y = relu6(batch_norm(conv2d(x, stem_w, 2), stem_bn))
        for blk in blocks:
            h = y
            if "we" in blk:
                h = relu6(batch_norm(conv2d(h, blk["we"]), blk["bne"]))
            h = relu6(batch_norm(conv2d(h, blk["wd"], blk["stride"], groups=h.shape[-1]), blk["bnd"]))
            h = batch_norm(conv2d(h, blk["wp"]), blk["bnp"])
            y = y + h if blk["residual"] else h
        y = relu6(batch_norm(conv2d(y, last_w), last_bn))
        y = jnp.mean(y, axis=(1, 2))
        return y @ fc_w + fc_b

    x = np.random.default_rng(seed + 1).standard_normal((batch, image, image, 3)).astype(np.float32)
    return forward, (x,)


def mobilenet_v2(batch: int = 1, image: int = 224, seed: int = 0) -> Tuple[Callable, Tuple[np.ndarray]]:
    """MobileNet-V2, width multiplier 1.0, 1000 classes."""
    return mobilenet(V2_CONFIG, image, 1000, batch, seed=seed)


def mobilenet_tiny(seed: int = 0) -> Tuple[Callable, Tuple[np.ndarray]]:
    """Four inverted-residual blocks on 32x32 images, 10 classes (for tests)."""
    config = ((1, 8, 1, 1), (4, 12, 2, 2), (4, 16, 1, 2))
    return mobilenet(config, 32, 10, 1, stem=8, last=32, seed=seed)
