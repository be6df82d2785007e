"""Parallel loops run by a launcher shared across kernels, calling the loop body by address.

In the ``prange`` parallel form (:mod:`.emit`) an outermost parallel loop becomes a body
function ``body(lo, hi, ints..., arrays...)`` that runs the loop's iterations ``lo`` to
``hi``, compiled alone like any other function, and a call
``launch(address_of_body, extent, ints..., arrays...)`` where the loop stood. ``launch`` is
a ``parallel=True`` function: its ``prange`` loop splits ``range(extent)`` into one
contiguous chunk per thread (numba's own static schedule) and calls the body on each
through its address (a numba intrinsic). It depends only on the kinds of the
arguments, so :func:`launcher` compiles it once per argument signature per process, and
every kernel with a parallel loop of that signature reuses it.

Why not a ``prange`` wrapper per loop: numba lowers each ``prange`` loop into a gufunc
through a second compile pipeline. That costs ~0.6 s per loop whatever its body (four
LLVM finalisations and a ``compile_ir``), and more for a big body, which numba links into
the wrapper and optimises again. On tuned candidates those wrappers were half of the
compile time (README, "Where a tuned candidate's compile time goes"). The body keeps its
``noalias`` array arguments: it is compiled as before and only called differently.

Why a chunk per call and not an index: a call by address is not inlined and costs ~20 ns
(the arrays are passed field by field). Called per index, NRM:2's best kernels (1024
iterations of ~1000 statements) ran 17-23% slower. Per chunk, a body also allocates its
scratch buffers once per thread, not per iteration. The loop around the iteration costs
some compile time: the same tuned candidates' bodies compiled 4-20% slower as chunks than
per index (one process, alternating), which is not worth a second mode.

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
import threading
from typing import Dict, List, Tuple

from .compile import compile_options, configure_numba, numba_type, warm_up

_launchers: Dict[Tuple[str, ...], object] = {}
_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _call_by_address():
    """The numba intrinsic ``call_by_address(address, args_tuple)`` (built on first use)."""
    numba = configure_numba()
    from numba.core import cgutils
    from numba.core.callconv import RETCODE_NONE, RETCODE_OK
    from numba.extending import intrinsic

    @intrinsic
    def call_by_address(typingctx, address, args):
        """Call the numba-compiled function at ``address`` with the members of ``args``;
        1 when it returned an error status (it raised), else 0."""
        if not isinstance(address, numba.types.Integer) or not isinstance(args, numba.types.BaseTuple):
            return None

        def codegen(context, builder, signature, llargs):
            addr, packed = llargs
            argtys = list(args.types)
            values = [builder.extract_value(packed, k) for k in range(len(argtys))]
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

        return numba.types.int64(address, args), codegen

    return call_by_address


def function_address(dispatcher) -> int:
    """Address of the one compiled overload of ``dispatcher`` (numba's calling convention).

    The dispatcher must stay alive as long as anything calls the address: numba frees
    nothing, but the address belongs to the dispatcher's compiled library.
    """
    (overload,) = dispatcher.overloads.values()
    return overload.library.get_pointer_to_function(overload.fndesc.llvm_func_name)


def launcher(kinds: Tuple[str, ...]):
    """The launcher for bodies taking ``(lo, hi, *args)`` with ``args`` of ``kinds``
    (each ``"int64"`` or ``"array:<dtype>"``): compiled on first use, then shared.

    Its signature is ``(address, extent, *args)``; it splits ``range(extent)`` into one
    contiguous chunk per thread of numba's pool and runs ``body(lo, hi, *args)`` on each.
    """
    kinds = tuple(kinds)
    hit = _launchers.get(kinds)
    if hit is not None:
        return hit
    with _lock:
        hit = _launchers.get(kinds)
        if hit is None:
            hit = _launchers[kinds] = compile_launcher(kinds)
        return hit


def compile_launcher(kinds: Tuple[str, ...]):
    """Compile a new launcher for ``kinds`` (what :func:`launcher` does once per kinds)."""
    numba = configure_numba()
    warm_up(parallel=True)
    names = [f"a{k}" for k in range(len(kinds))]
    chunk = "c * extent // chunks, (c + 1) * extent // chunks, " + "".join(f"{n}, " for n in names)
    src = (
        f"def launch(address, extent, {', '.join(names)}):\n"
        "    chunks = min(get_num_threads(), extent)\n"
        "    failed = 0\n"
        "    for c in prange(chunks):\n"
        f"        failed += call(address, ({chunk}))\n"
        "    if failed:\n"
        "        raise RuntimeError('a parallel loop body failed (an exception in its chunk, e.g. out of memory)')\n"
    )
    ns = {"prange": numba.prange, "get_num_threads": numba.get_num_threads, "call": _call_by_address()}
    exec(compile(src, "<probsched-launcher>", "exec"), ns)
    sig = (numba_type("int64"), numba_type("int64")) + tuple(numba_type(k) for k in kinds)
    return numba.njit(sig, **compile_options(parallel=True))(ns["launch"])


def compiled_launchers() -> List[Tuple[str, ...]]:
    """The argument kinds of every launcher this process has compiled."""
    return list(_launchers)
