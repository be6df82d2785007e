"""Loop-nest IR to the Python source of a numba module.

:func:`emit_module` turns a :class:`~probsched.ir.stmt.PrimFunc` into a
:class:`ModuleSource`: the text, the functions to compile (callees first) with their
argument types, and the plan the kernel wrapper follows. What it promises: the source
computes what the IR computes (the same stores, in an order the IR allows), and the
schedule's decisions (loop kinds, unrolling, scratch buffers, parallel loops) reach numba
and LLVM in a form they keep instead of being left to the compiler to rediscover. The
generated code, and why each choice:

- takes every buffer as a flat 1-D C-contiguous array and indexes it with a flat int64
  index cast once to ``np.uint64`` (``A[_u64(i * 512 + k)]``): numba guards signed indices
  for negative wraparound, which hides contiguity from LLVM's vectorizers;
- emits loops by kind: ``serial`` and ``vectorized`` as ``range`` loops (LLVM vectorizes
  the innermost one), ``unrolled`` as ``extent`` copies of the body with the loop variable
  replaced by constants (at most :data:`MAX_UNROLL_NODES` expression nodes, see
  :func:`emitted_size`; a larger body stays a plain loop: unrolling is a hint),
  ``parallel`` per the parallel form (below); loop annotations are not used yet
  (``pragma_auto_unroll_max_step`` may be honoured later); loops of extent 1 are
  substituted by 0;
- inlines block iterators whose binding is affine in the loop variables and assigns the
  others (``v_f = f // 4``) once; guards the body with the block predicate; runs a
  reduction ``init`` before the reduction loops when they hold nothing else and feed only
  reduction iterators (hoisted), else under ``if <reduction iterators> == 0:``;
- allocates ``global`` intermediates in the kernel wrapper (once per kernel) and passes
  them after the parameters; ``local`` scratch buffers become scalar variables when every
  access has a constant index (after unrolling), else an array allocated once per thread
  (on the stack up to :data:`~.stackalloc.MAX_STACK_BYTES`, where LLVM can keep a register
  tile in registers; ``np.empty`` beyond): at the start of the function, of the parallel body, or of the thread's
  chunk, whichever innermost one encloses all uses (hoisted out of serial loops so that no
  loop iteration pays for an allocation);
- names: every IR name is mangled to a unique identifier (:class:`~.names.Namer`), block
  comments carry the IR's block names.

Parallel forms (``parallel=`` of :func:`emit_module`):

- ``"threads"``: each top-level parallel loop is a *segment* of the one compiled (nogil)
  function ``main(_ps_seg, _ps_lo, _ps_hi, arrays...)``; the kernel wrapper runs a parallel
  segment as contiguous chunks of the loop on a thread pool. One function to compile, no
  ``parallel=True`` launcher, but each call of a parallel segment wakes a sleeping Python
  thread, a handoff that small kernels feel. Needs every outermost parallel loop to be a
  top-level statement of the function.
- ``"prange"``: each outermost parallel loop becomes a separately compiled nogil body
  function running a chunk ``range(lo, hi)`` of the loop, with the enclosing integer
  variables and the arrays as arguments, and a call to the launcher shared by every loop
  of that argument signature (:mod:`.launch`), which runs one chunk per thread (on the
  spinning workers of :mod:`.spin_pool`, else numba's pool), calling the body by address.
  Works at any depth. The name stayed from when every launcher was a ``prange`` loop.
- ``"auto"``: prange whenever there is a parallel loop: it ran every suite workload's
  best kernel at least as fast as the threads form (much faster for small kernels, where
  the thread handoff is a large share of a call), and since the shared launcher of
  :mod:`.launch` its extra compile time is small (``python benchmarks/bench_parallel_form.py``
  times both forms).

Parallel loops nested in a parallel loop run serially in every form.

>>> import probsched as ps
>>> A = ps.placeholder((4, 8), name="A")
>>> k = ps.reduce_axis(8, name="k")
>>> S = ps.compute((4,), lambda i: ps.sum(A[i, k], axis=k), name="S")
>>> print(emit_module(ps.create_func([A, S])).function_source("main"))
def main(A, S):
    for i in range(4):
        # block S: init hoisted out of k
        S[_u64(i)] = np.float32(0.0)
        for k in range(8):
            # block S
            S[_u64(i)] = S[_u64(i)] + A[_u64(i * 8 + k)]
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import BuildError
from ..ir.dtypes import BF16, NARROW_INT_DTYPES, numpy_dtype, storage_dtype
from ..ir.expr import BOOL, INT_DTYPES, Cast, Const, Expr, Load, Select, Var, all_of, as_expr, binary, children, eq, free_vars, substitute, walk
from ..ir.stmt import Block, Buffer, Loop, PrimFunc, Store
from .exprs import ExprWriter, const_src, fold_bool, linear_const, linearize, saturate_src
from .names import Namer
from .registry import lookup, lookup_block

MAX_UNROLL_NODES = 4096
"""Largest :func:`emitted_size` an ``unrolled`` loop may expand to; a larger one stays a loop.

Calibrated on tuning records of the suite: kernels whose largest unrolled loop held about
half this many nodes still compiled in seconds, while a 256-way unroll of T2D's interleave
copy (over this bound) took tens of seconds or hit the compile timeout."""

MAX_SCALARISED_ELEMENTS = 256
"""A local buffer with more accessed elements than this stays an array."""

PARALLEL_FORMS = ("auto", "threads", "prange")

_LAUNCH_FAILED = "a parallel loop body failed (an exception in its chunk, e.g. out of memory)"

_ROOT = ("root",)


def _is_fn_scope(key: tuple) -> bool:
    return key[0] in ("root", "seg", "fn")


@dataclass
class FunctionSpec:
    """One function of the generated module: name, argument kinds, source lines."""

    name: str
    args: List[Tuple[str, str]]  # (name, "int64") or (name, "array:<dtype>")
    lines: List[str] = field(default_factory=list)


@dataclass
class LaunchSpec:
    """A parallel loop of the prange form: the entry calls the shared launcher of the
    argument ``kinds`` by its address ``launcher`` with the address ``address`` of the
    compiled ``body`` (see :mod:`.launch`). Both are int64 arguments of the entry, after its
    arrays, which the kernel passes at each call (:attr:`ModuleSource.address_args`): the
    compiled entry holds no address of this process, and the launcher's code is not linked
    into it (compiling each entry with its launcher inlined made every kernel's build
    several times longer)."""

    launcher: str
    address: str
    body: str
    kinds: Tuple[str, ...]


@dataclass
class Segment:
    """A top-level part of a threads-form function: serial, or a parallel loop's range."""

    index: int
    extent: Optional[int]  # None for a serial segment
    label: str


