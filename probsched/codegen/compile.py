"""Compiling generated source with numba: options, the SLP setting, errors, warm-up.

Options (chosen by timing float32 kernels with the pinned numba):

- ``fastmath`` = :data:`FASTMATH` = ``{nsz, arcp, contract, afn}``. Not ``reassoc`` (it lets
  the loop vectorizer pick the wrong loop, several times slower), not ``ninf``
  (max/min reductions start from -inf/+inf, softmax relies on them), not ``nnan`` (a NaN in
  the data must come out as NaN, as in numpy). Code that rounds floats to integers (a
  quantized task's requantization) leaves out ``contract`` too (:data:`EXACT_FASTMATH`):
  a fused multiply-add moves a value lying at a rounding tie to the other integer, and a
  float output made from the rounded value (a quantized classifier's logits) is checked
  against a reference that rounds what the graph says. It keeps ``arcp``: a true
  division per element (a residual add's requantization divides by the output's scale)
  cost ResNet-50's int8 blocks about 0.5 ms; such a division moves ties too, but what it
  rounds is stored as bytes, whose check lets a few elements be one off;
- ``error_model='numpy'`` (no ZeroDivisionError branches), ``boundscheck=False``,
  ``nogil=True`` (kernels run on worker threads);
- array arguments are ``noalias`` (numba's internal ``noalias`` flag, which parfors uses
  for its gufuncs, exposed as the njit option ``_probsched_noalias``): without it LLVM
  must assume that writing ``C`` may change ``A`` and keeps every accumulator in memory;
  with it a 4x16 register block writing into ``C`` runs an order of magnitude faster. The
  kernel wrapper guarantees the promise: an input that overlaps an output is copied, two
  overlapping outputs are an error;
- LLVM's SLP vectorizer on: numba ships with it off; it is what turns unrolled scalar FMAs
  into vector FMAs. ``NUMBA_SLP_VECTORIZE=1`` is put in the environment when this module
  is imported (unless the user set it) and ``numba.config.SLP_VECTORIZE`` follows it.

Generated functions (not the launchers, which are compiled once per machine kind) get a shorter
front end, :func:`generated_options`: numba's rewrites off (``no_rewrites``: constant
getitems, array expressions, dead-branch pruning; generated code indexes with computed
integers and has no array expressions or constant branches), no closure inlining (it
defines no closures), no C callback wrapper, and no CPython wrapper for the parallel bodies
only the launcher calls, by address: builds are shorter and kernels run as fast
(``python benchmarks/bench_throughput_levers.py front-end --db DB --workload W`` compares
them on tuned candidates). numba's SSA reconstruction stays: without it
a name assigned twice would take one unified type (float32 and float64 unify to float64)
instead of one per assignment.

Every function is compiled eagerly with its explicit signature (1-D C-contiguous arrays,
int64 scalars), so compile time is paid in :func:`compile_module` and never at a call,
and each function is compiled exactly once (each compiled function keeps a few MB of
process memory for good). The first compile of a process also initialises numba's
code generator (a noticeable one-time cost); :func:`warm_up` does that once, outside the measured
compile time of any kernel.

>>> compile_options()["fastmath"] == set(FASTMATH)
True
"""

from __future__ import annotations

import contextlib
import itertools
import linecache
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

os.environ.setdefault("NUMBA_SLP_VECTORIZE", "1")

import numpy as np  # noqa: E402

from ..errors import BuildError  # noqa: E402
from .emit import ModuleSource  # noqa: E402

FASTMATH = frozenset({"nsz", "arcp", "contract", "afn"})
#: fastmath of code that rounds floats to integers (see the module docstring)
EXACT_FASTMATH = FASTMATH - {"contract"}

_counter = itertools.count()
_warm_lock = threading.Lock()
_warmed: set = set()


NOALIAS_OPTION = "_probsched_noalias"
_noalias_ok: list = []


def _numba():
    """numba, imported on first use (``import probsched`` stays light), SLP configured."""
    import numba

    want = int(os.environ.get("NUMBA_SLP_VECTORIZE", "1") or 0)
    if numba.config.SLP_VECTORIZE != want:
        numba.config.SLP_VECTORIZE = want
    if not _noalias_ok:
        _noalias_ok.append(_install_noalias_option())
    return numba


def _install_noalias_option() -> bool:
    """Teach numba's CPU target the njit option ``_probsched_noalias`` (-> flags.noalias)."""
    try:
        from numba.core import cpu
        from numba.core.compiler import Flags
        from numba.core.options import TargetOptions

        if not hasattr(Flags, "noalias"):
            return False
        if not hasattr(cpu.CPUTargetOptions, NOALIAS_OPTION):
            setattr(cpu.CPUTargetOptions, NOALIAS_OPTION, TargetOptions.Mapping("noalias"))
        return True
    except Exception:  # pragma: no cover - another numba version: compile without noalias
        return False


