"""Design spaces: MetaSchedule's CPU rules composed into a schedule program.

>>> import probsched as ps
>>> from handlers import seed, trace
>>> w = ps.workloads.small("C2D")
>>> sch = ps.Schedule(w.func)
>>> tr = trace(seed(ps.space.default(), 0)).get_trace(sch)
>>> "conv2d/write_cache" in tr
True
"""

from .postprocs import ParallelVectorizeUnroll, RewriteReductionBlock
from .intrin_tiling import MultiLevelTilingWithIntrin
from .rules import AddRFactor, AutoInline, MultiLevelTiling, RandomComputeLocation, RFactorLanes
from .space import Space, compose


def default_rules() -> list:
    """The CPU rules with MetaSchedule's defaults, in the order they apply to each block."""
    return [
        AutoInline(),
        AddRFactor(max_jobs_per_core=16, max_innermost_factor=64),
        RFactorLanes(max_jobs_per_core=16),
        MultiLevelTilingWithIntrin(max_panel=512),
        MultiLevelTiling(structure="SSRSRS", max_innermost_factor=64),
        RandomComputeLocation(),
    ]


def default_postprocs() -> list:
    """Decomposed reductions, then parallel/vectorize/unroll."""
    return [
        RewriteReductionBlock(),
        ParallelVectorizeUnroll(max_jobs_per_core=16, max_vectorize_extent=64, unroll_max_steps=(0, 16, 64, 512)),
    ]


def default() -> Space:
    """The default CPU design space: ``space(sch)`` samples one schedule."""
    return Space(default_rules(), default_postprocs(), name="default")


__all__ = [
    "Space",
    "compose",
    "default",
    "default_rules",
    "default_postprocs",
    "AutoInline",
    "AddRFactor",
    "RFactorLanes",
    "MultiLevelTiling",
    "MultiLevelTilingWithIntrin",
    "RandomComputeLocation",
    "ParallelVectorizeUnroll",
    "RewriteReductionBlock",
]
