"""The shipped records at work (issue #66): a network compiled with no database on a CPU
family the package has records for, against the same network compiled from its tuning
database.

For each model: a new probsched cache folder (this machine's micro-kernel library and cost
models copied in, so the compile is the network's, not the one-time library build);
``ps.compile(ps.from_onnx(path))`` timed (no database: the family's shipped records where
tasks match, predicted schedules elsewhere); then ``ps.compile(..., database=DB/<model>.db)``;
both models timed interleaved (medians of 3 x 15 calls). Prints one line per model::

    python benchmarks/bench_shipped.py --onnx-dir D --db-dir D [--models resnet50,...] [--precision bf16]

``--predicted`` instead of ``--db-dir`` sets the shipped records against no records at all
(every task's schedule predicted by the cost model): what they are worth on a machine with
no tuning database, e.g. a CPU family that borrows another vendor's records.

``probsched build-records DB...`` writes the family's file from tuning databases.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_deploy import fresh_cache  # noqa: E402  (the micro-kernel library copied into a new cache)

ONE = r"""
import sys, time
sys.path.insert(0, sys.argv[4])
try:
    import torch  # noqa: F401  (before numba's OpenMP layer: see bench_models.main)
except ImportError:
    pass
import numpy as np
import probsched as ps
from probsched.precision import precision_of
from bench_models import _feeds
path, db, precision = sys.argv[1], sys.argv[2], sys.argv[3]
name = path.rsplit("/", 1)[-1][:-5]
feeds = _feeds(path, name)
graph = ps.from_onnx(path, name=name)
x = [feeds[n] for n in graph.input_names]
t = time.perf_counter()
shipped = ps.compile(graph, precision=precision, progress=None)
seconds = time.perf_counter() - t
if db == "-":  # the other arm: no records at all, every schedule predicted
    from probsched.tuning import shipped as shipped_mod
    shipped_mod.FOLDER = "/nonexistent"
    shipped_mod.shipped_database.cache_clear()
    tuned = ps.compile(graph, precision=precision, progress=None)
else:
    tuned = ps.compile(graph, database=db, precision=precision, progress=None)
a, b = np.asarray(shipped(*x)), np.asarray(tuned(*x))
if any(precision_of(t.func) == "int8" for t in graph.tasks()):
    # two schedules of one int8 layer may round a tie of its output apart, and the next
    # layers carry the step on: BERT-base's two models differ by 3% of the output's norm,
    # as each does from the graph's own evaluation, where int8 itself costs 10% against float32
    assert np.linalg.norm(a - b) <= 0.05 * np.linalg.norm(b), np.linalg.norm(a - b) / np.linalg.norm(b)
else:
    assert np.allclose(a, b, rtol=1e-2, atol=1e-2)

def med(f, n=15):
    ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return 1e3 * float(np.median(ts))

a, b = [], []
for _ in range(3):
    a.append(med(lambda: shipped(*x))); b.append(med(lambda: tuned(*x)))
a, b = float(np.median(a)), float(np.median(b))
print(f"| {name} | {precision} | {seconds:.1f} | {a:.2f} | {b:.2f} | {a / b:.3f} |", flush=True)
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onnx-dir", required=True, help="where <model>.onnx are (export_onnx_models.py --full)")
    arm = ap.add_mutually_exclusive_group(required=True)
    arm.add_argument("--db-dir", help="where <model>.db are (the tuning databases)")
    arm.add_argument("--predicted", action="store_true", help="against predicted schedules, no records at all")
    ap.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    ap.add_argument("--precision", default="float32")
    args = ap.parse_args(argv)
    other = "predicted" if args.predicted else "tuned"
    print(f"| model | precision | compile without database s | shipped ms | {other} ms | shipped / {other} |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.models.split(","):
        cache = tempfile.mkdtemp(prefix="bench-shipped-")
        fresh_cache(cache)
        env = dict(os.environ, PROBSCHED_CACHE_DIR=cache)
        paths = [os.path.join(args.onnx_dir, f"{name}.onnx"), "-" if args.predicted else os.path.join(args.db_dir, f"{name}.db")]
        subprocess.run([sys.executable, "-c", ONE, *paths, args.precision, HERE], env=env, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
