"""Layouts of constant inputs: a weight stored in the order the schedule reads it.

A :class:`Layout` splits each dimension of an input into factors (outer first) and orders
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

>>> import numpy as np
>>> lay = Layout((4, 6), ((2, 2), (3, 2)), (2, 0, 1, 3))     # W[k, n] -> W'[n//2, k//2, k%2, n%2]
>>> lay.physical_shape
(3, 2, 2, 2)
>>> w = np.arange(24, dtype=np.float32).reshape(4, 6)
>>> wp = lay.apply(w)
>>> float(wp[1, 0, 1, 0]) == float(w[1, 2])
True
>>> from probsched.ir.expr import Var
>>> [str(e) for e in lay.index((Var("k"), Var("n")))]
['n // 2', 'k // 2', 'k % 2', 'n % 2']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..ir.expr import Const, Expr, Load, Var
from ..ir.stmt import Block, Buffer, Loop, PrimFunc, Store
from .analysis import affine
from .dataflow import map_block_exprs, map_loads
from .tree import map_blocks, require

#: Function attribute: ``((buffer name, layout JSON), ...)`` of the parameters laid out anew.
LAYOUT_TRANSFORMS = "layout_transforms"
#: Function attribute: names of the inputs that are constants where the function is used
#: (a network's weights), which the design space may lay out anew.
LAYOUT_FREE = "layout_free_buffers"


@dataclass(frozen=True)
class Layout:
    """``shape`` split per dimension into ``splits`` (outer factor first, product = extent),
    the pieces (numbered dimension by dimension) stored in ``order``."""

    shape: Tuple[int, ...]
    splits: Tuple[Tuple[int, ...], ...]
    order: Tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "splits", tuple(tuple(int(f) for f in fs) for fs in self.splits))
        object.__setattr__(self, "order", tuple(int(o) for o in self.order))
        if len(self.splits) != len(self.shape):
            raise ValueError(f"Layout: {len(self.splits)} splits for a rank-{len(self.shape)} shape {self.shape}")
        for d, (extent, fs) in enumerate(zip(self.shape, self.splits)):
            if not fs or any(f < 1 for f in fs) or int(np.prod(fs)) != extent:
                raise ValueError(f"Layout: dimension {d} of extent {extent} split into {fs}, whose product differs")
        if sorted(self.order) != list(range(sum(len(fs) for fs in self.splits))):
            raise ValueError(f"Layout: order {self.order} is not a permutation of the {sum(len(fs) for fs in self.splits)} pieces")

    @property
    def pieces(self) -> List[Tuple[int, int, int]]:
        """``(dimension, extent, stride)`` of every piece, dimension by dimension."""
        out = []
        for d, fs in enumerate(self.splits):
            stride = int(np.prod(fs))
            for f in fs:
                stride //= f
                out.append((d, f, stride))
        return out

    @property
    def physical_shape(self) -> Tuple[int, ...]:
        """The stored array's shape."""
        pieces = self.pieces
        return tuple(pieces[o][1] for o in self.order)

    @property
    def is_identity(self) -> bool:
        """Whether the stored array is the logical one."""
        return self.physical_shape == self.shape and list(self.order) == list(range(len(self.order)))

    def apply(self, array: np.ndarray) -> np.ndarray:
        """The array laid out: a C-contiguous copy of shape :attr:`physical_shape`."""
        from ..codegen.aligned import aligned_copy

        a = np.asarray(array)
        if a.shape != self.shape:
            raise ValueError(f"Layout.apply: array of shape {a.shape}, the layout is of {self.shape}")
        split = a.reshape([f for fs in self.splits for f in fs])
        return aligned_copy(np.transpose(split, self.order))

    def index(self, indices: Sequence[Expr]) -> Tuple[Expr, ...]:
        """The physical indices of the element at logical ``indices``."""
        parts: List[Expr] = []
        for d, extent, stride in self.pieces:
            e = indices[d]
            first = stride * extent == self.shape[d]  # the outermost piece: no remainder needed
            q = e // stride if stride > 1 else e
            parts.append(Const(0, "int64") if extent == 1 else (q if first else q % extent))
        return tuple(parts[o] for o in self.order)

    def to_json(self) -> str:
        """JSON text (what the function attribute and the instruction log store)."""
        return json.dumps({"shape": self.shape, "splits": self.splits, "order": self.order})

    @staticmethod
    def from_json(text: str) -> "Layout":
        """Rebuild a layout from :meth:`to_json` text."""
        d = json.loads(text)
        return Layout(tuple(d["shape"]), tuple(tuple(s) for s in d["splits"]), tuple(d["order"]))


def layouts_of(func: PrimFunc) -> Dict[str, Layout]:
    """The layouts ``func`` stores its parameters in, by name (empty for most functions)."""
    return {name: Layout.from_json(text) for name, text in (func.attr(LAYOUT_TRANSFORMS) or ())}


def logical_params(func: PrimFunc) -> Tuple[Buffer, ...]:
    """``func``'s parameters with the shapes their callers pass (before any layout)."""
    lays = layouts_of(func)
    return tuple(Buffer(b.name, lays[b.name].shape, b.dtype) if b.name in lays else b for b in func.params)


def lay_out_inputs(func: PrimFunc, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """``func``'s input arrays (in :meth:`~probsched.ir.stmt.PrimFunc.input_buffers` order,
    logical shapes) as the function itself reads them: what the IR interpreter takes."""
    lays = layouts_of(func)
    return [lays[b.name].apply(a) if b.name in lays else a for b, a in zip(func.input_buffers(), inputs)]


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
    require(buffer not in layouts_of(func), prim, f"parameter {buffer} is laid out already")
    new = Buffer(buffer, layout.physical_shape, old.dtype)

    def fix_load(ld: Load) -> Load:
        return Load(new, layout.index(ld.indices)) if ld.buffer.name == buffer else ld

    def fix_block(blk: Block) -> Block:
        return map_block_exprs(blk, lambda e: map_loads(e, fix_load))

    body = map_blocks(func.body, fix_block)
    out = func.replace(params=tuple(new if b.name == buffer else b for b in func.params), body=body)
    lays = tuple(func.attr(LAYOUT_TRANSFORMS) or ()) + ((buffer, layout.to_json()),)
    return _set_attr(out, LAYOUT_TRANSFORMS, lays)


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


__all__ = ["Layout", "transform_layout", "tile_layout", "layouts_of", "logical_params", "lay_out_inputs", "LAYOUT_TRANSFORMS", "LAYOUT_FREE"]
