"""A/B of two code-generation choices on tuned kernels: per-tile intermediates, aligned stacks.

For the ``-k`` best records of each database, builds the kernel twice, interleaves their
timings in this process (9 rounds) and prints, per workload, the best of the top k each
way and the per-record ratios (B / A: below 1, the current code is faster):

- A: lowering leaves global intermediates whole (``compact_local_buffers(...,
  intermediates=False)``) and stack arrays get LLVM's default alignment (what the code did
  before per-tile intermediates);
- B: the current code (a global intermediate computed under a loop becomes a local tile;
  stack arrays are 64-byte aligned).

The database file names must end in ``_<workload>.db`` (``ours_DEP:0.db``), as
``benchmarks/bench_tvm.py`` and ``probsched bench`` runs name them.

    python benchmarks/bench_lowering_ab.py -k 8 D/ours_DEP:0.db D/ours_SFM:2.db
    python benchmarks/bench_lowering_ab.py -k 16 --changed-only D/ours_DEP:0.db
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from typing import Dict, List, Optional

import numpy as np

import probsched as ps
import probsched.codegen.stackalloc as stackalloc
import probsched.lowering as lowering
from probsched.aligned import aligned_copy, aligned_empty
from probsched.database import Database
from probsched.lowering.compact import compact_local_buffers
from probsched.measure.timer import time_interleaved


def build(sch, current: bool):
    """The kernel of ``sch`` built by the current code (True) or the A arm (False)."""
    saved = stackalloc.STACK_ALIGN
    lowering.compact_local_buffers = functools.partial(compact_local_buffers, intermediates=current)
    stackalloc.STACK_ALIGN = saved if current else None
    try:
        return ps.build(sch)
    finally:
        lowering.compact_local_buffers = compact_local_buffers
        stackalloc.STACK_ALIGN = saved


def workload_of(path: str) -> str:
    """``D/ours_DEP:0.db`` -> ``DEP:0``."""
    stem = path.rsplit("/", 1)[-1]
    if not stem.endswith(".db") or "_" not in stem:
        raise SystemExit(f"{path}: expected a database named like ours_DEP:0.db")
    return stem[:-3].rsplit("_", 1)[1]


def compare(path: str, k: int, changed_only: bool = False, rounds: int = 9) -> Optional[Dict]:
    """Time the top ``k`` records of ``path`` both ways; None when none is left to time."""
    spec = workload_of(path)
    w = ps.workloads.get(spec)
    db = Database(path)
    records = db.best(w.func.structural_hash(), k=k)
    inputs = [aligned_copy(a) for a in w.random_inputs(np.random.default_rng(0))]
    expected = w.reference(*inputs)
    fns, kept = {}, []
    for i, rec in enumerate(records):
        sch = rec.schedule(w.func)
        if changed_only and compact_local_buffers(sch.mod) == compact_local_buffers(sch.mod, intermediates=False):
            continue
        kept.append(i)
        for current in (False, True):
            kern = build(sch, current)
            outs = [aligned_empty(b.shape, b.dtype) for b in kern.outputs]
            kern(*inputs, *outs)
            w.check(outs, expected)
            fns[(i, current)] = kern.bind(*inputs, *outs)
    db.close()
    if not kept:
        return None
    t = time_interleaved(fns, rounds=rounds, settle_s=0.0, min_repeat_ms=50)
    a = [t[(i, False)].median * 1e6 for i in kept]
    b = [t[(i, True)].median * 1e6 for i in kept]
    return {"workload": spec, "records": kept, "a_us": a, "b_us": b, "ratios": [y / x for x, y in zip(a, b)]}


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("databases", nargs="+")
    p.add_argument("-k", type=int, default=8, help="best records per database (default 8)")
    p.add_argument("--changed-only", action="store_true", help="only records whose lowering the compaction changes")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = p.parse_args(argv)
    rows = []
    print("| workload | records | best A µs | best B µs | B / A (best) | B / A (median per record) |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in args.databases:
        r = compare(path, args.k, args.changed_only)
        if r is None:
            print(f"| {workload_of(path)} | 0 | | | | |", flush=True)
            continue
        rows.append(r)
        best = min(r["b_us"]) / min(r["a_us"])
        print(f"| {r['workload']} | {len(r['records'])} | {min(r['a_us']):.1f} | {min(r['b_us']):.1f} | {best:.3f} | "
              f"{float(np.median(r['ratios'])):.3f} |", flush=True)
    if rows:
        g = math.exp(sum(math.log(min(r["b_us"]) / min(r["a_us"])) for r in rows) / len(rows))
        print(f"| geomean | | | | {g:.3f} | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
