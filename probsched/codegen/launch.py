"""Parallel loops run by a launcher shared across kernels, calling the loop body by address.

In the ``prange`` parallel form (:mod:`.emit`) an outermost parallel loop becomes a body
function ``body(lo, hi, ints..., arrays...)`` that runs the loop's iterations ``lo`` to
``hi``, compiled alone like any other function, and a call
``launch(address_of_body, extent, ints..., arrays...)`` where the loop stood. ``launch``
splits ``range(extent)`` into one contiguous chunk per thread and calls the body on each
through its address (a numba intrinsic): chunk 0 on the calling thread, the others on the
spinning workers of :mod:`.spin_pool` (the cheapest launch), or, when those sleep or
the pool is off, in a ``prange`` loop (numba's libgomp pool; ``python
benchmarks/bench_launch.py`` measures both launches). It depends only on the kinds of the
arguments, so every kernel with a parallel loop of one argument signature uses the same
launcher. Its code holds no address of the process (the pool's slots are read through a
symbol, the trampoline the workers call is linked in, the thread count is read through
numba's runtime symbol), so it is compiled once per machine kind: stored in the program
cache and in saved models, and loaded by other processes (:mod:`.shared`).

Why not a ``prange`` wrapper per loop: numba lowers each ``prange`` loop into a gufunc
through a second compile pipeline. That costs a large fixed time per loop whatever its
body (four LLVM finalisations and a ``compile_ir``), and more for a big body, which numba
links into the wrapper and optimises again: on tuned candidates those wrappers were a
large share of the compile time (``python benchmarks/bench_compile.py --records DB``
splits a build by generated function). The body keeps its ``noalias`` array arguments: it
is compiled as before and only called differently.

Why a chunk per call and not an index: a call by address is not inlined (the arrays are
passed field by field), and called per index it slowed kernels whose parallel loop has
many iterations of a large body, such as NRM's. Per chunk, a body also allocates its
scratch buffers once per thread, not per iteration. The loop around the iteration costs
a little compile time, which is not worth a second mode.

The body is called through numba's own calling convention (return slot, exception slot,
the arguments' data model), so it must have been compiled for exactly the argument types
the launcher passes: :func:`function_address` takes the one overload of a dispatcher
compiled with an explicit signature. Generated bodies raise nothing themselves (no bounds
checks, numpy's error model), but a scratch buffer's allocation can fail: the launcher
counts the chunks whose call returned an error status and then raises ``RuntimeError``,
so the kernel fails (a failed record) instead of returning a partly computed result. The
body's own exception is not carried across the call.

>>> import numba, numpy as np
>>> from probsched.codegen.compile import compile_options, numba_type
>>> def body(lo, hi, a):
...     for i in range(lo, hi):
...         a[i] = i * 2.0
>>> i64, f32 = numba_type("int64"), numba_type("array:float32")
>>> compiled = numba.njit((i64, i64, f32), **compile_options())(body)
>>> a = np.zeros(6, dtype="float32")
>>> launcher(("array:float32",))(function_address(compiled), 6, a)
>>> a.tolist()
[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
"""

from __future__ import annotations

import functools
import hashlib
from typing import Dict, Iterable, List, Tuple

from .compile import compile_options, configure_numba, numba_type, warm_up

_names: Dict[str, Tuple[str, ...]] = {}  # shared name -> the kinds of the launchers asked for


def _emit_call(context, builder, numba, addr, argtys, values):
    """Emit a call of the numba-compiled function at ``addr`` (numba's calling convention,
    no return value) with ``values`` of numba types ``argtys``; 1 (int64) when it returned
    an error status (it raised), else 0."""
    from numba.core import cgutils
    from numba.core.callconv import RETCODE_NONE, RETCODE_OK

    conv = context.call_conv
    fnty = conv.get_function_type(numba.types.none, argtys)
    fn = builder.inttoptr(addr, fnty.as_pointer())
    ret = cgutils.alloca_once(builder, fnty.args[0].pointee)
    builder.store(cgutils.get_null_value(ret.type.pointee), ret)
    excinfo = cgutils.alloca_once(builder, fnty.args[1].pointee, name="excinfo")
    packer = conv._get_arg_packer(argtys)
    status = builder.call(fn, [ret, excinfo] + list(packer.as_arguments(builder, values)))
    ok = builder.or_(builder.icmp_signed("==", status, RETCODE_OK), builder.icmp_signed("==", status, RETCODE_NONE))
    return builder.zext(builder.not_(ok), context.get_value_type(numba.types.int64))


