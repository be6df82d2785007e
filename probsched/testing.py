"""Random sequences of schedule primitives, for property tests of the correctness invariant.

:func:`random_schedule` applies ``steps`` random primitive calls to a schedule. Arguments
are drawn from the current program (its blocks, loops, extents), biased towards calls that
can succeed; a call whose precondition fails raises ``ScheduleError``, which must leave the
schedule unchanged, and the walk goes on. Every scheduled program must still compute what
the unscheduled one computes: that is what the suite checks with these walks.

``choose`` is any ``choose(options: list) -> element`` (hypothesis' ``data.draw`` of
``sampled_from`` or a numpy Generator), so the walks are reproducible and shrinkable.

>>> import numpy as np, probsched as ps
>>> w = ps.workloads.small("GMM")
>>> sch = ps.Schedule(w.func)
>>> log = random_schedule(sch, numpy_chooser(np.random.default_rng(0)), steps=6)
>>> len(log) == 6 and all(isinstance(entry, str) for entry in log)
True
"""

from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np

from .errors import ScheduleError
from .ir.stmt import Loop
from .schedule import BlockRV, LoopRV, Schedule
from .schedule.tree import TreeIndex

Chooser = Callable[[Sequence], object]

PRIMITIVES = (
    "split",
    "split",
    "split",
    "fuse",
    "reorder",
    "reorder",
    "parallel",
    "vectorize",
    "unroll",
    "compute_at",
    "reverse_compute_at",
    "compute_inline",
    "reverse_compute_inline",
    "cache_read",
    "cache_write",
    "rfactor",
    "decompose_reduction",
    "annotate",
    "transform_layout",
)


def numpy_chooser(rng: np.random.Generator) -> Chooser:
    """A ``choose`` function from a numpy Generator."""

    def choose(options: Sequence):
        options = list(options)
        return options[int(rng.integers(len(options)))]

    return choose


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _one_step(sch: Schedule, choose: Chooser, primitives: Sequence[str]) -> str:
    idx = TreeIndex.of(sch.mod)
    blocks = list(idx.blocks)
    loops = list(idx.loops)
    prim = choose(primitives)
    if not loops:
        return "no loops"
    blk = choose(blocks)
    blk_loops = [l.name for l in idx.loops_above(blk)] or loops
    loop = choose(blk_loops + [choose(loops)])
    node = idx.loop(loop)
    if prim == "split":
        n = choose([2, 2, 3])
        ext = node.extent
        opts = _divisors(ext) + [2, 3, 5, max(1, ext // 2 + 1)]
        factors: list = [choose(opts) for _ in range(n)]
        factors[choose(range(n))] = None
        sch.split(LoopRV(loop), factors)
    elif prim == "fuse":
        inner = node.body[0] if len(node.body) == 1 and isinstance(node.body[0], Loop) else None
        sch.fuse(LoopRV(loop), LoopRV(inner.name if inner is not None else choose(loops)))
    elif prim == "reorder":
        chain = blk_loops
        k = choose(range(2, max(3, len(chain) + 1)))
        picked = [choose(chain) for _ in range(k)]
        picked = list(dict.fromkeys(picked))
        perm = list(picked)
        for i in range(len(perm) - 1, 0, -1):  # Fisher-Yates with the chooser
            j = choose(range(i + 1))
            perm[i], perm[j] = perm[j], perm[i]
        sch.reorder(*[LoopRV(x) for x in perm])
    elif prim == "parallel":
        sch.parallel(LoopRV(loop))
    elif prim == "vectorize":
        sch.vectorize(LoopRV(loop))
    elif prim == "unroll":
        if node.extent > 16:
            return "unroll skipped (extent > 16)"
        sch.unroll(LoopRV(loop))
    elif prim == "compute_at":
        sch.compute_at(BlockRV(blk), LoopRV(choose(loops)))
    elif prim == "reverse_compute_at":
        sch.reverse_compute_at(BlockRV(blk), LoopRV(choose(loops)))
    elif prim == "compute_inline":
        sch.compute_inline(BlockRV(blk))
    elif prim == "reverse_compute_inline":
        sch.reverse_compute_inline(BlockRV(blk))
    elif prim == "cache_read":
        sch.cache_read(BlockRV(blk), choose([0, 0, 1]), choose(["local", "global"]))
    elif prim == "cache_write":
        sch.cache_write(BlockRV(blk), 0, choose(["local", "global"]))
    elif prim == "rfactor":
        sch.rfactor(LoopRV(loop), choose([0, -1]))
    elif prim == "decompose_reduction":
        sch.decompose_reduction(BlockRV(blk), LoopRV(loop))
    elif prim == "annotate":
        sch.annotate(LoopRV(loop), "pragma_auto_unroll_max_step", choose([0, 16, 64]))
    elif prim == "transform_layout":
        buf = choose(list(sch.mod.input_buffers()) + list(sch.mod.allocs) or list(sch.mod.params))
        splits = []
        for extent in buf.shape:
            f = choose(_divisors(extent))
            splits.append([extent // f, f] if f not in (1, extent) else [extent])
        pieces = list(range(sum(len(x) for x in splits)))
        for i in range(len(pieces) - 1, 0, -1):  # Fisher-Yates with the chooser
            j = choose(range(i + 1))
            pieces[i], pieces[j] = pieces[j], pieces[i]
        sch.transform_layout(buf.name, splits, pieces)
    return prim


def random_schedule(
    sch: Schedule, choose: Chooser, steps: int = 8, primitives: Sequence[str] = PRIMITIVES
) -> List[str]:
    """Apply ``steps`` random primitive calls; returns one line per call (what happened).

    ``primitives`` are the calls drawn from (repeat one to draw it more often): a walk
    aimed at a few primitives reaches their interactions in far fewer steps."""
    unknown = sorted(set(primitives) - set(PRIMITIVES))
    if unknown or not primitives:
        raise ValueError(f"random_schedule: primitives must be some of {sorted(set(PRIMITIVES))}, got {list(primitives)}")
    log = []
    for _ in range(steps):
        before = sch.mod
        try:
            what = _one_step(sch, choose, primitives)
            log.append(f"ok {what}")
        except ScheduleError as exc:
            if sch.mod is not before:
                raise AssertionError(f"a failed primitive changed the schedule: {exc}") from exc
            log.append(f"refused: {exc}")
    return log
