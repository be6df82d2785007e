"""Winograd convolution as a schedule choice (issue #63): speed per layer, accuracy per network.

``tasks``: ResNet-50's 3x3 stride-1 tasks (``probsched import resnet50``: 3, 13, 20, 27),
each tuned with the same budget and seed in the default space and in the default space
without the Winograd rule; then the best of the direct-only run and the fastest direct,
F(2x2, 3x3) and F(4x4, 3x3) candidates of the default-space run are timed together in this
process, interleaved (medians of ``--rounds``); the speed-up is the direct-only best over
the default space's best (the algorithm its tuner measured fastest)::

    python benchmarks/bench_winograd.py tasks --tasks 20 --trials 64 --db-dir D

``accuracy``: a network compiled with Winograd kernels against float32 direct convolution:
``jax.jit`` (XLA's direct convolutions) and the network compiled without the Winograd rule,
on ``--inputs`` random inputs: the logits' relative error (2-norm) and how often the argmax
agrees. ``--db`` compiles from a tuned database (Winograd where the tuner measured it
faster; ``bench_modules.py --configs full`` makes one); ``--force 2`` or ``--force 4``
computes every eligible convolution by that tile instead (the largest error Winograd can
bring, no tuning needed)::

    python benchmarks/bench_winograd.py accuracy --model resnet50 --db D/resnet50-full-s0.db
    python benchmarks/bench_winograd.py accuracy --model resnet50 --force 4

Databases go to ``DIR/<model>-t<task>-<space>-s<seed>.db`` and are topped up to the budget
when they exist. Prints the CPU, threads and date with each table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from typing import Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import probsched as ps  # noqa: E402
from bench_models import cpu_model  # noqa: E402
from probsched.schedule import InstructionLog  # noqa: E402
from probsched.schedule.winograd import match_conv  # noqa: E402

SPACES = {"direct": dict(winograd=False), "winograd": dict(winograd=True)}


def eligible_tasks(graph) -> List[int]:
    """Indices of the tasks with a convolution the Winograd rule takes."""
    return [i for i, t in enumerate(graph.tasks()) if any(match_conv(t.func, b.name)[0] for b in t.func.blocks())]


def algorithm(record) -> str:
    """``direct``, ``F2`` or ``F4``: how a record's schedule computes its convolution."""
    for inst in InstructionLog.from_json(record.instructions):
        if inst.kind == "winograd":
            return f"F{inst.attrs['tile']}"
    return "direct"


def fastest_by_algorithm(db, workload, target: str) -> Dict[str, object]:
    """The fastest successful record of each algorithm in ``db`` measured on ``target``."""
    out: Dict[str, object] = {}
    for rec in db.records(workload, target=target, include_failed=False):
        alg = algorithm(rec)
        if rec.median is not None and (alg not in out or rec.median < out[alg].median):
            out[alg] = rec
    return out


def run_tasks(args: argparse.Namespace) -> int:
    from probsched.aligned import aligned_copy, aligned_empty
    from probsched.codegen import build
    from probsched.database import Database
    from probsched.measure.timer import time_interleaved

    fn, inputs = ps.models.get(args.model)
    graph = ps.from_jax(fn, *inputs, name=args.model)
    tasks = graph.tasks()
    chosen = [int(t) for t in args.tasks.split(",")] if args.tasks else eligible_tasks(graph)
    target = "cpu"  # this machine, every core (the measurer's workers time there too)
    os.makedirs(args.db_dir, exist_ok=True)
    rows = []
    for i in chosen:
        task = tasks[i]
        w = task.workload
        kernels, chosen = {}, "direct"
        for config, options in SPACES.items():
            path = os.path.join(args.db_dir, f"{args.model}-t{i:02d}-{config}-s{args.seed}.db")
            with Database(path) as db:
                done = len(db.records(w, target=target))
            space = ps.space.default(**options)
            if args.trials > done:
                ps.tune(w, trials=args.trials - done, database=path, space=space, seed=args.seed)
            with Database(path) as db:
                fastest = fastest_by_algorithm(db, w, target)
            if config == "direct":
                kernels["direct-only"] = build(fastest["direct"].schedule(w.func), target)
            else:  # the default space's fastest of each algorithm, its best among them
                kernels.update({alg: build(r.schedule(w.func), target) for alg, r in fastest.items()})
                chosen = min(fastest, key=lambda alg: fastest[alg].median)
        x = [aligned_copy(a) for a in w.random_inputs(np.random.default_rng(0))]
        fns = {}
        for name, k in kernels.items():
            outs = [aligned_empty(b.shape, b.dtype) for b in k.outputs]
            k(*x, *outs)
            w.check(outs, w.reference(*x), scheduled=k.func)
            fns[name] = k.bind(*x, *outs)
        timings = time_interleaved(fns, rounds=args.rounds, min_repeat_ms=args.min_repeat_ms)
        ms = {k: v.median * 1e3 for k, v in timings.items()}
        shapes = " * ".join("x".join(map(str, b.shape)) for b in w.func.input_buffers()[:2])
        rows.append({"task": i, "shape": shapes, "ms": ms, "chosen": chosen, "gflop": task.flops / 1e9})
        print(json.dumps(rows[-1]), flush=True)
    print(header(args))
    print(tasks_table(rows))
    _dump(args, rows)
    return 0


