"""SIMULATED measuring, for scale experiments only: nothing is compiled or timed.

``DaskMeasurer(..., simulate=Simulation(...))`` sends every candidate to the cluster as usual
(the same tasks, dispatch and collection), but the Dask worker sleeps for a candidate's
compile-and-run time instead of measuring it (:func:`simulated_task`). With many workers on
one machine (threads that sleep) this shows whether the tuning loop, which generates, ranks,
dispatches and records on one core, can keep a cluster of that size busy, without the
cluster. Every simulated result says ``"simulated"`` in its ``error_message``; its run time is
made up from the candidate's instruction log (stable, so a search sees a landscape), and is
never a measurement.

The default durations are of the order of a GMM:2 candidate's compile and of its check and
timing on a 2-core machine (``python benchmarks/bench_measure.py`` measures them).

>>> sim = Simulation(compile_seconds=0.01, run_seconds=0.01, spread=0.0)
>>> d = simulated_task({"logs": ["[]"], "options": {}, "simulate": sim.to_data()}, None)
>>> len(d["results"]), d["end"] - d["start"] >= 0.02
(1, True)
"""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import asdict, dataclass
from typing import Optional

from .remote import host_description
from .result import MeasureResult


@dataclass(frozen=True)
class Simulation:
    """SIMULATED compile and run seconds of one candidate: each drawn uniformly within
    ``spread`` (a fraction) of its mean."""

    compile_seconds: float = 0.81
    run_seconds: float = 0.49
    spread: float = 0.5

    def __post_init__(self) -> None:
        if self.compile_seconds < 0 or self.run_seconds < 0 or not 0 <= self.spread <= 1:
            raise ValueError(f"Simulation: seconds must be >= 0 and spread in [0, 1], got {self}")

    def to_data(self) -> dict:
        """Plain data for the task."""
        return asdict(self)


def _made_up_seconds(log_json: str) -> float:
    """A stable pseudo run time per candidate, 1-10 ms (no measurement behind it)."""
    digest = int(hashlib.sha256(log_json.encode()).hexdigest()[:8], 16)
    return 1e-3 * (1 + 9 * digest / 0xFFFFFFFF)


def simulated_task(task: dict, reference: Optional[dict]) -> dict:
    """Sleep the simulated time of each candidate of ``task``, then answer as
    :func:`~probsched.measure.remote.measure_task` does (see the module doc)."""
    sim = Simulation(**task["simulate"])
    rng = random.Random()
    start = time.time()
    results = []
    for log_json in task["logs"]:
        compile_s = sim.compile_seconds * (1 + sim.spread * rng.uniform(-1, 1))
        run_s = sim.run_seconds * (1 + sim.spread * rng.uniform(-1, 1))
        time.sleep(compile_s + run_s)
        seconds = _made_up_seconds(log_json)
        results.append(MeasureResult((seconds,) * 3, compile_s, None, "simulated").to_json())
    return {**host_description(), "results": results, "start": start, "end": time.time()}


__all__ = ["Simulation", "simulated_task"]
