"""Task schedulers: which task of a network gets the next round of trials.

A tuning run (``ps.tune_model``, and ``ps.tune`` as a network of one task) spends one
budget of trials over a network's tasks, a round (a batch of candidates of one task) at a
time. Before each round it asks its scheduler for a task. A scheduler is any object with
``name`` and::

    next_task(tasks: Sequence[TaskState], rng: numpy.random.Generator) -> Optional[int]

returning the index of a task whose ``alive`` is true (or None to stop early). It sees each
task's :class:`TaskState`: weight (calls per inference), FLOPs, trials so far, best time,
the best time after each of its rounds. The tuner keeps the states and retires a task
(``alive = False``) whose strategy finds no new candidate or whose last
:data:`MAX_FAILED_ROUNDS` rounds measured nothing successfully. ``examples/custom_task_scheduler.py``
writes one in a few lines.

- :class:`RoundRobin`: each live task in turn.
- :class:`GradientBased`: MetaSchedule's. Every task without earlier trials gets one round
  first (a task with no success yet before the others, then the largest share of the
  latency first: a run resumed on a database that already times most tasks reaches those it
  has no record of before its budget ends, where a compile would run an untimed schedule);
  then the round goes to the task with the largest estimated gain in end-to-end latency,
  ``weight * (alpha * backward + (1 - alpha) * forward)``: ``backward`` the drop of its best
  time per round over the last ``window`` rounds, ``forward`` its best time over its trials
  so far, earlier runs' included (what one more trial could still save, optimistically: a
  resumed run goes on with the tasks earlier runs gave least, not with a first round for
  each of a network's tasks again); ties broken at random.

>>> import numpy as np
>>> tasks = [TaskState(0, "a", 1, 1e6, 32, 2e-3, [3e-3, 2e-3]), TaskState(1, "b", 4, 1e6, 32, 1e-3, [1e-3, 1e-3])]
>>> GradientBased().next_task(tasks, np.random.default_rng(0))   # 4 calls of b outweigh a's progress
1
>>> RoundRobin().next_task(tasks, np.random.default_rng(0))
0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

import numpy as np

from ..components import Registry

#: Rounds in a row without one successful trial after which a task leaves the rotation.
MAX_FAILED_ROUNDS = 3


@dataclass
class TaskState:
    """What a scheduler knows of one task (kept by the tuner)."""

    index: int
    name: str
    weight: int
    flops: float
    trials: int = 0
    best_seconds: float = math.inf
    round_bests: List[float] = field(default_factory=list)  # best time after each round
    alive: bool = True
    failed_rounds: int = 0  # rounds in a row with no successful trial
    past_trials: int = 0  # measured by earlier runs (the database's records of it)

    @property
    def weighted_seconds(self) -> float:
        """Its share of the network's latency: weight x best time (inf before a success)."""
        return self.weight * self.best_seconds


class RoundRobin:
    """Each live task in turn."""

    name = "round-robin"

    def __init__(self) -> None:
        self._last = -1

    def next_task(self, tasks: Sequence[TaskState], rng: np.random.Generator) -> Optional[int]:
        live = [t.index for t in tasks if t.alive]
        if not live:
            return None
        after = [i for i in live if i > self._last]
        self._last = after[0] if after else live[0]
        return self._last


class GradientBased:
    """MetaSchedule's gradient-based task scheduler (see the module docstring)."""

    name = "gradient"

    def __init__(self, alpha: float = 0.2, window: int = 3) -> None:
        if not 0 <= alpha <= 1 or window < 1:
            raise ValueError(f"GradientBased: alpha must be in [0, 1] and window >= 1, got {alpha} and {window}")
        self.alpha = alpha
        self.window = window

    def gain(self, task: TaskState) -> float:
        """The estimated drop of the network's latency (seconds) from one more round of ``task``."""
        if not math.isfinite(task.best_seconds):
            return math.inf  # nothing runs yet: any success is the largest gain there is
        hist = task.round_bests
        backward = 0.0
        if len(hist) > self.window and math.isfinite(hist[-1 - self.window]):
            backward = (hist[-1 - self.window] - hist[-1]) / self.window
        forward = task.best_seconds / max(1, task.trials + task.past_trials)
        return task.weight * (self.alpha * backward + (1 - self.alpha) * forward)

    def next_task(self, tasks: Sequence[TaskState], rng: np.random.Generator) -> Optional[int]:
        live = [t for t in tasks if t.alive]
        if not live:
            return None
        fresh = [t for t in live if not t.round_bests and not (t.past_trials and math.isfinite(t.best_seconds))]
        if fresh:
            return min(fresh, key=lambda t: (math.isfinite(t.best_seconds), -t.weighted_seconds, t.index)).index
        gains = np.array([self.gain(t) for t in live])
        top = np.flatnonzero(gains == gains.max())
        return live[int(rng.choice(top))].index


#: Task schedulers by the name ``ps.tune_model(scheduler=...)`` and ``--scheduler`` take,
#: the default first; ``SCHEDULERS.register("mine", factory)`` adds one.
SCHEDULERS: Registry[object] = Registry("task scheduler", required=("next_task",))
SCHEDULERS.register("gradient", GradientBased)
SCHEDULERS.register("round-robin", RoundRobin)


def get(scheduler: Union[str, object], **options) -> object:
    """A scheduler from its name (``"gradient"``, ``"round-robin"``; made with ``options``)
    or the object itself."""
    return SCHEDULERS.get(scheduler, **options)


__all__ = ["TaskState", "GradientBased", "RoundRobin", "SCHEDULERS", "MAX_FAILED_ROUNDS", "get"]
