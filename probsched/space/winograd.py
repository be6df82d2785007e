"""``Winograd``: choose per convolution between the direct loop nest and Winograd's
algorithm (TVM's auto-scheduler offers both forms of a 3x3 convolution the same way).

For a block the :func:`~probsched.schedule.Schedule.winograd` primitive takes (an
unscheduled 3x3 stride-1 float32 convolution, NHWC/HWIO), the rule samples the site
``<block>/winograd``: 0 keeps the block for the other rules (tiled around a micro-kernel),
2 or 4 rewrites it as F(2x2, 3x3) or F(4x4, 3x3). After a rewrite it hands the batched
matmul to the rules after it, which tile it around a micro-kernel like any matmul (and lay
out the transformed weight of a network, which binding computes once). The transform
stages keep the loop nests the primitive gives them (the channel loop over unrolled
positions, whose tiles code generation holds in scalars); the postprocessors parallelize
them.

>>> import probsched as ps
>>> from handlers import condition, seed, trace
>>> w = ps.workloads.get("C2D:3")
>>> space = ps.space.compose(Winograd(), ps.space.MultiLevelTilingWithIntrin())
>>> sch = ps.Schedule(w.func)
>>> trace(seed(condition(space, {"conv2d/winograd": 4}), 0)).get_trace(sch)["conv2d/winograd"].value
4
>>> [b for b in sch.blocks() if ps.space.analysis.block(sch, b).annotation("tensorize")]
['conv2d_wino_bgemm_o']
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from ..ir.winograd import TILES
from ..schedule import BlockRV, Schedule
from ..schedule.distributions import ALGORITHM
from ..schedule.winograd import match_conv


class Winograd:
    """Sample direct (0) or Winograd's F(m x m, 3x3) for each ``m`` of ``tiles`` (site
    ``<block>/winograd``, tagged an algorithm choice) for eligible convolutions; after a
    rewrite, return the batched matmul for the rules after this one."""

    def __init__(self, tiles: Sequence[int] = TILES, probs: Optional[Sequence[float]] = None) -> None:
        bad = [t for t in tiles if t not in TILES]
        if bad or not tiles:
            raise ValueError(f"Winograd: tiles {list(tiles)} must be some of {TILES}")
        self.tiles = tuple(tiles)
        self.probs = None if probs is None else list(probs)

    def __call__(self, sch: Schedule, block: BlockRV) -> Optional[List[BlockRV]]:
        name = block.name
        roles, _ = match_conv(sch.mod, name)
        if roles is None:
            return None
        tile = sch.sample_categorical([0, *self.tiles], self.probs, name=f"{name}/winograd", tag=ALGORITHM)
        if not tile:
            return None
        stages = sch.winograd(block, tile)
        return [stages[-3]]  # the batched matmul (the primitive's order: ..., bgemm, output's two passes)


__all__ = ["Winograd"]
