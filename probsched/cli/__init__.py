"""The ``probsched`` command line: :func:`main`, and one module per subcommand.

- :mod:`.tune` — ``probsched tune``: search with a progress bar, then best vs numpy/jax.jit;
- :mod:`.tune_model` — ``probsched tune-model``: every task of a network under one budget, then vs jax.jit;
- :mod:`.compile_model` — ``probsched compile``: a network from a database into one model file;
- :mod:`.run_model` — ``probsched run``: a saved model on ``.npy`` inputs, ``--bench`` times it;
- :mod:`.show` — ``probsched show``: the best schedules as Python (instruction log), loop nest, source;
- :mod:`.bench` — ``probsched bench``: tune a list of suite workloads, Markdown and JSON;
- :mod:`.plot` — ``probsched plot``: best-so-far curves per strategy from a database;
- :mod:`.vary` — ``probsched vary``: the best schedule timed beside variants with decisions changed;
- :mod:`.model_import` — ``probsched import``: a JAX model's fused tasks as a table;
- :mod:`.workloads`, :mod:`.ir`, :mod:`.cache` — ``probsched workloads``, ``ir``, ``cache``:
  the suite, a loop nest, the on-disk caches;
- :mod:`.build_transfer` — ``probsched build-transfer``: the cost model's transfer records
  from tuning databases;
- :mod:`.build_records` — ``probsched build-records``: the best records shipped for this
  CPU family;
- :mod:`.common` — what the commands share: workload specs, the tuning and measuring
  options (defaults from :class:`~probsched.tuning.TuningOptions`), opening databases,
  :class:`~.common.CLIError` (exit 2);
- :mod:`.progress` — the progress bars of the tuning commands.

Each command module has ``add_parser(subparsers)`` and ``run(args) -> exit code``. Exit
codes: 0 success, 1 a run that found nothing (e.g. every trial failed), 2 a mistake in the
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

from ..version import __version__
from ..errors import ProbschedError
from . import bench, build_records, build_transfer, cache, compile_model, ir, model_import, plot, run_model, show, tune, tune_model, vary, workloads
from .common import CLIError

#: In the order ``probsched --help`` lists them.
COMMANDS = (tune, tune_model, compile_model, run_model, show, bench, plot, vary, model_import, workloads, ir, cache, build_transfer, build_records)


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


__all__ = ["main", "build_parser", "COMMANDS", "CLIError"]
