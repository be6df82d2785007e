"""The timing protocol: warm-up, then ``repeat`` means of ``number`` calls each.

``number`` grows until one repeat lasts at least ``min_repeat_ms`` (so short kernels are
timed over many calls and the timer's resolution does not matter); each repeat's mean is
kept and the median is what ranks. Optionally a cache-flushing buffer is touched before each
repeat so that every repeat starts cold. A callable with a ``before`` method has it run
ahead of each call, untimed (:mod:`.cold_weights` flushes a kernel's weights there).

>>> import numpy as np
>>> t = time_callable(lambda: np.ones(1000).sum(), repeat=3, min_repeat_ms=1)
>>> len(t.means) == 3 and t.median > 0
True

Two options make the protocol cheaper where many candidates are timed (the measurement
workers use both, :mod:`.worker`):

- ``reuse_calibration``: the calibration's last pass, ``number`` calls that lasted at least
  ``min_repeat_ms`` after shorter passes warmed the kernel up, is the first repeat: one
  repeat's time saved per candidate (not with ``flush_cache``: it did not start cold);
- ``stop_above`` (seconds): after ``stop_after`` repeats, a kernel whose *fastest* repeat so
  far is slower than that stops being timed: ``Timing.stopped_early`` says its means are
  fewer than ``repeat``. The tuner passes twice the best median measured so far, so a
  stopped candidate is clearly slower than one already timed in full and can never rank
  first (:mod:`.local` says how the record is kept honest).

>>> slow = time_callable(lambda: np.ones(100000).sum(), repeat=5, min_repeat_ms=1, stop_above=1e-9)
>>> len(slow.means), slow.stopped_early
(2, True)

Implementations compared with each other are timed *interleaved*
(:func:`time_interleaved`): on a small shared virtual machine the speed of a two-thread
kernel drifts over seconds, by up to a factor of two with nothing else running in the
guest, so timing one implementation after the other compares the drift, not the
implementations.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

_FLUSH = None


def _flush_caches() -> None:
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = np.ones(64 << 20 >> 3)  # 64 MiB: larger than L3
    _FLUSH += 1.0


@dataclass(frozen=True)
class Timing:
    """Per-repeat mean seconds of one call, how many calls each repeat made, and whether
    timing stopped before ``repeat`` repeats (``stop_above``)."""

    means: List[float]
    number: int
    stopped_early: bool = False

    @property
    def median(self) -> float:
        """Median of the repeat means (seconds per call)."""
        return statistics.median(self.means)


def time_callable(
    fn: Callable[[], object],
    *,
    repeat: int = 5,
    number: int = 0,
    min_repeat_ms: float = 100.0,
    flush_cache: bool = False,
    reuse_calibration: bool = False,
    stop_above: Optional[float] = None,
    stop_after: int = 2,
) -> Timing:
    """Time ``fn()`` per the protocol above (``number=0``: chosen from ``min_repeat_ms``;
    ``reuse_calibration``, ``stop_above`` and ``stop_after``: see the module doc)."""
    fn()  # warm-up: first-call costs (page faults, thread start) never count
    means: List[float] = []
    if number <= 0:
        number, last_mean, passes = _calibrate(fn, min_repeat_ms)
        # a first pass that was already long enough followed only the warm-up call: not a repeat
        if reuse_calibration and not flush_cache and passes >= 2:
            means.append(last_mean)
    while len(means) < repeat:
        if stop_above is not None and len(means) >= max(1, stop_after) and min(means) > stop_above:
            return Timing(means, number, stopped_early=True)
        means.append(_repeat_mean(fn, number, flush_cache))
    return Timing(means, number)


def time_interleaved(
    fns: Dict[str, Callable[[], object]],
    *,
    rounds: int = 7,
    min_repeat_ms: float = 30.0,
    settle_s: float = 0.2,
    warm_up: float = 1.0,
) -> Dict[str, Timing]:
    """Time several implementations of one computation in ``rounds`` rounds, each round
    one repeat of every implementation (the order rotating, so none always runs first);
    each implementation's median is then taken over the same stretch of time as the others'.

    Before each repeat: ``settle_s`` of sleep, then ``warm_up`` of a repeat untimed (at
    least one call; 1.0, the default, is a whole repeat). Both are for timing beside other
    libraries (our best GMM kernel, numpy and jax.jit in one process): right after numpy's
    calls a two-thread kernel runs slower for a moment (OpenBLAS's threads keep spinning
    for work), and a repeat started cold after a pause runs slower too (threads asleep);
    without both, our kernel's interleaved median came out far above its time alone.
    Kernels of ours alone, without pauses (the tuner's re-timing), only need their data
    back in cache and their threads awake: a tenth of a repeat does that (``python
    benchmarks/bench_retime.py protocols`` compares protocols).

    >>> t = time_interleaved({"sum": lambda: np.ones(1000).sum(), "max": lambda: np.ones(1000).max()},
    ...                      rounds=3, min_repeat_ms=1)
    >>> sorted(t), len(t["sum"].means)
    (['max', 'sum'], 3)
    """
    names = list(fns)
    numbers = {}
    for n in names:
        fns[n]()  # warm-up
        numbers[n] = _calls_per_repeat(fns[n], min_repeat_ms)
    means: Dict[str, List[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            time.sleep(settle_s)
            _repeat_mean(fns[n], max(1, int(numbers[n] * warm_up)), False)  # untimed: threads awake, caches warm
            means[n].append(_repeat_mean(fns[n], numbers[n], False))
    return {n: Timing(means[n], numbers[n]) for n in names}


def _calls_per_repeat(fn: Callable[[], object], min_repeat_ms: float) -> int:
    """Calls per repeat so that one repeat lasts at least ``min_repeat_ms``."""
    return _calibrate(fn, min_repeat_ms)[0]


def _timed_calls(fn: Callable[[], object], number: int) -> Tuple[float, float]:
    """(seconds ``number`` calls of ``fn`` take, seconds they took with what ran between
    them). A callable with a ``before`` method (:class:`~.cold_weights.ColdWeightsCall`) has
    it run ahead of each call, outside the timed span: each call is then timed alone."""
    before = getattr(fn, "before", None)
    start = time.perf_counter()
    if before is None:
        for _ in range(number):
            fn()
        wall = time.perf_counter() - start
        return wall, wall
    total = 0.0
    for _ in range(number):
        before()
        t = time.perf_counter()
        fn()
        total += time.perf_counter() - t
    return total, time.perf_counter() - start


def _calibrate(fn: Callable[[], object], min_repeat_ms: float) -> Tuple[int, float, int]:
    """(calls per repeat so that one repeat lasts at least ``min_repeat_ms``, the mean
    seconds per call of the last pass, which made that many calls, and the passes made).
    A repeat's length counts what runs before each call: flushing an embedding table of
    100 MB takes milliseconds before a gather of microseconds, and a thousand of them per
    repeat would take seconds."""
    number, passes = 1, 0
    while True:
        dt, wall = _timed_calls(fn, number)
        passes += 1
        if wall * 1000.0 >= min_repeat_ms or number >= 1 << 20:
            return number, dt / number, passes
        number = max(number * 2, int(number * min_repeat_ms / max(wall * 1000.0, 1e-3) * 1.1))


def _repeat_mean(fn: Callable[[], object], number: int, flush_cache: bool) -> float:
    if flush_cache:
        _flush_caches()
    return _timed_calls(fn, number)[0] / number
