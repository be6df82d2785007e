"""Schedules: primitives that transform a loop nest, and their instruction log."""

import warnings as _warnings
from typing import Any as _Any

from .instructions import BlockRV, Instruction, InstructionLog, LoopRV  # noqa: F401
from .schedule import Schedule  # noqa: F401


def __getattr__(name: str) -> _Any:
    # ScheduleTrace was renamed (issue #52: "trace" is the handlers' record of sample
    # sites); the old name resolves, with a warning, for one release.
    if name == "ScheduleTrace":
        _warnings.warn(
            "probsched.schedule.ScheduleTrace is deprecated; use probsched.schedule.InstructionLog",
            DeprecationWarning,
            stacklevel=2,
        )
        return InstructionLog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
