"""Random schedules of small suite workloads compile and agree with the numpy reference.

The schedules come from :func:`probsched.testing.random_schedule` (split, fuse, reorder,
parallel, vectorize, unroll, compute_at, cache_read/cache_write, rfactor, ...), so the
generator sees the IR that schedule primitives really produce, with and without the
compaction of local buffers.
"""

from __future__ import annotations

import numpy as np
import pytest

import probsched as ps
import probsched.workloads as wl
from probsched.lowering.compact import compact_local_buffers
from probsched.testing import numpy_chooser, random_schedule

CASES = [(name, seed) for name in ("GMM", "C2D", "SFM", "NRM", "DEP", "CBR") for seed in (0, 1)]


@pytest.mark.parametrize("name,seed", CASES)
def test_random_schedule_builds_and_matches_reference(name, seed):
    w = wl.small(name)
    sch = ps.Schedule(w.func)
    log = random_schedule(sch, numpy_chooser(np.random.default_rng(seed)), steps=8)
    func = compact_local_buffers(sch.mod) if seed % 2 else sch.mod
    inputs = w.random_inputs(seed)
    kern = ps.build(func)
    try:
        w.check(kern.run(*inputs), w.reference(*inputs))
    except AssertionError as exc:  # pragma: no cover - the message is what matters
        raise AssertionError(f"{exc}\nschedule: {log}\n{func}\n{kern.source}") from None
