"""Measurement: compile, check and time candidates in worker processes.

- :mod:`.timer` — the timing protocol (:func:`time_callable`);
- :mod:`.result` — :class:`MeasureResult` and the error kinds;
- :mod:`.reference` — inputs and expected outputs shared by the workers;
- :mod:`.worker` — the worker process, and :mod:`.process` — how it is started;
- :mod:`.local` — :class:`LocalMeasurer`, the pool of local workers;
- :mod:`.hostlock` — one kernel timed at a time per machine, across measurers;
- :mod:`.dask` — :class:`DaskMeasurer`, measuring on a Dask cluster (the optional
  ``probsched[dask]`` extra), and :mod:`.remote` — what its workers run;
- :mod:`.simulate` — SIMULATED measuring for scale experiments;
- :mod:`.protocol` — :class:`Measurer`, what the tuner needs of either;
- :mod:`.stats` — :class:`MeasureStats`, where its time and memory went.
"""

from .dask import DaskBatch, DaskMeasurer  # noqa: F401
from .local import DEFAULT_MAX_COMPILES, LocalMeasurer, MeasureError  # noqa: F401
from .protocol import Measurer  # noqa: F401
from .result import (  # noqa: F401
    COMPILE,
    CRASH,
    ERROR_KINDS,
    LOST,
    RUNTIME,
    TIMEOUT,
    WRONG_RESULT,
    MeasureResult,
)
from .stats import MeasureStats  # noqa: F401
from .timer import Timing, time_callable  # noqa: F401

__all__ = [
    "LocalMeasurer",
    "DaskMeasurer",
    "DaskBatch",
    "Measurer",
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
    "LOST",
    "Timing",
    "time_callable",
]
