"""Tuning: searching schedules for operators and networks, and compiling a network from them.

- :mod:`.options` — :class:`TuningOptions`: how a run searches, the defaults of every entry
  point in one place;
- :mod:`.loop` — :class:`TuningLoop`: the one orchestration loop (rounds of proposals,
  measurements, learning over a network's tasks; an operator is a network of one task);
- :mod:`.task_search` — :class:`TaskSearch`: one task's search state;
- :mod:`.task_scheduler` — which task gets the next round (:data:`SCHEDULERS`);
- :mod:`.warm_start` — what the cost model learns before the first round;
- :mod:`.resources` — the database and measurer a run opens and closes;
- :mod:`.selection` — naming the best schedule (re-timing the fastest together);
- :mod:`.tune_operator` — ``ps.tune``; :mod:`.tune_network` — ``ps.tune_model``;
- :mod:`.compile_network` — ``ps.compile``: a schedule per task, built and checked, handed
  to the runtime (:mod:`probsched.runtime`).

Data flows one way: the front end (:mod:`probsched.graph`) gives tasks; this room tunes
them with the search, measure, database and cost-model rooms and hands kernels to the
runtime, which needs nothing from here.
"""

from .compile_network import DEFAULT_CANDIDATES, TaskChoice, compile, predicted_schedules
from .loop import LoopTask, TrialEvent, TuningLoop, run_rounds
from .options import TuningOptions, default_batch_size, default_retime_top
from .resources import TuningResources
from .selection import BestSchedule, best_schedule, retime
from .task_scheduler import SCHEDULERS, GradientBased, RoundRobin, TaskState
from .task_search import TaskSearch, Trial
from .tune_network import ModelTrial, ModelTuneResult, TaskRow, tune_model
from .tune_operator import TuneResult, tune

__all__ = [
    "tune",
    "tune_model",
    "compile",
    "TuneResult",
    "ModelTuneResult",
    "ModelTrial",
    "TaskRow",
    "TuningOptions",
    "TuningLoop",
    "LoopTask",
    "TrialEvent",
    "TuningResources",
    "TaskSearch",
    "Trial",
    "TaskState",
    "GradientBased",
    "RoundRobin",
    "SCHEDULERS",
    "BestSchedule",
    "best_schedule",
    "retime",
    "run_rounds",
    "default_batch_size",
    "default_retime_top",
    "predicted_schedules",
    "TaskChoice",
    "DEFAULT_CANDIDATES",
]
