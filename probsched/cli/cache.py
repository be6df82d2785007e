"""``probsched cache [path|clear]``: where micro-kernels, trained models and compiled programs
are cached on disk, or empty that folder (a missing cache only costs compile time)."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("cache", help="where micro-kernels, trained models and compiled programs are cached; 'clear' empties it")
    p.add_argument("action", choices=("path", "clear"), nargs="?", default="path")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .. import cache

    if args.action == "clear":
        n = cache.clear()
        print(f"removed {n} cached files (micro-kernels, trained models, compiled programs) from {cache.root()}")
    else:
        print(cache.root())
    return 0
