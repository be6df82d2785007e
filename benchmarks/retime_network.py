"""Re-time a tuned network's database as the tuner's end of run now does.

``ps.tune_model`` ends by re-timing each weighty task's fastest candidates together, with the
task's weights flushed from the caches before each call, as the network runs it, and with the
fastest candidate of each algorithm family (direct or Winograd, vector or AMX tiles) beside
them (:func:`probsched.tuning.selection.retime`). A database tuned before that re-timed hot;
this script re-times every task of the model that has records, in float32 and in bf16, so
that ``ps.compile`` names its schedules as a run of the current tuner would. It measures
nothing new: the candidates are the database's.

Usage::

    python benchmarks/retime_network.py --onnx D/resnet50.onnx --db D/resnet50.db [--out D2/resnet50.db]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import probsched as ps  # noqa: E402
from probsched.database import Database  # noqa: E402
from probsched.measure import LocalMeasurer  # noqa: E402
from probsched.tuning.options import RETIME_TOP_PER_TASK, DEFAULT_RETIME_ROUNDS  # noqa: E402
from probsched.tuning.selection import retime  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--onnx", required=True, help="the model the database was tuned for")
    ap.add_argument("--db", required=True)
    ap.add_argument("--out", help="re-time a copy written here (default: the database itself)")
    ap.add_argument("--precisions", default="float32,bf16")
    ap.add_argument("--top", type=int, default=RETIME_TOP_PER_TASK)
    args = ap.parse_args(argv)
    path = args.db
    if args.out:
        shutil.copy(args.db, args.out)
        path = args.out
    graph = ps.from_onnx(args.onnx)
    start = time.perf_counter()
    with Database(path) as db, LocalMeasurer() as measurer:
        for task in graph.tasks():
            for precision in args.precisions.split(","):
                t = task.in_precision(precision)
                if (precision != "float32" and t is task) or not db.best(t.workload, k=1):
                    continue
                pairs = retime(t.workload, db, measurer, top=args.top, rounds=DEFAULT_RETIME_ROUNDS,
                               cold_weights=True, families=True)
                shown = [f"{res.median * 1e6:.0f}" if res.ok else res.error_kind for _, res in pairs]
                print(f"{t.name}: {' '.join(shown)} µs", flush=True)
    print(f"re-timed in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
