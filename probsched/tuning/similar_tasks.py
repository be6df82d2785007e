"""What a new task learns from the tasks tuned before it: the decisions of similar tasks.

A network's tasks repeat operators at other shapes (ResNet-50's convolutions, BERT's
matmuls), and the database holds the best decisions found for each. A task with no records
of its own starts its search from the best decision traces of the most similar tasks
stored: the same function name and block structure (the same fused operators, so the same
sample sites), the nearest shapes first. The search replays each trace onto the new task
with ``replay(strict=False)``: a decision that fits the new shapes (a tile that divides the
new extent, a compute location that exists) is kept, the others are drawn from the prior;
the cost model then ranks them with everything else (:meth:`SearchContext.best_decisions
<probsched.search.candidate.SearchContext.best_decisions>` gives them after the task's own).

>>> import probsched as ps
>>> a, b = ps.workloads.get("C2D:1").func, ps.workloads.get("C2D:2").func
>>> shape_distance(a, b) > 0, shape_distance(a, a)
(True, 0.0)
>>> shape_distance(a, ps.workloads.get("GMM:1").func) is None
True
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, List, Optional

from handlers.trace_struct import Trace

from ..ir.stmt import PrimFunc

if TYPE_CHECKING:
    from ..database import Database

#: Similar tasks whose records a new task starts from, and their best records taken each.
SIMILAR_TASKS = 3
RECORDS_PER_TASK = 8


def structure(func: PrimFunc) -> tuple:
    """What must match for decisions to carry over: the name, and per block its name and
    iterator kinds (the sample sites are named by block and loop)."""
    return (func.name, tuple((b.name, tuple(it.kind for it in b.iters)) for b in func.blocks()))


def shape_distance(a: PrimFunc, b: PrimFunc) -> Optional[float]:
    """How far apart two functions of one structure are: the summed absolute log2 ratios of
    their parameters' extents; None when their structures differ."""
    if structure(a) != structure(b) or len(a.params) != len(b.params):
        return None
    total = 0.0
    for pa, pb in zip(a.params, b.params):
        if len(pa.shape) != len(pb.shape):
            return None
        total += sum(abs(math.log2(max(x, 1)) - math.log2(max(y, 1))) for x, y in zip(pa.shape, pb.shape))
    return total


def similar_decisions(db: "Database", func: PrimFunc, key: str) -> List[Trace]:
    """Decision traces of the best records of the stored tasks most similar to ``func``
    (never its own: ``key``), nearest first."""
    ranked = []
    for stored in db.workloads():
        if stored.hash == key:
            continue
        try:
            other = stored.func
        except Exception:  # noqa: BLE001 - a function stored by another version: not comparable
            continue
        d = shape_distance(func, other)
        if d is not None:
            ranked.append((d, stored.hash))
    return [t for _, h in sorted(ranked)[:SIMILAR_TASKS] for t in best_decisions(db, h, RECORDS_PER_TASK)]


def best_decisions(db: "Database", key: str, k: int) -> List[Trace]:
    """Decision traces of the ``k`` best records of workload ``key`` in ``db`` (fastest
    first; records without decisions, or written by another version, left out)."""
    return [d for d in (rec.decision_trace() for rec in db.best(key, k=k)) if d is not None]

__all__ = ["similar_decisions", "best_decisions", "shape_distance", "structure"]