@functools.lru_cache(maxsize=None)
def call_by_address():
    """The numba intrinsic ``call_by_address(address, args_tuple)`` (built on first use)."""
    numba = configure_numba()
    from numba.extending import intrinsic

    @intrinsic
    def call_by_address(typingctx, address, args):
        """Call the numba-compiled function at ``address`` with the members of ``args``;
        1 when it returned an error status (it raised), else 0."""
        if not isinstance(address, numba.types.Integer) or not isinstance(args, numba.types.BaseTuple):
            return None

        def codegen(context, builder, signature, llargs):
            addr, packed = llargs
            values = [builder.extract_value(packed, k) for k in range(len(args.types))]
            return _emit_call(context, builder, numba, addr, list(args.types), values)

        return numba.types.int64(address, args), codegen

    return call_by_address


def call_stashed(arg_types: tuple):
    """The numba intrinsic ``call_stashed(address, stashed, lo, hi)``: call the function at
    ``address`` with ``lo``, ``hi`` and the members of the tuple of ``arg_types`` that a
    launcher stashed at address ``stashed`` (:func:`.spin_pool.atomics`' ``stash``); 1 when
    it raised, else 0. The members are passed as they lie (no reference counting: the
    launcher that stashed them holds them until the call has returned)."""
    numba = configure_numba()
    from numba.extending import intrinsic

    packed_type = numba.types.Tuple(arg_types)

    @intrinsic
    def call_stashed(typingctx, address, stashed, lo, hi):
        def codegen(context, builder, signature, llargs):
            addr, where, lo_, hi_ = llargs
            ll_packed = context.get_value_type(packed_type)
            packed = builder.load(builder.inttoptr(where, ll_packed.as_pointer()))
            values = [lo_, hi_] + [builder.extract_value(packed, k) for k in range(len(arg_types))]
            argtys = [numba.types.int64, numba.types.int64] + list(arg_types)
            return _emit_call(context, builder, numba, addr, argtys, values)

        i64 = numba.types.int64
        return i64(i64, i64, i64, i64), codegen

    return call_stashed


def function_address(dispatcher) -> int:
    """Address of the one compiled overload of ``dispatcher`` (numba's calling convention).

    The dispatcher must stay alive as long as anything calls the address: numba frees
    nothing, but the address belongs to the dispatcher's compiled library.
    """
    (overload,) = dispatcher.overloads.values()
    return overload.library.get_pointer_to_function(overload.fndesc.llvm_func_name)


def num_threads():
    """The numba intrinsic ``num_threads()``: ``numba.get_num_threads()`` by the symbol of
    numba's parallel runtime (numba's own compiles to a call through a ctypes pointer, an
    address of the process, which would keep the launcher from being stored)."""
    numba = configure_numba()
    from llvmlite import ir
    from numba.core import cgutils
    from numba.extending import intrinsic

    numba.get_num_threads()  # starts the parallel runtime, which registers the symbol

    @intrinsic
    def num_threads(typingctx):
        def codegen(context, builder, signature, args):
            fnty = ir.FunctionType(context.get_value_type(numba.types.intp), [])
            return builder.call(cgutils.get_or_insert_function(builder.module, fnty, "get_num_threads"), [])

        return numba.types.intp(), codegen

    return num_threads


