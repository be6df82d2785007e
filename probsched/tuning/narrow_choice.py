"""``ps.compile(..., precision="bf16", narrow="auto")``: store in bfloat16 between tasks what
makes *this* network faster, measured.

Which values a bf16 network stores in bfloat16 between its tasks
(:func:`~probsched.graph.precision.narrow_between_tasks`) moves its speed by several per
cent either way, and not the same way for every network nor for every state of the
machine: on AMD Zen 4, ResNet-50 ran 6% faster with every value in bfloat16 (``"all"``: half
the bytes of its float32 residual stream) than with only the values every reader rounds
anyway (``"exact"``); MobileNet-V2 ran 3-6% slower while memory was not the limit and 10-12%
faster while it was (another tenant's traffic: the same network took twice as long), its
depthwise tasks then bound by the bytes they move (``benchmarks/data/zen4_1207c.md``,
``zen4_1207d.md``). Neither the tasks' tuned times nor the
sum of the kernel calls timed one by one say which (MobileNet-V2's calls summed 7% *less*
with ``"all"``): only whole inferences do. So ``"auto"`` compiles both and times them
:func:`paired`: repeats of inferences of one and of the other, alternating, and the median
over the rounds of one's time over the other's, which the host's slower stretches move far
less than they move either median. ``"all"`` is kept when it is at least
:data:`MARGIN` faster (it rounds the residual stream once more per block: a choice for
speed, so it must pay) and only when its outputs depart from ``"exact"``'s by at most
:data:`ERROR_BUDGET` on the same inputs: one more bfloat16 rounding of the output's worth
(ResNet-50 2.2e-3, MobileNet-V2 1.9e-3; BERT-base 9.7e-3, where ``"all"`` took its error
against float32 on the benchmark's inputs from 9.7e-3 to 1.24e-2, above OpenVINO bf16's
1.08e-2, and so stays ``"exact"``).
The decision is kept on disk (:mod:`probsched.cache`, keyed by the two compiled networks),
so compiling the network again gives the same model.

>>> import time
>>> fast, slow = (lambda: time.sleep(0.001)), (lambda: time.sleep(0.002))
>>> ratio = paired(fast, slow, rounds=9, repeat_ms=5)
>>> 0.3 < ratio < 0.8
True
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import cache
from ..measure.timer import time_interleaved

log = logging.getLogger("probsched.compile")

#: ``"all"`` is kept only when its paired time is at most this share of ``"exact"``'s.
MARGIN = 0.99

#: ... and its outputs differ from ``"exact"``'s by at most this (relative, Frobenius):
#: bfloat16's unit roundoff, 2**-8, one more rounding of the outputs themselves.
ERROR_BUDGET = 2.0 ** -8

#: Rounds of paired timing (each a repeat of at least :data:`REPEAT_MS` of each network).
ROUNDS = 60
REPEAT_MS = 20.0


def paired(a: Callable[[], object], b: Callable[[], object], rounds: int = ROUNDS, repeat_ms: float = REPEAT_MS) -> float:
    """The median over rounds of ``a``'s mean time over ``b``'s (below 1: ``a`` is faster),
    each round a repeat of each after one untimed call (the other's data out of the caches,
    its threads awake), which runs first alternating
    (:func:`~probsched.measure.timer.time_interleaved`, without pauses: no other library's
    threads to let settle)."""
    t = time_interleaved({"a": a, "b": b}, rounds=rounds, min_repeat_ms=repeat_ms, settle_s=0.0, warm_up=0.0)
    return float(np.median([x / y for x, y in zip(t["a"].means, t["b"].means)]))


def example_inputs(model) -> List[np.ndarray]:
    """Inputs of ``model``'s types for timing it: standard normal floats (no denormals, no
    NaNs to slow a kernel down), zeros for integers (a valid index of any table)."""
    rng = np.random.default_rng(0)
    out = []
    for v in model.interface.inputs:
        spec = model.interface.types[v]
        dtype = np.dtype(spec.dtype) if spec.dtype != "bfloat16" else np.dtype(np.float32)
        if np.issubdtype(dtype, np.floating):
            out.append(rng.standard_normal(spec.shape).astype(dtype))
        else:
            out.append(np.zeros(spec.shape, dtype))
    return out


def departure(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """How far outputs ``a`` (arrays, or one array) are from ``b``: ``|a - b| / |b|`` over
    all their elements.

    >>> departure([np.zeros(2), np.array([3.0])], [np.array([0.0, 4.0]), np.zeros(1)])
    1.25
    """
    fa, fb = (np.concatenate([np.ravel(x) for x in ([v] if isinstance(v, np.ndarray) else v)]).astype(np.float64)
              for v in (a, b))
    return float(np.linalg.norm(fa - fb) / max(np.linalg.norm(fb), 1e-30))


def _decision_path(keys: Tuple[str, str]) -> str:
    # the rule's constants too: a decision made under another rule is made again
    digest = hashlib.sha256("|".join([*keys, repr(MARGIN), repr(ERROR_BUDGET)]).encode()).hexdigest()[:40]
    return os.path.join(cache.folder("narrow"), digest + ".json")


def choose(models: Dict[str, object], keys: Optional[Tuple[str, str]] = None) -> Tuple[str, Optional[float]]:
    """``"all"`` or ``"exact"`` for ``models`` (the same network compiled both ways), and the
    measured ratio of ``"all"``'s time to ``"exact"``'s (None when read from the disk, when
    the two store the same values, or when ``"all"``'s outputs are too far from
    ``"exact"``'s: nothing is timed then). ``keys``: the two compiled networks' cache keys,
    under which the decision is kept (None: not kept)."""
    exact, every = models["exact"], models["all"]
    if exact.interface.types == every.interface.types:
        return "exact", None  # nothing more is stored in bfloat16 with "all": one network
    path = _decision_path(keys) if keys and all(keys) else None
    if path and os.path.exists(path):
        try:
            with open(path) as fh:
                saved = json.load(fh)
            if saved.get("mode") in ("exact", "all"):
                return saved["mode"], None
        except (OSError, ValueError):
            pass  # a damaged decision is made again
    args = example_inputs(exact)
    bound = [m.bind(*args) for m in (every, exact)]  # outputs as one flat list of arrays
    for run in bound:
        run()
    apart = departure(*(run.outputs for run in bound))
    if apart > ERROR_BUDGET:
        mode, ratio = "exact", None
        log.info("compile: narrow='auto' chose 'exact': with every value in bfloat16 the outputs move %.1e "
                 "(more than one bfloat16 rounding, %.1e)", apart, ERROR_BUDGET)
    else:
        ratio = paired(lambda: every(*args), lambda: exact(*args))
        mode = "all" if ratio <= MARGIN else "exact"
        log.info("compile: narrow='auto' chose %r: with every value in bfloat16 the network takes %.3fx the time "
                 "(outputs %.1e apart)", mode, ratio, apart)
    if path:
        try:
            cache.write_atomic(path, json.dumps({"mode": mode, "ratio": ratio}).encode())
        except OSError:
            pass  # an unwritable cache: the next compile measures again
    return mode, ratio


__all__ = ["choose", "paired", "departure", "example_inputs", "MARGIN", "ERROR_BUDGET"]
