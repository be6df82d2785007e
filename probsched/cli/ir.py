"""``probsched ir WORKLOAD``: the loop nest of a workload and its structural hash (the key its
records are stored under)."""

from __future__ import annotations

import argparse

from ..workloads import as_workload
from .common import WORKLOAD_HELP, resolve_workload


def add_parser(sub) -> None:
    p = sub.add_parser("ir", help="print the loop-nest IR of a workload, e.g. GMM:2")
    p.add_argument("workload", help=WORKLOAD_HELP)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    func = as_workload(resolve_workload(args.workload)).func
    print(func)
    print(f"# structural hash: {func.structural_hash()}")
    return 0