def address_of(dispatcher):
    """The numba intrinsic ``address_of()``: the address of ``dispatcher``'s one compiled
    function, whose code is linked into the caller's (a relocation, not a constant: the
    caller's code holds no address of this process and can be stored)."""
    numba = configure_numba()
    from numba.core import cgutils
    from numba.extending import intrinsic

    (cres,) = dispatcher.overloads.values()

    @intrinsic
    def address_of(typingctx):
        def codegen(context, builder, signature, args):
            fnty = context.call_conv.get_function_type(cres.signature.return_type, cres.signature.args)
            fn = cgutils.get_or_insert_function(builder.module, fnty, cres.fndesc.llvm_func_name)
            context.add_linking_libs([cres.library])
            return builder.ptrtoint(fn, context.get_value_type(numba.types.int64))

        return numba.types.int64(), codegen

    return address_of


def launcher_name(kinds: Tuple[str, ...]) -> str:
    """The name the launcher for ``kinds`` is shared under in this process (:mod:`.shared`):
    the kinds and how chunks run, ``prange`` or the spin pool with its size and timing (a
    launcher made for another pool is never loaded). Starts the pool.

    >>> launcher_name(("int64", "array:float32")).startswith("launch int64,array:float32 ")
    True
    """
    from . import spin_pool

    pool = spin_pool.spin_pool() if spin_pool.enabled() else None
    how = "prange" if pool is None or pool.workers == 0 else f"pool{pool.workers} {spin_pool.timing()}"
    return f"launch {','.join(kinds)} {how}"


def launcher(kinds: Tuple[str, ...]):
    """The launcher for bodies taking ``(lo, hi, *args)`` with ``args`` of ``kinds``
    (each ``"int64"`` or ``"array:<dtype>"``): compiled once per machine kind, then shared
    (:mod:`.shared`: this process, a loaded model, the program cache).

    Its signature is ``(address, extent, *args)``; it splits ``range(extent)`` into one
    contiguous chunk per thread (``numba.get_num_threads()``) and runs ``body(lo, hi,
    *args)`` on each. Whether it uses the spin pool is decided by
    :func:`.spin_pool.enabled` when it is first asked for (a launcher of each is kept).
    """
    from . import shared
    from .spin_pool import enabled, register_symbols

    kinds = tuple(kinds)
    name = launcher_name(kinds)
    register_symbols()  # before its code is linked, compiled or loaded
    configure_numba().get_num_threads()  # numba's parallel runtime: the symbols of its prange
    disp = shared.get(name, lambda: compile_launcher(kinds, pool=enabled()), compile_options(parallel=True))
    _names[name] = kinds
    return disp


