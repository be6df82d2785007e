"""Transfer: measured records of other workloads that a cost model starts from.

A tuning run's first batch is otherwise chosen blind: the model has seen nothing of the
workload yet, so the evolutionary search falls back to prior draws. The features are
workload-agnostic (per store: arithmetic, loop kinds, footprints, reuse), so what the model
learns on one workload ranks another's candidates far better than chance: trained on the
other eight workloads of the suite, its top 32 of a workload's prior draws run a median 1.2-2.3x
faster than 32 random ones (``python benchmarks/bench_cost_model.py transfer``). With a
prior, round 0 is already a model-guided round, and every later training keeps the other
workloads' pairs beside the workload's own (pairs never cross groups).

The shipped prior (:data:`PRIOR_PATH`, ~170 KB) holds features, run times and workload
groups of 128 tuned records per suite workload, measured on this project's reference
machine. :func:`load_prior` leaves out the group being tuned (a workload's own records come
from its database, never from here) and returns None, with a warning, when the file is
missing or was made with other features: rebuild it with ``python -m
probsched.cost_model.transfer DB... --out probsched/cost_model/data/prior_records.npz``.

>>> prior = load_prior()
>>> prior is not None and len(prior) > 500 and prior.features[0].shape[1] == N_FEATURES
True
>>> len(load_prior(exclude=[prior.groups[0]])) < len(prior)
True
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence

import numpy as np

from .features import N_FEATURES, extract, feature_names

log = logging.getLogger(__name__)

#: The prior shipped with the package.
PRIOR_PATH = os.path.join(os.path.dirname(__file__), "data", "prior_records.npz")


def feature_schema() -> str:
    """A digest of the feature columns' names: a prior made with other columns is stale."""
    return hashlib.sha256("\n".join(feature_names()).encode()).hexdigest()[:16]


@dataclass
class PriorRecords:
    """Measured programs of other workloads: one feature matrix, run time and group each.

    ``names`` maps a group (workload hash) to the workload's name; ``samples`` holds, per
    workload, one record's instruction trace and function (JSON) with its stored features,
    so that a test can tell whether today's features of that program still match.
    """

    features: List[np.ndarray]
    seconds: np.ndarray
    groups: List[str]
    names: dict
    samples: List[dict]

    def __len__(self) -> int:
        return len(self.features)

    def without(self, exclude: Iterable[str]) -> "PriorRecords":
        """The records whose group is not in ``exclude``."""
        drop = set(exclude)
        keep = [i for i, g in enumerate(self.groups) if g not in drop]
        return PriorRecords(
            [self.features[i] for i in keep],
            self.seconds[keep],
            [self.groups[i] for i in keep],
            {g: n for g, n in self.names.items() if g not in drop},
            [s for s in self.samples if s["group"] not in drop],
        )


def load_prior(path: Optional[str] = None, exclude: Iterable[str] = ()) -> Optional[PriorRecords]:
    """The prior records at ``path`` (default :data:`PRIOR_PATH`) without the groups in
    ``exclude``; None (and a warning) when the file is missing or its features are stale."""
    path = path or PRIOR_PATH
    if not os.path.exists(path):
        log.warning("cost-model prior %s is missing: the first batch is drawn from the prior", path)
        return None
    with np.load(path, allow_pickle=False) as z:
        if str(z["schema"]) != feature_schema() or int(z["n_features"]) != N_FEATURES:
            log.warning(
                "cost-model prior %s was made with other features (schema %s, today %s): not used; "
                "rebuild it with python -m probsched.cost_model.transfer",
                path, str(z["schema"]), feature_schema(),
            )
            return None
        lengths = z["lengths"]
        features = np.split(z["x"], np.cumsum(lengths)[:-1]) if len(lengths) else []
        prior = PriorRecords(
            list(features), z["seconds"].astype(np.float64), [str(g) for g in z["groups"]],
            json.loads(str(z["names"])), json.loads(str(z["samples"])),
        )
    return prior.without(exclude)


def build_prior(databases: Sequence[str], out: str, per_workload: int = 128) -> PriorRecords:
    """Write a prior from the successful records of ``databases``: per workload, its
    ``per_workload`` first records in measurement order (a tuning run's spread, from its
    prior draws to its best), features extracted by replaying each record's trace today."""
    from ..database import Database

    features, seconds, groups, names, samples = [], [], [], {}, []
    for path in databases:
        with Database(path) as db:
            for wl in db.workloads():
                func = wl.func
                recs = sorted((r for r in db.records(wl.hash) if r.ok), key=lambda r: r.timestamp)[:per_workload]
                for rec in recs:
                    try:
                        f = extract(rec.schedule(func))
                    except Exception as e:  # a record of another version of the space
                        log.warning("%s: record %s skipped (%s)", wl.name, rec.candidate_hash[:12], e)
                        continue
                    if wl.hash not in names:
                        samples.append({"group": wl.hash, "instructions": rec.instructions, "func": wl.func_json,
                                        "index": len(features)})
                    names[wl.hash] = wl.name
                    features.append(f.astype(np.float32))
                    seconds.append(rec.median)
                    groups.append(wl.hash)
    prior = PriorRecords(features, np.asarray(seconds, np.float64), groups, names, samples)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "wb") as fh:  # a file object: numpy would append ".npz" to a str
        np.savez_compressed(
            fh,
            x=np.concatenate(features) if features else np.zeros((0, N_FEATURES), np.float32),
            lengths=np.asarray([len(f) for f in features], np.int64),
            seconds=prior.seconds,
            groups=np.asarray(groups),
            names=np.asarray(json.dumps(names)),
            samples=np.asarray(json.dumps(samples)),
            schema=np.asarray(feature_schema()),
            n_features=np.asarray(N_FEATURES),
        )
    return prior


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m probsched.cost_model.transfer", description=build_prior.__doc__)
    p.add_argument("databases", nargs="+", help="tuning databases (SQLite)")
    p.add_argument("--out", default=PRIOR_PATH, help=f"output .npz (default {PRIOR_PATH})")
    p.add_argument("--per-workload", type=int, default=128)
    args = p.parse_args(argv)
    prior = build_prior(args.databases, args.out, args.per_workload)
    counts = {n: prior.groups.count(g) for g, n in prior.names.items()}
    print(f"{args.out}: {len(prior)} records, {os.path.getsize(args.out) / 1e3:.0f} KB; per workload {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
