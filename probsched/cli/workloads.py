"""``probsched workloads``: the operator suite, one ``NAME:INDEX`` and its parameters per line.

>>> import argparse
>>> run(argparse.Namespace())  # doctest: +ELLIPSIS
C1D:0  ...
0
"""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("workloads", help="list the operator suite (NAME:INDEX)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .. import workloads

    for name in workloads.names():
        for index, params in enumerate(workloads.configs(name)):
            print(f"{name}:{index}  {params}")
    return 0
