"""Transfer: measured records of other workloads that a cost model starts from.

A tuning run's first batch is otherwise chosen blind: the model has seen nothing of the
workload yet, so the evolutionary search falls back to draws from the design space's prior.
The features are workload-agnostic (per store: arithmetic, loop kinds, footprints, reuse),
so a model trained on other workloads ranks a new workload's candidates far better than
chance. ``CostModel.set_transfer`` trains the model on such records at once and keeps them
beside the workload's own in every later training; ``ps.tune(...,
cost_model="mlp-transfer")`` (the default) does so with the shipped records. ``python
benchmarks/bench_cost_model.py transfer`` measures what it buys (the ranking, one workload
left out at a time).

The shipped records (:data:`TRANSFER_PATHS`) hold features, run times and workload groups of
up to 128 tuned records per workload, one file per vector width of the CPU they were measured
on (run times, and so the ranking a model learns from them, depend on it): the nine benchmark
workloads and other shapes of the depthwise convolution, which has no relative among them.
:func:`transfer_path` picks the file of the host's width (or ``$PROBSCHED_TRANSFER``, a user's
own). :func:`load_transfer` leaves out the groups being tuned (a workload's own records come
from its database, never from here) and returns None, with a warning, when the file is
missing or was made with other feature columns. Build a file with ``probsched
build-transfer DB... [--out FILE]`` (by default the shipped file of this machine's width), or
add a workload's records to one with ``--base`` (:func:`build_transfer`).

>>> records = load_transfer()
>>> records is not None and len(records) > 500 and records.features[0].shape[1] == N_FEATURES
True
>>> len(load_transfer(exclude=[records.groups[0]])) < len(records)
True
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Union

import numpy as np

from .features import N_FEATURES, extract, feature_names

if TYPE_CHECKING:
    from ..target import Target

log = logging.getLogger(__name__)

#: The transfer records shipped with the package, by the vector width (bytes) of the CPU
#: they were measured on: run times, and so the ranking a model learns from them, depend on it.
TRANSFER_PATHS = {
    64: os.path.join(os.path.dirname(__file__), "data", "transfer_records_avx512.npz"),
    32: os.path.join(os.path.dirname(__file__), "data", "transfer_records_avx2.npz"),
}


def transfer_path(target: Union[None, str, "Target"] = None) -> str:
    """The transfer records a tuning run on ``target`` (default: this machine) starts from:
    ``$PROBSCHED_TRANSFER`` when set (a user's own, built with :func:`build_transfer`), else
    the shipped file measured with ``target``'s vector width, else the closest width shipped.

    >>> from probsched.target import Target
    >>> os.path.basename(transfer_path(Target(isa=("avx", "avx2", "fma"))))
    'transfer_records_avx2.npz'
    >>> os.path.basename(transfer_path(Target(isa=("avx2", "avx512f"))))
    'transfer_records_avx512.npz'
    """
    from ..target import Target

    own = os.environ.get("PROBSCHED_TRANSFER")
    if own:
        return own
    width = Target.parse(target).vector_bytes
    shipped = [w for w, path in TRANSFER_PATHS.items() if os.path.exists(path)] or list(TRANSFER_PATHS)
    return TRANSFER_PATHS[min(shipped, key=lambda w: (abs(w - width), -w))]


def feature_schema() -> str:
    """A digest of the feature columns' names: records made with other columns are stale."""
    return hashlib.sha256("\n".join(feature_names()).encode()).hexdigest()[:16]


@dataclass
class TransferRecords:
    """Measured programs of other workloads: one feature matrix, run time and group each.

    ``names`` maps a group (workload hash) to the workload's name; ``samples`` holds, per
    workload, one record's instruction log and function (JSON) with its stored features,
    so that a test can tell whether today's features of that program still match.
    """

    features: List[np.ndarray]
    seconds: np.ndarray
    groups: List[str]
    names: dict
    samples: List[dict]

    def __len__(self) -> int:
        return len(self.features)

    def take(self, indices: Sequence[int]) -> "TransferRecords":
        """The records at ``indices``, with the names and samples of the groups left (a
        sample's ``index`` follows its record, and a sample whose record is left out goes)."""
        keep = list(indices)
        new_index = {old: new for new, old in enumerate(keep)}
        groups = [self.groups[i] for i in keep]
        present = set(groups)
        return TransferRecords(
            [self.features[i] for i in keep],
            self.seconds[np.asarray(keep, dtype=np.int64)],
            groups,
            {g: n for g, n in self.names.items() if g in present},
            [{**s, "index": new_index[s["index"]]} for s in self.samples if s["index"] in new_index],
        )

    def without(self, exclude: Iterable[str]) -> "TransferRecords":
        """The records whose group is not in ``exclude``."""
        drop = set(exclude)
        return self.take([i for i, g in enumerate(self.groups) if g not in drop])

    def concat(self, other: "TransferRecords") -> "TransferRecords":
        """These records, then ``other``'s (whose groups must not be among these)."""
        shared = set(self.groups) & set(other.groups)
        if shared:
            raise ValueError(f"TransferRecords.concat: groups {sorted(shared)} are in both")
        return TransferRecords(
            self.features + other.features,
            np.concatenate([self.seconds, np.asarray(other.seconds, np.float64)]),
            self.groups + other.groups,
            {**self.names, **other.names},
            self.samples + [{**s, "index": s["index"] + len(self)} for s in other.samples],
        )


def load_transfer(path: Optional[str] = None, exclude: Iterable[str] = ()) -> Optional[TransferRecords]:
    """The transfer records at ``path`` (default :func:`transfer_path`, this machine's)
    without the groups in ``exclude``; None (and a warning) when the file is missing or its
    features are stale."""
    path = path or transfer_path()
    if not os.path.exists(path):
        log.warning("cost-model transfer records %s are missing: the first batch is drawn blind", path)
        return None
    with np.load(path, allow_pickle=False) as z:
        if str(z["schema"]) != feature_schema() or int(z["n_features"]) != N_FEATURES:
            log.warning(
                "cost-model transfer records %s were made with other features (schema %s, today %s): not used; "
                "rebuild them with probsched build-transfer",
                path, str(z["schema"]), feature_schema(),
            )
            return None
        lengths = z["lengths"]
        features = np.split(z["x"], np.cumsum(lengths)[:-1]) if len(lengths) else []
        records = TransferRecords(
            list(features), z["seconds"].astype(np.float64), [str(g) for g in z["groups"]],
            json.loads(str(z["names"])), json.loads(str(z["samples"])),
        )
    return records.without(exclude)


def build_transfer(
    databases: Sequence[str], out: str, per_workload: int = 128, base: Optional[str] = None
) -> TransferRecords:
    """Write transfer records from the successful records of ``databases``: per workload, its
    ``per_workload`` first records in measurement order (a tuning run's spread, from its
    prior draws to its best; a workload in several databases takes them in the order given),
    features extracted by replaying each record's instruction log today (a record whose log no longer
    gives the program that was timed is left out).

    With ``base`` (a transfer file, e.g. one of :data:`TRANSFER_PATHS`), the result holds base's
    records too, except for the workloads the databases hold, which the databases' records
    replace: that is how records of a new workload are added to the shipped ones."""
    built = _from_databases(databases, per_workload)
    if base is not None:
        old = load_transfer(base)
        if old is None:
            raise ValueError(f"build_transfer: base {base} is missing or was made with other features")
        built = old.without(built.names).concat(built)
    save_transfer(built, out)
    return built


def _from_databases(databases: Sequence[str], per_workload: int) -> TransferRecords:
    from ..database import Database
    from ..ir.serialize import structural_hash

    features, seconds, groups, names, samples = [], [], [], {}, []
    for path in databases:
        with Database(path) as db:
            for wl in db.workloads():
                func, room = wl.func, per_workload - groups.count(wl.hash)
                recs = sorted((r for r in db.records(wl.hash) if r.ok), key=lambda r: r.timestamp)
                for rec in recs:
                    if room <= 0:
                        break
                    try:
                        sch = rec.schedule(func)
                    except Exception as e:  # a record of another version of the space
                        log.warning("%s: record %s skipped (%s)", wl.name, rec.candidate_hash[:12], e)
                        continue
                    if structural_hash(sch.mod) != rec.candidate_hash:
                        # today's primitives turn the log into another program than the one
                        # timed (e.g. a compute_at region computed tighter): its time is not this one's
                        log.warning("%s: record %s skipped (replays to another program)", wl.name,
                                    rec.candidate_hash[:12])
                        continue
                    f = extract(sch)
                    if wl.hash not in names:
                        samples.append({"group": wl.hash, "instructions": rec.instructions, "func": wl.func_json,
                                        "index": len(features)})
                    names[wl.hash] = wl.name
                    features.append(f.astype(np.float32))
                    seconds.append(rec.median)
                    groups.append(wl.hash)
                    room -= 1
    return TransferRecords(features, np.asarray(seconds, np.float64), groups, names, samples)


def save_transfer(records: TransferRecords, out: str) -> None:
    """Write ``records`` to ``out`` in the format :func:`load_transfer` reads."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    features = records.features
    with open(out, "wb") as fh:  # a file object: numpy would append ".npz" to a str
        np.savez_compressed(
            fh,
            x=np.concatenate(features) if features else np.zeros((0, N_FEATURES), np.float32),
            lengths=np.asarray([len(f) for f in features], np.int64),
            seconds=np.asarray(records.seconds, np.float64),
            groups=np.asarray(records.groups),
            names=np.asarray(json.dumps(records.names)),
            samples=np.asarray(json.dumps(records.samples)),
            schema=np.asarray(feature_schema()),
            n_features=np.asarray(N_FEATURES),
        )