@dataclass
class ModuleSource:
    """What :func:`emit_module` produces."""

    func: PrimFunc
    source: str
    functions: List[FunctionSpec]  # compile order: callees first, entry last
    entry: str
    arrays: List[Buffer]  # entry's array arguments: parameters, then wrapper-allocated buffers
    wrapper_allocs: List[Buffer]
    segments: Optional[List[Segment]]
    parallel_form: str  # "none", "threads" or "prange"
    extra_globals: Dict[str, object]
    launches: List[LaunchSpec] = field(default_factory=list)
    #: The entry's int64 arguments after its arrays, in order: ``("launcher", kinds)`` (the
    #: address of the shared launcher of those kinds) or ``("body", name)`` (of that body).
    address_args: List[Tuple[str, object]] = field(default_factory=list)
    #: Global name the code calls a function by address through (``call_by_address``), if any.
    call_global: Optional[str] = None

    @property
    def rounds(self) -> bool:
        """Whether the code rounds floats to integers (a quantized task's requantization):
        it is compiled to round exactly the float values its reference rounds
        (:func:`~.compile.generated_options` ``exact``)."""
        return "np.rint(" in self.source

    def by_address(self) -> set:
        """Names of the functions only called through their address (by the launcher)."""
        return {key for kind, key in self.address_args if kind == "body"}

    def function_source(self, name: str) -> str:
        """The text of one generated function."""
        for f in self.functions:
            if f.name == name:
                return "\n".join(f.lines)
        raise KeyError(name)


# ----------------------------------------------------------------------------- analysis record


@dataclass
class _LocalUse:
    paths: list = field(default_factory=list)  # scope paths of the accesses
    const_indices: list = field(default_factory=list)  # flat constant indices (in first-access order)
    all_const: bool = True
    needs_array: bool = False


@dataclass
class _Decisions:
    scalars: Dict[str, tuple] = field(default_factory=dict)  # buffer name -> declaration scope
    arrays: Dict[str, tuple] = field(default_factory=dict)  # buffer name -> allocation scope
    promoted: List[str] = field(default_factory=list)  # local buffers allocated by the wrapper
    const_indices: Dict[str, list] = field(default_factory=dict)


class _Fn:
    def __init__(self, spec: FunctionSpec, indent: int) -> None:
        self.spec = spec
        self.indent = indent


# ----------------------------------------------------------------------------- the emitter


