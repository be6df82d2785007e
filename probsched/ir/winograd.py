"""Winograd's minimal filtering F(m x m, 3 x 3): transform matrices, the weight transform,
and how much the algorithm amplifies rounding errors.

A 3x3 stride-1 convolution computes each ``m x m`` tile of its output from an
``alpha x alpha`` tile ``d`` of its input (``alpha = m + 2``) as
``Y = A^T [(G g G^T) (.) (B^T d B)] A``, ``g`` the 3x3 kernel and ``(.)`` the elementwise
product, summed over the input channels. The matrices come from the Cook-Toom construction
(Lavin and Gray, "Fast algorithms for convolutional neural networks", 2016): evaluate the
two polynomials at the points ``0, 1, -1, 2, -2, ...`` and at infinity, multiply, and
interpolate; the correlation is the transposed algorithm. They are built here from the
points in exact rational arithmetic (:func:`exact_matrices`), so every entry is the true
value and a test can check the identity.

:class:`WinogradKernel` is the weight transform ``U = G g G^T`` as a parameter transform
of the kind :mod:`probsched.ir.layout` records: a function that reads ``U`` in place of its
weight ``g`` (:func:`probsched.schedule.winograd.winograd`) still takes ``g`` from its
callers, and whoever binds the kernel computes ``U`` once (in float64, rounded once).

:func:`error_amplification` is the factor by which a Winograd program's float32 error
exceeds the direct convolution's (the check's tolerance, :mod:`probsched.workloads.workload`).

>>> at, g, bt = matrices(2)
>>> bt.shape, g.shape, at.shape
((4, 4), (4, 3), (2, 4))
>>> import numpy as np
>>> d, w = np.arange(4.0), np.array([1.0, 2.0, 3.0])
>>> at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid")
(array([ 8., 14.]), array([ 8., 14.]))
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from fractions import Fraction
from typing import List, Tuple

import numpy as np

from ..aligned import aligned_copy

#: Function attribute: ``((block, tile m, input channels), ...)`` of the convolutions a
#: function computes by Winograd's algorithm (what the check's tolerance reads).
WINOGRAD = "winograd"
#: The kernel size the transforms are for.
KERNEL = 3
#: The output tile sizes offered: F(2x2, 3x3) and F(4x4, 3x3). Larger tiles need points
#: like 1/2 whose transforms amplify rounding errors beyond what float32 checks can bound.
TILES = (2, 4)

Matrix = List[List[Fraction]]


def _points(m: int) -> List[Fraction]:
    """The ``m + 1`` finite interpolation points ``0, 1, -1, 2, -2, ...`` (and infinity)."""
    out = [Fraction(0)]
    k = 1
    while len(out) < m + KERNEL - 2:
        out += [Fraction(k), Fraction(-k)]
        k += 1
    return out[: m + KERNEL - 2]


def _poly_times(a: List[Fraction], b: List[Fraction]) -> List[Fraction]:
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


@functools.lru_cache(maxsize=None)
def exact_matrices(m: int) -> Tuple[Matrix, Matrix, Matrix]:
    """``(A^T, G, B^T)`` of F(m, 3) as exact fractions: ``A^T`` is ``m x alpha``, ``G``
    ``alpha x 3``, ``B^T`` ``alpha x alpha``.

    ``A^T[i][k] = p_k^i`` evaluates the output polynomial at the points (the last column
    is the point at infinity: its leading coefficient); ``G[k] = (1, p_k, p_k^2) / N_k``
    with ``N_k = prod_{l != k} (p_k - p_l)`` evaluates the kernel, the Lagrange weights
    folded in; row ``k`` of ``B^T`` holds the coefficients of ``prod_{l != k} (x - p_l)``
    (of ``prod_l (x - p_l)`` for infinity): the interpolation, transposed.

    >>> [[str(x) for x in row] for row in exact_matrices(2)[1]]
    [['-1', '0', '0'], ['1/2', '1/2', '1/2'], ['1/2', '-1/2', '1/2'], ['0', '0', '1']]
    """
    if m not in TILES:
        raise ValueError(f"Winograd F({m}x{m}, 3x3): the output tile must be one of {TILES}")
    pts = _points(m)
    alpha = m + KERNEL - 1
    at = [[p**i for p in pts] + [Fraction(int(i == m - 1))] for i in range(m)]
    g = []
    for k, p in enumerate(pts):
        norm = Fraction(1)
        for l, q in enumerate(pts):
            if l != k:
                norm *= p - q
        g.append([p**j / norm for j in range(KERNEL)])
    g.append([Fraction(0)] * (KERNEL - 1) + [Fraction(1)])
    bt = []
    for k in range(len(pts) + 1):
        poly = [Fraction(1)]
        for l, q in enumerate(pts):
            if l != k:
                poly = _poly_times(poly, [-q, Fraction(1)])
        bt.append(poly + [Fraction(0)] * (alpha - len(poly)))
    return at, g, bt


@functools.lru_cache(maxsize=None)
def matrices(m: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`exact_matrices` as float64 arrays (read only)."""
    out = []
    for mat in exact_matrices(m):
        a = np.array([[float(x) for x in row] for row in mat])
        a.setflags(write=False)
        out.append(a)
    return tuple(out)  # type: ignore[return-value]


