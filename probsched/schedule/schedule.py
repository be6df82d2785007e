"""``Schedule``: the scheduled program, its primitives, and the instruction log.

Every primitive checks its preconditions and raises :class:`~probsched.ScheduleError`
naming the primitive, block and loop; a failed primitive leaves the schedule unchanged (the
IR is immutable, so the old function simply stays). ``copy()`` is O(1) for the same reason.

>>> import probsched as ps
>>> A = ps.placeholder((32, 32), name="A")
>>> B = ps.placeholder((32, 32), name="B")
>>> k = ps.reduce_axis(32, name="k")
>>> C = ps.compute((32, 32), lambda i, j: ps.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> sch = ps.Schedule(ps.create_func([A, B, C]))
>>> c = sch.get_block("C")
>>> i, j, kk = sch.get_loops(c)
>>> i0, i1 = sch.split(i, [None, 8])
>>> sch.reorder(i0, j, kk, i1)
>>> sch.parallel(i0)
>>> [l.name for l in sch.get_loops(c)]
['i_0', 'j', 'k', 'i_1']
>>> try:
...     sch.parallel(kk)
... except ps.ScheduleError as e:
...     print(e)
parallel: loop k is bound to a reduction iterator of block C; iterations would race on the accumulation (use rfactor first)
"""

from __future__ import annotations

import warnings
from typing import Any, List, Optional, Sequence, Union

import handlers
from handlers import Categorical

from ..errors import ScheduleError
from ..ir import intrinsic as intrinsic_registry
from ..ir.stmt import Block, Loop, PrimFunc
from .distributions import ComputeLocation, PerfectTile
from . import blockize as blockize_mod
from . import cache, compute_location, dataflow, loops, reduction
from . import layout as layout_mod
from . import tensorize as tensorize_mod
from . import winograd as winograd_mod
from .instructions import BlockRV, Instruction, InstructionLog, LoopRV
from .tree import TreeIndex, children_of, iter_blocks, make_room, require

LoopLike = Union[LoopRV, str]
BlockLike = Union[BlockRV, str]

#: (primitive, id of the program, arguments, intrinsics generation) -> (the program, the
#: result) for the pure primitives (and the compute-location query) a schedule applies.
#: The search replays the space program thousands of times per round, and a mutant differs
#: from its parent in one decision: every primitive before that decision meets the very
#: program object an earlier replay made (a hit returns the object the first replay made,
#: and the chain starts from the workload's one function), with the same arguments. Keyed
#: by identity, not structure: hashing each new program structurally cost DEP:0's search
#: more than the hits saved. The entry holds the program, so its id stays unique while
#: cached. Failures are not kept (they are rare and their messages name the schedule).
_TRANSITIONS: dict = {}
_TRANSITIONS_MAX = 16384


def _tensorize_named(mod: PrimFunc, block: str, intrin: str) -> PrimFunc:
    return tensorize_mod.tensorize(mod, block, intrinsic_registry.get(intrin))


def _memo_key(fn, mod: PrimFunc, args: tuple) -> tuple:
    return (fn, id(mod), args, intrinsic_registry.generation)


def _memo_get(key: tuple, mod: PrimFunc):
    """The cached result of ``key`` made from this very ``mod``, or None."""
    try:
        hit = _TRANSITIONS.get(key)
    except TypeError:  # an unhashable argument (an annotation's list value): not memoized
        return None
    return hit[1] if hit is not None and hit[0] is mod else None


def _memo_put(key: tuple, mod: PrimFunc, out) -> None:
    make_room(_TRANSITIONS, _TRANSITIONS_MAX)
    try:
        _TRANSITIONS[key] = (mod, out)
    except TypeError:  # unhashable arguments (see _memo_get)
        pass


def _name(x, kind: type, primitive: str) -> str:
    if isinstance(x, kind):
        return x.name
    if isinstance(x, str):
        return x
    want = "block" if kind is BlockRV else "loop"
    require(False, primitive, f"expected a {want} handle, got {x!r}")
    raise AssertionError  # unreachable


