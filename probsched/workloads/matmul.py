"""Matrix multiplication (GMM): ``Z[b, i, j] = sum_k X[b, i, k] * Y[b, k, j]``.

>>> w = matmul(4, 3, 5, batch=2)
>>> print(w.func)  # doctest: +ELLIPSIS
def matmul(X: float32[2, 4, 5], Y: float32[2, 5, 3], Z: float32[2, 4, 3]):
    for b in range(2):
        for i in range(4):
            for j in range(3):
                for k in range(5):
                    with block("Z", ...):
                        init: Z[v_b, v_i, v_j] = 0.0
                        Z[v_b, v_i, v_j] = Z[v_b, v_i, v_j] + X[v_b, v_i, v_k] * Y[v_b, v_k, v_j]
>>> w.flops == 2 * 2 * 4 * 3 * 5
True
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..te import compute, create_func, placeholder, reduce_axis
from ..te import sum as te_sum
from .workload import Workload, make_workload, positive_ints


def matmul(n: int, m: int, k: int, batch: Optional[int] = 1) -> Workload:
    """(Batched) matmul: X (batch, n, k) times Y (batch, k, m) is Z (batch, n, m).

    ``batch=None`` drops the batch axis (X (n, k), Y (k, m)). FLOPs: ``2 * batch * n * m * k``.
    """
    positive_ints("matmul", n=n, m=m, k=k)
    if batch is not None:
        positive_ints("matmul", batch=batch)
    lead = () if batch is None else (batch,)
    X = placeholder(lead + (n, k), name="X")
    Y = placeholder(lead + (k, m), name="Y")
    rk = reduce_axis(k, name="k")
    if batch is None:
        Z = compute((n, m), lambda i, j: te_sum(X[i, rk] * Y[rk, j], axis=rk), name="Z")
    else:
        Z = compute((batch, n, m), lambda b, i, j: te_sum(X[b, i, rk] * Y[b, rk, j], axis=rk), name="Z")

    def reference(x: np.ndarray, y: np.ndarray):
        return (np.matmul(x.astype(np.float64), y.astype(np.float64)),)

    return make_workload(
        "matmul",
        {"n": n, "m": m, "k": k, "batch": batch},
        create_func([X, Y, Z], name="matmul"),
        flops=2 * (batch or 1) * n * m * k,
        reference=reference,
        reduction_length=k,
    )
