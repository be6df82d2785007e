"""A compiled function as bytes, and back: numba's own serialised form of its one overload.

numba serialises a compiled function as its object code plus what it needs to run it (the
function's descriptor, environment and signature: ``CompileResult._reduce``, what its
``cache=True`` writes); :func:`state` takes that of a dispatcher and :func:`rebuild` makes a
dispatcher of it again, in this or another process of the same machine kind, without
compiling. The program cache (:mod:`.program_cache`), the shared launchers
(:mod:`.shared`) and saved models store code this way.

Code is only valid in another process when it holds no address of the process that
compiled it. numba marks the addresses it embeds (``has_dynamic_globals``: ctypes
functions, large constant arrays) and :func:`state` refuses such code; probsched's own code
takes addresses as arguments at each call or reaches process state through symbols that
every process registers (:func:`.spin_pool.register_symbols`).

>>> import numba, numpy as np
>>> from probsched.codegen.compile import compile_options, numba_type
>>> def twice(a):
...     for i in range(a.shape[0]):
...         a[i] *= 2.0
>>> disp = numba.njit((numba_type("array:float32"),), **compile_options())(twice)
>>> again = rebuild(loads(dumps(state(disp))), compile_options())
>>> a = np.ones(3, np.float32); again(a); a.tolist()
[2.0, 2.0, 2.0]
"""

from __future__ import annotations

import pickle
from typing import Callable, Optional


def state(dispatcher) -> Optional[tuple]:
    """The serialisable state of ``dispatcher``'s one compiled overload, or None when its
    code holds addresses of this process (numba's dynamic globals) or was lifted from an
    object-mode function. The code must have been compiled in this process: numba keeps a
    rebuilt function's object code only until it is loaded."""
    (cres,) = dispatcher.overloads.values()
    if cres.library.has_dynamic_globals or cres.lifted:
        return None
    return cres._reduce()


def dumps(obj) -> bytes:
    """``obj`` (e.g. a :func:`state`) as bytes, pickled the way numba pickles its own."""
    from numba.core.serialize import dumps as numba_dumps

    return numba_dumps(obj)


def loads(data: bytes):
    """What :func:`dumps` wrote, with numba's module of dynamically created functions
    importable.

    Functions that are ``exec``-ed live in no importable module, so numba files their
    environments under its ``"<dynamic>"`` module, and unpickling one imports the module by
    that name: it is put in ``sys.modules`` for the call (never used at run time: nopython
    code does not read its globals).
    """
    import sys

    from numba.core import funcdesc

    name = funcdesc._dynamic_modname
    added = name not in sys.modules
    if added:
        sys.modules[name] = funcdesc._dynamic_module
    try:
        return pickle.loads(data)
    finally:
        if added:
            sys.modules.pop(name, None)


def rebuild(saved: tuple, options: dict, py_func: Optional[Callable] = None):
    """A dispatcher whose one overload is the code of a :func:`state`, compiled with the njit
    ``options``; it cannot compile (a call with other argument types fails). ``py_func``
    is the Python function it wraps; without it, a stand-in of the same name and arguments
    whose body only raises (numba never runs it: the code is there)."""
    from numba.core.compiler import CompileResult

    from .compile import configure_numba

    numba = configure_numba()
    fndesc = saved[1]
    disp = numba.njit(**options)(py_func or _stand_in(fndesc.qualname.split(".")[-1], fndesc.args))
    # what numba does before it compiles or loads from its own cache: among others it
    # starts its runtime (NRT), whose functions the loaded code may call
    disp.targetctx.refresh()
    cres = CompileResult._rebuild(disp.targetctx, *saved)
    disp.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
    disp.add_overload(cres)
    disp.disable_compile()
    return disp


def _stand_in(name: str, args) -> Callable:
    name = name if name.isidentifier() else "loaded"
    ns: dict = {}
    exec(f"def {name}({', '.join(args)}):\n    raise RuntimeError('loaded machine code: no Python body')\n", ns)
    return ns[name]


__all__ = ["state", "dumps", "loads", "rebuild"]
