"""Postprocessors: run once after the rules (MetaSchedule's RewriteReductionBlock and
RewriteParallelVectorizeUnroll, applied directly instead of through annotations)."""

from __future__ import annotations

from typing import List, Optional, Sequence

from ..errors import ScheduleError
from ..ir.stmt import Loop
from ..schedule import BlockRV, LoopRV, Schedule
from ..schedule.distributions import PARALLEL, UNROLL
from ..schedule.tree import iter_blocks, iter_outer_blocks
from ..target import Target
from . import analysis as an


class RewriteReductionBlock:
    """Move each reduction's init out of its loops (before its outermost reduction loop), so
    no ``if k == 0`` runs in the inner loop. A tensorized tile keeps its init: the
    micro-kernel's zero-start variant performs it (see :mod:`probsched.schedule.tensorize`)."""

    def __call__(self, sch: Schedule) -> None:
        tiles = (an.block(sch, name) for name in sch.blocks())
        in_tiles = {b.name for t in tiles if t.annotation("tensorize") is not None for b in iter_blocks(t.body)}
        for name in sch.blocks():
            blk = an.block(sch, name)
            if blk.init is None or not blk.is_reduction or isinstance(blk.body, tuple) or name in in_tiles:
                continue
            loops = sch.get_loops(BlockRV(name))
            kinds = an.loop_kinds(sch, name)
            r_loops = [l for l in loops if kinds.get(l.name) == "R"]
            if not r_loops:
                continue
            # outer reduction tiles of extent 1 (a 3x3 kernel tiled (1, 3)) run once: the init
            # goes below them, inside the spatial tiles between, where a write cache of one
            # register tile can hold it (else the cache must span those tiles too)
            first_r = next((l for l in r_loops if sch.get(l).extent > 1), r_loops[0])
            try:
                sch.decompose_reduction(BlockRV(name), first_r)
            except ScheduleError:
                pass


class ParallelVectorizeUnroll:
    """For each root loop nest: fuse its outer data-parallel loops (up to a sampled number
    of jobs, site ``<block>/parallel``: none, ``cores``, ``4 * cores`` or
    ``max_jobs_per_core * cores``) and run them in parallel; vectorize each
    block's innermost loop when it is spatial and at most ``max_vectorize_extent`` long;
    sample an explicit-unroll budget from ``unroll_max_steps`` for the nest."""

    def __init__(
        self,
        max_jobs_per_core: int = 16,
        max_vectorize_extent: int = 64,
        unroll_max_steps: Sequence[int] = (0, 16, 64, 512),
        cores: int = 0,
        target: Optional["Target"] = None,
    ) -> None:
        self.max_jobs_per_core = max_jobs_per_core
        self.max_vectorize_extent = max_vectorize_extent
        self.unroll_max_steps = tuple(unroll_max_steps)
        self.cores = cores or Target.parse(target).threads

    def __call__(self, sch: Schedule) -> None:
        limit = self.max_jobs_per_core * self.cores
        for root in [s for s in sch.mod.body if isinstance(s, Loop)]:
            # a blockized tile is one block here: its inner loops are the micro-kernel's
            blocks = [b.name for b in iter_outer_blocks(root)]
            if not blocks:
                continue
            # how many parallel jobs (MetaSchedule mutates this extent): 0 keeps the nest
            # serial, which wins for small nests (a parallel region costs microseconds to start)
            cores = self.cores
            choices = [0, cores, 4 * cores, limit]
            jobs = sch.sample_categorical(choices, [0.1, 0.2, 0.2, 0.5], name=f"{blocks[0]}/parallel", tag=PARALLEL)
            outer = self._parallelize(sch, root, jobs) if jobs else LoopRV(root.name)
            for name in blocks:
                if sch.has_block(name):
                    self._vectorize(sch, name)
            if len(self.unroll_max_steps) > 1 and outer is not None:
                step = sch.sample_categorical(list(self.unroll_max_steps), name=f"{blocks[0]}/unroll", tag=UNROLL)
                if step:
                    sch.annotate(outer, "pragma_auto_unroll_max_step", step)

    def _parallelize(self, sch: Schedule, root: Loop, limit: int):
        chain: List[Loop] = []
        s = root
        product = 1
        while isinstance(s, Loop) and s.kind == "serial":
            if chain and product > 1 and product * s.extent > limit:
                break  # (a first loop longer than the limit still runs in parallel)
            if not sch.can_set_kind(LoopRV(s.name), "parallel"):
                break
            chain.append(s)
            product *= s.extent
            if len(s.body) != 1 or not isinstance(s.body[0], Loop):
                break
            s = s.body[0]
        if not chain:
            return LoopRV(root.name)
        try:
            fused = sch.fuse(*[LoopRV(l.name) for l in chain]) if len(chain) > 1 else LoopRV(chain[0].name)
            if product > 1:
                sch.parallel(fused)
            return fused
        except ScheduleError:
            return LoopRV(root.name)

    def _vectorize(self, sch: Schedule, name: str) -> None:
        loops = sch.loops_of(name)
        if not loops or an.block(sch, name).annotation("tensorize") is not None:
            return
        inner = loops[-1]
        if (
            inner.kind != "serial"
            or inner.extent > self.max_vectorize_extent
            or inner.extent < 2
            or an.loop_kind(sch, name, LoopRV(inner.name)) != "S"
        ):
            return
        try:
            sch.vectorize(LoopRV(inner.name))
        except ScheduleError:
            pass
