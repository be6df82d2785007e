"""Where generated micro-kernel sources live, so numba's ``cache=True`` can cache them.

numba caches compiled code next to a function's source file, which must be a real file: the
library writes each generated kernel as a module under :func:`cache_dir` (``$PROBSCHED_CACHE_DIR``
or ``~/.cache/probsched``), named by a hash of its source, the numba version and the CPU, so a
stale or foreign cache is never used: it only costs a compile. ``probsched cache clear`` (or
:func:`clear`) empties it.

>>> import os
>>> os.path.isabs(cache_dir())
True
"""

from __future__ import annotations

import functools
import hashlib
from types import ModuleType

from .. import cache


def cache_dir() -> str:
    """The cache directory (:func:`probsched.cache.root`)."""
    return cache.root()


def _fingerprint() -> str:
    import numba

    try:
        import llvmlite.binding as ll

        cpu = ll.get_host_cpu_name() + ll.get_host_cpu_features().flatten()
    except Exception:  # pragma: no cover - llvmlite always has these
        cpu = "unknown"
    return f"{numba.__version__}|{cpu}"


@functools.lru_cache(maxsize=None)
def source_version(module: str) -> str:
    """A hash of module ``module``'s source file. numba's ``cache=True`` checks only a kernel's
    own file date, so a generated kernel names the version of the helpers it calls in its
    source: an edited helper module makes a new source, compiled anew.

    >>> len(source_version("probsched.intrinsics.simd"))
    16
    """
    import importlib

    with open(importlib.import_module(module).__file__, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


def load_module(stem: str, source: str) -> ModuleType:
    """Import ``source`` as a module stored in the cache (written once, atomically), named by
    ``stem`` and a hash of the source, the numba version and the CPU."""
    digest = hashlib.sha256((source + _fingerprint()).encode()).hexdigest()[:16]
    return cache.import_source(f"probsched_kernel_{stem}_{digest}", source)


def clear() -> int:
    """Delete every cached kernel; returns the number of files removed."""
    return cache.clear(["kernels"])
