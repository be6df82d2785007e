"""The paper's expert-module experiment: how much each module of the design space adds end to end.

``python benchmarks/bench_modules.py --models bert_base,resnet50 --trials 1000 --db-dir DIR [--seed S]``

For each network, ``ps.tune_model`` with the same budget and seed on four design spaces:

- ``full``: the default space (``ps.space.default()``);
- ``no-winograd``: without the Winograd rule (``winograd=False``): every 3x3 convolution is
  computed directly (issue #63's ablation row);
- ``no-layout``: without the weight-layout rewrite (``rewrite_layout=False``): weights are
  read in their own layout (or packed into panels on every call);
- ``no-micro-kernels``: without the micro-kernel tiling rule (``micro_kernels=False``) and
  without Winograd (``winograd=False``): matmul-like blocks are tiled by
  ``MultiLevelTiling`` alone. The layout rewrite acts on micro-kernel tiles, so this space
  has none of the modules (``none``: the paper's baseline);

then every tuned network is compiled from its database and timed beside ``jax.jit``, all in
one process, interleaved round by round (medians of ``--rounds``). Databases go to
``DIR/<model>-<space>-s<seed>.db`` and are topped up to the budget when they exist, so a
long run can be split (and ``full`` can be a copy of ``bench_models.py``'s database of the
same budget and seed). Prints a Markdown table with the CPU and date; ``--json`` writes the figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import probsched as ps  # noqa: E402
from bench_models import cpu_model  # noqa: E402
from probsched.measure.timer import time_interleaved  # noqa: E402

#: Space options of each configuration.
CONFIGS = {
    "full": dict(micro_kernels=True, rewrite_layout=True, winograd=True),
    "no-winograd": dict(micro_kernels=True, rewrite_layout=True, winograd=False),
    "no-layout": dict(micro_kernels=True, rewrite_layout=False, winograd=True),
    "no-micro-kernels": dict(micro_kernels=False, rewrite_layout=True, winograd=False),
}


def _records_in(path: str, graph) -> int:
    """How many records ``path`` already holds for the tasks of ``graph`` (0 when it does not exist)."""
    if not os.path.exists(path):
        return 0
    db = ps.database.Database(path)
    try:
        return sum(len(db.records(task.workload)) for task in graph.tasks())
    finally:
        db.close()


def run_model(name: str, args: argparse.Namespace) -> dict:
    import jax

    fn, inputs = ps.models.get(name)
    graph = ps.from_jax(fn, *inputs, name=name)
    row: dict = {"model": name, "tune": {}}
    models = {}
    for config in args.configs.split(","):
        space = ps.space.default(**CONFIGS[config])
        os.makedirs(args.db_dir, exist_ok=True)
        db = os.path.join(args.db_dir, f"{name}-{config}-s{args.seed}.db")
        done = _records_in(db, graph)
        t = time.perf_counter()
        # a resumed database is topped up to the budget, not given it again
        result = ps.tune_model(graph, trials=max(0, args.trials - done), database=db, space=space, seed=args.seed)
        row["tune"][config] = {
            "wall_s": time.perf_counter() - t,
            "trials": done + len(result.history),
            "estimated_ms": result.estimated_seconds * 1e3,
        }
        print(result.summary(), flush=True)
        models[config] = result.model
    jitted = jax.jit(fn)
    jitted(*inputs)
    fns = {config: (lambda m=m: m(*inputs)) for config, m in models.items()}
    fns["jax.jit"] = lambda: jax.block_until_ready(jitted(*inputs))
    timings = time_interleaved(fns, rounds=args.rounds, min_repeat_ms=args.min_repeat_ms)
    row["ms"] = {k: v.median * 1e3 for k, v in timings.items()}
    return row


def table(rows: list) -> str:
    lines = [
        "| network | full ms | no Winograd ms | no layout ms | no micro-kernels (= none) ms | jax.jit ms | "
        "full vs none | full vs no Winograd | full vs no layout |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ms = r["ms"]
        full, nowino, nolay, nomk = ms.get("full"), ms.get("no-winograd"), ms.get("no-layout"), ms.get("no-micro-kernels")
        cell = lambda x: f"{x:.1f}" if x is not None else "-"  # noqa: E731
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "-"  # noqa: E731
        lines.append(
            f"| {r['model']} | {cell(full)} | {cell(nowino)} | {cell(nolay)} | {cell(nomk)} | {cell(ms.get('jax.jit'))} | "
            f"{ratio(nomk, full)} | {ratio(nowino, full)} | {ratio(nolay, full)} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="bert_base,resnet50")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--db-dir", default=".")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--min-repeat-ms", type=float, default=300.0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    rows = [run_model(m.strip(), args) for m in args.models.split(",")]
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    print(f"\n{cpu_model()}, {os.cpu_count()} cores, {stamp}, seed {args.seed}, {args.trials} trials per network and space\n")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cpu": cpu_model(), "date": stamp, "seed": args.seed, "trials": args.trials, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