def noalias_enabled() -> bool:
    """Whether compiled kernels declare their array arguments noalias."""
    _numba()
    return bool(_noalias_ok and _noalias_ok[0])


configure_numba = _numba
"""Import numba with probsched's settings (SLP on, the noalias option); returns the module.

Call it before compiling anything else with numba (micro-kernels) in a probsched process."""


def slp_enabled() -> bool:
    """Whether numba runs LLVM's SLP vectorizer (what this module configures).

    >>> slp_enabled()
    True
    """
    return bool(_numba().config.SLP_VECTORIZE)


def compile_options(parallel: bool = False) -> dict:
    """The keyword arguments given to ``numba.njit``."""
    opts = dict(
        fastmath=set(FASTMATH),
        error_model="numpy",
        boundscheck=False,
        nogil=True,
        parallel=parallel,
        cache=False,
    )
    if noalias_enabled():
        opts[NOALIAS_OPTION] = True
    return opts


_generated_compiler: list = []


def _generated_code_compiler():
    """numba's nopython pipeline without closure inlining (see the module docstring); the
    class is made once (its repr is part of the program cache's key)."""
    if not _generated_compiler:
        from numba.core import untyped_passes
        from numba.core.compiler import CompilerBase, DefaultPassBuilder

        class GeneratedCodeCompiler(CompilerBase):
            """The default nopython pipeline without ``InlineClosureLikes``."""

            def define_pipelines(self):
                pm = DefaultPassBuilder.define_nopython_pipeline(self.state)
                pm.passes[:] = [p for p in pm.passes if p[0] is not untyped_passes.InlineClosureLikes]
                pm._finalized = False  # finalize() again: it checks the shortened list
                pm.finalize()
                return [pm]

        GeneratedCodeCompiler.__module__ = __name__
        GeneratedCodeCompiler.__qualname__ = "GeneratedCodeCompiler"
        _generated_compiler.append(GeneratedCodeCompiler)
    return _generated_compiler[0]


def generated_options(by_address: bool = False, exact: bool = False) -> dict:
    """The ``numba.njit`` keyword arguments of a generated function: :func:`compile_options`
    with the shorter front end; ``by_address``: only called through its address (a parallel
    body the launcher runs), so without a CPython wrapper; ``exact``: the code rounds floats
    to integers (:data:`EXACT_FASTMATH`).

    >>> generated_options(by_address=True)["no_cpython_wrapper"]
    True
    >>> sorted(generated_options(exact=True)["fastmath"])
    ['afn', 'arcp', 'nsz']
    """
    opts = compile_options()
    if exact:
        opts["fastmath"] = set(EXACT_FASTMATH)
    opts.update(no_rewrites=True, no_cfunc_wrapper=True, pipeline_class=_generated_code_compiler())
    if by_address:
        opts["no_cpython_wrapper"] = True
    return opts


def numba_type(kind: str):
    """numba type of an argument kind: ``"int64"`` or ``"array:<dtype>"`` (1-D, C order;
    bfloat16 arrays are their uint16 bits, see :mod:`.bf16`)."""
    types = _numba().types
    scalars = {
        "bfloat16": types.uint16,
        "float32": types.float32,
        "float64": types.float64,
        "int32": types.int32,
        "uint8": types.uint8,
        "int8": types.int8,
        "int8r": types.int8,
        "int64": types.int64,
        "bool": types.boolean,
    }
    if kind.startswith("array:"):
        return types.Array(scalars[kind[6:]], 1, "C")
    return scalars[kind]


def warm_up(parallel: bool = False) -> None:
    """Initialise numba's code generator (and its parallel back end) once per process."""
    key = "parallel" if parallel else "serial"
    if key in _warmed:
        return
    numba = _numba()
    prange = numba.prange
    with _warm_lock:
        if key in _warmed:
            return
        arr = numba_type("array:float32")
        if parallel:

            def _warm_par(a):  # pragma: no cover - compiled by numba
                for i in prange(a.shape[0]):
                    a[i] += np.float32(1.0)

            numba.njit((arr,), **compile_options(True))(_warm_par)
        else:

            def _warm(a):  # pragma: no cover - compiled by numba
                for i in range(a.shape[0]):
                    a[i] += np.float32(1.0)

            numba.njit((arr,), **compile_options())(_warm)
        _warmed.add(key)


