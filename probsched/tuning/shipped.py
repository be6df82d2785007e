"""Records shipped with the package: what tuning the shipped networks taught, per CPU family.

TVM's TopHub shipped tuned logs per device; this is the same for this library. The package
holds, for each CPU family the project has tuned on (``probsched/data/records/<family>.jsonl.gz``,
a database export of the best few records of every task of the shipped networks), the
decisions that were fastest there. They serve twice:

- ``ps.compile`` without a database uses them (source ``"shipped"``) for the tasks they
  cover, on a machine of the same family; every kernel is still checked before use;
- a tuning run's task that has no record of its own measures them first
  (:class:`~probsched.tuning.task_search.TaskSearch`), then searches from there.

A family is the CPU's vendor and its widest vector instructions (:func:`cpu_family`): the
schedules' tile shapes and micro-kernels suit every CPU of one family, and the records are
re-measured where it matters (tuning) and re-checked always. A family the package ships no
file for borrows the file of another vendor with the same vector instructions
(:func:`records_family`): its register tiles fit the same registers, only the cache-sized
choices may be off, and every record is still checked before use and re-measured by tuning.
``probsched build-records DB...`` makes a family's file from tuning databases.

>>> from probsched.target import Target
>>> cpu_family(Target(model="AMD EPYC 9R14", isa=("avx2", "avx512f")))
'amd-avx512'
>>> cpu_family(Target(model="Intel(R) Xeon(R) Platinum", isa=("avx2", "fma")))
'intel-avx2'
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import math
import os
import tempfile
from typing import Dict, Iterable, List, Optional, Tuple


from ..database import Database, StoredWorkload, TuningRecord
from ..intrinsics.matmul_amx import FAMILIES as AMX_FAMILIES
from ..database.record import target_json
from .selection import FAMILY_POOL
from ..target import Target

log = logging.getLogger("probsched.tune")

FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "records")
#: Best records per task a family's file keeps.
DEFAULT_TOP = 4


def cpu_family(target: Optional[Target] = None) -> str:
    """``<vendor>-<widest vector ISA>`` of ``target`` (this machine unless given)."""
    t = Target.parse(target)
    model = t.model.lower()
    vendor = "amd" if "amd" in model else "intel" if "intel" in model else "x86"
    isa = "avx512" if t.has("avx512f") else "avx2" if t.has("avx2") else "sse"
    return f"{vendor}-{isa}"


def records_family(family: Optional[str] = None) -> Optional[str]:
    """The family whose shipped records serve ``family`` (this machine's unless given): its
    own where the package ships a file for it, else that of another vendor with the same
    vector instructions, else None.

    >>> records_family("intel-avx512")
    'intel-avx512'
    >>> records_family("intel-avx2")  # none ship for it: AMD's, the same vector instructions
    'amd-avx2'
    >>> records_family("x86-sse") is None
    True
    """
    family = family or cpu_family()
    if os.path.exists(shipped_path(family)):
        return family
    isa = family.rsplit("-", 1)[-1]
    for vendor in ("intel", "amd", "x86"):
        if os.path.exists(shipped_path(f"{vendor}-{isa}")):
            return f"{vendor}-{isa}"
    return None


def shipped_path(family: str) -> str:
    """Where the records of ``family`` are shipped (the file may be absent)."""
    return os.path.join(FOLDER, f"{family}.jsonl.gz")


@functools.lru_cache(maxsize=4)
def shipped_database(family: Optional[str] = None) -> Optional[Database]:
    """The shipped records of ``family`` (this machine's unless given) in a database in
    memory, filed as this machine's own (so every query finds them); None when the package
    ships none for it nor for its vector instructions (:func:`records_family`)."""
    wanted = family or cpu_family()
    family = records_family(wanted)
    if family is None:
        return None
    path = shipped_path(family)
    host = target_json(None)
    missing = _missing_kernels()
    db = Database(":memory:")
    skipped = 0
    with gzip.open(path, "rt") as src, tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as dst:
        for n, line in enumerate(src):
            if n and line.strip():
                entry = json.loads(line)
                if entry.get("type") == "record" and any(k in line for k in missing):
                    skipped += 1  # its kernels cannot run here: it would only fail to build, every compile
                    continue
                if entry.get("type") in ("record", "retiming"):
                    entry["target"] = host
                line = json.dumps(entry, sort_keys=True) + "\n"
            dst.write(line)
    try:
        added = db.import_jsonl(dst.name)
    finally:
        os.unlink(dst.name)
    log.info("shipped records: %d of family %s%s%s", added, family, "" if family == wanted else f" (none ship for {wanted})",
             f"; {skipped} left out, their kernels ({', '.join(missing)}) cannot run here" if skipped else "")
    return db


#: micro-kernel families that run only where a CPU unit is (name prefix -> AMX unit)
UNIT_KERNELS = {fam.prefix: fam.unit for fam in AMX_FAMILIES.values()}


def _missing_kernels() -> List[str]:
    """Name prefixes of the micro-kernels this process cannot run (the AMX ones on a CPU
    without AMX, or where the OS does not grant it)."""
    from ..intrinsics import amx

    host = Target.host()
    # the CPU is asked first: on one without AMX, the unit's own check would warn for nothing
    return [prefix for prefix, unit in UNIT_KERNELS.items() if not (host.has(f"amx_{unit}") and amx.usable(unit))]


def shipped_records(key: str, limit: int = DEFAULT_TOP) -> List[TuningRecord]:
    """The shipped best records of the workload ``key`` (fastest first; none where the
    package ships no records for this CPU family)."""
    db = shipped_database()
    return [] if db is None else db.best(key, k=limit)


def build_records(databases: Iterable[str], out: str, top: int = DEFAULT_TOP) -> Dict[str, int]:
    """Write the ``top`` best distinct records of every workload of ``databases`` to
    ``out`` (a gzipped database export: what :func:`shipped_database` reads), with the
    workload's latest re-timing session and the records it timed (the tuner names a
    network task's schedule by that session, timed with the weights cold); returns the
    records kept per workload name. A workload several databases hold comes from the one
    whose best record is fastest (the first of equals): a network tuned in bf16 holds its
    tasks' float32 versions too, tried a few times each, and those must not replace the
    float32 network's own records, tuned hundreds of times. A record whose instructions no
    longer replay on its workload (a schedule primitive changed since it was tuned) is
    left out: ``ps.compile`` would skip it."""
    from ..database.database import JSONL_FORMAT, JSONL_VERSION

    databases = list(databases)
    # workload hash -> (its best seconds, database index, that database's best records that replay)
    source: Dict[str, Tuple[float, int, List[TuningRecord]]] = {}
    for i, path in enumerate(databases):
        with Database(path) as db:
            for w in db.workloads():
                best = _replaying(db.best(w.hash, k=FAMILY_POOL), w, top)
                if best and best[0].median < source.get(w.hash, (math.inf,))[0]:
                    source[w.hash] = (best[0].median, i, best)
    workloads: Dict[str, str] = {}
    lines: List[str] = []
    kept: Dict[str, int] = {}
    for i, path in enumerate(databases):
        with Database(path) as db:
            for w in db.workloads():
                if w.hash in workloads or w.hash not in source or source[w.hash][1] != i:
                    continue
                best = source[w.hash][2]
                pool = db.best(w.hash, k=FAMILY_POOL)
                workloads[w.hash] = json.dumps({"type": "workload", "hash": w.hash, "name": w.name, "func": w.func_json}, sort_keys=True)
                session = db.latest_session(w.hash, target=None)
                retimed = [] if session is None else [x for x in db.retiming_lines([session]) if x["median"] is not None]
                timed = {x["candidate_hash"] for x in retimed}
                by_hash = {r.candidate_hash: r for r in _replaying([r for r in pool if r.candidate_hash in timed], w, len(pool))}
                records = best + [r for h, r in by_hash.items() if h not in {b.candidate_hash for b in best}]
                for rec in records:
                    lines.append(json.dumps({"type": "record", **rec.to_dict()}, sort_keys=True))
                lines += [json.dumps(x, sort_keys=True) for x in retimed if x["candidate_hash"] in {r.candidate_hash for r in records}]
                kept[w.name] = len(records)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with gzip.open(out, "wt") as fh:
        fh.write(json.dumps({"format": JSONL_FORMAT, "version": JSONL_VERSION}) + "\n")
        for line in list(workloads.values()) + lines:
            fh.write(line + "\n")
    return kept


def _replaying(records: List[TuningRecord], workload: StoredWorkload, limit: int) -> List[TuningRecord]:
    """The first ``limit`` of ``records`` whose instructions replay on ``workload``."""
    out: List[TuningRecord] = []
    func = workload.func if records else None
    for rec in records:
        if len(out) >= limit:
            break
        try:
            rec.schedule(func)
        except Exception:  # noqa: BLE001 - any failure to replay: compile would skip the record
            log.info("build-records: %s record %s no longer replays; left out", workload.name, rec.candidate_hash[:12])
            continue
        out.append(rec)
    return out


__all__ = ["cpu_family", "records_family", "shipped_path", "shipped_database", "shipped_records", "build_records", "DEFAULT_TOP"]
