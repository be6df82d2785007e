"""Reductions over whole rows or matrices: the 2-norm (NRM) and row softmax (SFM).

>>> w = softmax(4, 7)
>>> [b.name for b in w.func.blocks()]
['T_softmax_maxelem', 'T_softmax_exp', 'T_softmax_expsum', 'T_softmax_norm']
>>> import numpy as np
>>> (a,) = w.random_inputs(0)
>>> bool(np.allclose(w.reference(a)[0].sum(axis=1), 1.0))
True
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import exp, sqrt
from ..te import compute, create_func, placeholder, reduce_axis
from ..te import max as te_max
from ..te import sum as te_sum
from .workload import RTOL, Workload, make_workload, positive_ints, signed_uniform


def norm(b: int, m: int, n: int) -> Workload:
    """NRM: ``l2_norm[b] = sqrt(sum_sq[b])``, ``sum_sq[b] = sum_{i,j} A[b, i, j]^2``, A (b, m, n).

    FLOPs: ``2 * b * m * n`` (square and add) + ``b`` (sqrt). Tolerance: the L = m*n
    squares are all positive, so float32 rounding errors drift instead of cancelling (the
    worst-case relative bound is L * 2**-24; a plain sequential loop is off by 6e-4 at
    NRM-3's L = 4M): rtol = max(1e-4, L * 2**-24 / 32), 7.8e-3 for NRM-3, 1e-4 for small L.
    """
    positive_ints("norm", b=b, m=m, n=n)
    A = placeholder((b, m, n), name="A")
    i, j = reduce_axis(m, name="i"), reduce_axis(n, name="j")
    sum_sq = compute((b,), lambda bb: te_sum(A[bb, i, j] * A[bb, i, j], axis=[i, j]), name="sum_sq")
    out = compute((b,), lambda bb: sqrt(sum_sq[bb]), name="l2_norm")

    def reference(a: np.ndarray):
        a64 = a.astype(np.float64)
        return (np.sqrt(np.einsum("bij,bij->b", a64, a64)),)

    return make_workload(
        "norm", {"b": b, "m": m, "n": n}, create_func([A, out], name="l2_norm"),
        flops=2 * b * m * n + b, reference=reference, reduction_length=m * n,
        rtol=max(RTOL, m * n * 2.0**-24 / 32),
    )


def softmax(m: int, n: int) -> Workload:
    """SFM: softmax of each row of A (m, n) in four stages (TVM's topi form and names).

    ``maxelem[i] = max_k A[i, k]``; ``exp[i, j] = exp(A[i, j] - maxelem[i])``;
    ``expsum[i] = sum_k exp[i, k]``; ``norm[i, j] = exp[i, j] / expsum[i]`` (each
    ``T_softmax_<stage>``).
    FLOPs: ``5 * m * n`` (compare; subtract and exp; add; divide). Inputs: ``|x|`` in
    [0.05, 4] with random sign. Outputs are of order ``1/n``, so atol is 1e-6 (not scaled
    up with n as for unnormalised sums); rtol 1e-4 does the work.
    """
    positive_ints("softmax", m=m, n=n)
    A = placeholder((m, n), name="A")
    k1, k2 = reduce_axis(n, name="k"), reduce_axis(n, name="k")
    maxelem = compute((m,), lambda i: te_max(A[i, k1], axis=k1), name="T_softmax_maxelem")
    ex = compute((m, n), lambda i, j: exp(A[i, j] - maxelem[i]), name="T_softmax_exp")
    expsum = compute((m,), lambda i: te_sum(ex[i, k2], axis=k2), name="T_softmax_expsum")
    out = compute((m, n), lambda i, j: ex[i, j] / expsum[i], name="T_softmax_norm")

    def reference(a: np.ndarray):
        a64 = a.astype(np.float64)
        e = np.exp(a64 - a64.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True),)

    return make_workload(
        "softmax", {"m": m, "n": n}, create_func([A, out], name="T_softmax_norm"),
        flops=5 * m * n, reference=reference, reduction_length=n,
        samplers={"A": signed_uniform(0.05, 4.0)}, atol=1e-6,
    )