class Emitter:
    """Writes one function's module; also the context handed to statement emitters.

    Public methods for statement emitters (see :mod:`probsched.codegen.registry`):
    :meth:`line`, :meth:`comment`, :meth:`indented`, :meth:`expr`, :meth:`index`,
    :meth:`array`, :meth:`add_global`, :meth:`fresh`, :meth:`emit`.
    """

    def __init__(self, func: PrimFunc, form: str, decisions: Optional[_Decisions]) -> None:
        self.func = func
        self.form = form  # "none" | "threads" | "prange"
        self.decisions = decisions
        self.analysis: Dict[str, _LocalUse] = {}
        self.namer = Namer()
        self.globals: Dict[str, object] = {}
        self.functions: List[FunctionSpec] = []
        self.launches: List[LaunchSpec] = []
        self.launcher_args: Dict[tuple, str] = {}  # launcher kinds -> the entry's argument
        self.address_args: List[Tuple[str, tuple]] = []  # the entry's int64 arguments after its arrays
        self.call_global: Optional[str] = None
        self.env: Dict[str, Expr] = {}
        self.bound: List[str] = []  # integer names in scope, in binding order
        self.scope: List[tuple] = [_ROOT]
        self.hoisted: set = set()
        # id(block) -> whether its init runs: set while a loop's peeled first iteration and
        # its other iterations are emitted (see _peeled)
        self.init_mode: Dict[int, bool] = {}
        self.in_parallel = False
        self.unroll_sizes: dict = {}
        self.buffers: Dict[str, Buffer] = {b.name: b for b in func.params + func.allocs}
        self.array_names: Dict[str, str] = {}
        for b in func.params + func.allocs:
            self.array_names[b.name] = self.namer.fresh(b.name)
        self.local_names = {b.name for b in func.allocs if b.scope == "local"}
        self.loop_names: Dict[str, str] = {}
        self.iter_names: Dict[tuple, str] = {}
        self.scalar_names: Dict[tuple, str] = {}
        self.visible_arrays: List[str] = []
        self.alloc_scopes: Dict[tuple, list] = {}
        self.scalar_scopes: Dict[tuple, list] = {}
        if decisions is not None:
            for name, key in decisions.arrays.items():
                self.alloc_scopes.setdefault(key, []).append(name)
            for name, key in decisions.scalars.items():
                self.scalar_scopes.setdefault(key, []).append(name)
        self.writer = ExprWriter(self._load_src, None, self.add_global)
        self.fn: Optional[_Fn] = None
        self.context: List[str] = []  # "block C", "loop i" for error messages
        # (IR name, extent) of the loops around the statement being emitted: bounds that
        # statement emitters may simplify with (a laid-out weight's index in a micro-kernel call)
        self.ir_loops: List[Tuple[str, int]] = []

    # ------------------------------------------------------------------ public context API

    def line(self, text: str) -> None:
        """Append a line of source at the current indentation."""
        self.fn.spec.lines.append("    " * self.fn.indent + text)

    def comment(self, text: str) -> None:
        """Append a comment line."""
        self.line("# " + text)

    @contextlib.contextmanager
    def indented(self):
        """Indent the lines written inside the ``with``; writes ``pass`` if there were none."""
        n = len(self.fn.spec.lines)
        self.fn.indent += 1
        try:
            yield
        finally:
            # comments alone do not make a body (a block whose guard folds to False)
            if all(x.lstrip().startswith("#") for x in self.fn.spec.lines[n:]):
                self.line("pass")
            self.fn.indent -= 1

    def expr(self, e: Expr) -> str:
        """Source of an IR expression in the current scope (variables substituted)."""
        return self.writer.src(self._sub(as_expr(e)))

    def folded(self, e: Expr) -> Expr:
        """A boolean IR expression in the current scope, folded (``Const`` when decided here)."""
        return fold_bool(self._sub(as_expr(e)))

    def index(self, buffer: Buffer, indices: Sequence[Expr]) -> str:
        """Source of the flat int64 index of ``buffer[indices]`` (marks it as an array use)."""
        idx = tuple(self._sub(as_expr(i)) for i in indices)
        self._record(buffer, self._flat(buffer, idx), needs_array=True)
        return self.writer.affine_src(self._flat(buffer, idx))

    def array(self, buffer: Buffer) -> str:
        """Name of the flat array that holds ``buffer`` (marks it as an array use)."""
        self._record(buffer, None, needs_array=True)
        return self.array_names[buffer.name]

    def add_global(self, hint: str, obj) -> str:
        """Bind ``obj`` (an njit function, a constant) to a fresh global name; returns it."""
        for name, o in self.globals.items():
            if o is obj:
                return name
        name = self.namer.helper(hint)
        self.globals[name] = obj
        return name

    def fresh(self, hint: str) -> str:
        """A fresh local identifier."""
        return self.namer.fresh(hint)

    def emit(self, s) -> None:
        """Emit a statement or a tuple of statements."""
        if isinstance(s, (tuple, list)):
            for x in s:
                self.emit(x)
        elif isinstance(s, Loop):
            self._loop(s)
        elif isinstance(s, Block):
            self._block(s)
        elif isinstance(s, Store):
            self._store(s)
        else:
            fn = lookup(s)
            if fn is None:
                raise BuildError(
                    f"no code generator for statement {type(s).__name__} ({s}); "
                    "register one with probsched.codegen.register_stmt_emitter"
                )
            fn(s, self)

    # ------------------------------------------------------------------ top level

    def run(self) -> None:
        func = self.func
        self.entry = self.namer.fresh(func.name if func.name.isidentifier() else "main")
        wrapper = [b for b in func.allocs if b.scope == "global"]
        if self.decisions is not None:
            wrapper += [self.buffers[n] for n in self.decisions.promoted]
        self.wrapper_allocs = wrapper
        self.entry_arrays = list(func.params) + wrapper
        array_args = [(self.array_names[b.name], "array:" + b.dtype) for b in self.entry_arrays]
        self.visible_arrays = [a for a, _ in array_args]
        self.segments = None
        if self.form == "threads":
            seg, lo, hi = self.namer.helper("seg"), self.namer.helper("lo"), self.namer.helper("hi")
            spec = FunctionSpec(self.entry, [(seg, "int64"), (lo, "int64"), (hi, "int64")] + array_args)
            self._start_fn(spec)
            self._segments(seg, lo, hi)
        else:
            spec = FunctionSpec(self.entry, array_args)
            self._start_fn(spec)
            with self.indented():
                self._allocs(_ROOT)
                self.emit(func.body)
            if self.address_args:  # known once the body is emitted
                spec.args += [(name, "int64") for name, _ in self.address_args]
                spec.lines[0] = f"def {spec.name}({', '.join(a for a, _ in spec.args)}):"
        self.functions.append(spec)

    def _start_fn(self, spec: FunctionSpec) -> None:
        args = ", ".join(a for a, _ in spec.args)
        spec.lines.append(f"def {spec.name}({args}):")
        self.fn = _Fn(spec, 0)

    def _segments(self, seg: str, lo: str, hi: str) -> None:
        groups: list = []
        for s in self.func.body:
            if isinstance(s, Loop) and s.kind == "parallel" and s.extent > 1:
                groups.append(("parallel", s))
            elif groups and groups[-1][0] == "serial":
                groups[-1][1].append(s)
            else:
                groups.append(("serial", [s]))
        self.segments = []
        with self.indented():
            for n, (kind, item) in enumerate(groups):
                self.line(f"{'if' if n == 0 else 'elif'} {seg} == {n}:")
                key = ("seg", n)
                self.scope.append(key)
                with self.indented():
                    self._allocs(key)
                    if kind == "parallel":
                        loop = item
                        name = self._loop_name(loop)
                        self.segments.append(Segment(n, loop.extent, f"parallel loop {loop.var.name}"))
                        self._for_header(loop, name, f"range({lo}, {hi})", "parallel: this thread's chunk")
                        self.in_parallel = True
                        self._loop_body(loop, name)
                        self.in_parallel = False
                    else:
                        self.segments.append(Segment(n, None, "serial"))
                        self.emit(tuple(item))
                self.scope.pop()

    # ------------------------------------------------------------------ loops

    def _loop_name(self, loop: Loop) -> str:
        name = self.loop_names.get(loop.var.name)
        if name is None:
            name = self.loop_names[loop.var.name] = self.namer.fresh(loop.var.name)
        return name

    def _loop(self, loop: Loop) -> None:
        self.context.append(f"loop {loop.var.name}")
        self.ir_loops.append((loop.var.name, loop.extent))
        hoisted = self._hoist_init(loop)
        if loop.kind == "unrolled" and loop.extent > 1 and self._unrolled_size(loop) > MAX_UNROLL_NODES:
            # Unrolling is a hint: a body too large to copy runs as a plain loop instead.
            name = self._loop_name(loop)
            self._for_header(loop, name, f"range({loop.extent})", f"unroll skipped: over {MAX_UNROLL_NODES} expression nodes")
            self._loop_body(loop, name)
        elif loop.extent == 1 or loop.kind == "unrolled":
            self._unrolled(loop)
        elif loop.kind == "parallel" and not self.in_parallel and self.form == "prange":
            self._prange(loop)
        else:
            note = loop.kind if loop.kind != "serial" else ""
            if loop.kind == "parallel":
                note = "parallel loop inside a parallel loop: runs serially"
            peel = self._unswitchable_init(loop)
            if peel is not None:
                self._peeled(loop, peel, note)
            else:
                name = self._loop_name(loop)
                self._for_header(loop, name, f"range({loop.extent})", note)
                self._loop_body(loop, name)
        if hoisted is not None:
            self.hoisted.discard(hoisted)
        self.ir_loops.pop()
        self.context.pop()

    def _for_header(self, loop: Loop, name: str, rng: str, note: str) -> None:
        if loop.annotations:
            ann = ", ".join(f"{k}={v!r}" for k, v in loop.annotations)
            note = f"{note}; {ann}" if note else ann
        self.line(f"for {name} in {rng}:" + (f"  # {note}" if note else ""))

    def _loop_body(self, loop: Loop, name: str) -> None:
        key = ("loop", id(loop))
        with self.indented(), self._bind(loop.var.name, Var(name), name), self._scope(key):
            self.emit(loop.body)

    def _peeled(self, loop: Loop, blk: Block, note: str) -> None:
        """``loop`` with its first iteration apart: the reduction's init (its guard true only
        at that step) runs there and nowhere in the loop, so no inner loop carries the
        branch (a matmul whose init was left in place ran at a tenth of its decomposed speed)."""
        self.comment(f"block {blk.name}: the first step of {loop.var.name} peeled, with the init")
        with self._bind(loop.var.name, Const(0, "int64"), None), self._scope(("loop", id(loop))):
            first = fold_bool(all_of(*(eq(self._sub(b), 0) for it, b in zip(blk.iters, blk.bindings) if it.kind == "R")))
            if isinstance(first, Const) and first.value:
                with self._init_mode(blk, True):
                    self.emit(loop.body)
            else:  # the reduction also runs over outer loops: its first step is one of theirs
                for head, mode in ((f"if {self.writer.src(first)}:", True), ("else:", False)):
                    self.line(head)
                    with self.indented(), self._init_mode(blk, mode):
                        self.emit(loop.body)
        if loop.extent > 1:
            name = self._loop_name(loop)
            self._for_header(loop, name, f"range(1, {loop.extent})", note)
            with self._init_mode(blk, False):
                self._loop_body(loop, name)

    @contextlib.contextmanager
    def _init_mode(self, blk: Block, runs: bool):
        self.init_mode[id(blk)] = runs
        try:
            yield
        finally:
            self.init_mode.pop(id(blk), None)

    def _unswitchable_init(self, loop: Loop) -> Optional[Block]:
        """The block whose init guard is worth testing once per iteration of ``loop``: the
        single block of the perfect nest below ``loop``, a reduction with its init in place,
        whose reduction iterators depend on ``loop`` (or loops outside it) but on no loop
        below it, with a loop below it that iterates; else None."""
        chain = []
        s = loop
        while len(s.body) == 1 and isinstance(s.body[0], Loop):
            s = s.body[0]
            chain.append(s)
        if not chain or not (len(s.body) == 1 and isinstance(s.body[0], Block)):
            return None
        blk = s.body[0]
        if blk.init is None or not blk.is_reduction or id(blk) in self.hoisted or id(blk) in self.init_mode:
            return None
        if blk.annotations and lookup_block(blk) is not None:
            return None
        r_vars: set = set()
        for it, b in zip(blk.iters, blk.bindings):
            if it.kind == "R":
                r_vars |= free_vars(b)
        if loop.var.name not in r_vars or any(lp.var.name in r_vars for lp in chain):
            return None
        if all(lp.extent == 1 for lp in chain) or any(lp.kind == "parallel" for lp in chain):
            return None
        # peeling the first iteration is right when the reduction is at its first step only
        # there: the loop binds reduction iterators alone, each an affine sum with positive
        # coefficients (no fused spatial part, no division)
        for it, b in zip(blk.iters, blk.bindings):
            if loop.var.name not in free_vars(b):
                continue
            terms, _ = linearize(b)
            if it.kind != "R" or any(not isinstance(a, Var) or c <= 0 for a, c in terms.items()):
                return None
        key = ("loop", id(loop))
        if self.alloc_scopes.get(key) or self.scalar_scopes.get(key):
            return None  # its body allocates: emitting it twice would allocate twice
        return blk

    def _unrolled(self, loop: Loop) -> None:
        key = ("loop", id(loop))
        with self._scope(key):
            for c in range(loop.extent):
                if loop.extent > 1:
                    self.comment(f"{loop.var.name} = {c} (unrolled)")
                with self._bind(loop.var.name, Const(c, "int64"), None):
                    self.emit(loop.body)

    def _prange(self, loop: Loop) -> None:
        name = self._loop_name(loop)
        ints = list(self.bound)
        arrays = list(self.visible_arrays)
        body_name = self.namer.helper(f"{self.entry}_{name}_body")
        address_name = self.namer.helper(f"{self.entry}_{name}_body_address")
        int_args = [(a, "int64") for a in ints]
        arr_args = [(a, self._array_type(a)) for a in arrays]
        kinds = tuple(k for _, k in int_args + arr_args)
        launch_name = self.launcher_args.get(kinds)
        if launch_name is None:  # one argument per launcher: loops of the same kinds share it
            launch_name = self.launcher_args[kinds] = self.namer.helper(f"{self.entry}_{name}_launch")
            self.address_args.append((launch_name, ("launcher", kinds)))
        self.address_args.append((address_name, ("body", body_name)))
        if self.call_global is None:
            self.call_global = self.namer.helper("call_by_address")
        packed = ", ".join([address_name, str(loop.extent)] + ints + arrays)
        self.line(
            f"if {self.call_global}({launch_name}, ({packed},)):"
            f"  # parallel loop {loop.var.name} in range({loop.extent}): {body_name} on a chunk per thread"
        )
        with self.indented():
            self.line(f"raise RuntimeError({_LAUNCH_FAILED!r})")
        self.launches.append(LaunchSpec(launch_name, address_name, body_name, kinds))
        lo, hi = self.namer.helper("lo"), self.namer.helper("hi")
        body = FunctionSpec(body_name, [(lo, "int64"), (hi, "int64")] + int_args + arr_args)
        saved_fn, saved_scope, saved_arrays = self.fn, self.scope, list(self.visible_arrays)
        self._start_fn(body)
        body.lines[0] = f"def {body_name}({', '.join([lo, hi] + ints + arrays)}):  # parallel loop {loop.var.name}, one thread's chunk"
        self.in_parallel = True
        self.scope = self.scope + [("fn", id(loop))]
        with self.indented():
            self._allocs(self.scope[-1])  # once per chunk: scratch buffers are per thread
            self._for_header(loop, name, f"range({lo}, {hi})", "")
            self._loop_body(loop, name)
        self.scope = saved_scope
        self.visible_arrays = saved_arrays
        self.in_parallel = False
        self.fn = saved_fn
        self.functions.append(body)

    def _array_type(self, name: str) -> str:
        for bname, aname in self.array_names.items():
            if aname == name:
                return "array:" + self.buffers[bname].dtype
        raise BuildError(f"internal: unknown array {name}")

    def _unrolled_size(self, loop: Loop) -> int:
        """:func:`emitted_size` of ``loop`` where it is emitted (unrolled outer loops are constants)."""
        consts = frozenset(k for k, v in self.env.items() if isinstance(v, Const))
        return emitted_size(loop, consts, self.unroll_sizes)

    # ------------------------------------------------------------------ blocks

    def _hoist_init(self, loop: Loop):
        """Emit a block's init before ``loop`` when the loops down to it allow; returns the block id."""
        chain = [loop]
        s = loop
        while len(s.body) == 1 and isinstance(s.body[0], Loop):
            s = s.body[0]
            chain.append(s)
        if not (len(s.body) == 1 and isinstance(s.body[0], Block)):
            return None
        blk = s.body[0]
        if blk.init is None or id(blk) in self.hoisted or not blk.is_reduction:
            return None
        if blk.annotations and lookup_block(blk) is not None:
            return None
        s_vars: set = set()
        r_vars: set = set()
        for it, b in zip(blk.iters, blk.bindings):
            (r_vars if it.kind == "R" else s_vars).update(free_vars(b))
        for lp in chain:
            if lp.extent == 1:
                continue
            if lp.kind == "parallel" or lp.var.name in s_vars or lp.var.name not in r_vars:
                return None
        zero = {lp.var.name: Const(0, "int64") for lp in chain}
        for it, b in zip(blk.iters, blk.bindings):
            if it.kind == "R" and linear_const(self._sub(b, zero)) != 0:
                return None
        self.hoisted.add(id(blk))
        names = ", ".join(lp.var.name for lp in chain if lp.extent > 1) or loop.var.name
        self.comment(f"block {blk.name}: init hoisted out of {names}")
        self.context.append(f"init of block {blk.name}")
        with contextlib.ExitStack() as stack:
            for lp in chain:
                stack.enter_context(self._bind(lp.var.name, Const(0, "int64"), None))
            stack.enter_context(self._iterators(blk))
            pred = fold_bool(self._sub(blk.predicate))
            if not (isinstance(pred, Const) and not pred.value):
                with self._guard(pred):
                    self.emit(blk.init)
        self.context.pop()
        return id(blk)

    def _block(self, blk: Block) -> None:
        self.context.append(f"block {blk.name}")
        self.comment(f"block {blk.name}")
        with self._iterators(blk):
            pred = fold_bool(self._sub(blk.predicate))
            if not (isinstance(pred, Const) and not pred.value):
                with self._guard(pred):
                    custom = lookup_block(blk) if blk.annotations else None
                    if custom is None or custom(blk, self) is False:
                        self._block_default(blk)
        self.context.pop()

    def _block_default(self, blk: Block) -> None:
        mode = self.init_mode.get(id(blk))
        if mode is not None:  # inside an unswitched loop body: the guard was tested there
            if mode:
                self.emit(blk.init)
        elif blk.init is not None and id(blk) not in self.hoisted:
            first = all_of(*(eq(self.env[it.var.name], 0) for it in blk.iters if it.kind == "R"))
            first = fold_bool(first)
            if not (isinstance(first, Const) and not first.value):
                with self._guard(first):
                    self.emit(blk.init)
        self.emit(blk.body)

    @contextlib.contextmanager
    def _iterators(self, blk: Block):
        assigned = []  # (line index, name) of the iterators given an assignment line
        with contextlib.ExitStack() as stack:
            for it, b in zip(blk.iters, blk.bindings):
                e = self._sub(b)
                if isinstance(e, Const) or (e.dtype in INT_DTYPES and all(isinstance(a, Var) for a in linearize(e)[0])):
                    stack.enter_context(self._bind(it.var.name, e, None))
                else:
                    key = (id(blk), it.var.name)
                    name = self.iter_names.get(key)
                    if name is None:
                        name = self.iter_names[key] = self.namer.fresh(it.var.name)
                    assigned.append((len(self.fn.spec.lines), name))
                    self.line(f"{name} = {self.writer.src(e)}")
                    stack.enter_context(self._bind(it.var.name, Var(name), name))
            yield
        self._drop_unused(assigned)

    def _drop_unused(self, assigned: List[Tuple[int, str]]) -> None:
        """Delete the assignment lines of iterators that no line after them reads.

        A block's body often reads a few of its iterators (a compacted local tile is indexed
        by the inner loops alone), and each unrolled copy repeated the others' ``//`` and
        ``%``: LLVM drops them, but numba types and lowers every one first, and its compile
        time grows with the statements it is given (on DEP:0's candidates about a fifth of
        the lines were such assignments). Lines are only ever appended, and an enclosing
        ``indented`` compares lines from before this block, so deleting here is safe.
        """
        lines = self.fn.spec.lines
        for index, name in reversed(assigned):
            used = re.compile(r"\b" + re.escape(name) + r"\b")
            if not any(used.search(text) for text in lines[index + 1 :]):
                del lines[index]

    @contextlib.contextmanager
    def _guard(self, cond: Expr):
        if isinstance(cond, Const) and cond.value:
            yield
            return
        self.line(f"if {self.writer.src(cond)}:")
        with self.indented():
            yield

    # ------------------------------------------------------------------ stores and loads

    def _store(self, st: Store) -> None:
        buf = st.buffer
        self._check_buffer(buf)
        value = self._sub(st.value)
        idx = tuple(self._sub(i) for i in st.indices)
        flat = self._flat(buf, idx)
        self._record(buf, flat)
        scalar = buf.name in self._scalar_set()
        if buf.dtype == BF16:
            rhs = self._bf16_store_src(value, scalar)
        elif buf.dtype in NARROW_INT_DTYPES and value.dtype != buf.dtype:
            rhs = saturate_src(self.writer.src(value), value.dtype, buf.dtype)  # a narrowing store saturates
        else:
            rhs = self.writer.src(value)
            if scalar and (value.dtype != buf.dtype or buf.dtype not in ("float32", "float64", "int64")):
                rhs = f"np.{buf.dtype}({rhs})" if buf.dtype != BOOL else f"bool({rhs})"
        self.line(f"{self._access(buf, flat)} = {rhs}")

    def _bf16_store_src(self, value: Expr, scalar: bool) -> str:
        """What a bfloat16 buffer element is set to: a float32 holding a bfloat16 for a scalar
        (see :mod:`.bf16`), the bits for an array element. A copy of another bfloat16 array's
        element (a pack, a padding select) moves the bits without converting them."""
        if scalar:
            text = self.writer.src(value)
            return text if value.dtype == BF16 else f"{self.writer.bf16('bf16_round')}({text})"
        return self._bf16_bits_src(value)

    def _bf16_bits_src(self, e: Expr) -> str:
        if e.dtype == BF16 and isinstance(e, Load) and e.buffer.name not in self._scalar_set():
            return self._access_of(e.buffer, e.indices)
        if e.dtype == BF16 and isinstance(e, Select):
            c = fold_bool(e.cond)
            if isinstance(c, Const):
                return self._bf16_bits_src(e.t if c.value else e.f)
            return f"({self._bf16_bits_src(e.t)} if {self.writer.src(c)} else {self._bf16_bits_src(e.f)})"
        if isinstance(e, Const):
            return f"np.uint16({int(np.array(e.value, dtype=numpy_dtype(BF16)).view(np.uint16))})"
        if isinstance(e, Cast) and e.dtype == BF16 and e.value.dtype == "float32":
            e = e.value  # rounded by bf16_bits itself
        return f"{self.writer.bf16('bf16_bits')}({self.writer.src(e)})"

    def _load_src(self, buf: Buffer, indices) -> str:
        text = self._access_of(buf, indices)
        if buf.dtype == BF16 and buf.name not in self._scalar_set():
            return f"{self.writer.bf16('bf16_widen')}({text})"
        return text

    def _access_of(self, buf: Buffer, indices) -> str:
        self._check_buffer(buf)
        flat = self._flat(buf, indices)
        self._record(buf, flat)
        return self._access(buf, flat)

    def _check_buffer(self, buf: Buffer) -> None:
        known = self.buffers.get(buf.name)
        if known is None:
            raise BuildError(
                f"{self._where()}: buffer {buf.name} is neither a parameter nor an allocation of function {self.func.name}"
            )
        if known != buf:
            raise BuildError(f"{self._where()}: buffer {buf} differs from the function's {known}")

    def _flat(self, buf: Buffer, indices) -> Expr:
        strides = []
        stride = 1
        for extent in reversed(buf.shape):
            strides.append(stride)
            stride *= extent
        strides.reverse()
        flat: Expr = Const(0, "int64")
        for ix, extent, st in zip(indices, buf.shape, strides):
            c = linear_const(ix)
            if c is not None and not 0 <= c < extent:
                raise BuildError(
                    f"{self._where()}: index {c} is out of range [0, {extent}) of buffer {buf.name} {buf.shape}"
                )
            if extent == 1:
                # the only index an executed access can have: writing 0 keeps a compacted
                # local's indices constant (n1_0_h1_0_fused // 2 would hide that from LLVM)
                continue
            flat = binary("add", flat, binary("mul", ix, st))
        return flat

    def _access(self, buf: Buffer, flat: Expr) -> str:
        if buf.name in self._scalar_set():
            c = linear_const(flat)
            return self._scalar_name(buf, c)
        arr = self.array_names[buf.name]
        c = linear_const(flat)
        if c is not None:
            return f"{arr}[{c}]"
        return f"{arr}[_u64({self.writer.affine_src(flat)})]"

    def _scalar_set(self):
        return self.decisions.scalars if self.decisions is not None else ()

    def _scalar_name(self, buf: Buffer, c: int) -> str:
        key = (buf.name, c)
        name = self.scalar_names.get(key)
        if name is None:
            name = self.scalar_names[key] = self.namer.fresh(f"{buf.name}_{c}")
        return name

    def _record(self, buf: Buffer, flat: Optional[Expr], needs_array: bool = False) -> None:
        if buf.scope != "local" or buf.name not in self.local_names:
            return
        use = self.analysis.setdefault(buf.name, _LocalUse())
        use.paths.append(tuple(self.scope))
        if needs_array:
            use.needs_array = True
        c = linear_const(flat) if flat is not None else None
        if c is None:
            use.all_const = False
        elif c not in use.const_indices:
            use.const_indices.append(c)

    # ------------------------------------------------------------------ scopes and allocation

    @contextlib.contextmanager
    def _scope(self, key: tuple):
        self.scope.append(key)
        try:
            self._allocs(key)
            yield
        finally:
            self.scope.pop()

    def _allocs(self, key: tuple) -> None:
        if self.decisions is None:
            return
        for name in self.alloc_scopes.get(key, ()):
            buf = self.buffers[name]
            arr = self.array_names[name]
            np_dtype = "np.bool_" if buf.dtype == BOOL else f"np.{storage_dtype(buf.dtype)}"
            # imported here: stackalloc compiles with numba, which .compile must configure first
            from .stackalloc import MAX_STACK_BYTES, stack_empty

            if buf.size * storage_dtype(buf.dtype).itemsize <= MAX_STACK_BYTES:
                alloc = self.add_global("stack_empty", stack_empty)
                self.line(f"{arr} = {alloc}({buf.size}, {np_dtype})  # local {buf}, on the stack")
            else:
                self.line(f"{arr} = np.empty({buf.size}, dtype={np_dtype})  # local {buf}")
            self.visible_arrays.append(arr)
        for name in self.scalar_scopes.get(key, ()):
            buf = self.buffers[name]
            self.comment(f"local {buf} as scalars")
            for c in self.decisions.const_indices[name]:
                self.line(f"{self._scalar_name(buf, c)} = {const_src(0, buf.dtype)}")

    @contextlib.contextmanager
    def _bind(self, ir_name: str, value: Expr, py_name: Optional[str]):
        had = ir_name in self.env
        old = self.env.get(ir_name)
        self.env[ir_name] = value
        if py_name is not None:
            self.bound.append(py_name)
        try:
            yield
        finally:
            if py_name is not None:
                self.bound.remove(py_name)
            if had:
                self.env[ir_name] = old
            else:
                del self.env[ir_name]

    def _sub(self, e: Expr, extra: Optional[dict] = None) -> Expr:
        env = self.env if extra is None else {**self.env, **extra}
        free = free_vars(e)
        missing = free - set(env)
        if missing:
            raise BuildError(
                f"{self._where()}: variable(s) {sorted(missing)} in {e} are not defined by an enclosing loop or block"
            )
        return substitute(e, {n: env[n] for n in free})

    def _where(self) -> str:
        return f"function {self.func.name}" + (f", {' > '.join(self.context)}" if self.context else "")


