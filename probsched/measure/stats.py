"""``MeasureStats``: where a measurer's time and its workers' memory went.

Times are wall seconds seen by the caller, summed over workers and candidates:

- ``compile_seconds``: from sending a candidate to its worker to hearing it is built
  (replay, lowering, numba, and the pipe), including builds that failed or timed out;
- ``build_seconds``: the part of it spent in ``ps.build`` as the workers report it;
- ``run_seconds``: from the go-ahead to the result (check and timing: the cores are held);
  ``check_seconds`` and ``timing_seconds`` are its two parts as the workers report them
  (the kernel's first call on the reference inputs and the comparison; the timing protocol);
- ``wait_seconds``: built kernels waiting for their turn to run.

``wall`` splits the measurer's own wall time (while a ``measure`` call runs) by what the
workers were doing, in this order of precedence, so the parts add up to the wall time:
``"run"`` (a kernel is being checked or timed: one at a time), ``"compile"`` (no kernel
runs, at least one worker compiles), ``"start"`` (no kernel runs, none compiles, a worker
is starting), ``"idle"`` (nothing: the batch is ending), ``"caller"`` (the caller's
``on_result`` callback runs, e.g. a database commit: no new work is handed out meanwhile). On 2 cores a compile cannot overlap a timing (see :mod:`.local`), so "run" and
"compile" are what a batch's wall time is made of.

``memory`` samples ``(worker pid, fresh compiles so far, resident MiB)`` after every result.

>>> s = MeasureStats()
>>> s.candidates, s.worker_starts, s.memory
(0, 0, [])
>>> s.tick(10.0, "compile"); s.tick(10.5, "run"); s.tick(10.75, None)
>>> s.wall["compile"], s.wall["run"]
(0.5, 0.25)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

WALL_MODES = ("run", "compile", "start", "idle", "caller")


@dataclass
class MeasureStats:
    """Cumulative counters of a :class:`~probsched.measure.LocalMeasurer` (see the module doc)."""

    candidates: int = 0
    compile_seconds: float = 0.0
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    check_seconds: float = 0.0
    timing_seconds: float = 0.0
    wait_seconds: float = 0.0
    worker_starts: int = 0
    stopped_early: int = 0  # candidates whose timing stopped early (LocalMeasurer.early_stop)
    memory: List[Tuple[int, int, float]] = field(default_factory=list)
    wall: Dict[str, float] = field(default_factory=lambda: dict.fromkeys(WALL_MODES, 0.0))
    _mode: Optional[str] = field(default=None, repr=False)
    _since: float = field(default=0.0, repr=False)

    def tick(self, now: float, mode: Optional[str]) -> None:
        """Charge the time since the last tick to the mode then current; ``mode`` is the
        one from ``now`` on (None: the measurer is not measuring)."""
        if self._mode is not None:
            self.wall[self._mode] += max(0.0, now - self._since)
        self._mode, self._since = mode, now

    def copy(self) -> "MeasureStats":
        """A snapshot (to subtract from a later one: :meth:`minus`)."""
        return MeasureStats(**{**self.__dict__, "memory": list(self.memory), "wall": dict(self.wall)})

    def minus(self, before: "MeasureStats") -> "MeasureStats":
        """The counters accumulated since the snapshot ``before``.

        >>> a = MeasureStats(candidates=3, run_seconds=2.0)
        >>> b = MeasureStats(candidates=5, run_seconds=3.5)
        >>> d = b.minus(a)
        >>> d.candidates, d.run_seconds
        (2, 1.5)
        """
        out = MeasureStats()
        for k, v in self.__dict__.items():
            if k.startswith("_"):
                continue
            if k == "memory":
                out.memory = self.memory[len(before.memory):]
            elif k == "wall":
                out.wall = {m: v[m] - before.wall.get(m, 0.0) for m in v}
            else:
                setattr(out, k, v - getattr(before, k))
        return out
