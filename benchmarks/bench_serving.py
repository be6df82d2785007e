"""What serving a compiled network costs beyond its kernels, and what its neighbours cost it.

For each network (compiled from ``--db`` when given, else with predicted schedules):

- ``kernels``: the kernel calls of one inference alone (``model.bind`` to the caller's own
  arrays: nothing is checked or copied);
- ``call``: ``model(x)`` (argument checks, the input copied into the arena, the outputs
  copied out);
- ``overhead``: ``call - kernels`` per inference;
- ``after numpy`` / ``after jax.jit``: ``model(x)`` right after a 512x512 numpy matmul or a
  ``jax.jit`` call of the network, as a server that preprocesses calls it; their worker
  threads may still spin on the cores when the model starts.

All timed in one process, interleaved over ``--rounds`` rounds (medians). The CPU is printed
with the table.

Usage: ``python benchmarks/bench_serving.py [--models resnet50,mobilenet_v2,bert_base] [--db-dir D]``;
``--onnx-dir D`` serves the canonical exports ``D/<model>.onnx`` (``export_onnx_models.py``)
instead of the shipped JAX models (no ``after jax.jit`` column then: there is no JAX function).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import probsched as ps


#: Seconds of sleep before each timed step: numpy's BLAS and XLA's threads spin for a while
#: after their last call, and the step after "after numpy" would pay for them otherwise.
SETTLE_S = 0.5


def timed(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def after(first, then, repeat: int) -> float:
    """Median seconds of ``then`` called right after ``first`` (``first`` not timed)."""
    times = []
    for _ in range(repeat):
        first()
        t = time.perf_counter()
        then()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    import jax

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    p.add_argument("--db-dir", default=None, help="folder with <model>.db tuning databases (bench_models.py's)")
    p.add_argument("--onnx-dir", default=None, help="folder with the canonical <model>.onnx exports")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    rows = []
    for name in args.models.split(","):
        db = os.path.join(args.db_dir, f"{name}.db") if args.db_dir else None
        db = db if db and os.path.exists(db) else None
        if args.onnx_dir:
            from bench_models import _feeds

            path = os.path.join(args.onnx_dir, f"{name}.onnx")
            graph = ps.from_onnx(path)
            feeds = _feeds(path, name)
            example = [feeds[n] for n in graph.input_names]
            model, jitted = ps.compile(graph, database=db, progress=None), None
        else:
            fn, example = ps.models.get(name)
            model, jitted = ps.compile(fn, *example, database=db, progress=None), jax.jit(fn)
            jitted(*example)
        x = [np.ascontiguousarray(e) for e in example]
        bound = model.bind(*[e.copy() for e in x])
        fns = {
            "kernels": (None, bound),
            "call": (None, lambda: model(*x)),
            "after numpy": (lambda: a @ a, lambda: model(*x)),
        }
        if jitted is not None:
            fns["after jax.jit"] = (lambda: jax.block_until_ready(jitted(*example)), lambda: model(*x))
        results = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, (first, then) in fns.items():
                time.sleep(SETTLE_S)  # the neighbour's threads of the step before stop spinning
                results[k].append(timed(then, args.repeat) if first is None else after(first, then, args.repeat))
        med = {k: statistics.median(v) for k, v in results.items()}
        rows.append((name, med))
    print(f"CPU: {ps.Target.host()}")
    print()
    print("| network | kernels ms | call ms | overhead µs | after numpy ms | after jax.jit ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, m in rows:
        jit = f"{m['after jax.jit'] * 1e3:.2f}" if "after jax.jit" in m else "-"
        print(f"| {name} | {m['kernels'] * 1e3:.2f} | {m['call'] * 1e3:.2f} | {(m['call'] - m['kernels']) * 1e6:.0f} | "
              f"{m['after numpy'] * 1e3:.2f} | {jit} |")


if __name__ == "__main__":
    main()
