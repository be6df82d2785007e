"""Cost per sample site of the handler stack (a script, not a test).

Measures ``trace(seed(replay(program, old_trace), 0))`` on a program with 1,000
Categorical sites (3 or 4 candidates), beside the same loop calling
``Categorical.sample`` directly and the program run with no handler. Configurations
are timed in interleaved rounds, so that load from other processes hits all of them
alike; the table shows the median (and the minimum) over rounds, in microseconds per
site.

    .venv/bin/python benchmarks/bench_handlers.py [--sites 1000] [--rounds 41]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from handlers import (Categorical, condition, mutate, replay, sample, seed,  # noqa: E402
                      set_default_rng, trace)

TARGET_US = 3.0


def build(n_sites: int) -> dict[str, Callable[[], object]]:
    dists = [Categorical([1, 2, 4, 8]), Categorical([0, 16, 64]), Categorical([True, False])]
    pairs = [(f"s{i}", dists[i % len(dists)]) for i in range(n_sites)]

    def program() -> int:
        total = 0
        for name, dist in pairs:
            total += sample(name, dist)
        return total

    rng = np.random.default_rng(0)

    def plain() -> int:  # the same work with no effect system at all
        total = 0
        for _name, dist in pairs:
            total += dist.sample(rng)
        return total

    set_default_rng(0)
    old = trace(seed(program, 0)).get_trace()
    replayed = trace(seed(replay(program, old), 0))
    assert replayed.get_trace() == old
    return {
        "plain loop calling `dist.sample(rng)`": plain,
        "`program()`, no handler": program,
        "`trace(seed(program, 0))`": trace(seed(program, 0)).get_trace,
        "**`trace(seed(replay(program, old), 0))`**": replayed.get_trace,
        "`trace(mutate(program, old, sites=10, rng_seed=0))`":
            trace(mutate(program, old, sites=10, rng_seed=0)).get_trace,
        "`condition(program, old.choices())`": condition(program, old.choices()),
    }


def measure(configs: dict[str, Callable[[], object]], rounds: int,
            inner: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {label: [] for label in configs}
    for run in configs.values():
        run()  # warm-up
    for _ in range(rounds):
        for label, run in configs.items():
            gc.collect()  # start every timing from the same heap state
            t0 = time.perf_counter()
            for _ in range(inner):
                run()
            samples[label].append((time.perf_counter() - t0) / inner)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--inner", type=int, default=5)
    args = parser.parse_args()
    n = args.sites

    samples = measure(build(n), args.rounds, args.inner)
    baseline = statistics.median(samples["`program()`, no handler"])
    print(f"{n} sites, {args.rounds} interleaved rounds x {args.inner} runs "
          f"(Python {sys.version.split()[0]}, numpy {np.__version__})\n")
    print("| configuration | median us/site | min us/site | x no-handler |")
    print("|---|---:|---:|---:|")
    for label, times in samples.items():
        med = statistics.median(times)
        print(f"| {label} | {med / n * 1e6:.2f} | {min(times) / n * 1e6:.2f} | "
              f"{med / baseline:.1f} |")
    target = statistics.median(samples["**`trace(seed(replay(program, old), 0))`**"]) / n * 1e6
    verdict = "met" if target <= TARGET_US else "MISSED"
    print(f"\ntarget: trace(seed(replay)) <= {TARGET_US} us/site (median): {verdict} "
          f"({target:.2f})")


if __name__ == "__main__":
    main()
