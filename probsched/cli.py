"""The ``probsched`` command line.

``tune``, ``show``, ``bench``, ``plot`` and ``vary`` live in :mod:`probsched.cli_commands`, one
module each; the small ``workloads``, ``ir`` and ``cache`` commands are here. Exit codes:
0 success, 1 a run that found nothing (e.g. every trial failed), 2 a mistake in the
command (unknown workload, missing file or database, bad option), 130 interrupted (Ctrl-C).

>>> main(["--version"])  # doctest: +ELLIPSIS
probsched ...
0
>>> main(["show", "GMM:9"])
2
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from . import __version__
from .cli_commands import COMMANDS
from .cli_commands.common import WORKLOAD_HELP, CLIError, resolve_workload
from .errors import ProbschedError
from .workloads import as_workload


def _cmd_workloads(args: argparse.Namespace) -> int:
    from . import workloads

    for name in workloads.names():
        for index, params in enumerate(workloads.configs(name)):
            print(f"{name}:{index}  {params}")
    return 0


def _cmd_ir(args: argparse.Namespace) -> int:
    func = as_workload(resolve_workload(args.workload)).func
    print(func)
    print(f"# structural hash: {func.structural_hash()}")
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    from . import cache

    if args.action == "clear":
        n = cache.clear()
        print(f"removed {n} cached files (micro-kernels, trained models, compiled programs) from {cache.root()}")
    else:
        print(cache.root())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and shell completion)."""
    parser = argparse.ArgumentParser(
        prog="probsched",
        description="Tune tensor programs for this CPU with probabilistic schedules.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    p = sub.add_parser("workloads", help="list the operator suite (NAME:INDEX)")
    p.set_defaults(run=_cmd_workloads)
    p = sub.add_parser("ir", help="print the loop-nest IR of a workload, e.g. GMM:2")
    p.add_argument("workload", help=WORKLOAD_HELP)
    p.set_defaults(run=_cmd_ir)
    p = sub.add_parser("cache", help="where micro-kernels, trained models and compiled programs are cached; 'clear' empties it")
    p.add_argument("action", choices=("path", "clear"), nargs="?", default="path")
    p.set_defaults(run=_cmd_cache)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``probsched`` console script; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad options, 0 on --help
        return int(exc.code or 0)
    if args.version:
        print(f"probsched {__version__}")
        return 0
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        return args.run(args)
    except CLIError as exc:
        print(f"probsched {args.command}: {exc}", file=sys.stderr)
        return 2
    except ProbschedError as exc:  # the run itself failed (e.g. measuring workers cannot start)
        print(f"probsched {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Tuning commits each record as it is measured: nothing measured is lost here.
        print(f"\nprobsched {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
