"""Schedules: primitives that transform a loop nest, and their instruction log."""

from .instruction_trace import BlockRV, Instruction, LoopRV, ScheduleTrace  # noqa: F401
from .schedule import Schedule  # noqa: F401
