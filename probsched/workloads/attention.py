"""Transpose + batch matmul (TBG), the attention-score pattern of a transformer layer.

>>> w = transpose_batch_matmul(1, 5, 2, 3)
>>> [b.name for b in w.func.blocks()], w.output_shapes
(['query_T', 'value_T', 'C'], ((1, 2, 5, 5),))
"""

from __future__ import annotations

import numpy as np

from ..te import compute, create_func, placeholder, reduce_axis
from ..te import sum as te_sum
from .workload import Workload, make_workload, positive_ints


def transpose_batch_matmul(batch: int, seq: int, heads: int, dim: int) -> Workload:
    """TBG: query and value (batch, seq, heads, dim), transposed in their own stages to
    query_T (batch, heads, seq, dim) and value_T (batch, heads, dim, seq), then
    ``C[b, h, i, j] = sum_k query_T[b, h, i, k] * value_T[b, h, k, j]``.

    FLOPs: ``2 * batch * heads * seq * seq * dim`` (the transposes move data).
    """
    positive_ints("transpose_batch_matmul", batch=batch, seq=seq, heads=heads, dim=dim)
    query = placeholder((batch, seq, heads, dim), name="query")
    value = placeholder((batch, seq, heads, dim), name="value")
    query_T = compute((batch, heads, seq, dim), lambda b, h, l, d: query[b, l, h, d], name="query_T")
    value_T = compute((batch, heads, dim, seq), lambda b, h, d, l: value[b, l, h, d], name="value_T")
    k = reduce_axis(dim, name="k")
    out = compute(
        (batch, heads, seq, seq),
        lambda b, h, i, j: te_sum(query_T[b, h, i, k] * value_T[b, h, k, j], axis=k),
        name="C",
    )

    def reference(q: np.ndarray, v: np.ndarray):
        return (np.einsum("bihk,bjhk->bhij", q.astype(np.float64), v.astype(np.float64)),)

    return make_workload(
        "transpose_batch_matmul", {"batch": batch, "seq": seq, "heads": heads, "dim": dim},
        create_func([query, value, out], name="transpose_batch_matmul"),
        flops=2 * batch * heads * seq * seq * dim, reference=reference, reduction_length=dim,
    )
