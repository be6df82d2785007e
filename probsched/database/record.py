"""``TuningRecord``: one measured candidate as the database stores it.

A record names its workload and candidate by structural hash (of the unscheduled and of
the scheduled function), keeps the decisions (a handlers ``Trace`` as JSON, when the
strategy has one) and the instruction log (``InstructionLog`` JSON, enough to rebuild the
schedule without the program that sampled it), the measurement, and where it was measured
(the :class:`~probsched.target.Target` as JSON), with which space and strategy, and when.

>>> import probsched as ps
>>> from probsched.measure import MeasureResult
>>> w = ps.workloads.small("GMM")
>>> sch = ps.Schedule(w.func)
>>> _ = sch.split(sch.get_loops(sch.get_block("Z"))[1], [2, 2])
>>> rec = TuningRecord.from_result(w, sch, MeasureResult((3e-6, 2e-6, 4e-6), 0.4), space="default")
>>> rec.ok, rec.median, rec.workload_hash == w.func.structural_hash()
(True, 3e-06, True)
>>> rec.schedule(w.func).mod == sch.mod
True
>>> TuningRecord.from_json(rec.to_json()) == rec
True
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Optional, Tuple, Union

from ..ir.serialize import structural_hash
from ..ir.stmt import PrimFunc
from ..measure.result import ERROR_KINDS, MeasureResult
from ..schedule import InstructionLog, Schedule
from ..target import Target
from ..workloads.workload import as_workload

if TYPE_CHECKING:
    from handlers.trace_struct import Trace

    from ..workloads import Workload

WorkloadRef = Union["Workload", PrimFunc, str]
"""What the database accepts for a workload: a Workload, its PrimFunc, or the structural hash."""


def workload_key(workload: WorkloadRef) -> str:
    """The structural hash of a Workload's or PrimFunc's function (a str passes through)."""
    if isinstance(workload, str):
        return workload
    return structural_hash(as_workload(workload).func)


def target_json(target: Union[None, str, Target]) -> str:
    """Canonical JSON of a target: ``None`` is the host, a str is JSON or ``"cpu ..."``."""
    if target is None:
        return Target.host().to_json()
    if isinstance(target, Target):
        return target.to_json()
    if isinstance(target, str):
        if target.lstrip().startswith("{"):
            return Target.from_json(target).to_json()
        return Target.from_str(target).to_json()
    raise TypeError(f"target {target!r}: expected None, a Target, its JSON or a string like 'cpu'")


@dataclass(frozen=True)
class TuningRecord:
    """A measured candidate (see the module docstring)."""

    workload_hash: str
    candidate_hash: str
    decisions: Optional[str]
    instructions: str
    run_seconds: Tuple[float, ...] = ()
    compile_seconds: float = 0.0
    error_kind: Optional[str] = None
    error_message: str = ""
    target: str = field(default_factory=lambda: Target.host().to_json())
    space: str = ""
    strategy: str = ""
    timestamp: float = field(default_factory=time.time)
    stopped_early: bool = False  # timed with fewer repeats than asked (MeasureResult.stopped_early)

    def __post_init__(self) -> None:
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"TuningRecord: error_kind {self.error_kind!r} is not one of {ERROR_KINDS}")
        object.__setattr__(self, "run_seconds", tuple(float(s) for s in self.run_seconds))
        object.__setattr__(self, "compile_seconds", float(self.compile_seconds))
        object.__setattr__(self, "timestamp", float(self.timestamp))
        object.__setattr__(self, "stopped_early", bool(self.stopped_early))

    @staticmethod
    def from_result(
        workload_hash: WorkloadRef,
        schedule: Schedule,
        result: MeasureResult,
        decisions: Union[None, str, "Trace"] = None,
        space: str = "",
        strategy: str = "",
        target: Union[None, str, Target] = None,
    ) -> "TuningRecord":
        """A record of ``result``, measured for ``schedule`` (a :class:`~probsched.Schedule`).

        ``workload_hash`` may also be the Workload or PrimFunc; ``decisions`` a handlers
        ``Trace`` (or its JSON); ``target`` defaults to where the result says it was
        measured (``result.target``), else the host.
        """
        if not isinstance(schedule, Schedule):
            raise TypeError(
                f"TuningRecord.from_result: expected a Schedule, got {type(schedule).__name__} "
                "(replay an InstructionLog onto ps.Schedule(func) first: the record needs the scheduled function)"
            )
        if decisions is not None and not isinstance(decisions, str):
            decisions = decisions.to_json()
        return TuningRecord(
            workload_key(workload_hash),
            structural_hash(schedule.mod),
            decisions,
            schedule.instructions.to_json(),
            result.run_seconds,
            result.compile_seconds,
            result.error_kind,
            result.error_message,
            target_json(target if target is not None else result.target),
            space,
            strategy,
            stopped_early=result.stopped_early,
        )

    @property
    def ok(self) -> bool:
        """Whether the candidate was measured successfully."""
        return self.result.ok

    @property
    def median(self) -> float:
        """Median of the repeat means in seconds; ``inf`` when failed."""
        return self.result.median

    @property
    def result(self) -> MeasureResult:
        """The measurement as a :class:`~probsched.measure.MeasureResult`."""
        return MeasureResult(self.run_seconds, self.compile_seconds, self.error_kind, self.error_message, stopped_early=self.stopped_early)

    def decision_trace(self) -> Optional["Trace"]:
        """The handlers ``Trace`` of the decisions that made the candidate, or None (none
        kept, or written by a version that reads no more)."""
        if not self.decisions:
            return None
        from handlers.trace_struct import Trace

        try:
            return Trace.from_json(self.decisions)
        except Exception:  # noqa: BLE001 - written by another version
            return None

    def instruction_log(self) -> InstructionLog:
        """The instruction log, parsed from the stored JSON (the ``instructions`` field)."""
        return InstructionLog.from_json(self.instructions)

    def trace(self) -> InstructionLog:
        """Deprecated name of :meth:`instruction_log` (``decisions`` holds the handlers ``Trace``)."""
        warnings.warn("TuningRecord.trace() is deprecated; use TuningRecord.instruction_log()", DeprecationWarning, stacklevel=2)
        return self.instruction_log()

    def schedule(self, func: PrimFunc) -> Schedule:
        """The candidate rebuilt: the instruction log replayed onto ``Schedule(func)``."""
        return self.instruction_log().apply(Schedule(func))

    def to_dict(self) -> dict:
        """JSON-ready data (``run_seconds`` as a list)."""
        d = asdict(self)
        d["run_seconds"] = list(self.run_seconds)
        if not self.stopped_early:  # as records were before the field: their keys stay the same
            del d["stopped_early"]
        return d

    def to_json(self) -> str:
        """Canonical JSON text (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_dict(d: dict) -> "TuningRecord":
        """Inverse of :meth:`to_dict` (unknown keys are an error)."""
        return TuningRecord(**{**d, "run_seconds": tuple(d.get("run_seconds", ()))})

    @staticmethod
    def from_json(text: str) -> "TuningRecord":
        """Inverse of :meth:`to_json`."""
        return TuningRecord.from_dict(json.loads(text))

    @property
    def key(self) -> str:
        """SHA-256 of the canonical JSON: equal records have equal keys (import is idempotent)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()
