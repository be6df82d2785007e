"""Static memory planning: place every intermediate tensor of a network in one arena.

Each value lives from the step that writes it to the last step that reads it. Two values
whose lifetimes overlap must not overlap in memory; two that do not may share bytes. The
planner places values largest first, each at the lowest offset (a multiple of the cache
line) that is free for its whole lifetime: the greedy-by-size heuristic of TFLite's arena
planner, which comes within a few per cent of the best packing on CNNs. A value that is
read by the step that writes another (a kernel's input and output) is live at that step in
both, so a kernel never reads and writes the same bytes.

>>> plan = plan_memory({"a": 1000, "b": 1000, "c": 500}, {"a": (0, 1), "b": (1, 2), "c": (2, 3)})
>>> plan.offsets["a"] != plan.offsets["b"], plan.offsets["c"] == plan.offsets["a"], plan.peak_bytes
(True, True, 2048)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Hashable, List, Mapping, Tuple

#: Offsets are multiples of this (a cache line; numba kernels load whole vectors).
ALIGN = 64


def round_up(n: int, align: int = ALIGN) -> int:
    """``n`` rounded up to a multiple of ``align`` (a cache line)."""
    return -(-n // align) * align


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offsets of the values in one arena, and the arena's size (``peak_bytes``)."""

    offsets: Dict[Hashable, int]
    sizes: Dict[Hashable, int]
    peak_bytes: int

    @property
    def total_bytes(self) -> int:
        """What the values would take without sharing (for comparison with the peak)."""
        return sum(round_up(s) for s in self.sizes.values())


def plan_memory(sizes: Mapping[Hashable, int], lifetimes: Mapping[Hashable, Tuple[int, int]]) -> MemoryPlan:
    """Offsets for values of ``sizes`` bytes alive over the inclusive step ranges ``lifetimes``."""
    order = sorted(sizes, key=lambda v: (-sizes[v], lifetimes[v][0], str(v)))
    placed: List[Tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: Dict[Hashable, int] = {}
    for v in order:
        size = round_up(max(1, int(sizes[v])))
        first, last = lifetimes[v]
        if first > last:
            raise ValueError(f"plan_memory: value {v!r} dies (step {last}) before it is made (step {first})")
        busy = sorted((o, e) for o, e, f, l in placed if not (l < first or last < f))
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[v] = offset
        placed.append((offset, offset + size, first, last))
    peak = max((e for _, e, _, _ in placed), default=0)
    return MemoryPlan(offsets, {v: int(s) for v, s in sizes.items()}, peak)


__all__ = ["MemoryPlan", "plan_memory", "round_up", "ALIGN"]
