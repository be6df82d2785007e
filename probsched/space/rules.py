"""MetaSchedule's CPU schedule rules, as small callables ``rule(sch, block)``.

Each samples what it cannot decide (tile sizes, where to cache, rfactor or not) through the
schedule's sampling instructions, so the decisions are ``sample`` sites named after the
block (``C/i/tile``, ``C/write_cache``, ``C/rfactor``, ``pad/compute_at``). A rule that
does not apply to a block leaves it alone; a primitive a rule tries that the program refuses
(ScheduleError) leaves the schedule unchanged and the rule moves on.
"""

from __future__ import annotations

from typing import Dict, List

from ..errors import ScheduleError
from ..schedule import BlockRV, LoopRV, Schedule
from . import analysis as an


class AutoInline:
    """Inline elementwise producers into their consumers (padding excluded, as in TVM's CPU
    defaults: a conditional in the consumer's inner loop costs more than a separate stage)."""

    def __init__(self, inline_if_then_else: bool = False) -> None:
        self.inline_if_then_else = inline_if_then_else

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        if not an.is_elementwise(sch, name) or an.writes_output(sch, name):
            return
        if an.has_if_then_else(sch, name) and not self.inline_if_then_else:
            return
        if not an.consumer_names(sch, name):
            return
        try:
            sch.compute_inline(block)
        except ScheduleError:
            pass


class MultiLevelTiling:
    """Tile a block with data reuse (matmul, conv) by ``structure`` ("SSRSRS": four spatial
    and two reduction levels interleaved), then optionally keep the output tile in a local
    write cache (or fuse the elementwise consumer) at spatial level 1 or 2."""

    def __init__(self, structure: str = "SSRSRS", max_innermost_factor: int = 64, write_levels=(1, 2)) -> None:
        if set(structure) - {"S", "R"} or "S" not in structure:
            raise ValueError(f"MultiLevelTiling: structure {structure!r} must be made of S and R")
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor
        self.write_levels = tuple(write_levels)

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        blk = an.block(sch, name)
        if not an.needs_multi_level_tiling(sch, name) or blk.annotation("tensorize"):
            return
        if blk.annotation("meta_schedule.tiling_structure") is not None:
            return  # tiled already (by MultiLevelTilingWithIntrin)
        loops = sch.get_loops(block)
        kinds = [an.loop_kind(sch, name, l) for l in loops]
        if any(k not in ("S", "R") for k in kinds):
            return
        n_levels = {"S": self.structure.count("S"), "R": self.structure.count("R")}
        tiles: Dict[str, List[List[LoopRV]]] = {k: [[] for _ in range(n)] for k, n in n_levels.items()}
        for loop, kind in zip(loops, kinds):
            n = n_levels[kind]
            if n == 0:
                continue
            parts = [loop] if n == 1 else sch.split(
                loop, sch.sample_perfect_tile(loop, n=n, max_innermost_factor=self.max_innermost_factor)
            )
            for level, part in enumerate(parts):
                tiles[kind][level].append(part)
        order: List[LoopRV] = []
        seen = {"S": 0, "R": 0}
        groups = []
        for ch in self.structure:
            groups.append((ch, tiles[ch][seen[ch]]))
            order += tiles[ch][seen[ch]]
            seen[ch] += 1
        sch.reorder(*order)
        sch.annotate(block, "meta_schedule.tiling_structure", self.structure)
        choice = sch.sample_categorical([0, *self.write_levels], name=f"{name}/write_cache")
        if not choice:
            return
        spatial_groups = [g for ch, g in groups if ch == "S"]
        at = spatial_groups[choice - 1][-1]
        consumers = an.consumer_names(sch, name)
        try:
            if len(consumers) == 1 and an.is_elementwise(sch, consumers[0]):
                sch.reverse_compute_at(BlockRV(consumers[0]), at)
            else:
                cache = sch.cache_write(block, 0, "local")
                sch.reverse_compute_at(cache, at)
        except ScheduleError:
            pass


class AddRFactor:
    """For reductions with little spatial parallelism (a norm, a sum to a scalar): fuse the
    reduction loops, split them in two and, by a sampled choice, rfactor one of the halves so
    the partial results can be computed in parallel."""

    def __init__(self, max_jobs_per_core: int = 16, max_innermost_factor: int = 64, cores: int = 0) -> None:
        self.max_jobs_per_core = max_jobs_per_core
        self.max_innermost_factor = max_innermost_factor
        self.cores = cores

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        blk = an.block(sch, name)
        if not blk.is_reduction or blk.init is None or an.needs_multi_level_tiling(sch, name):
            return
        spatial = reduce = 1
        for it in blk.iters:
            if it.kind == "S":
                spatial *= it.extent
            else:
                reduce *= it.extent
        cores = self.cores or _cores()
        if spatial >= reduce or spatial > self.max_jobs_per_core * cores:
            return
        loops = sch.get_loops(block)
        r_loops = [l for l in loops if an.loop_kind(sch, name, l) == "R"]
        if not r_loops or loops[-len(r_loops):] != r_loops:
            return
        choice = sch.sample_categorical(["none", "outer", "inner"], name=f"{name}/rfactor")
        if choice == "none":
            return
        try:
            fused = sch.fuse(*r_loops) if len(r_loops) > 1 else r_loops[0]
            outer, inner = sch.split(
                fused, sch.sample_perfect_tile(fused, n=2, max_innermost_factor=self.max_innermost_factor)
            )
            sch.rfactor(outer if choice == "outer" else inner, factor_axis=0)
        except ScheduleError:
            pass


class RandomComputeLocation:
    """Sample where to compute a block that is neither an output nor tiled: at a loop of its
    consumers, at the root, or inlined (MutateComputeLocation re-proposes it)."""

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        blk = an.block(sch, name)
        if an.writes_output(sch, name) or blk.annotation("meta_schedule.tiling_structure") is not None:
            return
        if not an.consumer_names(sch, name) or isinstance(blk.body, tuple):
            return
        location = sch.sample_compute_location(block)
        try:
            if location == "inline":
                sch.compute_inline(block)
            elif location != "root":
                sch.compute_at(block, LoopRV(location))
        except ScheduleError:
            pass


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
