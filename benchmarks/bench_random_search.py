"""Random search over the default design space: the floor for model-guided search (issue #6).

For each workload: draw N traces from ``ps.space.default()`` (``ps.tune`` with the
``replay`` strategy and no cost model), compile, check and time each in worker processes,
keep the best; then time the best kernel, numpy and jax.jit in this process, in one run.
Prints a Markdown table: best GFLOP/s, the baselines, ratios (> 1: ours is faster), the mean
wall seconds per trace (draw + build + check + time, two workers) and failures by kind.

    python benchmarks/bench_random_search.py                  # N = 32 on GMM-2, C2D-2, DEP-0, SFM-2
    python benchmarks/bench_random_search.py -n 8 --workloads GMM:2
"""

from __future__ import annotations

import argparse
import collections
import json
import time

import probsched as ps
from probsched.measure import LocalMeasurer


def run(spec: str, n: int, seed: int, workers: int) -> dict:
    w = ps.workloads.get(spec)
    start = time.perf_counter()
    with LocalMeasurer(workers=workers) as m:
        result = ps.tune(w, trials=n, strategy="replay", cost_model=None, measurer=m, seed=seed, batch_size=n)
    wall = time.perf_counter() - start
    rows = dict(result.compare())
    fails = collections.Counter(t.error for t in result.history if t.error)
    ours = rows.get("probsched")
    return {
        "workload": spec,
        "trials": len(result.history),
        "seconds_per_trace": wall / max(1, len(result.history)),
        "best_gflops": w.flops / ours / 1e9 if ours else None,
        "numpy_gflops": w.flops / rows["numpy"] / 1e9 if "numpy" in rows else None,
        "jax_gflops": w.flops / rows["jax"] / 1e9 if "jax" in rows else None,
        "vs_numpy": rows["numpy"] / ours if ours and "numpy" in rows else None,
        "vs_jax": rows["jax"] / ours if ours and "jax" in rows else None,
        "failures": dict(fails),
        "mean_compile_seconds": sum(t.compile_seconds for t in result.history) / max(1, len(result.history)),
    }


def table(rows) -> str:
    f = lambda x, p=1: "-" if x is None else f"{x:.{p}f}"  # noqa: E731
    out = [
        "| workload | N | best GFLOP/s | numpy | jax.jit | vs numpy | vs jax | s/trace | compile s | failures |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fails = ", ".join(f"{k} {v}" for k, v in sorted(r["failures"].items())) or "0"
        out.append(
            f"| {r['workload']} | {r['trials']} | {f(r['best_gflops'])} | {f(r['numpy_gflops'])} | {f(r['jax_gflops'])} "
            f"| {f(r['vs_numpy'], 2)}x | {f(r['vs_jax'], 2)}x | {f(r['seconds_per_trace'], 2)} "
            f"| {f(r['mean_compile_seconds'], 2)} | {fails} |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=32, help="traces per workload")
    ap.add_argument("--workloads", default="GMM:2,C2D:2,DEP:0,SFM:2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for spec in args.workloads.split(","):
        rows.append(run(spec.strip(), args.n, args.seed, args.workers))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
