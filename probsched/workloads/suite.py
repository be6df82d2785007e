"""The paper's operator suite: 13 operators x 4 shape configurations (shared/WORKLOADS.md).

Each suite entry is named ``"<OP>:<index>"`` and its function ``"<OP>"``; ``params`` is the
configuration tuple of the table. :func:`small` gives a reduced shape of the same
structure (same stages, strides, padding, groups, dilation) for tests that interpret.

>>> names()[:4]
['C1D', 'C2D', 'C3D', 'GMM']
>>> w = get("GMM:2")
>>> w == get("GMM", 2), w.name, w.func.name, w.params, w.flops == 2 * 512 ** 3
(True, 'GMM:2', 'GMM', (1, 512, 512, 512), True)
>>> get("XYZ", 0)
Traceback (most recent call last):
...
ValueError: unknown workload 'XYZ'; the suite has C1D, C2D, C3D, GMM, GRP, DIL, DEP, T2D, CAP, NRM, SFM, CBR, TBG
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple, Union

from .attention import transpose_batch_matmul
from .conv import (
    conv1d_nwc,
    conv2d_bn_relu,
    conv2d_capsule_nhwc,
    conv2d_nhwc,
    conv2d_transpose_nhwc,
    conv3d_ndhwc,
    depthwise_conv2d_nhwc,
)
from .matmul import matmul
from .norm import norm, softmax
from ..precision import canonical
from .workload import Workload

Config = Tuple[int, ...]


@dataclass(frozen=True)
class SuiteEntry:
    """One operator of the suite: how a configuration tuple becomes a workload."""

    parameters: str
    build: Callable[..., Workload]
    configs: Tuple[Config, Config, Config, Config]
    small: Config


_SUITE: Dict[str, SuiteEntry] = {
    "C1D": SuiteEntry(
        "N, L, CI, CO, kernel, stride, pad",
        conv1d_nwc,
        ((1, 256, 64, 128, 3, 2, 1), (1, 128, 128, 256, 1, 2, 0), (1, 64, 256, 256, 5, 1, 2),
         (1, 32, 512, 512, 3, 1, 1)),
        (1, 9, 3, 4, 3, 2, 1),
    ),
    "C2D": SuiteEntry(
        "N, H, W, CI, CO, kernel, stride, pad",
        conv2d_nhwc,
        ((1, 224, 224, 3, 64, 7, 2, 3), (1, 56, 56, 64, 64, 1, 1, 0), (1, 14, 14, 256, 256, 3, 1, 1),
         (1, 7, 7, 512, 512, 3, 1, 1)),
        (1, 6, 7, 3, 5, 3, 2, 1),
    ),
    "C3D": SuiteEntry(
        "N, D, H, W, CI, CO, kernel, stride, pad",
        conv3d_ndhwc,
        ((1, 16, 224, 224, 3, 64, 7, 2, 3), (1, 16, 56, 56, 64, 64, 1, 1, 0), (1, 16, 14, 14, 256, 256, 3, 1, 1),
         (1, 16, 7, 7, 512, 512, 3, 1, 1)),
        (1, 4, 5, 6, 2, 3, 3, 2, 1),
    ),
    "GMM": SuiteEntry(
        "B, N, M, K",
        lambda b, n, m, k: matmul(n, m, k, batch=b),
        ((1, 128, 128, 128), (1, 512, 32, 512), (1, 512, 512, 512), (1, 1024, 1024, 1024)),
        (2, 4, 6, 5),
    ),
    "GRP": SuiteEntry(
        "N, H, W, CI, CO, kernel, stride, pad (dilation=1, groups=4)",
        lambda *c: conv2d_nhwc(*c, dilation=1, groups=4),
        ((1, 56, 56, 64, 128, 3, 2, 1), (1, 56, 56, 64, 64, 1, 1, 0), (1, 14, 14, 256, 256, 3, 1, 1),
         (1, 7, 7, 512, 512, 3, 1, 1)),
        (1, 6, 7, 8, 12, 3, 2, 1),
    ),
    "DIL": SuiteEntry(
        "N, H, W, CI, CO, kernel, stride, pad (dilation=2)",
        lambda *c: conv2d_nhwc(*c, dilation=2),
        ((1, 224, 224, 3, 64, 7, 2, 3), (1, 56, 56, 64, 64, 1, 1, 0), (1, 14, 14, 256, 256, 3, 1, 1),
         (1, 7, 7, 512, 512, 3, 1, 1)),
        (1, 8, 9, 3, 4, 3, 2, 1),
    ),
    "DEP": SuiteEntry(
        "N, H, W, C, kernel, stride, pad",
        depthwise_conv2d_nhwc,
        ((1, 112, 112, 32, 3, 1, 1), (1, 112, 112, 64, 3, 2, 1), (1, 14, 14, 512, 3, 2, 1), (1, 7, 7, 1024, 3, 1, 1)),
        (1, 6, 7, 4, 3, 2, 1),
    ),
    "T2D": SuiteEntry(
        "N, H, W, CI, CO, kernel, stride, pad",
        conv2d_transpose_nhwc,
        ((1, 4, 4, 512, 256, 4, 2, 1), (1, 8, 8, 256, 128, 4, 2, 1), (1, 16, 16, 128, 64, 4, 2, 1),
         (1, 32, 32, 64, 3, 4, 2, 1)),
        (1, 3, 4, 4, 3, 4, 2, 1),
    ),
    "CAP": SuiteEntry(
        "N, H, W, CI, CO, kernel, stride, pad (capsule=4)",
        lambda *c: conv2d_capsule_nhwc(*c, capsule=4),
        ((1, 16, 16, 32, 32, 3, 2, 1), (1, 8, 8, 32, 32, 3, 1, 1), (1, 16, 16, 8, 16, 3, 2, 1),
         (1, 8, 8, 16, 16, 3, 1, 1)),
        (1, 3, 4, 2, 3, 3, 2, 1),
    ),
    "NRM": SuiteEntry(
        "B, M, N",
        norm,
        ((1, 256, 256), (1, 512, 512), (1, 1024, 1024), (1, 4096, 1024)),
        (2, 4, 5),
    ),
    "SFM": SuiteEntry(
        "M, N",
        softmax,
        ((256, 256), (512, 512), (1024, 1024), (2048, 2048)),
        (4, 7),
    ),
    "CBR": SuiteEntry(
        "N, H, W, CI, CO, kernel, stride, pad",
        conv2d_bn_relu,
        ((1, 224, 224, 3, 64, 7, 2, 3), (1, 56, 56, 64, 128, 3, 2, 1), (1, 28, 28, 128, 256, 1, 2, 0),
         (1, 7, 7, 512, 512, 3, 1, 1)),
        (1, 6, 7, 3, 4, 3, 2, 1),
    ),
    "TBG": SuiteEntry(
        "batch, seq, heads, dim",
        transpose_batch_matmul,
        ((1, 128, 12, 64), (1, 128, 16, 64), (1, 64, 12, 128), (1, 128, 12, 128)),
        (2, 5, 3, 4),
    ),
}


def names() -> List[str]:
    """The 13 operator names, in the order of the paper's table."""
    return list(_SUITE)