# ----------------------------------------------------------------------------- decisions


def _decide(func: PrimFunc, analysis: Dict[str, _LocalUse], form: str) -> _Decisions:
    d = _Decisions()
    for name, use in analysis.items():
        paths = use.paths
        lca = list(paths[0])
        for p in paths[1:]:
            n = 0
            while n < min(len(lca), len(p)) and lca[n] == p[n]:
                n += 1
            lca = lca[:n]
        fn_keys = {next(k for k in reversed(p) if _is_fn_scope(k)) for p in paths}
        fn_of_lca = next(k for k in reversed(lca) if _is_fn_scope(k))
        if (
            use.all_const
            and not use.needs_array
            and len(use.const_indices) <= MAX_SCALARISED_ELEMENTS
            and fn_keys == {fn_of_lca}
        ):
            d.scalars[name] = lca[-1]
            d.const_indices[name] = sorted(use.const_indices)
        elif fn_of_lca == _ROOT and form == "threads":
            d.promoted.append(name)
        else:
            d.arrays[name] = fn_of_lca
    return d


def parallel_work(func: PrimFunc) -> Tuple[int, List[int]]:
    """(statements executed per call, depth of each outermost parallel loop): leaf
    statements times their loops' extents, and where the parallel loops that are not inside
    another parallel loop sit (0: a top-level statement of the function).

    >>> import probsched as ps
    >>> A = ps.placeholder((4,), name="A")
    >>> parallel_work(ps.create_func([A, ps.compute((4,), lambda i: A[i] + 1.0, name="B")]))
    (4, [])
    """
    outermost: List[int] = []
    work = [0]

    def visit(s, depth: int, inside: bool, trips: int) -> None:
        if isinstance(s, (tuple, list)):
            for x in s:
                visit(x, depth, inside, trips)
        elif isinstance(s, Loop):
            par = s.kind == "parallel" and s.extent > 1
            if par and not inside:
                outermost.append(depth)
            visit(s.body, depth + 1, inside or par, trips * s.extent)
        elif isinstance(s, Block):
            visit(s.body, depth + 1, inside, trips)
        else:
            work[0] += trips

    visit(func.body, 0, False, 1)
    return work[0], outermost


