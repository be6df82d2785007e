"""``probsched compile MODEL --db D -o model.psm``: a network compiled into one file.

Each task gets its best schedule from the database (a task without a record gets the one
the shipped cost model predicts), the kernels are built and checked, and the model is
written to one file that ``probsched run`` and ``ps.load`` run without the tuner. ``MODEL``
is as for ``probsched tune-model``. A progress bar shows the tasks being built.
"""

from __future__ import annotations

import argparse
import os
import sys

from .calibration import int8_graph
from .common import DB_HELP, add_precision_option, check_writable, float_precision, open_database
from .model_import import MODEL_HELP, add_onnx_options, load_model_of
from .progress import CompileBar


def add_parser(sub) -> None:
    p = sub.add_parser("compile", help="compile a network from a tuning database into one model file",
                       description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("model", help=MODEL_HELP)
    add_onnx_options(p)
    p.add_argument("--db", default=None, help=DB_HELP + "; without it (or without records) schedules are predicted")
    p.add_argument("-o", "--output", required=True, metavar="PATH", help="the model file to write (e.g. model.psm)")
    add_precision_option(p, int8=True, narrow=True)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..tuning import compile as compile_network

    check_writable(args.output, "--output")
    fn, example, graph = load_model_of(args)
    graph = int8_graph(args, graph)
    db = open_database(args.db, must_exist=True) if args.db else None
    bar = CompileBar(len(graph.tasks()), graph.name, args.quiet)
    try:
        model = compile_network(graph, database=db, progress=bar, precision=float_precision(args.precision),
                                narrow=args.narrow)
    except KeyboardInterrupt:
        print("\ninterrupted: nothing written", file=sys.stderr)
        return 130
    finally:
        bar.close()
        if db is not None:
            db.close()
    model.save(args.output)
    print(model.summary())
    print()
    print(f"wrote {args.output} ({os.path.getsize(args.output) / 2**20:.1f} MiB): `probsched run {args.output} --input x.npy` "
          "or ps.load() runs it")
    return 0
