"""``probsched build-records DB... [--top N] [--out FILE]``: the records the package ships
for this CPU family, built from tuning databases.

The ``N`` best distinct records of every workload of the databases (the shipped networks'
tasks, tuned on this machine), written as a gzipped database export that ``ps.compile``
without a database and a tuning run's first candidates use on machines of the same CPU
family (:mod:`probsched.tuning.shipped`). By default the output is the package's file for
this machine's family.
"""

from __future__ import annotations

import argparse
import os
import sys

from .common import CLIError


def add_parser(sub) -> None:
    p = sub.add_parser("build-records", help="build the records shipped for this CPU family from tuning databases",
                       description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("databases", nargs="+", help="tuning databases (SQLite)")
    p.add_argument("--top", type=int, default=4, help="records kept per workload (default 4)")
    p.add_argument("--out", default=None, help="output .jsonl.gz (default: the package's file of this CPU family)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..tuning.shipped import build_records, cpu_family, shipped_path

    missing = [d for d in args.databases if not os.path.exists(d)]
    if missing:
        raise CLIError(f"no database at {', '.join(missing)}")
    out = args.out or shipped_path(cpu_family())
    kept = build_records(args.databases, out, top=args.top)
    if not kept:
        raise CLIError("the databases hold no successful record")
    print(f"{out}: {sum(kept.values())} records of {len(kept)} workloads, {os.path.getsize(out) / 1e3:.0f} KB "
          f"(family {cpu_family()})", file=sys.stdout)
    return 0
