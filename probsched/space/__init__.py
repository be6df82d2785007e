"""Design spaces: MetaSchedule's CPU rules composed into a schedule program.

>>> import probsched as ps
>>> from handlers import seed, trace
>>> w = ps.workloads.small("C2D")
>>> sch = ps.Schedule(w.func)
>>> tr = trace(seed(ps.space.default(), 0)).get_trace(sch)
>>> "conv2d/write_cache" in tr
True
"""

from typing import Optional

from ..target import Target
from .postprocs import ParallelVectorizeUnroll, RewriteReductionBlock
from .intrin_tiling import MultiLevelTilingWithIntrin
from .rules import AddRFactor, AutoInline, MultiLevelTiling, RandomComputeLocation, RFactorLanes
from .space import Space, compose, fixing
from .winograd import Winograd


def default_rules(
    micro_kernels: bool = True, rewrite_layout: bool = True, target: Optional[Target] = None, winograd: bool = True
) -> list:
    """The CPU rules with MetaSchedule's defaults, in the order they apply to each block.

    ``micro_kernels=False`` leaves out the micro-kernel tiling (matmul-like blocks are then
    tiled by ``MultiLevelTiling`` alone); ``rewrite_layout=False`` never stores a network's
    weights in the order the tiles read them (:mod:`probsched.schedule.layout`);
    ``winograd=False`` never computes a 3x3 convolution by Winograd's algorithm
    (:mod:`probsched.space.winograd`). They are the expert modules of the paper's ablation
    (``benchmarks/bench_modules.py``).
    """
    target = Target.parse(target)
    rules = [
        AutoInline(),
        AddRFactor(max_jobs_per_core=16, max_innermost_factor=64, target=target),
        RFactorLanes(max_jobs_per_core=16, target=target),
        Winograd(),
        MultiLevelTilingWithIntrin(max_panel=512, rewrite_layout=rewrite_layout, target=target),
        MultiLevelTiling(structure="SSRSRS", max_innermost_factor=64, rewrite_layout=rewrite_layout),
        RandomComputeLocation(),
    ]
    if not winograd:
        rules = [r for r in rules if not isinstance(r, Winograd)]
    return rules if micro_kernels else [r for r in rules if not isinstance(r, MultiLevelTilingWithIntrin)]


def default_postprocs(target: Optional[Target] = None) -> list:
    """Decomposed reductions, then parallel/vectorize/unroll."""
    return [
        RewriteReductionBlock(),
        ParallelVectorizeUnroll(
            max_jobs_per_core=16, max_vectorize_extent=64, unroll_max_steps=(0, 16, 64, 512), target=target
        ),
    ]


def default(
    micro_kernels: bool = True, rewrite_layout: bool = True, target: Optional[Target] = None, winograd: bool = True
) -> Space:
    """The default CPU design space for ``target`` (default: this machine; its threads and
    vector width shape the parallel jobs, micro-kernels and lanes the rules sample):
    ``space(sch)`` samples one schedule. The options leave out an expert module (see
    :func:`default_rules`); the space's name says which.

    >>> default().name, default(rewrite_layout=False).name, default(False, False).name
    ('default', 'default-no-layout', 'default-no-micro-kernels-no-layout')
    >>> default(winograd=False).name
    'default-no-winograd'
    """
    name = "default" + ("" if micro_kernels else "-no-micro-kernels") + ("" if rewrite_layout else "-no-layout")
    name += "" if winograd else "-no-winograd"
    target = Target.parse(target)
    space = Space(default_rules(micro_kernels, rewrite_layout, target, winograd), default_postprocs(target), name=name)
    space.target = target
    return space


__all__ = [
    "Space",
    "compose",
    "fixing",
    "default",
    "default_rules",
    "default_postprocs",
    "AutoInline",
    "AddRFactor",
    "RFactorLanes",
    "MultiLevelTiling",
    "MultiLevelTilingWithIntrin",
    "RandomComputeLocation",
    "Winograd",
    "ParallelVectorizeUnroll",
    "RewriteReductionBlock",
]
