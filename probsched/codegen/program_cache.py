"""Compiled programs kept on disk: a second build of the same program, in any process, loads
its machine code instead of compiling it again.

:func:`~probsched.codegen.build` keeps compiled modules in the process
(:mod:`.build`); this is the layer under it, shared by processes through the ``programs``
folder of probsched's disk cache (:mod:`probsched.cache`). A measurement worker that
re-times the best candidates, a tuning run that resumes, a network whose tasks repeat
earlier ones, a second ``ps.compile`` of a model: each loads what was compiled before
(a small fraction of a compile's time).

**Key.** An entry is found by the SHA-256 of: the lowered program's structural hash, its
parallel form and name; the target's code-generation identity (numba's
``codegen.magic_tuple()``: triple, CPU name and features; the numba and llvmlite
versions); the code generator's version (:func:`generator_version`: a hash of the source
files of ``probsched.codegen``, ``probsched.intrinsics`` and ``probsched.lowering``, so an
edited code generator never reads an older entry) and the compile options. Programs with
statement or block emitters registered by the user (:mod:`.registry`) are not cached: their
code is not versioned here. The entry also holds the generated source, which must equal the
source generated now, or the entry is ignored.

**What is stored** is numba's own serialised form of each compiled function (its object code
and the data numba needs to run it, as numba's ``cache=True`` stores it: :mod:`.stored`).
This is safe because the generated code holds no address of the process that compiled it:
parallel loops call the shared launcher and their bodies through addresses the kernel passes
as arguments at each call (:mod:`.emit`, :mod:`.launch`); micro-kernels and helpers are
linked in as code. A compiled function that numba says uses dynamic globals (addresses of
the process) is never stored. The functions every kernel shares (the parallel launchers and
the spin pool's worker loop, :mod:`.shared`) are kept here too, each under
:func:`shared_key` of its name.

**Concurrency and size.** Entries are written atomically (:func:`probsched.cache.write_atomic`),
so processes may store and load at the same time. The folder is bounded by
``$PROBSCHED_PROGRAM_CACHE_MB`` (default 1024): after a store, when it is larger, the least
recently used entries (a load touches its file) are deleted down to three quarters of the
bound. ``PROBSCHED_PROGRAM_CACHE=0`` turns the cache off; ``probsched cache clear`` empties it.

>>> import os, tempfile, numpy as np, probsched as ps
>>> from probsched.codegen.build import clear_cache
>>> os.environ["PROBSCHED_CACHE_DIR"] = tempfile.mkdtemp()
>>> A = ps.placeholder((8,), name="A")
>>> B = ps.compute((8,), lambda i: A[i] * 3.0, name="B")
>>> func = ps.create_func([A, B], name="triple")
>>> first = ps.build(func)
>>> clear_cache()     # as if in another process: nothing compiled here
>>> again = ps.build(func)
>>> again.from_cache, again.run(np.ones(8, "float32"))[0].tolist() == [3.0] * 8
(True, True)
>>> del os.environ["PROBSCHED_CACHE_DIR"]
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from typing import TYPE_CHECKING, Dict, Optional

from .. import cache
from . import stored

if TYPE_CHECKING:
    from .compile import CompiledModule
    from .emit import ModuleSource

log = logging.getLogger("probsched.codegen")

#: Bumped when the stored format changes.
FORMAT = 1
DEFAULT_MAX_MB = 1024.0
_STORES_BETWEEN_SCANS = 32
_stores = 0


def enabled() -> bool:
    """Whether builds use the disk cache (``PROBSCHED_PROGRAM_CACHE=0`` turns it off)."""
    return os.environ.get("PROBSCHED_PROGRAM_CACHE", "1").strip().lower() not in ("0", "off", "no", "false")


@functools.lru_cache(maxsize=None)
def generator_version() -> str:
    """Hash of the code generator's sources (``probsched.codegen``, ``.intrinsics``,
    ``.lowering``): any edit gives new keys.

    >>> len(generator_version())
    16
    """
    h = hashlib.sha256(str(FORMAT).encode())
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for sub in ("codegen", "intrinsics", "lowering"):
        folder = os.path.join(pkg, sub)
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as fh:
                    h.update(name.encode() + b"\0" + fh.read())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _target_identity() -> str:
    import llvmlite
    import numba
    from numba.core.registry import cpu_target

    return repr((cpu_target.target_context.codegen().magic_tuple(), numba.__version__, llvmlite.__version__))


def identity() -> str:
    """What stored code is valid for: the target's code-generation identity (triple, CPU
    name and features; numba and llvmlite versions) and :func:`generator_version`."""
    return f"{_target_identity()} {generator_version()}"


def key(structural_hash: str, name: str, form: str, options: str) -> str:
    """The entry's name for a lowered program (see the module doc)."""
    parts = (str(FORMAT), structural_hash, name, form, options, identity())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def shared_key(name: str) -> str:
    """The entry's name for a function every kernel shares (:mod:`.shared`), by its name,
    which says everything its code depends on besides :func:`identity`."""
    return hashlib.sha256("\0".join((str(FORMAT), "shared", name, identity())).encode()).hexdigest()[:40]


def _path(digest: str) -> str:
    return os.path.join(cache.folder("programs"), digest + ".bin")


