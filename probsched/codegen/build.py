"""``build()``: a PrimFunc (or a schedule's ``.mod``) to a compiled :class:`Kernel`.

The function is lowered first (:func:`probsched.lowering.lower`: unroll pragmas, local
buffer compaction), then emitted and compiled.

Compiled modules are cached per process, keyed by the function's structural hash, the
parallel form and the registered statement emitters: building an equal function again
(a replayed trace, a re-measured candidate) reuses the machine code instead of paying
compile time and memory again (numba never frees a compiled function). Under it, compiled
modules are kept on disk for every process (:mod:`.program_cache`). The kernel of a
cache hit (either) has ``from_cache = True`` and the original ``compile_seconds``.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Dict, Optional, Tuple, Union

from ..errors import BuildError
from ..ir.stmt import PrimFunc
from ..lowering import lower
from ..target import Target
from . import program_cache
from .compile import compile_module, generated_options, slp_enabled
from .emit import choose_form, emit_module
from .kernel import Kernel
from .registry import generation
from .spin_pool import enabled as spin_pool_enabled

if TYPE_CHECKING:
    from ..schedule import Schedule

_cache: Dict[tuple, Tuple[object, object]] = {}
_cache_lock = threading.Lock()


def as_func(func_or_schedule: Union[PrimFunc, "Schedule"]) -> PrimFunc:
    """The PrimFunc of ``func_or_schedule`` (a PrimFunc, or anything whose ``.mod`` is one)."""
    if isinstance(func_or_schedule, PrimFunc):
        return func_or_schedule
    mod = getattr(func_or_schedule, "mod", None)
    if isinstance(mod, PrimFunc):
        return mod
    raise BuildError(
        f"build: expected a PrimFunc or an object whose .mod is a PrimFunc (a Schedule), "
        f"got {type(func_or_schedule).__name__}"
    )


def _cache_key(func: PrimFunc, form: str):
    try:
        h = func.structural_hash()
    except Exception:  # e.g. statements the serialiser does not know: do not cache
        return None
    return (h, func.name, form, slp_enabled(), spin_pool_enabled(), generation())


def build(
    func_or_schedule: Union[PrimFunc, "Schedule"],
    target: Union[None, str, Target] = None,
    *,
    parallel: str = "auto",
    cache: bool = True,
) -> Kernel:
    """Compile a function with numba; returns a callable :class:`Kernel`.

    ``target``: ``None`` (the host), a :class:`~probsched.target.Target`, or a string
    ``"cpu"`` / ``"cpu -threads=N"``. ``parallel``: how parallel loops run, ``"auto"``
    (default), ``"threads"`` or ``"prange"`` (see :mod:`probsched.codegen.emit`).
    ``cache=False`` compiles even when an equal function was compiled before.
    Errors in code generation or in numba's compilation raise
    :class:`~probsched.errors.BuildError` with numba's message and the source context.

    >>> import numpy as np, probsched as ps
    >>> A = ps.placeholder((2, 3), name="A")
    >>> k = ps.reduce_axis(3, name="k")
    >>> S = ps.compute((2,), lambda i: ps.max(A[i, k], axis=k), name="S")
    >>> kern = ps.build(ps.create_func([A, S]), "cpu -threads=1")
    >>> kern.run(np.array([[1, 5, 2], [7, 0, 3]], dtype="float32"))
    (array([5., 7.], dtype=float32),)
    >>> ps.build(ps.create_func([A, S])).from_cache
    True
    """
    func = lower(as_func(func_or_schedule))
    try:
        tgt = Target.parse(target)
    except (TypeError, ValueError) as exc:
        raise BuildError(str(exc)) from None
    form = choose_form(func, parallel)
    key = _cache_key(func, form) if cache else None
    hit = _cache.get(key) if key is not None else None
    if hit is not None:
        module, compiled = hit
        return Kernel(module, compiled, tgt, func=func, from_cache=True)
    module = emit_module(func, parallel)
    disk = _disk_key(key, module) if key is not None else None
    compiled = program_cache.load(disk, module) if disk is not None else None
    from_disk = compiled is not None
    if compiled is None:
        compiled = compile_module(module)
        if disk is not None:
            program_cache.store(disk, module, compiled)
    if key is not None:
        with _cache_lock:
            _cache.setdefault(key, (module, compiled))
    return Kernel(module, compiled, tgt, func=func, from_cache=from_disk)


def _disk_key(key: tuple, module) -> Optional[str]:
    """The program cache's key of a module, or None when it must not be cached on disk:
    the cache is off, or the code calls functions from outside probsched (a user's
    emitters), whose versions the key cannot know."""
    if not program_cache.enabled():
        return None
    for obj in module.extra_globals.values():
        owner = getattr(getattr(obj, "py_func", None) or getattr(obj, "_defn", None) or obj, "__module__", None) or ""
        if not (owner.startswith("probsched.") or owner.startswith("probsched_kernel_")):
            return None
    structural_hash, name, form, slp, spin_pool = key[:5]
    # not the emitter registry's generation (it counts registrations, which differ with what a
    # process imported): the entry's source is compared with the source generated now instead
    opts = generated_options(exact=module.rounds)
    options = repr(sorted((k, sorted(v) if isinstance(v, (set, frozenset)) else v) for k, v in opts.items()))
    return program_cache.key(structural_hash, name, form, f"{options} slp={slp} spin_pool={spin_pool}")


def clear_cache() -> None:
    """Forget cached compiled modules (their machine code stays in memory: numba keeps it)."""
    with _cache_lock:
        _cache.clear()
