"""``MeasureResult``: what measuring one candidate produced (times, or why it failed).

A result keeps every repeat's mean (seconds per call); the median ranks candidates. A
failed result has no times, a median of ``inf`` and an ``error_kind`` among
:data:`ERROR_KINDS`:

- ``"compile"``: code generation, replaying the instruction log or numba's compilation raised;
- ``"runtime"``: the kernel raised while running;
- ``"timeout"``: compiling or running took longer than its timeout (the worker was killed);
- ``"wrong_result"``: the outputs differ from the reference (a compiler bug: logged loudly);
- ``"crash"``: the worker process died (segfault, out of memory, ``os._exit``);
- ``"lost"``: the machine measuring it went away (a Dask worker or host lost mid-measurement,
  more often than the cluster retries: :class:`~probsched.measure.DaskMeasurer`).

``target`` is the JSON of the :class:`~probsched.target.Target` of the machine that
measured it (None: not said, i.e. this machine); a database record of the result is stored
under that target.

>>> r = MeasureResult(run_seconds=(2e-3, 1e-3, 3e-3), compile_seconds=0.5)
>>> r.ok, r.median
(True, 0.002)
>>> bad = MeasureResult.failure(TIMEOUT, "run exceeded 10 s", compile_seconds=0.5)
>>> bad.ok, bad.median, bad.run_seconds
(False, inf, ())
>>> MeasureResult.from_json(bad.to_json()) == bad
True

A result whose timing was stopped early (``stopped_early``: after fewer repeats than asked,
because even its fastest repeat was slower than twice the best median measured so far; see
:mod:`.timer`) is ``ok``, and its median ranks it: it cannot be the fastest of its run,
since a fully timed candidate was at least twice as fast, and the tuner never names it best
without timing it in full (:mod:`probsched.tuning.selection`).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Optional, Tuple

COMPILE = "compile"
RUNTIME = "runtime"
TIMEOUT = "timeout"
WRONG_RESULT = "wrong_result"
CRASH = "crash"
LOST = "lost"
ERROR_KINDS = (COMPILE, RUNTIME, TIMEOUT, WRONG_RESULT, CRASH, LOST)


@dataclass(frozen=True)
class MeasureResult:
    """Run seconds (each repeat's mean), compile seconds, the error if it failed, and
    where it was measured."""

    run_seconds: Tuple[float, ...] = ()
    compile_seconds: float = 0.0
    error_kind: Optional[str] = None
    error_message: str = ""
    target: Optional[str] = None
    stopped_early: bool = False  # timed with fewer repeats than asked: clearly slower than the best

    def __post_init__(self) -> None:
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"MeasureResult: error_kind {self.error_kind!r} is not one of {ERROR_KINDS}")
        object.__setattr__(self, "run_seconds", tuple(float(s) for s in self.run_seconds))
        object.__setattr__(self, "compile_seconds", float(self.compile_seconds))
        object.__setattr__(self, "stopped_early", bool(self.stopped_early))

    @staticmethod
    def failure(kind: str, message: str, compile_seconds: float = 0.0, target: Optional[str] = None) -> "MeasureResult":
        """A failed result of ``kind`` (one of :data:`ERROR_KINDS`)."""
        return MeasureResult((), compile_seconds, kind, message, target)

    @property
    def ok(self) -> bool:
        """Whether the candidate compiled, ran, matched the reference and was timed."""
        return self.error_kind is None and bool(self.run_seconds)

    @property
    def median(self) -> float:
        """Median of the repeat means in seconds (``inf`` when failed): what ranks candidates."""
        return statistics.median(self.run_seconds) if self.ok else math.inf

    def to_json(self) -> str:
        """JSON text (see :meth:`from_json`)."""
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "MeasureResult":
        """Rebuild a result from :meth:`to_json` text."""
        d = json.loads(text)
        return MeasureResult(
            tuple(d["run_seconds"]),
            d["compile_seconds"],
            d["error_kind"],
            d["error_message"],
            d.get("target"),
            d.get("stopped_early", False),
        )