def choose_form(func: PrimFunc, parallel: str = "auto") -> str:
    """The parallel form used for ``func``: "none", "threads" or "prange".

    >>> import probsched as ps
    >>> A = ps.placeholder((4,), name="A")
    >>> choose_form(ps.create_func([A, ps.compute((4,), lambda i: A[i] + 1.0, name="B")]))
    'none'
    """
    if parallel not in PARALLEL_FORMS:
        raise BuildError(f"parallel form {parallel!r} is not one of {PARALLEL_FORMS}")
    _, outermost = parallel_work(func)
    if not outermost:
        return "none"
    if parallel == "auto":
        return "prange"
    if parallel == "threads" and any(d != 0 for d in outermost):
        raise BuildError(
            "parallel='threads' needs every outermost parallel loop at the top level of the function; "
            "use parallel='prange' or 'auto'"
        )
    return parallel


def emit_module(func: PrimFunc, parallel: str = "auto") -> ModuleSource:
    """Generate the numba module of ``func`` (see the module docstring)."""
    if not isinstance(func, PrimFunc):
        raise BuildError(f"emit_module: expected a PrimFunc, got {type(func).__name__}")
    form = choose_form(func, parallel)
    try:
        first = Emitter(func, form, None)
        first.run()
        decisions = _decide(func, first.analysis, form)
        em = Emitter(func, form, decisions)
        em.run()
    except RecursionError:
        raise BuildError(f"function {func.name}: the loop nest is too deep to generate code for") from None
    header = [
        f"# Generated by probsched from PrimFunc '{func.name}' (parallel form: {form}).",
        "# Buffers are flat C-order arrays: " + ", ".join(
            f"{b.name} {b.dtype}[{', '.join(map(str, b.shape))}]"
            + (f" as {em.array_names[b.name]}" if em.array_names[b.name] != b.name else "")
            + (" (allocated by the wrapper)" if b in em.wrapper_allocs else "")
            for b in em.entry_arrays
        ),
        "import numpy as np",
        "",
        "_u64 = np.uint64",
    ]
    if em.globals:
        header.append("# globals brought in by statement emitters: " + ", ".join(sorted(em.globals)))
    for ls in em.launches:
        header.append(
            f"# {ls.launcher}: the address of the shared parallel launcher (probsched.codegen.launch); "
            f"{ls.address}: the address of {ls.body}; arguments of {em.entry}"
        )
    entry_spec = em.functions[-1]
    ordered = [entry_spec] + em.functions[:-1]
    text = "\n".join(header) + "\n\n\n" + "\n\n\n".join("\n".join(f.lines) for f in ordered) + "\n"
    return ModuleSource(
        func=func,
        source=text,
        functions=em.functions,
        entry=em.entry,
        arrays=em.entry_arrays,
        wrapper_allocs=em.wrapper_allocs,
        segments=em.segments,
        parallel_form=form,
        extra_globals=dict(em.globals),
        launches=list(em.launches),
        address_args=[what for _, what in em.address_args],
        call_global=em.call_global,
    )