@contextlib.contextmanager
def counting_compiles() -> Iterator[Dict[str, int]]:
    """Count what numba compiles during a block, in any thread: yields a dict (function name
    -> compiles) filled as compiles start. Code loaded from bytes (:mod:`.stored`) is not
    compiled: a process that loads a saved model counts none.

    >>> with counting_compiles() as compiled:
    ...     _ = _numba().njit(lambda x: x + 1)(1)
    >>> compiled
    {'<lambda>': 1}
    """
    from numba.core import event

    counts: Dict[str, int] = {}

    class Count(event.Listener):
        def on_start(self, ev):
            name = getattr(getattr(ev.data["dispatcher"], "py_func", None), "__name__", "?")
            counts[name] = counts.get(name, 0) + 1

        def on_end(self, ev):
            pass

    listener = Count()
    event.register("numba:compile", listener)
    try:
        yield counts
    finally:
        event.unregister("numba:compile", listener)


@dataclass
class CompiledModule:
    """Dispatchers of a compiled module, the entry point, the compile time, the addresses
    the entry takes after its arrays (:attr:`.emit.ModuleSource.address_args`), and for a
    module loaded from bytes (:mod:`.program_cache`), those bytes."""

    dispatchers: Dict[str, object]
    entry: object
    seconds: float
    filename: str
    addresses: List[int] = field(default_factory=list)
    stored: Optional[bytes] = field(default=None, repr=False)


def compile_module(module: ModuleSource) -> CompiledModule:
    """Compile every function of ``module`` (callees first) and return the dispatchers.

    Raises :class:`~probsched.errors.BuildError` carrying numba's message and the lines of
    generated source around the failure.
    """
    from .launch import call_by_address, function_address, launcher

    numba = _numba()
    warm_up()
    # Launchers are shared by every kernel of this process: like warm_up, their one-time
    # compile is not this kernel's compile time.
    launchers = {ls.kinds: launcher(ls.kinds) for ls in module.launches}
    n = next(_counter)
    filename = f"<probsched-{module.func.name}-{n}>"
    source = module.source
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as exc:  # a generator bug, reported with its context
        linecache.cache.pop(filename, None)
        raise BuildError(
            f"generated source of {module.func.name} does not parse: {exc.msg}\n{_context(source, [exc.lineno or 0])}"
        ) from exc
    ns: dict = {"__name__": f"probsched_generated_{n}", "__file__": filename}
    ns.update(module.extra_globals)
    if module.call_global is not None:
        ns[module.call_global] = call_by_address()
    exec(code, ns)
    dispatchers: Dict[str, object] = {}
    by_address = module.by_address()
    t0 = time.perf_counter()
    for spec in module.functions:
        sig = tuple(numba_type(kind) for _, kind in spec.args)
        try:
            disp = numba.njit(sig, **generated_options(spec.name in by_address, module.rounds))(ns[spec.name])
        except Exception as exc:
            linecache.cache.pop(filename, None)
            msg = str(exc)
            lines = _error_lines(exc, msg, filename, source)
            raise BuildError(
                f"numba could not compile {spec.name} of {module.func.name}: {type(exc).__name__}: {msg}\n"
                f"generated source around the error:\n{_context(source, lines)}"
            ) from exc
        ns[spec.name] = disp
        dispatchers[spec.name] = disp
    seconds = time.perf_counter() - t0
    addresses = [
        function_address(launchers[key] if kind == "launcher" else dispatchers[key]) for kind, key in module.address_args
    ]
    return CompiledModule(dispatchers, dispatchers[module.entry], seconds, filename, addresses)


def _error_lines(exc: Exception, msg: str, filename: str, source: str) -> list:
    """Line numbers of the generated source that an error message points at."""
    lines = [int(x) for x in re.findall(re.escape(filename) + r'", line (\d+)', msg)]
    loc = getattr(exc, "loc", None)
    if not lines and loc is not None and getattr(loc, "filename", None) == filename and getattr(loc, "line", None):
        lines = [int(loc.line)]
    if not lines:  # e.g. "name 'x' is not defined": show the lines that use the names quoted
        src = source.splitlines()
        for name in dict.fromkeys(re.findall(r"'([A-Za-z_]\w*)'", msg)):
            pat = re.compile(r"\b" + re.escape(name) + r"\b")
            hits = [i + 1 for i, t in enumerate(src) if pat.search(t) and not t.lstrip().startswith("#")]
            lines += hits[:3]
    return lines


def _context(source: str, lines, radius: int = 3) -> str:
    src = source.splitlines()
    if not lines:
        lines = []
    out = []
    shown: set = set()
    for ln in lines:
        for i in range(max(1, ln - radius), min(len(src), ln + radius) + 1):
            if i in shown:
                continue
            shown.add(i)
            out.append(f"{'>' if i == ln else ' '}{i:5d} | {src[i - 1]}")
    if not out:
        out = [f" {i + 1:5d} | {t}" for i, t in enumerate(src[:40])]
    return "\n".join(out)
