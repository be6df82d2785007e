"""The compiled functions every kernel of a process shares: compiled once per machine kind.

The parallel launchers (:mod:`.launch`, one per argument signature) and the spin pool's
worker loop (:mod:`.spin_pool`) belong to no kernel; every kernel with a parallel loop uses
them. :func:`get` returns one by name, from the first place that has it:

1. this process (compiled or loaded before);
2. a saved model this process loaded (:func:`offer`: ``ps.load`` offers the model's copies);
3. the program cache (:mod:`.program_cache`, under :func:`.program_cache.shared_key`);
4. compiled now, and stored in the program cache.

The *name* says everything the code depends on besides the machine kind and the code
generator's version (:func:`.program_cache.identity`, which stored copies carry and must
match): a launcher's argument kinds, whether it uses the spin pool, the pool's size and its
timing constants. Code that holds an address of the process that compiled it is never
stored (:func:`.stored.state`); the launchers and the worker loop reach the pool through
symbols every process registers (:func:`.spin_pool.register_symbols`) instead.

:func:`sources` says where each came from (``"compiled"``, ``"model file"``, ``"program
cache"``): a process that loaded a saved model and compiled nothing shows no ``"compiled"``.

>>> import numba
>>> from probsched.codegen.compile import compile_options, numba_type
>>> build = lambda: numba.njit((numba_type("int64"),), **compile_options())(lambda n: n + 1)
>>> add_one = get("doctest.add_one", build, compile_options())
>>> add_one(41), get("doctest.add_one", build, compile_options()) is add_one
(42, True)
>>> sources()["doctest.add_one"] in ("compiled", "program cache")
True
"""

from __future__ import annotations

import logging
import pickle
import threading
from typing import Callable, Dict, Optional

from . import program_cache, stored

log = logging.getLogger("probsched.codegen")

_functions: Dict[str, object] = {}  # name -> dispatcher
_bytes: Dict[str, bytes] = {}  # name -> its code as export() hands it out (a loaded function cannot be serialised again)
_offered: Dict[str, bytes] = {}  # name -> code a loaded model brought, rebuilt when asked for
_sources: Dict[str, str] = {}
# reentrant: building a launcher starts the spin pool, which gets its worker loop here
_lock = threading.RLock()


def get(name: str, build: Callable[[], object], options: dict):
    """The shared function ``name``: found (see the module docstring), or ``build()``-ed (a
    dispatcher with one compiled overload) and stored. ``options``: the njit options it is
    compiled with, which a loaded copy's dispatcher gets too."""
    hit = _functions.get(name)
    if hit is not None:
        return hit
    with _lock:
        hit = _functions.get(name)
        if hit is not None:
            return hit
        disp, source = _load(name, options)
        if disp is None:
            disp, source = build(), "compiled"
            data = _to_bytes(name, disp)
            if data is not None:
                _bytes[name] = data
                if program_cache.enabled():
                    program_cache.write(program_cache.shared_key(name), data)
        _functions[name], _sources[name] = disp, source
        return disp


def _load(name: str, options: dict):
    """(dispatcher, where it came from) from the first copy that loads, or (None, None)."""
    for source, data in _copies(name):
        try:
            disp = stored.rebuild(stored.loads(_unwrap(data, name)), options)
        except Exception as exc:  # a damaged or foreign copy: the next place, or compile
            log.debug("shared function %s: the %s copy does not load: %s", name, source, exc)
            continue
        _bytes[name] = data
        return disp, source
    return None, None


def _copies(name: str):
    """(where, bytes) of each copy of ``name`` there is, best first (read when reached)."""
    data = _offered.pop(name, None)
    if data is not None:
        yield "model file", data
    if program_cache.enabled():
        data = program_cache.read(program_cache.shared_key(name))
        if data is not None:
            yield "program cache", data


def _to_bytes(name: str, disp) -> Optional[bytes]:
    try:
        saved = stored.state(disp)
        if saved is None:
            log.debug("shared function %s holds addresses of this process: not stored", name)
            return None
        code = stored.dumps(saved)
    except Exception as exc:  # noqa: BLE001 - an unpicklable environment: compiled again elsewhere
        log.debug("shared function %s: not stored: %s", name, exc)
        return None
    return pickle.dumps({"name": name, "identity": program_cache.identity(), "code": code})


def _unwrap(data: bytes, name: str) -> bytes:
    """The code in a copy of ``name``; ValueError when it is of another function, machine
    kind or code generator."""
    entry = pickle.loads(data)
    if entry.get("name") != name or entry.get("identity") != program_cache.identity():
        raise ValueError(f"the copy is of {entry.get('name')!r} for {entry.get('identity')!r}")
    return entry["code"]


def export(name: str) -> Optional[bytes]:
    """The shared function ``name`` of this process as bytes for :func:`offer` in another
    process (a saved model carries the ones its kernels use), or None when this process
    has not got it or it cannot be stored."""
    return _bytes.get(name)


def offer(data: bytes) -> Optional[str]:
    """Keep a copy of a shared function (from :func:`export`) to be loaded if this process
    asks for it; returns its name, or None when it was made for another machine kind or
    code generator (this process then finds or compiles its own)."""
    try:
        entry = pickle.loads(data)
        name = entry["name"]
    except Exception:  # noqa: BLE001 - not a copy: nothing to offer
        return None
    if entry.get("identity") != program_cache.identity():
        return None
    with _lock:
        if name not in _functions:
            _offered[name] = data
    return name


def sources() -> Dict[str, str]:
    """Where each shared function of this process came from: ``"compiled"``, ``"model
    file"`` or ``"program cache"``."""
    return dict(_sources)


__all__ = ["get", "export", "offer", "sources"]
