"""Tuning throughput (issue #53): the cuts in compile, check and timing keep what is measured right."""

from __future__ import annotations

import re

import numpy as np

import probsched as ps
from handlers import seed, trace
from probsched.codegen.emit import emit_module
from probsched.lowering import lower


def _scheduled(workload: ps.workloads.Workload, rng_seed: int) -> ps.Schedule:
    sch = ps.Schedule(workload.func)
    trace(seed(ps.space.default(), rng_seed)).get_trace(sch)
    return sch


def test_no_unused_iterator_assignments():
    # DEP's compacted local tiles are indexed by the inner loops alone: the block iterators
    # bound by // and % were assigned in every copy and never read (numba compiled them all)
    w = ps.workloads.small("DEP")
    sch = _scheduled(w, 2)
    source = emit_module(lower(sch.mod)).source
    lines = source.splitlines()
    assigned = [(i, m.group(1)) for i, text in enumerate(lines) if (m := re.match(r"\s*(v_\w+) = ", text))]
    assert assigned, "the example no longer assigns an iterator: pick another seed"
    for i, name in assigned:
        assert any(re.search(rf"\b{name}\b", later) for later in lines[i + 1 :]), f"{name} assigned, never read"
    inputs = w.random_inputs(np.random.default_rng(0))
    w.check(ps.build(sch).run(*inputs), w.reference(*inputs))
