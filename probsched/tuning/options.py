"""``TuningOptions``: how a tuning run searches, one set of defaults for every entry point.

``ps.tune``, ``ps.tune_model``, ``probsched tune``, ``probsched tune-model`` and
``probsched bench`` all take these options (as keyword arguments or command-line flags) and
default them here, so an operator and a network are searched the same way unless asked
otherwise:

- ``space``: the design space (default ``ps.space.default(target=target)``);
- ``strategy``: a name of ``ps.search.STRATEGIES`` (``"evolutionary"``, MetaSchedule's
  genetic search ranked by the cost model; ``"replay"``; ``"mcmc"``) or a strategy object
  (a network's tasks each get a copy); ``strategy_options``: keyword arguments of a named
  strategy (e.g. ``{"max_family_share": 0.5}``; each task's is made with them, sized to the
  round);
- ``cost_model``: a name of ``ps.cost_model.COST_MODELS`` (``"mlp-transfer"``: the MLP that
  also trains on the shipped records of other workloads, so it ranks the first round too;
  ``"mlp"``; ``"ridge"``; ``"random"``), a model object, or None;
- ``seed``: of the search and the model (task ``i`` of a network searches with ``seed + i``);
  None draws fresh randomness;
- ``batch_size``: candidates measured per round; None: :func:`default_batch_size`, about
  three rounds per task within the budget, 8 to 32;
- ``retime_top``: after the search, the ``retime_top`` fastest candidates of each task
  that weighs at least 1% of the estimated latency are measured again together
  (``retime_rounds`` interleaved rounds) and the best is named by that
  (:mod:`probsched.tuning.selection`); None: :func:`default_retime_top`, 8 for one task, 3
  per task of a network (each costs a compile and a timing); 0: none;
- ``target``: the :class:`~probsched.target.Target` the default space schedules for (this
  machine);
- ``similar_tasks``: a task with no record of its own starts its search from the best
  decisions of the most similar tasks in the database (:mod:`.similar_tasks`);
- ``shipped``: a task with no record of its own first measures the records the package
  ships for this CPU family, where it ships some (:mod:`.shipped`).

>>> opts = TuningOptions(seed=3)
>>> opts.strategy, opts.cost_model, opts.batch_for(trials=128, tasks=1), opts.retime_for(tasks=1)
('evolutionary', 'mlp-transfer', 32, 8)
>>> TuningOptions.from_keywords({"strategy": "replay", "trails": 4}, who="tune")
Traceback (most recent call last):
...
TypeError: tune: unknown option 'trails'; the options are space, strategy, strategy_options, cost_model, seed, batch_size, retime_top, retime_rounds, target, similar_tasks, shipped
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union

if TYPE_CHECKING:
    from ..cost_model import CostModel
    from ..search import SearchStrategy
    from ..target import Target

#: Interleaved rounds of a re-timing: each candidate's median is over this many repeats of
#: the measurer's ``min_repeat_ms`` (``benchmarks/bench_retime.py protocols`` compares them).
DEFAULT_RETIME_ROUNDS = 15
#: Candidates re-timed together at the end when one task is tuned (``ps.tune``).
RETIME_TOP_ONE_TASK = 8
#: Candidates re-timed together per weighty task of a network (``ps.tune_model``).
RETIME_TOP_PER_TASK = 3


def default_batch_size(trials: int, tasks: int) -> int:
    """Candidates per round: about three rounds per task within the budget, 8 to 32.

    >>> default_batch_size(1500, 31), default_batch_size(1500, 8), default_batch_size(20, 12), default_batch_size(128, 1)
    (16, 32, 8, 32)
    """
    return int(min(32, max(8, trials // max(1, 3 * tasks))))


def default_retime_top(tasks: int) -> int:
    """Candidates re-timed per task: :data:`RETIME_TOP_ONE_TASK` for one task, else
    :data:`RETIME_TOP_PER_TASK` (a network's re-timing is paid once per weighty task)."""
    return RETIME_TOP_ONE_TASK if tasks <= 1 else RETIME_TOP_PER_TASK


@dataclass(frozen=True)
class TuningOptions:
    """How a tuning run searches; see the module docstring for each field."""

    space: Optional[Callable] = None
    strategy: Union[str, "SearchStrategy"] = "evolutionary"
    strategy_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    cost_model: Union[str, "CostModel", None] = "mlp-transfer"
    seed: Optional[int] = 0
    batch_size: Optional[int] = None
    retime_top: Optional[int] = None
    retime_rounds: int = DEFAULT_RETIME_ROUNDS
    target: Optional["Target"] = None
    similar_tasks: bool = False
    shipped: bool = True

    def __post_init__(self) -> None:
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.retime_top is not None and self.retime_top < 0:
            raise ValueError(f"retime_top must be >= 0, got {self.retime_top}")
        if self.strategy_options and not isinstance(self.strategy, str):
            raise ValueError("strategy_options apply to a strategy given by name, not to a strategy object")
        if self.retime_rounds < 1:
            raise ValueError(f"retime_rounds must be >= 1, got {self.retime_rounds}")

    @classmethod
    def from_keywords(cls, options: Mapping[str, Any], who: str, base: Optional["TuningOptions"] = None) -> "TuningOptions":
        """``base`` (default: the defaults) with ``options`` replaced; an unknown name is one
        TypeError naming it and the options there are."""
        names = [f.name for f in dataclasses.fields(cls)]
        for key in options:
            if key not in names:
                raise TypeError(f"{who}: unknown option {key!r}; the options are {', '.join(names)}")
        return dataclasses.replace(base or cls(), **options)

    def batch_for(self, trials: int, tasks: int) -> int:
        """The round size of a run of ``trials`` over ``tasks`` tasks."""
        return self.batch_size or default_batch_size(trials, tasks)

    def retime_for(self, tasks: int) -> int:
        """Candidates re-timed per weighty task in a run over ``tasks`` tasks."""
        return default_retime_top(tasks) if self.retime_top is None else self.retime_top

    def resolved_space(self) -> Callable:
        """The design space: the given one, or the default space for the target."""
        if self.space is not None:
            return self.space
        from .. import space as space_mod

        return space_mod.default(target=self.target)


__all__ = [
    "TuningOptions",
    "default_batch_size",
    "default_retime_top",
    "DEFAULT_RETIME_ROUNDS",
    "RETIME_TOP_ONE_TASK",
    "RETIME_TOP_PER_TASK",
]
