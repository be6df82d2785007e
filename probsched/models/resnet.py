"""ResNet (He et al. 2016) with bottleneck blocks, NHWC, inference form.

``resnet50()`` is ResNet-50 v1.5 (the stride on the 3x3 convolution) on a 224x224 image:
about 8 GFLOP (4.1 G multiply-adds) per image. ``resnet_tiny()`` is the same code with two
narrow stages on a 32x32 image, for tests.

>>> import numpy as np
>>> fn, (x,) = resnet_tiny()
>>> fn(x).shape
(1, 10)
"""

from __future__ import annotations

from typing import Callable, Sequence, Tuple

import numpy as np

from .layers import Params, batch_norm, conv2d, max_pool


def resnet(
    blocks: Sequence[int] = (3, 4, 6, 3),
    widths: Sequence[int] = (64, 128, 256, 512),
    image: int = 224,
    classes: int = 1000,
    batch: int = 1,
    stem: int = 64,
    expansion: int = 4,
    seed: int = 0,
) -> Tuple[Callable, Tuple[np.ndarray]]:
    """``(fn, (x,))``: a bottleneck ResNet and an example image batch (NHWC)."""
    import jax
    import jax.numpy as jnp

    p = Params(seed)
    stem_w, stem_bn = p.conv(7, 7, 3, stem), p.batch_norm(stem)
    layers = []
    ci = stem
    for stage, (n, width) in enumerate(zip(blocks, widths)):
        for b in range(n):
            stride = 2 if b == 0 and stage > 0 else 1
            co = width * expansion
            blk = {
                "stride": stride,
                "w1": p.conv(1, 1, ci, width), "bn1": p.batch_norm(width),
                "w2": p.conv(3, 3, width, width), "bn2": p.batch_norm(width),
                "w3": p.conv(1, 1, width, co), "bn3": p.batch_norm(co),
            }
            if stride != 1 or ci != co:
                blk["wd"], blk["bnd"] = p.conv(1, 1, ci, co), p.batch_norm(co)
            layers.append(blk)
            ci = co
    fc_w, fc_b = p.dense(ci, classes), p.bias(classes)

    def forward(x):
        y = jax.nn.relu(batch_norm(conv2d(x, stem_w, 2), stem_bn))
        y = max_pool(y, 3, 2)
        for blk in layers:
            s = blk["stride"]
            h = jax.nn.relu(batch_norm(conv2d(y, blk["w1"]), blk["bn1"]))
            h = jax.nn.relu(batch_norm(conv2d(h, blk["w2"], s), blk["bn2"]))
            h = batch_norm(conv2d(h, blk["w3"]), blk["bn3"])
            short = batch_norm(conv2d(y, blk["wd"], s), blk["bnd"]) if "wd" in blk else y
            y = jax.nn.relu(h + short)
        y = jnp.mean(y, axis=(1, 2))
        return y @ fc_w + fc_b

    x = np.random.default_rng(seed + 1).standard_normal((batch, image, image, 3)).astype(np.float32)
    return forward, (x,)


def resnet50(batch: int = 1, image: int = 224, seed: int = 0) -> Tuple[Callable, Tuple[np.ndarray]]:
    """ResNet-50: bottleneck blocks (3, 4, 6, 3), 1000 classes."""
    return resnet((3, 4, 6, 3), (64, 128, 256, 512), image, 1000, batch, seed=seed)


def resnet_tiny(seed: int = 0) -> Tuple[Callable, Tuple[np.ndarray]]:
    """A two-stage bottleneck ResNet on 32x32 images, 10 classes (for tests)."""
    return resnet((1, 1), (8, 16), 32, 10, 1, stem=8, seed=seed)
