"""``probsched build-transfer DB... [--out FILE] [--per-workload N] [--base FILE]``: the cost
model's transfer records, built from tuning databases.

The records a ``mlp-transfer`` model starts from (:mod:`probsched.cost_model.transfer`):
per workload, its first ``N`` successful records of the databases, with their features
extracted by replaying each record today. By default the output is the shipped file of this
machine's vector width; ``--base`` keeps another transfer file's records of the workloads
the databases do not hold (how a workload is added to the shipped file).
"""

from __future__ import annotations

import argparse
import os

from .common import CLIError


def add_parser(sub) -> None:
    from ..cost_model.transfer import build_transfer

    p = sub.add_parser(
        "build-transfer",
        help="build the cost model's transfer records (.npz) from tuning databases",
        description=build_transfer.__doc__,
    )
    p.add_argument("databases", nargs="+", help="tuning databases (SQLite)")
    p.add_argument("--out", default=None, help="output .npz (default: the shipped file of this machine's vector width, "
                                               "see transfer_path)")
    p.add_argument("--per-workload", type=int, default=128)
    p.add_argument("--base", help="keep this transfer file's records of the workloads the databases do not hold "
                                   "(e.g. the shipped file, to add a workload to it)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..cost_model.transfer import TRANSFER_PATHS, build_transfer
    from ..target import Target

    out = args.out if args.out is not None else TRANSFER_PATHS.get(Target.host().vector_bytes, TRANSFER_PATHS[32])
    try:
        records = build_transfer(args.databases, out, args.per_workload, base=args.base)
    except ValueError as e:  # a bad base file, no usable record: a mistake in the command
        raise CLIError(str(e)) from None
    counts = {n: records.groups.count(g) for g, n in records.names.items()}
    print(f"{out}: {len(records)} records, {os.path.getsize(out) / 1e3:.0f} KB; per workload {counts}")
    return 0