def tasks_table(rows: List[dict]) -> str:
    lines = [
        "| task | data * weight | direct-only space ms | default space: direct ms | F(2x2) ms | F(4x4) ms | "
        "default's best (by the tuner) | direct-only / default |",
        "|---:|---|---:|---:|---:|---:|---|---:|",
    ]
    cell = lambda x: f"{x:.3f}" if x is not None else "-"  # noqa: E731
    for r in rows:
        ms = r["ms"]
        d, best = ms["direct-only"], ms[r["chosen"]]
        lines.append(
            f"| {r['task']} | {r['shape']} | {cell(d)} | {cell(ms.get('direct'))} | {cell(ms.get('F2'))} | "
            f"{cell(ms.get('F4'))} | {r['chosen']} | {d / best:.2f}x |"
        )
    return "\n".join(lines)


def forced_space(tile: int):
    """The default space with every eligible convolution computed by F(tile x tile)."""
    from probsched.space import Winograd

    rules = [Winograd(tiles=(tile,), probs=[0, 1]) if isinstance(r, Winograd) else r for r in ps.space.default_rules()]
    return ps.space.Space(rules, ps.space.default_postprocs(), name=f"winograd-F{tile}")


def run_accuracy(args: argparse.Namespace) -> int:
    import jax

    fn, inputs = ps.models.get(args.model)
    graph = ps.from_jax(fn, *inputs, name=args.model)
    if args.force:
        wino = ps.compile(graph, space=forced_space(args.force), candidates=args.candidates, progress=None)
    else:
        wino = ps.compile(graph, database=args.db, progress=None)
    # the direct network reads no database: a compile uses a task's records whatever space
    # made them, so the tuned database's Winograd records would make it the same network
    direct = ps.compile(graph, space=ps.space.default(winograd=False), candidates=args.candidates, progress=None)
    if any(s.kernel.func.attr("winograd") for s in direct.steps):
        raise SystemExit("bench_winograd: the direct network computes a convolution by Winograd's algorithm")
    used = [s.kernel.func.attr("winograd") for s in wino.steps if s.kernel.func.attr("winograd")]
    jitted = jax.jit(fn)
    rng = np.random.default_rng(args.seed)
    stats: Dict[str, list] = {"winograd": [], "direct": []}
    agree = {"winograd": 0, "direct": 0}
    for _ in range(args.inputs):
        x = [rng.standard_normal(a.shape).astype(a.dtype) for a in inputs]
        ref = np.asarray(jitted(*x), dtype=np.float64)
        for name, model in (("winograd", wino), ("direct", direct)):
            y = np.asarray(model(*x), dtype=np.float64)
            stats[name].append(float(np.linalg.norm(y - ref) / np.linalg.norm(ref)))
            agree[name] += int(np.argmax(y) == np.argmax(ref))
    row = {
        "model": args.model,
        "source": f"every eligible convolution F({args.force}x{args.force})" if args.force else f"tuned: {args.db}",
        "winograd_layers": [list(u) for u in used],
        "rel_err": {k: (max(v), float(np.median(v))) for k, v in stats.items()},
        "argmax_agree": agree,
        "inputs": args.inputs,
    }
    print(header(args))
    print(f"{args.model}, {row['source']}: {len(used)} kernel calls by Winograd "
          f"({sorted({u[0][1] for u in used})} tiles)\n")
    print("| compiled network | relative error vs jax.jit (max, median) | argmax agrees |")
    print("|---|---:|---:|")
    for name in ("winograd", "direct"):
        mx, med = row["rel_err"][name]
        print(f"| {name} | {mx:.2e}, {med:.2e} | {agree[name]}/{args.inputs} |")
    _dump(args, [row])
    return 0


def header(args: argparse.Namespace) -> str:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    threads = ps.target.Target.host().threads
    return f"\n{cpu_model()}, {os.cpu_count()} cores, kernels on {threads} thread(s), {stamp}, seed {args.seed}\n"


def _dump(args: argparse.Namespace, rows: list) -> None:
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cpu": cpu_model(), "rows": rows}, fh, indent=1)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tasks", help="tune 3x3 tasks with and without the Winograd rule, time the best together")
    t.add_argument("--model", default="resnet50")
    t.add_argument("--tasks", default="", help="task indices (default: every eligible task)")
    t.add_argument("--trials", type=int, default=64)
    t.add_argument("--db-dir", default=".")
    t.add_argument("--rounds", type=int, default=9)
    t.add_argument("--min-repeat-ms", type=float, default=100.0)
    a = sub.add_parser("accuracy", help="a network with Winograd kernels against float32 direct convolution")
    a.add_argument("--model", default="resnet50")
    a.add_argument("--db", default=None, help="a tuned database of the network (Winograd where it was faster)")
    a.add_argument("--force", type=int, choices=(2, 4), default=None, help="every eligible convolution by this tile")
    a.add_argument("--candidates", type=int, default=8, help="programs drawn per task without a record")
    a.add_argument("--inputs", type=int, default=8)
    for q in (t, a):
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.command == "accuracy" and not (args.db or args.force):
        p.error("accuracy: give --db (a tuned network) or --force 2|4")
    return run_tasks(args) if args.command == "tasks" else run_accuracy(args)


if __name__ == "__main__":
    sys.exit(main())
