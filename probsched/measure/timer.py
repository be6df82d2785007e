"""The timing protocol: warm-up, then ``repeat`` means of ``number`` calls each.

``number`` grows until one repeat lasts at least ``min_repeat_ms`` (so short kernels are
timed over many calls and the timer's resolution does not matter); each repeat's mean is
kept and the median is what ranks. Optionally a cache-flushing buffer is touched before each
repeat so that every repeat starts cold.

>>> import numpy as np
>>> t = time_callable(lambda: np.ones(1000).sum(), repeat=3, min_repeat_ms=1)
>>> len(t.means) == 3 and t.median > 0
True
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, List

import numpy as np

_FLUSH = None


def _flush_caches() -> None:
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = np.ones(64 << 20 >> 3)  # 64 MiB: larger than L3
    _FLUSH += 1.0


@dataclass(frozen=True)
class Timing:
    """Per-repeat mean seconds of one call, and how many calls each repeat made."""

    means: List[float]
    number: int

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
) -> Timing:
    """Time ``fn()`` per the protocol above (``number=0``: chosen from ``min_repeat_ms``)."""
    fn()  # warm-up: first-call costs (page faults, thread start) never count
    if number <= 0:
        number = 1
        while True:
            t = time.perf_counter()
            for _ in range(number):
                fn()
            dt = time.perf_counter() - t
            if dt * 1000.0 >= min_repeat_ms or number >= 1 << 20:
                break
            number = max(number * 2, int(number * min_repeat_ms / max(dt * 1000.0, 1e-3) * 1.1))
    means = []
    for _ in range(repeat):
        if flush_cache:
            _flush_caches()
        t = time.perf_counter()
        for _ in range(number):
            fn()
        means.append((time.perf_counter() - t) / number)
    return Timing(means, number)