def dumps(module: "ModuleSource", compiled: "CompiledModule") -> Optional[bytes]:
    """``compiled`` (the functions of ``module``) as bytes :func:`loads` rebuilds in any
    process of the same machine kind; None when a function cannot be stored (it uses
    dynamic globals: addresses of this process). The bytes it was loaded from, for a
    module that was loaded (numba keeps loaded object code only until it is linked)."""
    if compiled.stored is not None:
        return compiled.stored
    functions = {}
    for spec in module.functions:
        saved = stored.state(compiled.dispatchers[spec.name])
        if saved is None:
            return None
        functions[spec.name] = saved
    return stored.dumps({"source": module.source, "seconds": compiled.seconds, "functions": functions})


def loads(module: "ModuleSource", data: bytes) -> "CompiledModule":
    """The compiled functions of ``module`` from :func:`dumps`' bytes; raises ValueError when
    they are of another module (another generated source) and whatever numba raises when
    they do not load here."""
    entry = stored.loads(data)
    if entry.get("source") != module.source or set(entry["functions"]) != {f.name for f in module.functions}:
        raise ValueError("the stored code is of another generated program")
    compiled = _rebuild(module, entry)
    compiled.stored = data
    return compiled


def store(digest: str, module: "ModuleSource", compiled: "CompiledModule") -> bool:
    """Keep ``compiled`` (the functions of ``module``) under ``digest``; False when a function
    cannot be stored (dynamic globals) or the write failed (neither is an error)."""
    try:
        data = dumps(module, compiled)
    except Exception as exc:  # an unpicklable environment: compile next time
        log.debug("program cache: not stored: %s", exc)
        return False
    return data is not None and write(digest, data)


def load(digest: str, module: "ModuleSource") -> Optional["CompiledModule"]:
    """The compiled functions of ``module`` stored under ``digest``, or None."""
    data = read(digest)
    if data is None:
        return None
    try:
        return loads(module, data)
    except Exception as exc:  # a damaged, foreign or stale entry: compile instead
        log.debug("program cache: entry %s does not load: %s", digest, exc)
        return None


def write(digest: str, data: bytes) -> bool:
    """Keep ``data`` under ``digest`` (atomically: readers never see part of it); False when
    the write failed (a full disk: not an error). Trims the folder now and then."""
    try:
        cache.write_atomic(_path(digest), data)
    except OSError as exc:
        log.debug("program cache: not stored: %s", exc)
        return False
    global _stores
    _stores += 1
    if _stores % _STORES_BETWEEN_SCANS == 1:
        trim()
    return True


def read(digest: str) -> Optional[bytes]:
    """The bytes kept under ``digest`` (now recently used: trimmed last), or None."""
    path = _path(digest)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.debug("program cache: unreadable entry %s: %s", path, exc)
        return None
    try:
        os.utime(path)
    except OSError:
        pass
    return data


def _rebuild(module: "ModuleSource", entry: dict) -> "CompiledModule":
    from .compile import CompiledModule, generated_options
    from .launch import call_by_address, function_address, launcher

    ns: dict = {"__name__": "probsched_cached_program"}
    exec(compile(module.source, "<probsched-cached>", "exec"), ns)  # the Python functions the dispatchers wrap
    dispatchers: Dict[str, object] = {}
    by_address = module.by_address()
    for spec in module.functions:
        options = generated_options(spec.name in by_address, module.rounds)
        dispatchers[spec.name] = stored.rebuild(entry["functions"][spec.name], options, ns[spec.name])
    if module.call_global is not None:
        call_by_address()  # built in this process as it would be for a compile
    launchers = {ls.kinds: launcher(ls.kinds) for ls in module.launches}
    addresses = [
        function_address(launchers[k] if kind == "launcher" else dispatchers[k]) for kind, k in module.address_args
    ]
    return CompiledModule(dispatchers, dispatchers[module.entry], float(entry["seconds"]), "<probsched-cached>", addresses)


def max_bytes() -> float:
    """The folder's bound in bytes (``$PROBSCHED_PROGRAM_CACHE_MB``)."""
    try:
        return float(os.environ.get("PROBSCHED_PROGRAM_CACHE_MB", DEFAULT_MAX_MB)) * 2**20
    except ValueError:
        return DEFAULT_MAX_MB * 2**20


def trim(limit: Optional[float] = None) -> int:
    """Delete the least recently used entries while the folder is over ``limit`` bytes
    (default :func:`max_bytes`), down to three quarters of it; returns the entries deleted."""
    limit = max_bytes() if limit is None else limit
    folder = cache.folder("programs")
    entries = []
    for name in os.listdir(folder):
        if not name.endswith(".bin"):
            continue
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:  # another process deleted it
            continue
        entries.append((st.st_mtime, st.st_size, name))
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return 0
    deleted = 0
    for _, size, name in sorted(entries):
        if total <= 0.75 * limit:
            break
        try:
            os.unlink(os.path.join(folder, name))
            deleted += 1
        except OSError:
            pass
        total -= size
    return deleted


__all__ = ["enabled", "generator_version", "identity", "key", "shared_key", "load", "store", "read", "write", "dumps",
           "loads", "trim", "max_bytes"]