def compile_launcher(kinds: Tuple[str, ...], pool: bool = True):
    """Compile a new launcher for ``kinds`` (what :func:`launcher` does once per kinds).

    With ``pool`` (and where :func:`.spin_pool.enabled`), the launcher hands chunks to the
    spinning workers of :mod:`.spin_pool` and falls back to ``prange`` when they sleep; else
    it always uses ``prange``. One chunk (one thread, or an extent of 1) is a plain call.
    Its code holds no address of this process (the pool's slots are read through a symbol,
    the trampoline is linked in), so it can be stored (:mod:`.shared`).
    """
    from . import spin_pool

    numba = configure_numba()
    warm_up(parallel=True)
    names = [f"a{k}" for k in range(len(kinds))]
    args = "".join(f", {n}" for n in names)
    packed = "(" + "".join(f"{n}, " for n in names) + ")"
    chunk = "c * extent // chunks, (c + 1) * extent // chunks" + args
    workers = spin_pool.spin_pool() if pool else None
    pool = workers is not None and workers.workers > 0
    # a module name of its own: numba's mangled names hold it, and a launcher loaded from
    # another process must not share a name with a different function compiled in this one
    variant = (kinds, workers.workers, spin_pool.timing()) if pool else (kinds,)
    module = "probsched_launch_" + hashlib.sha256(repr(variant).encode()).hexdigest()[:16]
    ns = {"__name__": module, "prange": numba.prange, "get_num_threads": num_threads(), "call": call_by_address()}
    pool_src = ""
    if pool:
        arg_types = tuple(numba_type(k) for k in kinds)
        a = spin_pool.atomics()
        ns.update(trampoline_address=address_of(_trampoline(arg_types, module)), stash=a.stash, pool_base=a.pool_base,
                  WORKERS=workers.workers)
        ops = spin_pool.pool_functions()
        ns.update(claim=ops.claim, post=ops.post, collect=ops.collect)
        # The workers run chunks 1.. (by the trampoline, on the arguments this frame stashed);
        # this thread runs chunk 0 and then waits for theirs. No pool (base 0): prange.
        pool_src = (
            "    base = pool_base()\n"
            "    mask = claim(base, WORKERS, chunks - 1) if base != 0 else -1\n"
            "    if mask >= 0:\n"
            "        parts = 1\n"
            "        k = mask\n"
            "        while k:\n"
            "            parts += k & 1\n"
            "            k >>= 1\n"
            f"        packed = stash({packed})\n"
            "        c = 1\n"
            "        k = 0\n"
            "        while c < parts:\n"
            "            if mask >> k & 1:\n"
            "                post(base, k, trampoline_address(), address, packed, c * extent // parts, (c + 1) * extent // parts)\n"
            "                c += 1\n"
            "            k += 1\n"
            f"        failed = call(address, (0, extent // parts{args}))\n"
            "        failed += collect(base, WORKERS, mask)\n"
            "        if failed:\n"
            f"            raise RuntimeError({_FAILED!r})\n"
            "        return\n"
        )
    src = (
        f"def launch(address, extent{args}):\n"
        "    chunks = min(get_num_threads(), extent)\n"
        "    if chunks <= 1:\n"
        f"        if extent > 0 and call(address, (0, extent{args})):\n"
        f"            raise RuntimeError({_FAILED!r})\n"
        "        return\n"
        + pool_src
        + "    failed = 0\n"
        "    for c in prange(chunks):\n"
        f"        failed += call(address, ({chunk}))\n"
        "    if failed:\n"
        f"        raise RuntimeError({_FAILED!r})\n"
    )
    exec(compile(src, "<probsched-launcher>", "exec"), ns)
    sig = (numba_type("int64"), numba_type("int64")) + tuple(numba_type(k) for k in kinds)
    return numba.njit(sig, **compile_options(parallel=True))(ns["launch"])


_FAILED = "a parallel loop body failed (an exception in its chunk, e.g. out of memory)"


def _trampoline(arg_types: tuple, module: str):
    """What a pool worker calls: ``trampoline(body_address, stashed, lo, hi)`` runs the body
    on ``lo`` to ``hi`` with the launcher's stashed arguments of ``arg_types``, and raises
    (an error status for the worker to report) when the body did. ``module``: the module
    name its mangled name holds (its launcher's)."""
    numba = configure_numba()
    ns = {"__name__": module, "call_stashed": call_stashed(arg_types)}
    src = (
        "def trampoline(address, stashed, lo, hi):\n"
        "    if call_stashed(address, stashed, lo, hi):\n"
        f"        raise RuntimeError({_FAILED!r})\n"
    )
    exec(compile(src, "<probsched-trampoline>", "exec"), ns)
    i64 = numba_type("int64")
    return numba.njit((i64, i64, i64, i64), **compile_options())(ns["trampoline"])


def exported(kinds: Iterable[Tuple[str, ...]]) -> List[bytes]:
    """This process's launchers for ``kinds``, and the spin pool's worker loop they need, as
    bytes another process offers to :func:`.shared.offer` (a saved model carries them); a
    launcher this process has not got, or cannot store, is left out."""
    from . import shared
    from .spin_pool import serve_name

    names = [launcher_name(tuple(k)) for k in dict.fromkeys(map(tuple, kinds))]
    if any(not name.endswith(" prange") for name in names):
        names.append(serve_name())
    return [data for data in map(shared.export, names) if data is not None]


def launcher_sources() -> Dict[Tuple[str, ...], str]:
    """The argument kinds of every launcher this process has, and where each came from:
    ``"compiled"`` here, or loaded from a ``"model file"`` or the ``"program cache"``."""
    from .shared import sources

    held = sources()
    return {kinds: held[name] for name, kinds in _names.items() if name in held}
