"""Layouts of constant inputs: a weight stored in the order the schedule reads it.

(:class:`Layout` and the attributes are the IR's, :mod:`probsched.ir.layout`, re-exported
here.) A :class:`Layout` splits each dimension of an input into factors (outer first) and orders
the pieces anew: ``W[k, n]`` read by a micro-kernel in ``kc x N`` panels, one panel per
``(n_out, k_out)`` tile, is best stored as ``W'[n_out, k_out, kc, N]`` so that each panel
is contiguous. :func:`transform_layout` rewrites a function to read such a parameter: the
parameter takes the new (physical) shape, every load of it goes through the layout's index
map, and the function records the layout in its ``layout_transforms`` attribute. The
parameter keeps its name; whoever calls the compiled kernel passes the weight as it was
(the logical shape) and :class:`~probsched.codegen.kernel.Kernel` lays it out when it binds
its arguments (``Kernel.bind``: once, outside any timed call), so callers never see the
physical shape. MetaSchedule calls this RewriteLayout; the design space samples it for
weights of a network's tasks (``layout_free_buffers``), where ``ps.compile`` binds each
weight once.

:func:`tile_layout` derives the layout from the loops that read a buffer: each dimension
split as its loops split it, the pieces in the order of those loops in the nest.

>>> import probsched as ps
>>> func = ps.workloads.small("GMM").func                  # Y: float32[2, 5, 6]
>>> lay = Layout((2, 5, 6), ((2,), (5,), (3, 2)), (0, 2, 1, 3))   # Y[b, k, n] -> Y'[b, n//2, k, n%2]
>>> laid = transform_layout(func, "Y", lay)
>>> [b.shape for b in laid.params if b.name == "Y"], layouts_of(laid)["Y"] == lay
([(2, 3, 5, 2)], True)
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..ir.expr import Const, Load, Var
from ..ir.layout import LAYOUT_FREE, LAYOUT_TRANSFORMS, Layout, lay_out_inputs, layouts_of, logical_params  # noqa: F401
from ..ir.stmt import Block, Buffer, Loop, PrimFunc, Store
from .analysis import affine
from .dataflow import map_block_exprs, map_loads
from .tree import map_blocks, require


def _set_attr(func: PrimFunc, key: str, value) -> PrimFunc:
    attrs = tuple((k, v) for k, v in func.attrs if k != key)
    return func.replace(attrs=attrs + ((key, value),))


def transform_layout(func: PrimFunc, buffer: str, layout: Layout) -> PrimFunc:
    """``func`` reading its input parameter ``buffer`` stored in ``layout`` (see the module
    docstring); raises ScheduleError for a buffer that is not an unwritten parameter, a
    layout of another shape, or a buffer laid out already.

    ``buffer`` may also be one the function allocates (a packing stage's local copy): its
    stores and loads alike go through the layout, and no caller sees it."""
    prim = "transform_layout"
    params = {b.name: b for b in func.params}
    if buffer not in params and any(b.name == buffer for b in func.allocs):
        return _transform_alloc(func, buffer, layout)
    require(buffer in params, prim, f"{buffer} is not a parameter of {func.name}")
    written = {b.name for blk in func.blocks() for b, _ in blk.writes()}
    require(buffer not in written, prim, f"parameter {buffer} is written by the function; only inputs can be laid out")
    old = params[buffer]
    require(tuple(old.shape) == layout.shape, prim, f"layout of shape {layout.shape} for {buffer} of shape {old.shape}")
    require(not laid_out(func, buffer), prim, f"parameter {buffer} is laid out already")
    new = Buffer(buffer, layout.physical_shape, old.dtype)

    def fix_load(ld: Load) -> Load:
        return Load(new, layout.index(ld.indices)) if ld.buffer.name == buffer else ld

    def fix_block(blk: Block) -> Block:
        return map_block_exprs(blk, lambda e: map_loads(e, fix_load))

    body = map_blocks(func.body, fix_block)
    out = func.replace(params=tuple(new if b.name == buffer else b for b in func.params), body=body)
    lays = tuple(func.attr(LAYOUT_TRANSFORMS) or ()) + ((buffer, layout.to_json()),)
    return _set_attr(out, LAYOUT_TRANSFORMS, lays)


def laid_out(func: PrimFunc, buffer: str) -> bool:
    """Whether ``func`` stores parameter ``buffer`` in a :class:`Layout` already (a
    Winograd-transformed weight may still be laid out once, for the tiles that read it)."""
    steps = layouts_of(func).get(buffer)
    return any(isinstance(s, Layout) for s in getattr(steps, "steps", (steps,)))


def _transform_alloc(func: PrimFunc, buffer: str, layout: Layout) -> PrimFunc:
    old = func.buffer(buffer)
    require(
        tuple(old.shape) == layout.shape, "transform_layout", f"layout of shape {layout.shape} for {buffer} of shape {old.shape}"
    )
    new = Buffer(buffer, layout.physical_shape, old.dtype, old.scope)

    def fix_load(ld: Load) -> Load:
        return Load(new, layout.index(ld.indices)) if ld.buffer.name == buffer else ld

    def fix_store(st: Store) -> Store:
        return Store(new, layout.index(st.indices), st.value) if st.buffer.name == buffer else st

    def fix_block(blk: Block) -> Block:
        return map_block_exprs(blk, lambda e: map_loads(e, fix_load), fix_store)

    body = map_blocks(func.body, fix_block)
    return func.replace(body=body, allocs=tuple(new if b.name == buffer else b for b in func.allocs))


def tile_layout(func: PrimFunc, block: str, buffer: str, loops: Sequence[Loop]) -> Optional[Layout]:
    """The layout in which ``block`` reads ``buffer`` in order: every index of the load an
    iterator of ``block``, each iterator bound to a sum of ``loops`` (outermost first) with
    the strides of a perfect split; each dimension split as its loops split it, the pieces
    in the loops' order. None when the load or the bindings are not of that form."""
    blk = next((b for b in func.blocks() if b.name == block), None)
    if blk is None:
        return None
    loads = [idx for b, idx in blk.reads() if b.name == buffer]
    if len(set(loads)) != 1:
        return None
    (indices,) = set(loads)
    shape = next(b.shape for b in func.params if b.name == buffer)
    binding = {it.var.name: b for it, b in zip(blk.iters, blk.bindings)}
    position = {l.var.name: i for i, l in enumerate(loops)}
    extent_of = {l.var.name: l.extent for l in loops}
    splits, keys = [], []
    for d, ix in enumerate(indices):
        if isinstance(ix, Const) and shape[d] == 1:
            splits.append((1,))
            keys.append([-1])
            continue
        if not isinstance(ix, Var) or ix.name not in binding:
            return None
        form = affine(binding[ix.name])
        if form is None or form[1] != 0 or any(v not in position for v in form[0]):
            return None
        terms = sorted(form[0].items(), key=lambda vc: -vc[1])  # outer (largest stride) first
        stride = int(shape[d])
        factors, where = [], []
        for v, c in terms:
            stride //= extent_of[v]
            if c != stride:
                return None  # not a perfect mixed-radix split of the dimension
            factors.append(extent_of[v])
            where.append(position[v])
        if stride != 1 or int(np.prod(factors)) != shape[d]:
            return None
        splits.append(tuple(factors))
        keys.append(where)
    flat_keys = [k for ks in keys for k in ks]
    order = tuple(sorted(range(len(flat_keys)), key=lambda i: (flat_keys[i], i)))
    return Layout(tuple(shape), tuple(splits), order)


__all__ = ["Layout", "transform_layout", "tile_layout", "laid_out", "layouts_of", "logical_params", "lay_out_inputs", "LAYOUT_TRANSFORMS", "LAYOUT_FREE"]