def _entry(name: str) -> SuiteEntry:
    try:
        return _SUITE[name.upper()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown workload {name!r}; the suite has {', '.join(_SUITE)}") from None


def entry(name: str) -> SuiteEntry:
    """The suite entry of operator ``name`` (its parameter names, configurations, small shape)."""
    return _entry(name)


def configs(name: str) -> Tuple[Config, ...]:
    """The four configuration tuples of operator ``name``.

    >>> configs("SFM")
    ((256, 256), (512, 512), (1024, 1024), (2048, 2048))
    """
    return _entry(name).configs


def get(name: str, index: Optional[Union[int, str]] = None, precision: Optional[str] = None) -> Workload:
    """Suite workload ``get("GMM", 2)`` or ``get("GMM:2")`` (index 0..3); ``precision="bf16"``
    (or the name ``"GMM:2:bf16"``) its bfloat16 version (:meth:`Workload.with_precision`).

    >>> w = get("GMM:2:bf16")
    >>> w.name, w == get("GMM", 2, precision="bfloat16"), w.func.params[0].dtype
    ('GMM:2:bf16', True, 'bfloat16')
    """
    if index is None:
        if not isinstance(name, str) or ":" not in name:
            raise ValueError(f"workload {name!r}: give a configuration index, e.g. get('GMM', 2) or get('GMM:2')")
        name, _, index = name.partition(":")
        index, _, suffix = index.partition(":")
        if suffix:
            precision = _suffix_precision(name, index, suffix, precision)
    e = _entry(name)
    op = name.upper()
    idx = _index(op, e, index)
    return e.build(*e.configs[idx]).renamed(f"{op}:{idx}", op, e.configs[idx]).with_precision(precision or "float32")


def _suffix_precision(name: str, index: str, suffix: str, precision: Optional[str]) -> str:
    """The precision a ``"GMM:2:bf16"`` suffix names (it must agree with ``precision=``)."""
    named = canonical(suffix)
    if precision is not None and canonical(precision) != named:
        raise ValueError(f"workload {name}:{index}:{suffix} with precision={precision!r}: they disagree")
    return named


def _index(op: str, e: SuiteEntry, index: Union[int, str]) -> int:
    choices = "; ".join(f"{i}: {c}" for i, c in enumerate(e.configs))
    try:
        if isinstance(index, bool):
            raise ValueError
        idx = int(index)
        if isinstance(index, float) and idx != index:
            raise ValueError
    except (TypeError, ValueError):
        idx = -1
    if not 0 <= idx < len(e.configs):
        raise ValueError(f"{op} has no configuration {index!r}; configurations ({e.parameters}) are {choices}")
    return idx


def small(name: str, precision: str = "float32") -> Workload:
    """A reduced-shape version of operator ``name`` with the same stages (named ``"<OP>:small"``).

    >>> small("C2D").params, small("C2D", "bf16").name
    ((1, 6, 7, 3, 5, 3, 2, 1), 'C2D:small:bf16')
    """
    e = _entry(name)
    op = name.upper()
    return e.build(*e.small).renamed(f"{op}:small", op, e.small).with_precision(precision)


def suite() -> List[Workload]:
    """All 52 suite workloads, operator by operator."""
    return [get(n, i) for n in _SUITE for i in range(len(_SUITE[n].configs))]