def emitted_size(s, consts: frozenset = frozenset(), memo: Optional[dict] = None) -> int:
    """Expression nodes that emitting ``s`` writes, unrolled loops multiplied by their extent.

    numba's compile time grows with this size, so it is what :data:`MAX_UNROLL_NODES`
    bounds. Each copy of a block repeats its stores, its guard and the assignments of its
    iterators whose ``//``, ``%`` or products do not fold: a variable in ``consts`` is a
    constant there (an unrolled loop's).

    >>> from probsched.ir.stmt import Block, Buffer, IterVar, Loop, Store
    >>> A = Buffer("A", (8, 4))
    >>> v = IterVar(Var("v"), 8, "S")
    >>> blk = Block("A", (v,), (Var("i"),), Store(A, (v.var, Const(0, "int64")), Const(1.0, "float32")))
    >>> emitted_size(blk), emitted_size(Loop(Var("i"), 8, "unrolled", body=(blk,)))
    (4, 32)
    """
    memo = {} if memo is None else memo
    if isinstance(s, (tuple, list)):
        return sum(emitted_size(x, consts, memo) for x in s)
    key = (id(s), consts)
    if key in memo:
        return memo[key]
    if isinstance(s, Loop):
        if s.kind == "unrolled" or s.extent == 1:
            n = emitted_size(s.body, consts | {s.var.name}, memo) * s.extent
        else:
            n = emitted_size(s.body, consts, memo)
    elif isinstance(s, Block):
        # a select on iterators bound to constants folds to one branch in each copy
        # (Winograd's transforms pick their coefficients so): only the larger one counts
        fixed = frozenset(it.var.name for it, b in zip(s.iters, s.bindings) if free_vars(b) <= consts)
        n = sum(_store_size(x, fixed) if isinstance(x, Store) else emitted_size(x, consts, memo) for x in (s.body, s.init) if x is not None)
        n += sum(_size(b) for b in s.bindings if _assigned(b, consts))
        if not isinstance(s.predicate, Const) and not free_vars(s.predicate) <= consts:
            n += _size(s.predicate)
    elif isinstance(s, Store):
        n = _store_size(s)
    else:
        n = 1
    memo[key] = n
    return n


