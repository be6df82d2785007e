"""probsched's disk cache: where compiled micro-kernels, trained models and compiled
programs are kept between processes, and how to empty it.

The root is ``$PROBSCHED_CACHE_DIR`` (default ``~/.cache/probsched``), one folder per kind
(:data:`KINDS`). Every entry is named by a hash of everything its content depends on, and
written atomically (a temporary file renamed over the name), so concurrent processes share
it safely and a stale entry is never read: it is only never used again. ``probsched cache
clear`` (:func:`clear`) removes them all.

>>> import os, tempfile
>>> os.environ["PROBSCHED_CACHE_DIR"] = tempfile.mkdtemp()
>>> path = os.path.join(folder("models"), "x.bin")
>>> write_atomic(path, b"abc")
>>> open(path, "rb").read(), clear()
(b'abc', 1)
>>> del os.environ["PROBSCHED_CACHE_DIR"]
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Iterable, Optional

_IMPORT_LOCK = threading.Lock()

#: The kinds of entries, one folder each: ``kernels`` (micro-kernel modules,
#: :mod:`probsched.intrinsics.disk_cache`), ``models`` (cost-model trainings,
#: :mod:`probsched.cost_model.trained_cache`), ``programs`` (compiled scheduled programs,
#: :mod:`probsched.codegen.program_cache`), ``choices`` (what ``ps.compile`` chose and
#: checked, :mod:`probsched.tuning.compile_cache`), ``networks`` (compiled networks without
#: their weights, :mod:`probsched.tuning.network_cache`), ``narrow`` (which values a bf16
#: network stores in bfloat16, as measured: :mod:`probsched.tuning.narrow_choice`).
KINDS = ("kernels", "models", "programs", "choices", "networks", "narrow")


def root() -> str:
    """The cache's root directory (not created)."""
    base = os.environ.get("PROBSCHED_CACHE_DIR") or os.path.join(Path.home(), ".cache", "probsched")
    return os.path.abspath(base)


def folder(kind: str) -> str:
    """The folder of one kind of entry (created on demand)."""
    if kind not in KINDS:
        raise ValueError(f"cache: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    path = os.path.join(root(), kind)
    os.makedirs(path, exist_ok=True)
    return path


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees a partial file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


#: How a generated module compiles its function when it is imported (:mod:`probsched.intrinsics`).
EAGER_DECORATOR = "@numba.njit(SIGNATURE, "


def import_source(name: str, source: str, lazy: bool = False) -> ModuleType:
    """Import ``source`` as module ``name``, kept as ``kernels/<name>.py`` (written once,
    atomically): generated modules need a real file for numba's ``cache=True``. A module
    of that name imported before is returned as it is.

    ``lazy``: a generated module's function is compiled when first called rather than when
    imported (its eager signature left out): a loaded model's code has the micro-kernels
    linked in already and never calls them, so on a machine with an empty cache their
    compiles would only cost time. The file keeps the source as given."""
    with _IMPORT_LOCK:
        if name in sys.modules:
            return sys.modules[name]
        path = os.path.join(folder("kernels"), name + ".py")
        if not os.path.exists(path):
            write_atomic(path, source.encode())  # concurrent workers never read half a file
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            if lazy and EAGER_DECORATOR in source:
                exec(compile(source.replace(EAGER_DECORATOR, "@numba.njit("), path, "exec"), module.__dict__)
            else:
                spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module


def clear(kinds: Optional[Iterable[str]] = None) -> int:
    """Delete every entry of ``kinds`` (default: all); returns the number of files removed."""
    n = 0
    for kind in KINDS if kinds is None else kinds:
        path = os.path.join(root(), kind)
        if os.path.isdir(path):
            n += sum(len(files) for _, _, files in os.walk(path))
            shutil.rmtree(path, ignore_errors=True)
    return n
