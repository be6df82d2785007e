"""What deploying a compiled network costs: the first compile, a second compile, and loading
the saved model in a new process until its first call has answered (issue #65).

Every step runs in a process of its own, in this order, sharing one probsched disk cache
(``--cache-dir``; default: a new folder, into which the micro-kernel modules and cost
models of ``~/.cache/probsched`` are copied, so that the first compile is the network's and
not the one-time micro-kernel library build)::

    python benchmarks/bench_deploy.py                      # resnet50, 16 candidates per task
    python benchmarks/bench_deploy.py --model mobilenet_v2 --candidates 16
    python benchmarks/bench_deploy.py --skip-first --cache-dir D --out D/m.psm   # reuse D
    python benchmarks/bench_deploy.py --model D/resnet50.onnx --db D/resnet50.db  # a tuned canonical export

1. ``first compile``: ``ps.compile(graph, candidates=N)`` of the imported network
   (``ps.from_jax(*ps.models.get(MODEL))`` or ``ps.from_onnx(MODEL)``, timed apart as
   "import network": the front end, JAX's import included) with an empty program, choice
   and network cache, then ``model.save``;
2. ``second compile``: the same again in a new process (the compiled network on disk is
   loaded: :mod:`probsched.tuning.network_cache`);
3. ``load + first call``: a process that imports probsched, ``ps.load``-s the file and
   calls the model once (then once more), without importing JAX; its output must equal the
   first process's bit for bit;
4. ``load + first call, fresh caches``: the same with empty probsched and numba caches, as
   on a machine that never ran probsched (its file cache still warm: a cold disk adds the
   file's read time).

Printed: a Markdown table with, per step, the whole process's wall time, the step's own
call, the import of probsched, and how many functions numba compiled in the step
(:func:`probsched.codegen.compile.counting_compiles`, by function name: ``launch`` and
``trampoline`` are the parallel launchers of :mod:`probsched.codegen.launch`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = r"""
import json, sys, time
T0 = time.perf_counter()
t = time.perf_counter()
import numpy as np
import probsched as ps
from probsched.codegen.compile import counting_compiles
imported = time.perf_counter() - t
def report(**kw):
    kw["process"] = time.perf_counter() - T0
    print("RESULT " + json.dumps(kw))
"""

COMPILE = PRELUDE + r"""
import os
db, precision = os.environ.get("BENCH_DEPLOY_DB") or None, os.environ.get("BENCH_DEPLOY_PRECISION", "float32")
t = time.perf_counter()
if sys.argv[1].endswith(".onnx"):  # a canonical export (export_onnx_models.py) and its tuning database
    sys.path.insert(0, os.environ["BENCH_DEPLOY_DIR"])
    from bench_models import _feeds
    graph = ps.from_onnx(sys.argv[1])
    feeds = _feeds(sys.argv[1], os.path.splitext(os.path.basename(sys.argv[1]))[0])
    args = [feeds[n] for n in graph.input_names]
else:
    fn, args = ps.models.get(sys.argv[1])
    graph = ps.from_jax(fn, *args)
front = time.perf_counter() - t
t = time.perf_counter()
with counting_compiles() as compiled:
    model = ps.compile(graph, database=db, candidates=int(sys.argv[2]), precision=precision, progress=None)
seconds = time.perf_counter() - t
x = [np.asarray(a) for a in args]
y = model(*x)
if sys.argv[3] != "-":
    model.save(sys.argv[3])
    for i, a in enumerate(x):
        np.save(f"{sys.argv[3]}.in{i}.npy", a)
    np.save(sys.argv[3] + ".out.npy", np.asarray(y))
else:
    assert np.array_equal(np.asarray(y), np.load(sys.argv[4] + ".out.npy")), "the second compile computes otherwise"
report(step=seconds, front=front, imported=imported, compiles=compiled)
"""

LOAD = PRELUDE + r"""
import glob
inputs = [np.load(p) for p in sorted(glob.glob(sys.argv[1] + ".in*.npy"))]
with counting_compiles() as compiled:
    t = time.perf_counter()
    model = ps.load(sys.argv[1])
    loaded = time.perf_counter() - t
    y = model(*inputs)
    first = time.perf_counter() - t - loaded
