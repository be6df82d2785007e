"""Measurement: compile, check and time candidates in worker processes.

- :mod:`.timer` — the timing protocol (:func:`time_callable`);
- :mod:`.result` — :class:`MeasureResult` and the error kinds;
- :mod:`.reference` — inputs and expected outputs shared by the workers;
- :mod:`.worker` — the worker process, and :mod:`.process` — how it is started;
- :mod:`.local` — :class:`LocalMeasurer`, the pool of local workers;
- :mod:`.hostlock` — one kernel timed at a time per machine, across measurers;
- :mod:`.cold_weights` — a network task timed with its weights flushed from the caches, as the network runs it;
- :mod:`.dask` — :class:`DaskMeasurer`, measuring on a Dask cluster (the optional
  ``probsched[dask]`` extra), and :mod:`.remote` — what its workers run;
- :mod:`.simulate` — SIMULATED measuring for scale experiments;
- :mod:`.protocol` — :class:`Measurer` (and :class:`PipelinedMeasurer`), every method
  the tuner may call on either;
- :mod:`.stats` — :class:`MeasureStats`, where its time and memory went.
"""

from typing import Union

from ..components import Registry
from .dask import DaskBatch, DaskMeasurer  # noqa: F401
from .local import DEFAULT_MAX_COMPILES, LocalMeasurer, MeasureError  # noqa: F401
from .protocol import MeasureHandle, Measurer, PipelinedMeasurer  # noqa: F401
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

#: Measurers by name: ``"local"`` (worker processes here; options as
#: :class:`LocalMeasurer`'s, e.g. ``workers=2``) and ``"dask"`` (a cluster; options as
#: :class:`DaskMeasurer`'s, the scheduler's address first).
MEASURERS: Registry[Measurer] = Registry("measurer", required=("measure", "measure_together", "settle", "close"))
MEASURERS.register("local", LocalMeasurer)
MEASURERS.register("dask", DaskMeasurer)


def get(measurer: Union[str, Measurer], **options) -> Measurer:
    """A measurer from a name of :data:`MEASURERS` (made with ``options``), or ``measurer``
    itself when it has the :class:`Measurer` methods.

    >>> get(3)
    Traceback (most recent call last):
    ...
    TypeError: a measurer needs a measure() method; got int
    """
    return MEASURERS.get(measurer, **options)


__all__ = [
    "MEASURERS",
    "get",
    "PipelinedMeasurer",
    "MeasureHandle",
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
