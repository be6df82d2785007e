"""Deprecated: the instruction log moved to :mod:`probsched.schedule.instructions`.

``ScheduleTrace`` is now :class:`~probsched.schedule.instructions.InstructionLog` ("trace"
is kept for the handlers' record of sample sites). Every name still resolves here, with a
``DeprecationWarning``, for one release.

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     from probsched.schedule.instruction_trace import ScheduleTrace
>>> ScheduleTrace.__name__, caught[0].category.__name__
('InstructionLog', 'DeprecationWarning')
"""

from __future__ import annotations

import warnings
from typing import Any

from . import instructions as _instructions

_RENAMED = {"ScheduleTrace": "InstructionLog"}
_MOVED = ("BlockRV", "LoopRV", "Instruction", "InstructionLog")


def __getattr__(name: str) -> Any:
    # Names are resolved lazily (nothing is bound at module level) so that every use of
    # this module warns, including ``from ... import`` of the names that did not change.
    if name in _RENAMED or name in _MOVED:
        new = _RENAMED.get(name, name)
        warnings.warn(
            f"probsched.schedule.instruction_trace.{name} is deprecated; "
            f"use probsched.schedule.instructions.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_instructions, new)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
