"""Measurement: compile, check and time candidates in worker processes.

- :mod:`.timer` — the timing protocol (:func:`time_callable`);
- :mod:`.result` — :class:`MeasureResult` and the error kinds;
- :mod:`.reference` — inputs and expected outputs shared by the workers;
- :mod:`.worker` — the worker process;
- :mod:`.local` — :class:`LocalMeasurer`, the pool of local workers;
- :mod:`.stats` — :class:`MeasureStats`, where its time and memory went.
"""

from .local import DEFAULT_MAX_COMPILES, LocalMeasurer, MeasureError  # noqa: F401
from .result import (  # noqa: F401
    COMPILE,
    CRASH,
    ERROR_KINDS,
    RUNTIME,
    TIMEOUT,
    WRONG_RESULT,
    MeasureResult,
)
from .stats import MeasureStats  # noqa: F401
from .timer import Timing, time_callable  # noqa: F401

__all__ = [
    "LocalMeasurer",
    "MeasureResult",
    "MeasureError",
    "MeasureStats",
    "DEFAULT_MAX_COMPILES",
    "ERROR_KINDS",
    "COMPILE",
    "RUNTIME",
    "TIMEOUT",
    "WRONG_RESULT",
    "CRASH",
    "Timing",
    "time_callable",
]
