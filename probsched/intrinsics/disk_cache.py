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

import hashlib
import importlib.util
import os
import shutil
import sys
import threading
from pathlib import Path
from types import ModuleType

_LOCK = threading.Lock()
_LOADED: dict = {}


def cache_dir() -> str:
    """The cache directory (created on demand)."""
    root = os.environ.get("PROBSCHED_CACHE_DIR") or os.path.join(Path.home(), ".cache", "probsched")
    return os.path.abspath(root)


def _fingerprint() -> str:
    import numba

    try:
        import llvmlite.binding as ll

        cpu = ll.get_host_cpu_name() + ll.get_host_cpu_features().flatten()
    except Exception:  # pragma: no cover - llvmlite always has these
        cpu = "unknown"
    return f"{numba.__version__}|{cpu}"


def load_module(stem: str, source: str) -> ModuleType:
    """Import ``source`` as a module stored in the cache (written once, atomically)."""
    digest = hashlib.sha256((source + _fingerprint()).encode()).hexdigest()[:16]
    name = f"probsched_kernel_{stem}_{digest}"
    with _LOCK:
        if name in _LOADED:
            return _LOADED[name]
        folder = os.path.join(cache_dir(), "kernels")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name + ".py")
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                fh.write(source)
            os.replace(tmp, path)  # atomic: concurrent workers never read half a file
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _LOADED[name] = module
        return module


def clear() -> int:
    """Delete every cached kernel; returns the number of files removed."""
    folder = os.path.join(cache_dir(), "kernels")
    if not os.path.isdir(folder):
        return 0
    n = sum(len(files) for _, _, files in os.walk(folder))
    shutil.rmtree(folder)
    return n