t = time.perf_counter()
model(*inputs)
second = time.perf_counter() - t
assert np.array_equal(np.asarray(y), np.load(sys.argv[1] + ".out.npy")), "the loaded model computes otherwise"
assert "jax" not in sys.modules, "loading imported jax"
report(step=loaded + first, load=loaded, first_call=first, second_call=second, imported=imported, compiles=compiled)
"""


def run(code: str, args: list, env: dict) -> dict:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"step failed ({' '.join(args)}):\n{done.stderr[-4000:]}")
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT "):])
    out["wall"] = wall
    return out


def fresh_cache(path: str) -> None:
    """A cache folder with this machine's micro-kernel modules and cost models, and no
    compiled programs or compile choices."""
    home = os.path.join(os.path.expanduser("~"), ".cache", "probsched")
    for kind in ("kernels", "models"):
        src = os.path.join(home, kind)
        if os.path.isdir(src) and not os.path.exists(os.path.join(path, kind)):
            shutil.copytree(src, os.path.join(path, kind))


def compiles(counts: dict) -> str:
    launchers = sum(n for name, n in counts.items() if name in ("launch", "trampoline"))
    return f"{sum(counts.values())} ({launchers} launcher)"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--cache-dir", help="the probsched cache the steps share (default: a new folder)")
    ap.add_argument("--out", help="where the model is saved (default: in the cache folder)")
    ap.add_argument("--skip-first", action="store_true", help="reuse --out from an earlier run (no first compile)")
    ap.add_argument("--db", help="compile from this tuning database (default: predicted schedules)")
    ap.add_argument("--precision", default="float32", help="float32, bf16 (or int8 for a quantized graph)")
    args = ap.parse_args(argv)
    cache = args.cache_dir or tempfile.mkdtemp(prefix="bench-deploy-")
    os.makedirs(cache, exist_ok=True)
    if not args.skip_first:
        fresh_cache(cache)
    out = args.out or os.path.join(cache, f"{os.path.splitext(os.path.basename(args.model))[0]}.psm")
    env = dict(os.environ, PROBSCHED_CACHE_DIR=cache, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               BENCH_DEPLOY_DB=os.path.abspath(args.db) if args.db else "", BENCH_DEPLOY_PRECISION=args.precision,
               BENCH_DEPLOY_DIR=os.path.dirname(os.path.abspath(__file__)))
    rows = []
    if not args.skip_first:
        rows.append(("first compile", run(COMPILE, [args.model, str(args.candidates), out], env)))
    rows.append(("second compile", run(COMPILE, [args.model, str(args.candidates), "-", out], env)))
    rows.append(("load + first call", run(LOAD, [out], env)))
    # as on a machine that never ran probsched: empty probsched and numba caches (the
    # operating system's file cache still holds the file and the libraries)
    fresh = tempfile.mkdtemp(prefix="bench-deploy-fresh-")
    rows.append(("load + first call, fresh caches",
                 run(LOAD, [out], dict(env, PROBSCHED_CACHE_DIR=fresh, NUMBA_CACHE_DIR=os.path.join(fresh, "numba")))))
    shutil.rmtree(fresh, ignore_errors=True)
    with open("/proc/loadavg") if os.path.exists("/proc/loadavg") else open(os.devnull) as fh:
        load = fh.read().split()[:3]
    how = f"records of {args.db}" if args.db else f"{args.candidates} candidates per task"
    print(f"{args.model} ({args.precision}), {how}, cache {cache}, load average {' '.join(load)}\n")
    print("| step | process wall s | step s | import network s | import probsched s | numba compiles (launchers) |")
    print("|---|---:|---:|---:|---:|---|")
    for name, r in rows:
        front = f"{r['front']:.2f}" if "front" in r else "-"
        print(f"| {name} | {r['wall']:.1f} | {r['step']:.2f} | {front} | {r['imported']:.2f} | {compiles(r['compiles'])} |")
    if not args.skip_first:
        first, second = rows[0][1], rows[1][1]
        print(f"\nsecond compile: {second['step']:.2f} s = {100 * second['step'] / first['step']:.0f}% of the first "
              f"({first['step']:.2f} s); with the network's import {second['step'] + second['front']:.2f} s = "
              f"{100 * (second['step'] + second['front']) / (first['step'] + first['front']):.0f}%")
    ld = rows[-2][1]
    print(f"\nload {ld['load']:.2f} s, first call {ld['first_call']:.2f} s, second call {ld['second_call'] * 1e3:.1f} ms")
    for label, row in (("loading", ld), ("loading with fresh caches", rows[-1][1])):
        top = sorted(row["compiles"].items(), key=lambda kv: -kv[1])[:8]
        if top:
            print(f"compiled while {label}: " + ", ".join(f"{k} x{v}" for k, v in top))


if __name__ == "__main__":
    main()
