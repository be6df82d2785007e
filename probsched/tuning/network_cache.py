"""A compiled network kept whole, so that ``ps.compile`` of the same network and records
again only loads it.

:mod:`.compile_cache` spares a second compile the choosing and the checking of each task's
schedule, and the program cache (:mod:`probsched.codegen.program_cache`) its numba
compiles; what was left of a second compile (replaying each stored schedule, computing
each task's reference to size its tolerance, generating each kernel's source to find its
compiled code) still cost several seconds of a network. This cache keeps the result: the
compiled model as :func:`probsched.runtime.artifact.save` writes it, without the weights
(the compiling process has them in its graph), in the ``networks`` folder of the disk cache
(:mod:`probsched.cache`).

An entry is keyed by everything the compile's result depends on: the network's values,
types and kernel calls (each task by its structural key), per task what
:func:`~.compile_network.compile` would choose from (the stored records it would try, in
order, with the measured time it reports; the predicted choice's key), the precision,
whether kernels are checked, the code generator's version and the machine code's target.
A task whose schedule is drawn from a space this cache cannot name (a custom space) makes
the network uncacheable. A damaged or foreign entry is a miss (the compile is done again
and the entry written anew), never trusted.

>>> import os, tempfile
>>> os.environ["PROBSCHED_CACHE_DIR"] = tempfile.mkdtemp()
>>> key = network_key({"calls": [["t0", [0], [1]]]})
>>> load(key, None) is None, len(key)
(True, 40)
>>> del os.environ["PROBSCHED_CACHE_DIR"]
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any, List, Optional, Tuple

from .. import cache
from ..errors import ModelFileError

log = logging.getLogger("probsched.compile")

#: Bumped when what an entry's key covers or its content changes.
FORMAT = 2


def network_key(parts: Any) -> str:
    """The key of a network's entry: ``parts`` (JSON-able: the network and its choices'
    inputs) with the code generator's version and the host's code target."""
    from ..codegen.program_cache import generator_version
    from ..runtime.artifact import host_codegen

    text = json.dumps([FORMAT, generator_version(), host_codegen(), parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _path(key: str) -> str:
    return os.path.join(cache.folder("networks"), key + ".psm")


def load(key: str, interface: Any) -> Optional[Tuple[Any, List[Any], List[Any]]]:
    """``(interface, steps, choices)`` of the entry under ``key`` (see
    :func:`probsched.runtime.artifact.read`), or None when there is none or it does not
    read (a warning then: it is written again)."""
    path = _path(key)
    if not os.path.exists(path):
        return None
    from ..runtime.artifact import read

    try:
        return read(path, interface)
    except (ModelFileError, KeyError, ValueError, OSError) as exc:
        log.warning("compile: the cached network %s does not load (%s); compiling it again", path, exc)
        return None


def store(key: str, model: Any) -> None:
    """Keep ``model`` (a :class:`~probsched.runtime.CompiledModel`) under ``key``; a full
    disk or a kernel that cannot be serialised only means the next compile builds again."""
    from ..runtime.artifact import save

    try:
        save(model, _path(key), constants=False)
    except Exception as exc:  # noqa: BLE001 - the model is right; only its caching failed
        log.warning("compile: network %s not cached (%s: %s)", model.name, type(exc).__name__, exc)


__all__ = ["network_key", "load", "store", "FORMAT"]