def _size(e: Expr) -> int:
    return sum(1 for _ in walk(e))


def _store_size(st: Store, fixed: frozenset = frozenset()) -> int:
    return 1 + _folded_size(st.value, fixed) + sum(_index_size(i) for i in st.indices)


def _index_size(e: Expr) -> int:
    # an index whose terms cancel (a compacted tile's ``f // 4 - f // 4``) is emitted as a constant
    return 1 if linear_const(e) is not None else _size(e)


def _folded_size(e: Expr, fixed: frozenset) -> int:
    """:func:`_size` of ``e`` with the selects whose conditions read only ``fixed``
    variables counted by their larger branch, and constant indices as one node."""
    if isinstance(e, Select) and fixed and free_vars(e.cond) <= fixed:
        return max(_folded_size(e.t, fixed), _folded_size(e.f, fixed))
    if isinstance(e, Load):
        return 1 + sum(_index_size(i) for i in e.indices)
    return 1 + sum(_folded_size(c, fixed) for c in children(e))


def _assigned(binding: Expr, consts: frozenset) -> bool:
    """Whether a block iterator bound to ``binding`` gets an assignment line in each copy.

    The emitter inlines constant and affine bindings; a ``//``, ``%`` or product of variables
    needs a line unless every variable in it is a constant of the copy.
    """
    if isinstance(binding, Const):
        return False
    if binding.dtype not in INT_DTYPES:
        return True
    terms, _ = linearize(binding)
    return any(not isinstance(a, Var) and not free_vars(a) <= consts for a in terms)
