"""Vectorised numpy references for the convolutions, computed in float64.

They share nothing with the tensor expressions they check: windows come from
``sliding_window_view`` and contractions from BLAS, chunked so that the im2col matrix of a
large layer (C3D-0 would need ~0.8 GB at once) stays under :data:`CHUNK_BYTES`.

>>> x = np.arange(5, dtype="float32").reshape(1, 5, 1)
>>> w = np.ones((3, 1, 1), dtype="float32")
>>> conv_nd(x, w, stride=1, pad=1)[0, :, 0]
array([1., 3., 6., 9., 7.])
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

CHUNK_BYTES = 64 << 20


def pad_spatial(x: np.ndarray, pad: int, n_spatial: int) -> np.ndarray:
    """``x`` (N, *spatial, ...) as float64, zero-padded by ``pad`` in the spatial axes."""
    widths = [(0, 0)] + [(pad, pad)] * n_spatial + [(0, 0)] * (x.ndim - 1 - n_spatial)
    return np.pad(x.astype(np.float64), widths)


def windows(xp: np.ndarray, kernel: Sequence[int], stride: int, dilation: int) -> np.ndarray:
    """View of the conv windows of padded ``xp`` (N, *S, *rest): shape (N, *O, *rest, *K)."""
    nsp = len(kernel)
    span = [dilation * (k - 1) + 1 for k in kernel]
    v = sliding_window_view(xp, span, axis=tuple(range(1, 1 + nsp)))
    n_rest = xp.ndim - 1 - nsp
    sl = (slice(None),) + (slice(None, None, stride),) * nsp + (slice(None),) * n_rest
    return v[sl + (slice(None, None, dilation),) * nsp]


def conv_nd(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int = 1, groups: int = 1) -> np.ndarray:
    """Channels-last N-d convolution: x (N, *S, CI), w (*K, CI/groups, CO) -> (N, *O, CO) float64."""
    nsp = x.ndim - 2
    xp = pad_spatial(x, pad, nsp)
    ci_g, co = w.shape[nsp], w.shape[-1]
    co_g = co // groups
    w64 = w.astype(np.float64)
    parts = [
        _conv_dense(xp[..., g * ci_g : (g + 1) * ci_g], w64[..., g * co_g : (g + 1) * co_g], stride, dilation)
        for g in range(groups)
    ]
    return parts[0] if groups == 1 else np.concatenate(parts, axis=-1)


def _conv_dense(xp: np.ndarray, w: np.ndarray, stride: int, dilation: int) -> np.ndarray:
    nsp = xp.ndim - 2
    win = windows(xp, w.shape[:nsp], stride, dilation)  # (N, *O, CI, *K)
    co = w.shape[-1]
    # Window axes are (CI, *K); order the weight the same way for one matrix product.
    wmat = np.moveaxis(w, nsp, 0).reshape(-1, co)
    n, out_sp = win.shape[0], win.shape[1 : 1 + nsp]
    out = np.empty((n,) + tuple(out_sp) + (co,))
    row_bytes = wmat.shape[0] * 8 * n * int(np.prod(out_sp[1:], dtype=np.int64))
    step = max(1, CHUNK_BYTES // max(1, row_bytes))
    for lo in range(0, out_sp[0], step):
        chunk = win[:, lo : lo + step]
        out[:, lo : lo + step] = (chunk.reshape(-1, wmat.shape[0]) @ wmat).reshape(chunk.shape[: 1 + nsp] + (co,))
    return out


def depthwise_conv2d(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """x (N, H, W, C), w (k, k, C) -> (N, Ho, Wo, C) float64."""
    win = windows(pad_spatial(x, pad, 2), w.shape[:2], stride, 1)  # (N, Ho, Wo, C, k, k)
    return np.einsum("nhwcij,ijc->nhwc", win, w.astype(np.float64), optimize=True)


def conv2d_transpose(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Transposed conv by its scatter definition: ``out[i*s + r - pad] += x[i] * w[r]``.

    x (N, H, W, CI), w (k, k, CI, CO) -> (N, (H-1)s - 2pad + k, (W-1)s - 2pad + k, CO).
    """
    n, h, wd, _ = x.shape
    k, co = w.shape[0], w.shape[-1]
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    full = np.zeros((n, (h - 1) * stride + k, (wd - 1) * stride + k, co))
    for rh in range(k):
        for rw in range(w.shape[1]):
            rows = slice(rh, rh + (h - 1) * stride + 1, stride)
            cols = slice(rw, rw + (wd - 1) * stride + 1, stride)
            full[:, rows, cols] += x64 @ w64[rh, rw]
    ho, wo = (h - 1) * stride - 2 * pad + k, (wd - 1) * stride - 2 * pad + w.shape[1]
    return full[:, pad : pad + ho, pad : pad + wo]


def conv2d_capsule(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """x (N, H, W, cap, cap, CI), w (k, k, cap, cap, CI, CO) -> (N, Ho, Wo, cap, cap, CO)."""
    win = windows(pad_spatial(x, pad, 2), w.shape[:2], stride, 1)  # (N, Ho, Wo, i, ck, rc, rh, rw)
    return np.einsum("nhwikcab,abkjco->nhwijo", win, w.astype(np.float64), optimize=True)

