"""What one evolutionary round costs the tuning process, outside measurement.

For each workload: draw ``--init`` candidates from the default space, train the MLP cost
model on them with seeded random labels (the work of a round does not depend on what the
labels are, and random labels make it reproducible without measuring anything), then time
``EvolutionarySearch().generate(ctx, 32)`` with MetaSchedule's defaults (population 512, 4
genetic iterations): how long, how many runs of the space program (draws, replays,
mutations), and the time per run. Same seed, same work: compare code versions with it.
``--calls`` counts the Python function calls per run instead (under ``cProfile``, so the
times are then inflated): a count does not drift with the machine, so it compares code
versions where the time's noise hides a 5-10% change.

    python benchmarks/bench_search.py                          # GMM:2, C2D:2, T2D:0, CBR:1
    python benchmarks/bench_search.py --workloads T2D:0 --rounds 3
    python benchmarks/bench_search.py --workloads DEP:0 --calls
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from types import SimpleNamespace
from typing import Dict, List, Optional

import numpy as np

import probsched as ps
from probsched.cost_model import MLPModel
from probsched.search import EvolutionarySearch
from probsched.search.candidate import SearchContext

DEFAULT_WORKLOADS = "GMM:2,C2D:2,T2D:0,CBR:1"


class _CountingContext(SearchContext):
    """A search context that counts the space programs it runs."""

    runs = 0

    def _run(self, program):
        self.runs += 1
        return super()._run(program)


def one_round(spec: str, init: int = 32, batch: int = 32, seed: int = 0, count_calls: bool = False) -> Dict[str, float]:
    """Time one ``generate`` of evolutionary search on ``spec`` (see the module docstring);
    with ``count_calls``, also count its Python function calls."""
    w = ps.workloads.get(spec)
    space = ps.space.default()
    warm = SearchContext(w, space, seed=seed)
    cands = [c for c in (warm.draw() for _ in range(init)) if c is not None]
    labels = list(np.random.default_rng(seed).uniform(1e-4, 1e-2, size=len(cands)))
    model = MLPModel(seed=seed)
    model.fit_features([c.features() for c in cands], labels, [spec] * len(cands))
    ctx = _CountingContext(w, space, model, seed=seed, measured={c.hash for c in cands})
    # what ctx.records holds after a measured round: records best first, with their decisions
    ctx.records = [SimpleNamespace(decisions=cands[i].decisions.to_json()) for i in np.argsort(labels)]
    profile = cProfile.Profile() if count_calls else None
    start = time.perf_counter()
    if profile is not None:
        profile.enable()
    out = EvolutionarySearch().generate(ctx, batch)
    if profile is not None:
        profile.disable()
    seconds = time.perf_counter() - start
    runs = max(ctx.runs, 1)
    calls = pstats.Stats(profile).total_calls / runs if profile is not None else float("nan")
    return {"seconds": seconds, "runs": ctx.runs, "ms_per_run": 1e3 * seconds / runs, "batch": len(out), "calls_per_run": calls}


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=DEFAULT_WORKLOADS)
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds per workload, seeds SEED, SEED+1, ... (the median is reported; a round with the same seed "
                        "would find the memos of the first one warm)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--calls", action="store_true", help="count Python function calls per space run (under cProfile)")
    args = p.parse_args(argv)
    extra = " calls per run |" if args.calls else ""
    print("| workload | generate s | space runs | ms per run |" + extra)
    print("|---|---:|---:|---:|" + ("---:|" if args.calls else ""))
    for spec in args.workloads.split(","):
        res = [one_round(spec, seed=args.seed + k, count_calls=args.calls) for k in range(args.rounds)]
        sec = statistics.median(r["seconds"] for r in res)
        runs = statistics.median(r["runs"] for r in res)
        ms = statistics.median(r["ms_per_run"] for r in res)
        calls = f" {statistics.median(r['calls_per_run'] for r in res):.0f} |" if args.calls else ""
        print(f"| {spec} | {sec:.1f} | {runs:.0f} | {ms:.1f} |" + calls, flush=True)


if __name__ == "__main__":
    main()
