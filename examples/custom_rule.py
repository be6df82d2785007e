"""A user-written schedule rule: pack the weight panel of every tiled block.

A rule is any function ``rule(sch, block)``. This one runs after MultiLevelTiling: when the
block was tiled, it copies the block's last input (a matmul's B, a convolution's weights) into
a local buffer at the outermost reduction tile loop; lowering compacts that buffer to the
panel the inner loops read, which is contiguous (packing). Whether to pack is itself a
decision, a ``sample`` site, so search can learn when it pays.

Run:  python examples/custom_rule.py
"""

from __future__ import annotations

import numpy as np

import probsched as ps
from handlers import seed, trace
from probsched.errors import ScheduleError
from probsched.space import analysis as an


def pack_weights(sch: ps.Schedule, block: ps.BlockRV) -> None:
    """Cache the last input of a tiled block at its outermost reduction loop (sampled)."""
    blk = sch.get(block)
    if blk.annotation("meta_schedule.tiling_structure") is None:
        return  # not tiled: nothing to pack
    if not sch.sample_categorical([False, True], name=f"{block.name}/pack_weights"):
        return
    inputs = an.reads_of(sch, block.name)
    reduce_loops = [l for l in sch.get_loops(block) if an.loop_kind(sch, block.name, l) == "R"]
    try:
        packed = sch.cache_read(block, len(inputs) - 1, "local")
        sch.compute_at(packed, reduce_loops[0])
    except ScheduleError:
        pass  # e.g. the weights are produced inside this nest: leave the block as it is


def space_with_packing() -> ps.space.Space:
    """The default CPU space with the packing rule after the default rules."""
    return ps.space.compose(
        *ps.space.default_rules(), pack_weights, postprocs=ps.space.default_postprocs(), name="default+pack"
    )


def main() -> None:
    w = ps.workloads.get("GMM:1")
    space = space_with_packing()
    inputs = w.random_inputs(np.random.default_rng(0))
    expected = w.reference(*inputs)
    for s in range(3):
        sch = ps.Schedule(w.func)
        decisions = trace(seed(space, s)).get_trace(sch)
        kernel = ps.build(sch)
        outputs = w.empty_outputs()
        kernel(*inputs, *outputs)
        w.check(outputs, expected)
        print(f"seed {s}: pack={decisions['Z/pack_weights'].value}, correct")


if __name__ == "__main__":
    main()