def error_amplification(m: int) -> float:
    """How much larger a float32 F(m x m, 3x3) result's rounding error grows than the direct
    convolution's, for the same inputs (at least 1: a direct program's bound is kept).

    The direct convolution rounds a chain of ``9 C`` multiply-adds of terms of size ``s``;
    the rounding error grows like ``eps * 9 C * s`` (the workloads' tolerance rule). Winograd
    rounds a chain of ``C`` products ``U V`` per transformed position ``(k, l)``; with
    entries of independent random sign, ``V = B^T d B`` has the size ``|B_k| |B_l| s_d``
    (``|B_k|`` the 2-norm of row ``k`` of ``B^T``) and ``U`` the size ``|G_k| |G_l| s_g``.
    The output transform adds the positions' errors weighted by ``A^T[i, k] A^T[j, l]``, so
    output ``(i, j)``'s error grows like ``eps * C * s * rho_i * rho_j``, where
    ``rho_i^2 = sum_k (A^T[i, k] |B_k| |G_k|)^2``. The ratio to the direct error is
    ``max_i rho_i^2 / 9``: 0.56 for F(2x2, 3x3), whose error stays at the direct one's
    (shorter chains), and 10.5 for F(4x4, 3x3), whose transform entries reach 8.

    >>> [round(error_amplification(m), 2) for m in TILES]
    [1.0, 10.48]
    """
    at, g, bt = matrices(m)
    row = np.linalg.norm(bt, axis=1) * np.linalg.norm(g, axis=1)
    rho2 = ((at * row) ** 2).sum(axis=1)
    return max(1.0, float(rho2.max()) / KERNEL**2)


@dataclass(frozen=True)
class WinogradKernel:
    """The transform of a ``(3, 3, CI, CO)`` weight ``g`` (HWIO) to the
    ``(alpha, alpha, CI, CO)`` array ``U[k, l] = sum_ab G[k, a] G[l, b] g[a, b]`` of
    F(``tile`` x ``tile``, 3x3): a parameter transform (see :mod:`probsched.ir.layout`).

    >>> t = WinogradKernel((3, 3, 2, 5), 2)
    >>> t.physical_shape
    (4, 4, 2, 5)
    >>> u = t.apply(np.ones((3, 3, 2, 5), np.float32))
    >>> u.dtype, float(u[1, 1, 0, 0])     # (1/2 + 1/2 + 1/2)^2
    (dtype('float32'), 2.25)
    >>> WinogradKernel.from_json(t.to_json()) == t
    True
    """

    shape: Tuple[int, ...]
    tile: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "tile", int(self.tile))
        if len(self.shape) != 4 or self.shape[:2] != (KERNEL, KERNEL):
            raise ValueError(f"WinogradKernel: a (3, 3, CI, CO) weight is transformed, not one of shape {self.shape}")
        exact_matrices(self.tile)  # checks the tile

    @property
    def alpha(self) -> int:
        """The transformed tile's side, ``tile + 2``."""
        return self.tile + KERNEL - 1

    @property
    def physical_shape(self) -> Tuple[int, ...]:
        """The transformed array's shape ``(alpha, alpha, CI, CO)``."""
        return (self.alpha, self.alpha) + self.shape[2:]

    def apply(self, array: np.ndarray) -> np.ndarray:
        """``U`` of the weight ``array``: computed in float64, rounded once to its dtype."""
        a = np.asarray(array)
        if a.shape != self.shape:
            raise ValueError(f"WinogradKernel.apply: array of shape {a.shape}, the transform is of {self.shape}")
        _, g, _ = matrices(self.tile)
        # G a G^T as two small matrix products over the flattened channels (einsum's
        # contraction order for this runs several times slower on ResNet's weights)
        flat = a.astype(np.float64).reshape(KERNEL, KERNEL, -1)
        left = np.tensordot(g, flat, axes=(1, 0))  # (alpha, 3, CI*CO)
        u = np.matmul(g, left)  # per row k: G @ left[k], (alpha, alpha, CI*CO)
        return aligned_copy(u.reshape(self.physical_shape).astype(a.dtype))

    def to_json(self) -> str:
        """JSON text (what the function attribute stores)."""
        return json.dumps({"kind": "winograd_kernel", "shape": self.shape, "tile": self.tile})

    @staticmethod
    def from_json(text: str) -> "WinogradKernel":
        """Rebuild the transform from :meth:`to_json` text."""
        d = json.loads(text)
        return WinogradKernel(tuple(d["shape"]), d["tile"])


__all__ = ["WINOGRAD", "KERNEL", "TILES", "exact_matrices", "matrices", "error_amplification", "WinogradKernel"]