class Schedule:
    """A function being scheduled: ``mod`` is the current program, ``instructions`` its log."""

    def __init__(self, func: PrimFunc) -> None:
        if not isinstance(func, PrimFunc):
            # imported here: a schedule is made per candidate, nearly always of a PrimFunc
            from ..workloads.workload import as_workload

            func = as_workload(func).func
        self._func = func
        self._mod = func
        self._instructions = InstructionLog()

    # ------------------------------------------------------------------ state
    @property
    def func(self) -> PrimFunc:
        """The unscheduled function."""
        return self._func

    @property
    def mod(self) -> PrimFunc:
        """The scheduled function (a :class:`~probsched.PrimFunc`)."""
        return self._mod

    @property
    def instructions(self) -> InstructionLog:
        """The instruction log: every primitive this schedule received, printable as Python."""
        return self._instructions

    @property
    def trace(self) -> InstructionLog:
        """Deprecated name of :attr:`instructions` (a handlers ``Trace`` is something else)."""
        warnings.warn("Schedule.trace is deprecated; use Schedule.instructions", DeprecationWarning, stacklevel=2)
        return self._instructions

    def copy(self) -> "Schedule":
        """An independent schedule sharing the (immutable) IR: O(length of the log)."""
        other = Schedule.__new__(Schedule)
        other._func = self._func
        other._mod = self._mod
        other._instructions = self._instructions.copy()
        return other

    def _idx(self) -> TreeIndex:
        return TreeIndex.of(self._mod)  # shared by the primitives that change it next

    def _record(self, kind: str, inputs: Sequence, attrs: dict, outputs: Sequence, decision: Any = None) -> None:
        self._instructions.append(Instruction(kind, inputs, attrs, outputs, decision))

    def _apply(self, fn, *args):
        """``fn(mod, *args)`` (a pure primitive returning the new program, or it and more),
        checked against tensorized blocks and made the current program; memoized in
        :data:`_TRANSITIONS`."""
        key = _memo_key(fn, self._mod, args)
        out = _memo_get(key, self._mod)
        if out is None:
            out = fn(self._mod, *args)
            if isinstance(out, tuple):
                out = tuple(tuple(x) if isinstance(x, list) else x for x in out)
            tensorize_mod.check_tensorized(self._mod, out[0] if isinstance(out, tuple) else out)
            _memo_put(key, self._mod, out)
        self._mod = out[0] if isinstance(out, tuple) else out
        return out

    def __repr__(self) -> str:
        return f"Schedule({self._func.name}, {len(self._instructions)} instructions)"

    def show(self) -> str:
        """The scheduled program's text."""
        return str(self._mod)

    # ------------------------------------------------------------------ handles
    def get_block(self, name: str) -> BlockRV:
        """The block named ``name``."""
        require(name in self._idx().blocks, "get_block", f"no block named {name!r} (blocks: {sorted(self._idx().blocks)})")
        rv = BlockRV(name)
        self._record("get_block", [name], {}, [rv])
        return rv

    def get_loop(self, name: str) -> LoopRV:
        """The loop whose variable is ``name``."""
        require(name in self._idx().loops, "get_loop", f"no loop named {name!r}")
        rv = LoopRV(name)
        self._record("get_loop", [name], {}, [rv])
        return rv

    def get_loops(self, block: BlockLike) -> List[LoopRV]:
        """Loops around ``block``, outermost first."""
        b = _name(block, BlockRV, "get_loops")
        loops.lookup_block(self._idx(), b, "get_loops")
        out = [LoopRV(l.name) for l in self._idx().loops_above(b)]
        self._record("get_loops", [BlockRV(b)], {}, out)
        return out

    def get_child_blocks(self, parent: Union[BlockLike, LoopLike, None] = None) -> List[BlockRV]:
        """Blocks directly under a loop or blockized block (or the whole function for None)."""
        idx = self._idx()
        if parent is None:
            stmts = self._mod.body
            inputs: list = []
        elif isinstance(parent, LoopRV) or (isinstance(parent, str) and parent in idx.loops):
            n = _name(parent, LoopRV, "get_child_blocks")
            _, node = loops.lookup_loop(idx, n, "get_child_blocks")
            stmts = node.body
            inputs = [LoopRV(n)]
        else:
            n = _name(parent, BlockRV, "get_child_blocks")
            _, node = loops.lookup_block(idx, n, "get_child_blocks")
            stmts = children_of(node)
            inputs = [BlockRV(n)]
        out: List[BlockRV] = []

        def visit(s) -> None:
            if isinstance(s, Block):
                out.append(BlockRV(s.name))
            elif isinstance(s, Loop):
                for c in s.body:
                    visit(c)

        for s in stmts:
            visit(s)
        self._record("get_child_blocks", inputs, {}, out)
        return out

    def get_producers(self, block: BlockLike) -> List[BlockRV]:
        """Blocks that write what ``block`` reads."""
        b = _name(block, BlockRV, "get_producers")
        loops.lookup_block(self._idx(), b, "get_producers")
        out = [BlockRV(x.name) for x in dataflow.producers(self._mod, b)]
        self._record("get_producers", [BlockRV(b)], {}, out)
        return out

    def get_consumers(self, block: BlockLike) -> List[BlockRV]:
        """Blocks that read what ``block`` writes."""
        b = _name(block, BlockRV, "get_consumers")
        loops.lookup_block(self._idx(), b, "get_consumers")
        out = [BlockRV(x.name) for x in dataflow.consumers(self._mod, b)]
        self._record("get_consumers", [BlockRV(b)], {}, out)
        return out

    def get(self, rv: Union[BlockRV, LoopRV]) -> Union[Block, Loop]:
        """The IR node a handle refers to (a :class:`Block` or :class:`Loop`)."""
        idx = self._idx()
        if isinstance(rv, BlockRV):
            return loops.lookup_block(idx, rv.name, "get")[1]
        return loops.lookup_loop(idx, _name(rv, LoopRV, "get"), "get")[1]

    def blocks(self) -> List[str]:
        """Names of every block, in program order."""
        return [b.name for b in iter_blocks(self._mod.body)]

    # ------------------------------------------------------------------ queries (nothing recorded)
    def has_block(self, name: str) -> bool:
        """Whether a block of that name exists (a rule's earlier inlining may have removed it)."""
        return name in self._idx().blocks

    def block_node(self, name: str) -> Block:
        """The IR block named ``name`` (a query: unlike :meth:`get_block`, records nothing)."""
        return loops.lookup_block(self._idx(), name, "block_node")[1]

    def loops_of(self, name: str) -> List[Loop]:
        """The IR loops around block ``name``, outermost first (records nothing)."""
        loops.lookup_block(self._idx(), name, "loops_of")
        return list(self._idx().loops_above(name))

    def can_set_kind(self, loop: LoopLike, kind: str) -> bool:
        """Whether :meth:`parallel` / :meth:`vectorize` / :meth:`unroll` (``kind``
        ``"parallel"``, ``"vectorized"``, ``"unrolled"``) would accept ``loop``; changes nothing."""
        try:
            loops.set_kind(self._mod, _name(loop, LoopRV, "can_set_kind"), kind, check_only=True)
        except ScheduleError:
            return False
        return True

    # ------------------------------------------------------------------ loop primitives
    def split(self, loop: LoopLike, factors: Sequence[Optional[int]]) -> List[LoopRV]:
        """Split ``loop`` into nested loops of the given extents (outer to inner); one may be None."""
        n = _name(loop, LoopRV, "split")
        factors = [None if f is None else _as_int(f) for f in factors]
        _, names = self._apply(loops.split, n, tuple(factors))
        out = [LoopRV(x) for x in names]
        self._record("split", [LoopRV(n)], {"factors": factors}, out)
        return out

    def fuse(self, *loop_rvs: LoopLike) -> LoopRV:
        """Fuse directly nested loops, outermost first, into one."""
        names = [_name(l, LoopRV, "fuse") for l in loop_rvs]
        _, name = self._apply(loops.fuse, tuple(names))
        out = LoopRV(name)
        self._record("fuse", [LoopRV(x) for x in names], {}, [out])
        return out

    def reorder(self, *loop_rvs: LoopLike) -> None:
        """Put loops of one perfect nest in the given order."""
        names = [_name(l, LoopRV, "reorder") for l in loop_rvs]
        self._apply(loops.reorder, tuple(names))
        self._record("reorder", [LoopRV(x) for x in names], {}, [])

    def parallel(self, loop: LoopLike) -> None:
        """Run ``loop``'s iterations on all cores (it must not drive a reduction)."""
        self._kind("parallel", loop, "parallel")

    def vectorize(self, loop: LoopLike) -> None:
        """Mark an innermost, data-parallel loop for SIMD."""
        self._kind("vectorize", loop, "vectorized")

    def unroll(self, loop: LoopLike) -> None:
        """Unroll ``loop`` in the generated source."""
        self._kind("unroll", loop, "unrolled")

    def _kind(self, prim: str, loop: LoopLike, kind: str) -> None:
        n = _name(loop, LoopRV, prim)
        self._apply(loops.set_kind, n, kind)
        self._record(prim, [LoopRV(n)], {}, [])

    def annotate(self, target: Union[BlockLike, LoopLike], key: str, value: Any) -> None:
        """Attach ``key=value`` to a block or loop (e.g. ``pragma_auto_unroll_max_step``)."""
        if isinstance(target, BlockRV) or (isinstance(target, str) and target in self._idx().blocks):
            n = _name(target, BlockRV, "annotate")
            self._apply(loops.annotate_block, n, key, value)
            self._record("annotate", [BlockRV(n)], {"key": key, "value": value}, [])
        else:
            n = _name(target, LoopRV, "annotate")
            self._apply(loops.annotate_loop, n, key, value)
            self._record("annotate", [LoopRV(n)], {"key": key, "value": value}, [])

    def unannotate(self, target: Union[BlockLike, LoopLike], key: str) -> None:
        """Remove annotation ``key`` from a block or loop."""
        if isinstance(target, BlockRV) or (isinstance(target, str) and target in self._idx().blocks):
            n = _name(target, BlockRV, "unannotate")
            self._apply(loops.unannotate_block, n, key)
            self._record("unannotate", [BlockRV(n)], {"key": key}, [])
        else:
            n = _name(target, LoopRV, "unannotate")
            self._apply(loops.unannotate_loop, n, key)
            self._record("unannotate", [LoopRV(n)], {"key": key}, [])

    # ------------------------------------------------------------------ compute location
    def compute_at(self, block: BlockLike, loop: LoopLike) -> None:
        """Move a producer under a loop of its consumers, computing only what they read there."""
        b, l = _name(block, BlockRV, "compute_at"), _name(loop, LoopRV, "compute_at")
        self._apply(compute_location.compute_at, b, l)
        self._record("compute_at", [BlockRV(b), LoopRV(l)], {}, [])

    def reverse_compute_at(self, block: BlockLike, loop: LoopLike) -> None:
        """Move a consumer under a loop of its producers, over what they write there."""
        b, l = _name(block, BlockRV, "reverse_compute_at"), _name(loop, LoopRV, "reverse_compute_at")
        self._apply(compute_location.reverse_compute_at, b, l)
        self._record("reverse_compute_at", [BlockRV(b), LoopRV(l)], {}, [])

    def compute_inline(self, block: BlockLike) -> None:
        """Inline an elementwise producer into its consumers."""
        b = _name(block, BlockRV, "compute_inline")
        self._apply(compute_location.compute_inline, b)
        self._record("compute_inline", [BlockRV(b)], {}, [])

    def reverse_compute_inline(self, block: BlockLike) -> None:
        """Inline an elementwise consumer into its elementwise producer."""
        b = _name(block, BlockRV, "reverse_compute_inline")
        self._apply(compute_location.reverse_compute_inline, b)
        self._record("reverse_compute_inline", [BlockRV(b)], {}, [])

    # ------------------------------------------------------------------ caching
    def cache_read(self, block: BlockLike, read_index: int, scope: str = "local") -> BlockRV:
        """Read the ``read_index``-th input of ``block`` through a copy in ``scope``."""
        b = _name(block, BlockRV, "cache_read")
        _, name = self._apply(cache.cache_read, b, read_index, scope)
        out = BlockRV(name)
        self._record("cache_read", [BlockRV(b)], {"read_index": read_index, "scope": scope}, [out])
        return out

    def cache_write(self, block: BlockLike, write_index: int = 0, scope: str = "local") -> BlockRV:
        """Compute ``block`` into a copy in ``scope``, written back by the returned block."""
        b = _name(block, BlockRV, "cache_write")
        _, name = self._apply(cache.cache_write, b, write_index, scope)
        out = BlockRV(name)
        self._record("cache_write", [BlockRV(b)], {"write_index": write_index, "scope": scope}, [out])
        return out

    # ------------------------------------------------------------------ reductions
    def rfactor(self, loop: LoopLike, factor_axis: int = 0) -> BlockRV:
        """Factor a reduction over ``loop`` into partial results; returns the rf block."""
        n = _name(loop, LoopRV, "rfactor")
        _, name = self._apply(reduction.rfactor, n, factor_axis)
        out = BlockRV(name)
        self._record("rfactor", [LoopRV(n)], {"factor_axis": factor_axis}, [out])
        return out

    def decompose_reduction(self, block: BlockLike, loop: LoopLike) -> BlockRV:
        """Move a reduction's init before ``loop`` as its own block; returns that block."""
        b, l = _name(block, BlockRV, "decompose_reduction"), _name(loop, LoopRV, "decompose_reduction")
        _, name = self._apply(reduction.decompose_reduction, b, l)
        out = BlockRV(name)
        self._record("decompose_reduction", [BlockRV(b), LoopRV(l)], {}, [out])
        return out


    # ------------------------------------------------------------------ layouts
    def transform_layout(self, buffer: str, splits: Sequence[Sequence[int]], order: Sequence[int]) -> None:
        """Store the input parameter ``buffer`` split per dimension into ``splits`` and the
        pieces in ``order`` (a :class:`~.layout.Layout`); callers still pass it in its own
        shape (see :mod:`probsched.schedule.layout`). A buffer the function allocates (a
        packing stage's copy) may be laid out too: nobody outside sees it."""
        params = {b.name: b for b in self._mod.params + self._mod.allocs}
        if buffer not in params:
            raise ScheduleError(f"transform_layout: {buffer} is neither a parameter nor an allocation of {self._mod.name}")
        if layout_mod.laid_out(self._mod, buffer):
            raise ScheduleError(f"transform_layout: parameter {buffer} is laid out already")
        try:
            lay = layout_mod.Layout(params[buffer].shape, tuple(tuple(f) for f in splits), tuple(order))
        except ValueError as exc:
            raise ScheduleError(f"transform_layout: {buffer}: {exc}") from None
        self._apply(layout_mod.transform_layout, buffer, lay)
        self._record(
            "transform_layout", [], {"buffer": buffer, "splits": [list(f) for f in lay.splits], "order": list(lay.order)}, []
        )

    def tile_layout(self, block: BlockLike, buffer: str) -> Optional["layout_mod.Layout"]:
        """The layout in which ``block``'s loops read ``buffer`` in order (a query: nothing
        changes, nothing is recorded), or None (see :func:`~.layout.tile_layout`)."""
        b = _name(block, BlockRV, "tile_layout")
        loops.lookup_block(self._idx(), b, "tile_layout")
        return layout_mod.tile_layout(self._mod, b, buffer, self._idx().loops_above(b))

    # ------------------------------------------------------------------ algorithms
    def winograd(self, block: BlockLike, tile: int) -> List[BlockRV]:
        """Compute the 3x3 stride-1 convolution ``block`` by Winograd's F(``tile`` x
        ``tile``, 3x3), ``tile`` 2 or 4 (see :mod:`probsched.schedule.winograd`): the block
        is replaced by its weight, input and output transforms and a batched matmul, returned
        in program order: the transforms' constant tables, the weight's two passes (unless
        the weight is bound), the input's two, the batched matmul, the output's two (the last
        keeps the block's name). The block must
        be unscheduled; its weight, when layout-free, is transformed once when the kernel is
        bound."""
        b = _name(block, BlockRV, "winograd")
        tile = _as_int(tile)
        _, names = self._apply(winograd_mod.winograd, b, tile)
        out = [BlockRV(x) for x in names]
        self._record("winograd", [BlockRV(b)], {"tile": tile}, out)
        return out

    # ------------------------------------------------------------------ micro-kernels
    def blockize(self, loop: LoopLike) -> BlockRV:
        """Wrap the loop nest under ``loop`` into one block; returns it."""
        n = _name(loop, LoopRV, "blockize")
        _, name = self._apply(blockize_mod.blockize, n)
        out = BlockRV(name)
        self._record("blockize", [LoopRV(n)], {}, [out])
        return out

    def tensorize(self, block_or_loop: Union[BlockLike, LoopLike], intrin: str) -> BlockRV:
        """Compute a tile with a registered intrinsic (a loop is blockized first); returns the block."""
        intrinsic = intrinsic_registry.get(intrin)
        if isinstance(block_or_loop, LoopRV) or (
            isinstance(block_or_loop, str) and block_or_loop in self._idx().loops
        ):
            block = self.blockize(block_or_loop)
        else:
            block = BlockRV(_name(block_or_loop, BlockRV, "tensorize"))
        self._apply(_tensorize_named, block.name, intrinsic.name)
        self._record("tensorize", [block], {"intrin": intrin}, [block])
        return block


    # ------------------------------------------------------------------ sampling instructions
    def _decide(self, kind: str, name: str, dist, decision, inputs: list, attrs: dict, tag: Optional[str] = None):
        """Draw (or take) a decision through ``handlers.sample`` and log the instruction.
        ``tag`` goes to the site's ``infer`` (what search strategies select sites by)."""
        if tag is not None:
            attrs = dict(attrs, tag=tag)
        if decision is None:
            value = handlers.sample(name, dist, infer=None if tag is None else {"tag": tag})
        else:
            value = tuple(decision) if isinstance(decision, list) else decision
            require(
                dist.contains(value),
                kind,
                f"decision {decision!r} for site {name} is outside the support of {dist!r}",
            )
        self._record(kind, inputs, dict(attrs, name=name), [value], decision=value)
        return value

    def sample_perfect_tile(
        self,
        loop: LoopLike,
        n: int,
        max_innermost_factor: Optional[int] = None,
        name: Optional[str] = None,
        decision: Optional[Sequence[int]] = None,
    ) -> List[int]:
        """Tile sizes for ``loop``: ``n`` factors whose product is its extent (site ``<block>/<loop>/tile``)."""
        l = _name(loop, LoopRV, "sample_perfect_tile")
        path, node = loops.lookup_loop(self._idx(), l, "sample_perfect_tile")
        if name is None:
            under = [b.name for b in iter_blocks(node)]
            name = f"{under[0] if under else self._func.name}/{l}/tile"
        dist = PerfectTile(node.extent, n, max_innermost_factor)
        attrs = {"n": n, "max_innermost_factor": max_innermost_factor}
        return list(self._decide("sample_perfect_tile", name, dist, decision, [LoopRV(l)], attrs))

    def sample_categorical(
        self,
        candidates: Sequence[Any],
        probs: Optional[Sequence[float]] = None,
        name: Optional[str] = None,
        decision: Any = None,
        tag: Optional[str] = None,
    ) -> Any:
        """One of ``candidates`` (site ``name``, default ``categorical_<k>``). ``tag`` says
        what kind of decision it is to search strategies (the site's ``infer["tag"]``:
        ``"unroll"``, ``"parallel"``, ``"algorithm"``; see :mod:`probsched.search.mutators`)."""
        if name is None:
            k = sum(1 for inst in self._instructions if inst.kind == "sample_categorical")
            name = f"categorical_{k}"
        dist = Categorical(list(candidates), probs=None if probs is None else list(probs))
        attrs = {"candidates": list(candidates), "probs": None if probs is None else list(probs)}
        return self._decide("sample_categorical", name, dist, decision, [], attrs, tag)

    def compute_locations(self, block: BlockLike) -> List[str]:
        """Valid locations of ``block``: ``"root"``, ``"inline"`` when legal, loops of its consumers.

        Inlining is offered only when :meth:`compute_inline` would succeed: a producer of a
        tensorized block's operand (a convolution's padding read by a micro-kernel) cannot be
        inlined as an expression, and offering it anyway made "inline" a second "root"."""
        b = _name(block, BlockRV, "sample_compute_location")
        loops.lookup_block(self._idx(), b, "sample_compute_location")
        key = _memo_key("compute_locations", self._mod, (b,))
        hit = _memo_get(key, self._mod)
        if hit is None:
            hit = tuple(self._compute_locations(b))
            _memo_put(key, self._mod, hit)
        return list(hit)

    def _compute_locations(self, b: str) -> List[str]:
        out = ["root"]
        try:
            compute_location.compute_inline(self._mod, b, check_only=True)
            # only a tensorized block can refuse the inlined program: build it just then
            # (building it for every replayed candidate showed in a search round's profile)
            if any(blk.annotation(tensorize_mod.TENSORIZE_KEY) for blk in self._idx().block_nodes):
                tensorize_mod.check_tensorized(self._mod, compute_location.compute_inline(self._mod, b))
            out.append("inline")
        except ScheduleError:
            pass
        cons = dataflow.consumers(self._mod, b)
        seen = set()
        candidates = []
        for c in cons:
            for l in self._idx().loops_above(c.name):
                if l.name in seen:
                    continue
                seen.add(l.name)
                if l.extent > 1 and not _reads_vary_with(self._idx(), b, l):
                    continue
                candidates.append(l.name)
        return out + compute_location.legal_compute_at_loops(self._mod, b, candidates)

    def sample_compute_location(self, block: BlockLike, name: Optional[str] = None, decision: Optional[str] = None) -> str:
        """Where to compute ``block`` (site ``<block>/compute_at``): a loop name, "root" or "inline"."""
        b = _name(block, BlockRV, "sample_compute_location")
        support = self.compute_locations(b)
        if isinstance(decision, str) and decision not in support and decision in self._idx().loops:
            # a stored decision at a loop that is legal but no longer offered (one that repeats
            # work): replaying a measured schedule must still rebuild it
            try:
                compute_location.compute_at(self._mod, b, decision, check_only=True)
                support = support + [decision]
            except ScheduleError:
                pass
        elif decision == "inline" and decision not in support:
            # recorded before "inline" was withheld from tensorized operands' producers: the
            # record still replays (the rule's compute_inline fails and leaves the block)
            try:
                compute_location.compute_inline(self._mod, b)
                support = support + [decision]
            except ScheduleError:
                pass
        dist = ComputeLocation(support)
        name = name or f"{b}/compute_at"
        return self._decide("sample_compute_location", name, dist, decision, [BlockRV(b)], {})


def _reads_vary_with(idx, producer: str, loop: Loop) -> bool:
    """Whether what the blocks under ``loop`` read of ``producer``'s outputs depends on the
    loop's variable. When it does not, computing the producer inside ``loop`` repeats the
    same work each iteration (softmax's row max recomputed for every element of the row), so
    :meth:`Schedule.compute_locations` does not offer it. Conservative: a read through a
    variable it cannot trace to loops (a nested block's iterator) counts as varying.
    """
    from ..ir.expr import Load, free_vars, substitute, walk

    written = {st.buffer.name for st in idx.at(idx.block_path(producer)).stores()}
    loop_vars = set(idx.loops)
    for blk in idx.blocks_under(idx.loops[loop.name]):
        binding = {it.var.name: bd for it, bd in zip(blk.iters, blk.bindings)}
        for st in blk.stores():
            for ld in walk(st.value):
                if not isinstance(ld, Load) or ld.buffer.name not in written:
                    continue
                used = set()
                for ix in ld.indices:
                    used |= free_vars(substitute(ix, binding))
                if loop.name in used or not used <= loop_vars:
                    return True
    return False


def _as_int(x) -> int:
    import numpy as np

    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    return x  # let the primitive report the bad value with its context
