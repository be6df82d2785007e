"""``Measurer``: every method the tuning loop and the re-timing may call on a measurer.

:class:`~probsched.measure.LocalMeasurer` (worker processes on this machine) and
:class:`~probsched.measure.DaskMeasurer` (a Dask cluster) both are one; so is any object
with these methods, e.g. a test's stand-in. A measurer that can take a batch without
waiting for its results is also a :class:`PipelinedMeasurer` (``submit``): the tuning loop
then proposes the next round while the current one is measured
(:func:`probsched.tuning.loop.run_rounds`); a plain :class:`Measurer` is called round by
round.

>>> from probsched.measure import DaskMeasurer, LocalMeasurer
>>> issubclass(LocalMeasurer, Measurer), issubclass(DaskMeasurer, Measurer), issubclass(dict, Measurer)
(True, True, False)
>>> issubclass(DaskMeasurer, PipelinedMeasurer), issubclass(LocalMeasurer, PipelinedMeasurer)
(True, False)
"""

from __future__ import annotations

import inspect
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
        """Measure each candidate; ``on_result(index, result)`` in the caller's thread as each
        ends. A measurer that stops timing clearly slow candidates early takes
        ``best_seconds`` too (the caller's best of the workload, timed in full; the tuner
        passes it where the keyword exists, :func:`takes_keyword`)."""

    def measure_together(
        self, workload: Union[Workload, PrimFunc], schedules: Sequence[Union[Schedule, InstructionLog]], rounds: int = 15
    ) -> List[MeasureResult]:
        """Measure the candidates together, interleaved, so that their times compare. A
        measurer that can time a network task's weights cold takes ``cold_weights=True``
        too (:mod:`.cold_weights`; the tuner asks for it only where the keyword exists)."""

    def settle(self) -> None:
        """Return once nothing the measurer started runs beside the caller's own timing."""

    def close(self) -> None:
        """Release the workers."""


@runtime_checkable
class MeasureHandle(Protocol):
    """A batch sent with :meth:`PipelinedMeasurer.submit`, being measured."""

    def wait(self, on_result: Optional[Callable[[int, MeasureResult], None]] = None) -> List[MeasureResult]:
        """Block until every candidate has its result (``on_result(index, result)`` as each
        arrives, in the caller's thread); the results in input order."""


@runtime_checkable
class PipelinedMeasurer(Measurer, Protocol):
    """A :class:`Measurer` that also takes a batch without waiting for it."""

    def submit(self, workload: Union[Workload, PrimFunc], schedules: Sequence[Union[Schedule, InstructionLog]]) -> MeasureHandle:
        """Send the candidates to be measured; returns at once with their handle."""


def instruction_log_json(candidate: Union[Schedule, InstructionLog, str], func: PrimFunc, index: int) -> str:
    """The instruction log a measurer sends for ``candidate`` (a Schedule of ``func``, an
    InstructionLog, or its JSON); one clear error for anything else.

    >>> import probsched as ps
    >>> f = ps.workloads.small("GMM").func
    >>> instruction_log_json(ps.Schedule(f), f, 0)
    '{"format":1,"instructions":[]}'
    >>> instruction_log_json(3, f, 2)
    Traceback (most recent call last):
    ...
    TypeError: measure: candidate 2 is a int, expected a Schedule or InstructionLog
    """
    if isinstance(candidate, Schedule):
        if candidate.func is not func and candidate.func != func:
            raise ValueError(f"measure: schedule {index} schedules another function than the workload's")
        return candidate.instructions.to_json()
    if isinstance(candidate, InstructionLog):
        return candidate.to_json()
    if isinstance(candidate, str):
        return candidate
    raise TypeError(f"measure: candidate {index} is a {type(candidate).__name__}, expected a Schedule or InstructionLog")


def takes_keyword(method: Callable, name: str) -> bool:
    """Whether ``method`` (a measurer's, which may be a user's without the optional keywords
    the protocol names) takes the keyword argument ``name``.

    >>> from probsched.measure import LocalMeasurer
    >>> takes_keyword(LocalMeasurer.measure, "best_seconds"), takes_keyword(lambda w, s: None, "best_seconds")
    (True, False)
    >>> takes_keyword(lambda w, s, **options: None, "cold_weights")
    True
    """
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
