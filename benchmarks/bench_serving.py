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

Usage: ``python benchmarks/bench_serving.py [--models resnet50,mobilenet_v2,bert_base] [--db-dir D]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import probsched as ps


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
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    rows = []
    for name in args.models.split(","):
        fn, example = ps.models.get(name)
        db = os.path.join(args.db_dir, f"{name}.db") if args.db_dir else None
        model = ps.compile(fn, *example, database=db if db and os.path.exists(db) else None, progress=None)
        x = np.ascontiguousarray(example[0])
        bound = model.bind(x.copy())
        jitted = jax.jit(fn)
        jitted(*example)
        fns = {
            "kernels": (None, bound),
            "call": (None, lambda: model(x)),
            "after numpy": (lambda: a @ a, lambda: model(x)),
            "after jax.jit": (lambda: jax.block_until_ready(jitted(*example)), lambda: model(x)),
        }
        results = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, (first, then) in fns.items():
                results[k].append(timed(then, args.repeat) if first is None else after(first, then, args.repeat))
        med = {k: statistics.median(v) for k, v in results.items()}
        rows.append((name, med))
    print(f"CPU: {ps.Target.host()}")
    print()
    print("| network | kernels ms | call ms | overhead µs | after numpy ms | after jax.jit ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, m in rows:
        print(f"| {name} | {m['kernels'] * 1e3:.2f} | {m['call'] * 1e3:.2f} | {(m['call'] - m['kernels']) * 1e6:.0f} | "
              f"{m['after numpy'] * 1e3:.2f} | {m['after jax.jit'] * 1e3:.2f} |")


if __name__ == "__main__":
    main()
