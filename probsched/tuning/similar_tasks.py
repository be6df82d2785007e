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

A *twin* is closer still: the same function but for the constants its blocks compute with
(:func:`twin_key`), such as a layer whose epilogue holds a calibrated scale as a constant
(the first convolution of a network quantized by ``ps.quantize`` changes key with the
calibration inputs; layers whose scales are tensors do not). A twin's record replays its
program onto the task exactly, so ``ps.compile`` takes a twin's records for a task with none
of its own anywhere, and a search measures them first (:func:`twin_records`).

>>> import probsched as ps
>>> a, b = ps.workloads.get("C2D:1").func, ps.workloads.get("C2D:2").func
>>> shape_distance(a, b) > 0, shape_distance(a, a)
(True, 0.0)
>>> shape_distance(a, ps.workloads.get("GMM:1").func) is None
True
"""

from __future__ import annotations

import hashlib
import json
import math
import weakref
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from handlers.trace_struct import Trace

from ..ir.serialize import func_to_data
from ..ir.stmt import PrimFunc

if TYPE_CHECKING:
    from ..database import Database, TuningRecord

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


def twin_key(func: PrimFunc) -> str:
    """A digest of ``func`` blind to the constants its stores compute with (not to those of
    indices, loop extents, bindings or a select's condition, which shape the loop nest):
    equal for two functions whose programs differ only in such values.

    >>> import probsched as ps
    >>> def scaled(c):
    ...     A = ps.placeholder((8,), name="A")
    ...     return ps.create_func([A, ps.compute((8,), lambda i: A[i] * c + 1.0, name="B")])
    >>> twin_key(scaled(0.5)) == twin_key(scaled(0.25)), scaled(0.5).structural_hash() == scaled(0.25).structural_hash()
    (True, False)
    """
    data = _blind_stores(func_to_data(func))
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _blind_stores(x: Any) -> Any:
    """Encoded statements (:mod:`probsched.ir.serialize`) with their stores' values blind to constants."""
    if isinstance(x, dict):
        return {k: (_blind_value(v) if k == "value" and "store" in x else _blind_stores(v)) for k, v in x.items()}
    if isinstance(x, list):
        return [_blind_stores(y) for y in x]
    return x


def _blind_value(e: Any) -> Any:
    """An encoded expression with its constants' values dropped, except under loads (indices)
    and in a select's condition."""
    if not isinstance(e, list) or not e:
        return e
    tag = e[0]
    if tag == "const":
        return ["const", None, e[2]]
    if tag == "load":
        return e
    if tag == "select":
        return ["select", e[1]] + [_blind_value(y) for y in e[2:]]
    return [_blind_value(y) for y in e]


#: per database: the hashes of its workloads indexed so far, and twin key -> those hashes
_TWIN_INDEX: "weakref.WeakKeyDictionary[Database, Tuple[set, Dict[str, List[str]]]]" = weakref.WeakKeyDictionary()


def twin_workloads(db: "Database", func: PrimFunc, key: str) -> List[str]:
    """Hashes of the workloads stored in ``db`` that are twins of ``func`` (:func:`twin_key`),
    never ``func``'s own (``key``). Each stored function is read once per database (a tuning
    run's database gains one workload per task)."""
    indexed, index = _TWIN_INDEX.setdefault(db, (set(), {}))
    for w in db.workloads():
        if w.hash in indexed:
            continue
        indexed.add(w.hash)
        try:
            index.setdefault(twin_key(w.func), []).append(w.hash)
        except Exception:  # noqa: BLE001 - a function stored by another version: no twin
            continue
    return [h for h in index.get(twin_key(func), []) if h != key]


def twin_records(db: Optional["Database"], func: PrimFunc, key: str, k: int) -> List["TuningRecord"]:
    """The ``k`` fastest records of the twins of ``func`` (:func:`twin_workloads`) in ``db``."""
    if db is None:
        return []
    found = [r for h in twin_workloads(db, func, key) for r in db.best(h, k=k)]
    return sorted(found, key=lambda r: r.median)[:k]


def stored_function(db: "Database", key: str) -> Optional[PrimFunc]:
    """The function of workload ``key`` stored in ``db`` (None when it is not there)."""
    for w in db.workloads():
        if w.hash == key:
            return w.func
    return None


__all__ = ["twin_records", "stored_function", "similar_decisions", "best_decisions", "shape_distance", "structure", "twin_key", "twin_workloads"]
