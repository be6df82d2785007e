"""The registry of tensor intrinsics: a compute description and a numba implementation each.

It lives in the IR because the schedule's ``tensorize`` matches tiles against the
descriptions; the micro-kernels themselves (:mod:`probsched.intrinsics`) register here.

An intrinsic's *description* is a one-block function written with the front end; tensorize
matches tiles against it. Its *implementation* is a callable returning the compiled numba
function (compiled lazily, on first use, and cached on disk by the shipped library), called
from generated code as::

    impl(out, out_offset, <out strides>, in0, in0_offset, <in0 strides>, ..., panel_extent)

with one flat float array, one element offset of the tile origin and, per operand, one
stride for each description axis the operand depends on (description iterator order, unit
stride axes included), then the panel extent when the intrinsic has a panel axis. Output
operands come first, then inputs, in the order of the description's parameters.

>>> import probsched as ps
>>> "matmul_6x16" in ps.intrinsics.list()
True
>>> ps.intrinsics.get("matmul_6x16").panel_axis
'v_k'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import ProbschedError
from .expr import free_vars
from .stmt import PrimFunc


@dataclass(frozen=True)
class Intrinsic:
    """A registered micro-kernel."""

    name: str
    description: PrimFunc
    implementation: Callable[[], Callable]
    panel_axis: Optional[str] = None
    unit_stride: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    meta: Dict[str, object] = field(default_factory=dict)
    #: buffer -> {axis: the flat element stride the implementation assumes along it}
    strides: Dict[str, Dict[str, int]] = field(default_factory=dict)

    def kernel(self) -> Callable:
        """The compiled implementation (compiled or loaded from the disk cache on first use)."""
        return self.implementation()

    def operands(self) -> List[Tuple[str, Tuple[str, ...]]]:
        """(buffer name, description axes it depends on) in call order: outputs, then inputs."""
        (blk,) = self.description.blocks()
        written = {b.name for b, _ in blk.writes()}
        order = [b for b in self.description.params if b.name in written]
        order += [b for b in self.description.params if b.name not in written]
        axes = [it.var.name for it in blk.iters]
        out = []
        for b in order:
            used = set()
            for buf, idx in blk.reads() + blk.writes():
                if buf.name == b.name:
                    for e in idx:
                        used |= free_vars(e)
            out.append((b.name, tuple(a for a in axes if a in used)))
        return out


_REGISTRY: Dict[str, Intrinsic] = {}
#: Bumped by every :func:`register`: what memos of checks against registered intrinsics
#: (:mod:`probsched.schedule.schedule`'s transitions) key on, so a replaced one is re-checked.
generation = 0


def register(
    name: str,
    description: PrimFunc,
    implementation: Callable[[], Callable],
    *,
    panel_axis: Optional[str] = None,
    unit_stride: Optional[Dict[str, Sequence[str]]] = None,
    meta: Optional[Dict[str, object]] = None,
    strides: Optional[Dict[str, Dict[str, int]]] = None,
    replace: bool = False,
) -> Intrinsic:
    """Register an intrinsic under ``name`` (``replace=True`` to overwrite one).

    ``unit_stride``: buffer -> axes along which its last index must step by 1 (contiguous);
    ``strides``: buffer -> {axis: flat element stride} the implementation assumes (a
    pair-interleaved B steps by 2 along N); tensorize checks both."""
    global generation
    if name in _REGISTRY and not replace:
        raise ProbschedError(f"intrinsic {name!r} is already registered (pass replace=True)")
    blocks = description.blocks()
    if len(blocks) != 1:
        raise ProbschedError(f"intrinsic {name}: the description must have exactly one block, has {len(blocks)}")
    axes = [it.var.name for it in blocks[0].iters]
    if panel_axis is not None and panel_axis not in axes:
        raise ProbschedError(f"intrinsic {name}: panel axis {panel_axis!r} is not one of {axes}")
    for buf, axis_strides in (strides or {}).items():
        if not set(axis_strides) <= set(axes):
            raise ProbschedError(f"intrinsic {name}: strides of {buf} name axes {sorted(set(axis_strides) - set(axes))} it does not have")
    intrin = Intrinsic(
        name,
        description,
        implementation,
        panel_axis,
        {k: tuple(v) for k, v in (unit_stride or {}).items()},
        dict(meta or {}),
        {k: dict(v) for k, v in (strides or {}).items()},
    )
    _REGISTRY[name] = intrin
    generation += 1
    return intrin


def unregister(name: str) -> None:
    """Remove the intrinsic registered as ``name`` (nothing when there is none)."""
    global generation
    if _REGISTRY.pop(name, None) is not None:
        generation += 1


def get(name: str) -> Intrinsic:
    """The intrinsic registered as ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ProbschedError(f"no intrinsic named {name!r}; registered: {sorted(_REGISTRY)}") from None


def list() -> List[str]:  # noqa: A001 - the documented name
    """Names of every registered intrinsic."""
    return sorted(_REGISTRY)
