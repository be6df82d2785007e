"""``Measurer``: what ``ps.tune`` and the re-timing need of a measurer.

:class:`~probsched.measure.LocalMeasurer` (worker processes on this machine) and
:class:`~probsched.measure.DaskMeasurer` (a Dask cluster) both are one; so is any object
with these methods, e.g. a test's stand-in.

>>> from probsched.measure import DaskMeasurer, LocalMeasurer
>>> issubclass(LocalMeasurer, Measurer), issubclass(DaskMeasurer, Measurer), issubclass(dict, Measurer)
(True, True, False)
"""

from __future__ import annotations

from typing import Callable, List, Optional, Protocol, Sequence, Union, runtime_checkable

from ..ir.stmt import PrimFunc
from ..schedule import InstructionLog, Schedule
from ..workloads import Workload
from .result import MeasureResult


@runtime_checkable
class Measurer(Protocol):
    """Compile, check and time candidates of a workload; see :class:`~probsched.measure.LocalMeasurer`."""

    def measure(
        self,
        workload: Union[Workload, PrimFunc],
        schedules: Sequence[Union[Schedule, InstructionLog]],
        on_result: Optional[Callable[[int, MeasureResult], None]] = None,
    ) -> List[MeasureResult]:
        """Measure each candidate; ``on_result(index, result)`` in the caller's thread as each ends."""

    def measure_together(
        self, workload: Union[Workload, PrimFunc], schedules: Sequence[Union[Schedule, InstructionLog]], rounds: int = 15
    ) -> List[MeasureResult]:
        """Measure the candidates together, interleaved, so that their times compare."""

    def settle(self) -> None:
        """Return once nothing the measurer started runs beside the caller's own timing."""

    def close(self) -> None:
        """Release the workers."""
