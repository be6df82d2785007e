"""``MeasureStats``: where a measurer's time and its workers' memory went.

Times are wall seconds seen by the caller, summed over workers and candidates:

- ``compile_seconds``: from sending a candidate to its worker to hearing it is built
  (replay, lowering, numba, and the pipe), including builds that failed or timed out;
- ``build_seconds``: the part of it spent in ``ps.build`` as the workers report it;
- ``run_seconds``: from the go-ahead to the result (check and timing: the cores are held);
- ``wait_seconds``: built kernels waiting for their turn to run.

``memory`` samples ``(worker pid, fresh compiles so far, resident MiB)`` after every result.

>>> s = MeasureStats()
>>> s.candidates, s.worker_starts, s.memory
(0, 0, [])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Tuple


@dataclass
class MeasureStats:
    """Cumulative counters of a :class:`~probsched.measure.LocalMeasurer` (see the module doc)."""

    candidates: int = 0
    compile_seconds: float = 0.0
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    wait_seconds: float = 0.0
    worker_starts: int = 0
    memory: List[Tuple[int, int, float]] = field(default_factory=list)
