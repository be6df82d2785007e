"""What ``ps.compile`` chose before, so that compiling the same network again is quick.

Compiling a network costs, per task, the choice of a schedule (a task without a record
draws and ranks ``candidates`` programs from the design space) and the check of its kernel
against the task's reference (run through JAX). Neither changes while the task, the
database's record, the design space, the shipped cost model and the code generator stay
the same, so both are kept in the ``choices`` folder of probsched's disk cache
(:mod:`probsched.cache`), one small JSON file per choice:

- a *predicted* choice is keyed by the task, the space (only the default spaces, whose
  rules are known by name and target), the number of candidates, the seed, the transfer
  records and the code generator's version, and holds the chosen instruction log;
- a *checked* kernel is keyed by the task, the scheduled program's structural hash and the
  code generator's version: that program compiled by this code generator passed the check.

A damaged or foreign file is ignored (the work is done again), never trusted.

>>> import os, tempfile
>>> os.environ["PROBSCHED_CACHE_DIR"] = tempfile.mkdtemp()
>>> key = checked_key("task", "program")
>>> was_checked(key)
False
>>> note_checked(key); was_checked(key)
True
>>> del os.environ["PROBSCHED_CACHE_DIR"]
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any, Optional

from .. import cache

log = logging.getLogger("probsched.compile")

#: Bumped when what a choice file holds changes.
FORMAT = 1


def _digest(*parts: Any) -> str:
    from ..codegen.program_cache import generator_version

    text = "\0".join(map(str, (FORMAT, generator_version()) + parts))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _path(key: str) -> str:
    return os.path.join(cache.folder("choices"), key + ".json")


def _read(key: str) -> Optional[dict]:
    try:
        with open(_path(key)) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _write(key: str, data: dict) -> None:
    try:
        cache.write_atomic(_path(key), json.dumps(data).encode())
    except OSError as exc:  # a full disk: the work is done again next time
        log.debug("compile cache: not stored: %s", exc)


def predicted_key(task_key: str, space: Any, candidates: int, seed: int) -> Optional[str]:
    """The key of a predicted choice, or None for a space this cache cannot name (only the
    default spaces are known by their name and target)."""
    name = getattr(space, "name", "")
    target = getattr(space, "target", None)
    if not name.startswith("default") or target is None:
        return None
    from ..cost_model.transfer import transfer_path

    path = transfer_path(target)
    try:
        stamp = os.stat(path).st_size, int(os.stat(path).st_mtime)
    except OSError:
        stamp = None
    # the rules by name too: a default space that gained a rule (Winograd) draws other programs
    return _digest("predicted", task_key, name, repr(space), target.to_json(), candidates, seed, path, stamp)


def load_predicted(key: Optional[str]) -> Optional[str]:
    """The instruction log (JSON) chosen before under ``key``, or None."""
    data = _read(key) if key else None
    return data.get("instructions") if data else None


def store_predicted(key: Optional[str], instructions: str) -> None:
    """Keep the instruction log chosen under ``key``."""
    if key:
        _write(key, {"instructions": instructions})


def checked_key(task_key: str, program_hash: str) -> str:
    """The key of a kernel's check: the task and the scheduled program."""
    return _digest("checked", task_key, program_hash)


def was_checked(key: str) -> bool:
    """Whether that program passed the check before (with this code generator)."""
    data = _read(key)
    return bool(data and data.get("ok"))


def note_checked(key: str) -> None:
    """Remember that the program passed the check."""
    _write(key, {"ok": True})


__all__ = ["predicted_key", "load_predicted", "store_predicted", "checked_key", "was_checked", "note_checked"]
