"""MetaSchedule's CPU schedule rules, as small callables ``rule(sch, block)``.

Each samples what it cannot decide (tile sizes, where to cache, rfactor or not) through the
schedule's sampling instructions, so the decisions are ``sample`` sites named after the
block (``C/i/tile``, ``C/write_cache``, ``C/rfactor``, ``pad/compute_at``). A rule that
does not apply to a block leaves it alone; a primitive a rule tries that the program refuses
(ScheduleError) leaves the schedule unchanged and the rule moves on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from ..errors import ScheduleError
from ..schedule import BlockRV, LoopRV, Schedule
from ..schedule.distributions import ALGORITHM
from . import analysis as an

if TYPE_CHECKING:
    from ..target import Target


#: Math functions worth computing once rather than inlining into several consumers: each
#: costs tens of instructions per element (``exp`` is a 20-instruction polynomial here).
EXPENSIVE_MATH = ("exp", "log", "tanh", "sigmoid")

#: Block annotation that RFactorLanes sets on the block it rfactors: the block's new producer
#: (the partial results) gets a compute location sampled with the block's own (TVM's key).
#: AddRFactor does not set it: its partials parallelize at the root. When RFactorLanes then
#: gives those partials lanes (NRM), the lanes get a location within the partials' row loop.
RANDOM_COMPUTE_PRODUCER = "meta_schedule.random_compute_producer"


class AutoInline:
    """Inline elementwise producers into their consumers (padding excluded, as in TVM's CPU
    defaults: a conditional in the consumer's inner loop costs more than a separate stage).

    A producer that calls an expensive math function (:data:`EXPENSIVE_MATH`) and is read by
    more than one block is left to :class:`RandomComputeLocation`, which samples inlining
    among its other locations: inlined, each consumer evaluates the function again.
    Softmax's ``exp`` has two consumers (the row sum and the division). Inlined, that is two
    exps per element; computed once per row at the row loop, the tuned softmax is much
    faster than the tuned best of an always-inline space.

    >>> import probsched as ps
    >>> sch = ps.Schedule(ps.workloads.small("SFM").func)
    >>> AutoInline()(sch, sch.get_block("T_softmax_exp"))
    >>> "T_softmax_exp" in [b.name for b in sch.mod.blocks()]   # not inlined: two consumers
    True
    """

    def __init__(self, inline_if_then_else: bool = False) -> None:
        self.inline_if_then_else = inline_if_then_else

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        if not an.is_elementwise(sch, name) or an.writes_output(sch, name):
            return
        if an.has_if_then_else(sch, name) and not self.inline_if_then_else:
            return
        consumers = an.consumer_names(sch, name)
        if not consumers:
            return
        if len(consumers) > 1 and an.calls_math(sch, name, EXPENSIVE_MATH):
            return
        try:
            sch.compute_inline(block)
        except ScheduleError:
            pass


class MultiLevelTiling:
    """Tile a block with data reuse (matmul, conv) by ``structure`` ("SSRSRS": four spatial
    and two reduction levels interleaved), then optionally keep the output tile in a local
    write cache (or fuse the elementwise consumer) at spatial level 1, 2 or 3.

    Level 3 (beyond MetaSchedule's 1 and 2) caches the innermost spatial tile alone: a
    register tile, which the code generator keeps on the stack where LLVM promotes it to
    registers. The tile is final there only when every reduction tile outside it has
    extent 1, so the level (site ``<block>/write_cache``) is sampled *before* the tile
    sizes and constrains them: at level 3 the outer reduction tiles are 1 and the inner
    ones take the whole loop (no tile site), which needs every reduction loop to fit
    ``max_innermost_factor`` (a 3x3 depthwise kernel does; a 512-long K does not).
    Sampling the level first makes the register tile a quarter of the prior instead of
    the 1/16 it was when the tap tiles had to come out (1, 3) by chance, and lets a
    single mutation of the level reach it. On a depthwise convolution the register tile
    runs about twice as fast as the best schedule of a space with levels 1-2 only.

    A constant of the network the block reads (a weight, :func:`.analysis.weight_layout`)
    is stored in the order the tiles read it (``rewrite_layout``), as MetaSchedule's
    RewriteLayout does, without a sampled choice: timed alone the two orders run alike
    (the weight is hot), but a network reads its weights from memory, where the tiles'
    order streams them and the given one strides. A classifier over 1000 classes, which
    no micro-kernel takes (1000 columns are not whole vectors), read its 1280 x 1000 int8
    weight at 4 GB/s in MobileNet-V2 before.

    >>> import probsched as ps
    >>> from handlers import condition, seed, trace
    >>> w = ps.workloads.small("DEP")
    >>> rule = MultiLevelTiling()
    >>> run = lambda s: rule(s, s.get_block("depthwise_conv2d"))
    >>> tr = trace(seed(condition(run, {"depthwise_conv2d/write_cache": 3}), 0)).get_trace(ps.Schedule(w.func))
    >>> [n for n in tr if n.startswith("depthwise_conv2d/r")]   # the taps are not sampled
    []
    """

    def __init__(
        self, structure: str = "SSRSRS", max_innermost_factor: int = 64, write_levels=(1, 2, 3), rewrite_layout: bool = True
    ) -> None:
        if set(structure) - {"S", "R"} or "S" not in structure:
            raise ValueError(f"MultiLevelTiling: structure {structure!r} must be made of S and R")
        self.structure = structure
        self.max_innermost_factor = max_innermost_factor
        self.write_levels = tuple(write_levels)
        self.rewrite_layout = rewrite_layout

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        blk = an.block(sch, name)
        if not an.needs_multi_level_tiling(sch, name) or blk.annotation("tensorize"):
            return
        if blk.annotation("meta_schedule.tiling_structure") is not None:
            return  # tiled already (by MultiLevelTilingWithIntrin)
        loops = sch.get_loops(block)
        by_loop = an.loop_kinds(sch, name)
        kinds = [by_loop.get(l.name, "O") for l in loops]
        if any(k not in ("S", "R") for k in kinds):
            return
        r_extents = [sch.get(l).extent for l, k in zip(loops, kinds) if k == "R"]
        levels = [l for l in self.write_levels if self._reachable(l, r_extents)]
        choice = sch.sample_categorical([0, *levels], name=f"{name}/write_cache", tag=ALGORITHM)
        # reduction levels that must be 1 so the result is final at the chosen level
        fixed_r = self._r_before(choice) if choice else 0
        n_levels = {"S": self.structure.count("S"), "R": self.structure.count("R")}
        tiles: Dict[str, List[List[LoopRV]]] = {k: [[] for _ in range(n)] for k, n in n_levels.items()}
        for loop, kind in zip(loops, kinds):
            n = n_levels[kind]
            if n == 0:
                continue
            fixed = fixed_r if kind == "R" else 0
            free = n - fixed
            if n == 1:
                parts = [loop]
            elif free <= 1:
                parts = sch.split(loop, [1] * fixed + [None] * free) if free else sch.split(loop, [1] * n)
            else:
                factors = sch.sample_perfect_tile(loop, n=free, max_innermost_factor=self.max_innermost_factor)
                parts = sch.split(loop, [1] * fixed + list(factors))
            for level, part in enumerate(parts):
                tiles[kind][level].append(part)
        order: List[LoopRV] = []
        seen = {"S": 0, "R": 0}
        spatial_groups = []
        for ch in self.structure:
            group = tiles[ch][seen[ch]]
            order += group
            seen[ch] += 1
            if ch == "S":
                spatial_groups.append(group)
        sch.reorder(*order)
        sch.annotate(block, "meta_schedule.tiling_structure", self.structure)
        if self.rewrite_layout:
            for buffer in an.reads_of(sch, name):
                lay = an.weight_layout(sch, name, buffer)
                if lay is not None:
                    try:
                        sch.transform_layout(buffer, lay.splits, lay.order)
                    except ScheduleError:
                        pass
        if not choice:
            return
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

    def _r_before(self, level: int) -> int:
        """Reduction levels of ``structure`` before its ``level``-th spatial level (1-based)."""
        s_seen = 0
        for i, ch in enumerate(self.structure):
            s_seen += ch == "S"
            if s_seen == level:
                return self.structure[:i].count("R")
        raise ValueError(f"MultiLevelTiling: structure {self.structure!r} has no spatial level {level}")

    def _reachable(self, level: int, r_extents: List[int]) -> bool:
        """Whether write level ``level`` can hold a final result: the reduction levels
        outside it set to 1, the rest still take every reduction loop (the innermost one
        within ``max_innermost_factor`` when it alone is left)."""
        if level > self.structure.count("S"):
            return False
        free = self.structure.count("R") - self._r_before(level)
        if free == 0:
            return all(e == 1 for e in r_extents)
        if free == 1 and self._r_before(level) > 0:
            return all(e <= self.max_innermost_factor for e in r_extents)
        return True


class AddRFactor:
    """For reductions with little spatial parallelism (a norm, a sum to a scalar): rfactor
    the reduction, by a sampled choice, over its outer part (partial results over the
    outermost reduction loop, or over the outer half of a single one: those parallelize) or
    its inner part (the inner half of the innermost loop). After an outer rfactor the
    partials block has spatial work to spare, and :class:`RFactorLanes` may give it vector
    lanes too (NRM: rows in parallel, each row summed in vector lanes).

    (rfactor takes a loop that drives one reduction iterator, so several reduction loops are
    not fused first as in TVM.)
    """

    def __init__(
        self, max_jobs_per_core: int = 16, max_innermost_factor: int = 64, cores: int = 0, target: Optional["Target"] = None
    ) -> None:
        self.max_jobs_per_core = max_jobs_per_core
        self.max_innermost_factor = max_innermost_factor
        self.cores = cores or _target(target).threads
        self.lanes = RFactorLanes(max_jobs_per_core=max_jobs_per_core, cores=self.cores, target=target)

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        work = _untiled_reduction_work(sch, name)
        if work is None:
            return
        spatial, reduce = work
        if spatial >= reduce or spatial > self.max_jobs_per_core * self.cores:
            return
        loops = sch.get_loops(block)
        kinds = an.loop_kinds(sch, name)
        r_loops = [l for l in loops if kinds.get(l.name) == "R"]
        if not r_loops or loops[-len(r_loops):] != r_loops:
            return
        choice = sch.sample_categorical(["none", "outer", "inner"], name=f"{name}/rfactor", tag=ALGORITHM)
        if choice == "none":
            return
        try:
            if choice == "outer" and len(r_loops) > 1:
                rf = sch.rfactor(r_loops[0], factor_axis=0)
            else:
                loop = r_loops[0 if choice == "outer" else -1]
                outer, inner = sch.split(
                    loop, sch.sample_perfect_tile(loop, n=2, max_innermost_factor=self.max_innermost_factor)
                )
                rf = sch.rfactor(outer if choice == "outer" else inner, factor_axis=0)
        except ScheduleError:
            return
        if choice == "outer":
            self.lanes(sch, rf)


class RFactorLanes:
    """For reductions with plenty of spatial parallelism (softmax's row max and sum): split
    the innermost reduction loop by a sampled multiple of the vector width and rfactor the
    inner part, so a row's partial results live in vector lanes. Without it the reduction is
    one serial chain per row (numba may not reassociate float adds or max), 3-4 cycles per
    element; with it the rf block's lane loop is spatial and vectorizes. The complement of
    :class:`AddRFactor`, which takes the reductions with little spatial parallelism.

    >>> import probsched as ps
    >>> from handlers import condition, seed, trace
    >>> sch = ps.Schedule(ps.workloads.softmax(4, 64).func)
    >>> rule = RFactorLanes(lanes=8, max_jobs_per_core=1, cores=1)
    >>> run = condition(lambda s: rule(s, s.get_block("T_softmax_expsum")), {"T_softmax_expsum/lanes": 16})
    >>> run(sch)
    >>> [b.name for b in sch.mod.blocks() if b.name.startswith("T_softmax_expsum")]
    ['T_softmax_expsum_rf', 'T_softmax_expsum']
    """

    def __init__(self, lanes: int = 0, max_jobs_per_core: int = 16, cores: int = 0, target: Optional["Target"] = None) -> None:
        tgt = _target(target)
        self.lanes = lanes or tgt.vector_lanes("float32")
        self.max_jobs_per_core = max_jobs_per_core
        self.cores = cores or tgt.threads

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        work = _untiled_reduction_work(sch, name)
        if work is None or work[0] <= self.max_jobs_per_core * self.cores:
            return
        loops = sch.get_loops(block)
        if not loops or an.loop_kind(sch, name, loops[-1]) != "R":
            return
        lanes = self.lanes
        extent = sch.get(loops[-1]).extent
        choices = [f for f in (0, lanes, 2 * lanes) if f == 0 or (extent % f == 0 and extent >= 2 * f)]
        if len(choices) == 1:
            return
        factor = sch.sample_categorical(choices, name=f"{name}/lanes")
        if not factor:
            return
        try:
            _, inner = sch.split(loops[-1], [None, factor])
            sch.rfactor(inner, factor_axis=-1)  # lanes last: a row's partials are contiguous
        except ScheduleError:
            return
        sch.annotate(block, RANDOM_COMPUTE_PRODUCER, 1)


class RandomComputeLocation:
    """Sample where to compute a block that is neither an output nor tiled: at a loop of its
    consumers, at the root, or inlined (MutateComputeLocation re-proposes it).

    A block annotated :data:`RANDOM_COMPUTE_PRODUCER` (by :class:`RFactorLanes`) then has its
    partial-results producer placed the same way (site ``<block>_rf/compute_at``), with the
    lane loop kept innermost so it still vectorizes. Softmax's row sum and its lanes then
    run inside the row loop of the division, on a row still in L1. So does an annotated
    producer of the block (NRM's row partials, whose lanes can then be summed in the row's
    own parallel iteration instead of a second parallel loop).

    >>> import probsched as ps
    >>> from handlers import condition, seed, trace
    >>> w = ps.workloads.softmax(4, 64)
    >>> space = ps.space.compose(AutoInline(), RFactorLanes(lanes=8, max_jobs_per_core=1, cores=1), RandomComputeLocation())
    >>> run = condition(space, {"T_softmax_expsum/lanes": 16, "T_softmax_expsum/compute_at": "i3",
    ...                         "T_softmax_expsum_rf/compute_at": "i3"})
    >>> sch = ps.Schedule(w.func)
    >>> trace(seed(run, 0)).get_trace(sch)["T_softmax_expsum_rf/compute_at"].value
    'i3'
    >>> [sch.get(l).extent for l in sch.get_loops(sch.get_block("T_softmax_expsum_rf"))]   # row, steps, lanes
    [4, 4, 16]
    """

    def __call__(self, sch: Schedule, block: BlockRV) -> None:
        name = block.name
        # The block's own annotation, and its producers': an outer rfactor's partials block
        # (AddRFactor, then RFactorLanes on it) did not exist when the space started visiting
        # blocks, so the rule is never called on it. Only a reduction has rfactor partials
        # as producers (the query is skipped for the rest: this runs for every replayed
        # trace). Collected before placing: an inlined block has no producers to ask for.
        blk = an.block(sch, name)
        candidates = (name, *an.producer_names(sch, name)) if blk.is_reduction else (name,)
        marked = [n for n in candidates if an.block(sch, n).annotation(RANDOM_COMPUTE_PRODUCER)]
        self._place(sch, block)
        for n in marked:
            if not sch.has_block(n):
                continue
            sch.unannotate(BlockRV(n), RANDOM_COMPUTE_PRODUCER)
            producers = an.producer_names(sch, n)
            if len(producers) == 1:
                self._place(sch, BlockRV(producers[0]), lanes_innermost=True)

    def _place(self, sch: Schedule, block: BlockRV, lanes_innermost: bool = False) -> None:
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
                if lanes_innermost:
                    _spatial_loops_innermost(sch, block, location)
        except ScheduleError:
            pass


def _spatial_loops_innermost(sch: Schedule, block: BlockRV, location: str) -> None:
    """Reorder the loops compute_at made under ``location`` so the spatial ones (an rf
    block's lanes) are innermost: compute_at orders them as the block's iterators, the
    lanes before the reduction steps, where they would not vectorize."""
    loops = sch.get_loops(block)
    names = [l.name for l in loops]
    below = loops[names.index(location) + 1 :]
    kinds = an.loop_kinds(sch, block.name)
    spatial = [l for l in below if kinds.get(l.name) == "S"]
    other = [l for l in below if kinds.get(l.name) != "S"]
    if spatial and other and below != other + spatial:
        sch.reorder(*other, *spatial)


def _target(target: Optional["Target"]) -> "Target":
    """The target a rule schedules for: ``target``, or this machine."""
    from ..target import Target

    return Target.parse(target)


def _untiled_reduction_work(sch: Schedule, name: str) -> Optional[Tuple[int, int]]:
    """(spatial, reduction) iteration counts of a reduction block that multi-level tiling
    does not take (the rfactor rules' blocks), else None."""
    blk = an.block(sch, name)
    if not blk.is_reduction or blk.init is None or an.needs_multi_level_tiling(sch, name):
        return None
    spatial = reduce = 1
    for it in blk.iters:
        if it.kind == "S":
            spatial *= it.extent
        else:
            reduce *= it.extent
    return spatial, reduce


