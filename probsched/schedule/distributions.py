"""Distributions of the scheduling decisions, with the proposal kernels MetaSchedule calls mutators.

- :class:`PerfectTile`: ordered factorisations of a loop extent (tile sizes);
  ``propose`` moves one prime factor from one level to another (MutateTileSize).
- :class:`ComputeLocation`: where a block is computed (a loop name, ``"root"`` or
  ``"inline"``); ``propose`` picks another valid location (MutateComputeLocation).
- ``Categorical`` (from :mod:`handlers`): unroll depths and other discrete choices;
  ``propose`` picks another candidate (MutateUnroll).

>>> import math, numpy as np
>>> d = PerfectTile(64, 3, max_innermost_factor=16)
>>> v = d.sample(np.random.default_rng(0))
>>> len(v) == 3 and v[0] * v[1] * v[2] == 64 and v[2] <= 16
True
>>> round(sum(math.exp(d.log_prob(x)) for x in d.support()), 12)
1.0
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from handlers import Categorical, Distribution, register_distribution

#: Tags of categorical sites (their ``infer["tag"]``), what search strategies select sites
#: by (names are for people): an explicit-unroll budget, a parallel extent, and the
#: choices of a block's algorithm (where its writes are staged, how a reduction is split).
UNROLL, PARALLEL, ALGORITHM = "unroll", "parallel", "algorithm"


@lru_cache(maxsize=4096)
def prime_factors(n: int) -> Tuple[Tuple[int, int], ...]:
    """``((p, e), ...)`` with ``n = prod p**e``, primes increasing."""
    out = []
    p = 2
    while p * p <= n:
        e = 0
        while n % p == 0:
            n //= p
            e += 1
        if e:
            out.append((p, e))
        p += 1
    if n > 1:
        out.append((n, 1))
    return tuple(out)


@lru_cache(maxsize=4096)
def divisors(n: int) -> Tuple[int, ...]:
    """Divisors of ``n``, increasing."""
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def _exponent(n: int, p: int) -> int:
    e = 0
    while n % p == 0:
        n //= p
        e += 1
    return e


@lru_cache(maxsize=4096)
def _factorisations(extent: int, n: int, mif: Optional[int]) -> Optional[Tuple[Tuple[int, ...], ...]]:
    """Ordered ``n``-factorisations of ``extent`` whose last factor is at most ``mif`` (None
    above 20,000 of them). Cached: the search asks for the support of the same tile sites
    each time it picks a site to mutate (``choose_site``; enumerating it on every call
    showed in an evolutionary round's profile)."""
    out: List[Tuple[int, ...]] = []

    def rec(prefix: list, remaining: int, left: int) -> bool:
        if len(out) > 20000:
            return False
        if left == 1:
            if n == 1 or mif is None or remaining <= mif:
                out.append(tuple(prefix + [remaining]))
            return True
        for d in divisors(remaining):
            if not rec(prefix + [d], remaining // d, left - 1):
                return False
        return True

    return tuple(out) if rec([], extent, n) else None


class PerfectTile(Distribution):
    """Ordered ``n``-tuples of positive integers whose product is ``extent``.

    Sampling law (MetaSchedule's SamplePerfectTile): the innermost factor is uniform over
    the divisors of ``extent`` not above ``max_innermost_factor`` (all divisors when None);
    then each unit of each prime exponent of the rest goes to one of the ``n - 1`` outer
    levels uniformly and independently. ``log_prob`` is exact under that law.
    """

    __slots__ = ("extent", "n", "max_innermost_factor")

    def __init__(self, extent: int, n: int, max_innermost_factor: Optional[int] = None) -> None:
        if int(extent) < 1 or int(n) < 1:
            raise ValueError(f"PerfectTile needs extent >= 1 and n >= 1, got {extent}, {n}")
        object.__setattr__(self, "extent", int(extent))
        object.__setattr__(self, "n", int(n))
        mif = None if max_innermost_factor in (None, -1) else int(max_innermost_factor)
        object.__setattr__(self, "max_innermost_factor", mif)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("PerfectTile is immutable")

    def params(self) -> tuple:
        return (self.extent, self.n, self.max_innermost_factor)

    def _inner_choices(self) -> Tuple[int, ...]:
        mif = self.max_innermost_factor
        return tuple(d for d in divisors(self.extent) if mif is None or d <= mif)

    def sample(self, rng: np.random.Generator) -> Tuple[int, ...]:
        if self.n == 1:
            return (self.extent,)
        choices = self._inner_choices()
        inner = choices[int(rng.integers(len(choices)))]
        outer = [1] * (self.n - 1)
        for p, e in prime_factors(self.extent // inner):
            for _ in range(e):
                outer[int(rng.integers(self.n - 1))] *= p
        return tuple(outer) + (inner,)

    def contains(self, value: Any) -> bool:
        if not isinstance(value, (tuple, list)) or len(value) != self.n:
            return False
        prod = 1
        for v in value:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                return False
            prod *= int(v)
        mif = self.max_innermost_factor
        return prod == self.extent and (mif is None or self.n == 1 or value[-1] <= mif)

    def log_prob(self, value: Any) -> float:
        if not self.contains(value):
            return -math.inf
        if self.n == 1:
            return 0.0
        lp = -math.log(len(self._inner_choices()))
        k = self.n - 1
        rest = self.extent // int(value[-1])
        for p, e in prime_factors(rest):
            # multinomial: e units over k levels, this split has e!/prod(e_i!) orderings
            lp += math.lgamma(e + 1) - e * math.log(k)
            for v in value[:-1]:
                lp -= math.lgamma(_exponent(int(v), p) + 1)
        return lp

    def support(self) -> Optional[Sequence[Tuple[int, ...]]]:
        """Every factorisation, as a shared tuple (None above 20,000 of them)."""
        return _factorisations(self.extent, self.n, self.max_innermost_factor)

    def _moves(self, value: Sequence[int]) -> List[Tuple[int, int, int]]:
        mif = self.max_innermost_factor
        moves = []
        for i, v in enumerate(value):
            for p, _ in prime_factors(int(v)) if v > 1 else ():
                for j in range(self.n):
                    if j == i:
                        continue
                    if j == self.n - 1 and mif is not None and value[j] * p > mif:
                        continue
                    moves.append((i, p, j))
        return moves

    def propose(self, value: Any, rng: np.random.Generator) -> Tuple[Tuple[int, ...], float]:
        """Move one prime factor between two levels (MutateTileSize); exact log-ratio."""
        value = tuple(int(v) for v in value)
        moves = self._moves(value)
        if not moves:
            return value, 0.0
        i, p, j = moves[int(rng.integers(len(moves)))]
        new = list(value)
        new[i] //= p
        new[j] *= p
        new = tuple(new)
        # q(new|old) = 1/|moves(old)|, q(old|new) = 1/|moves(new)|: each move is a distinct tuple
        return new, math.log(len(moves)) - math.log(len(self._moves(new)))

    def to_json_dict(self) -> dict:
        return {"extent": self.extent, "n": self.n, "max_innermost_factor": self.max_innermost_factor}

    @classmethod
    def from_json_dict(cls, d: dict) -> "PerfectTile":
        return cls(d["extent"], d["n"], d["max_innermost_factor"])


class ComputeLocation(Categorical):
    """Where to compute a block: a loop name, ``"root"`` or ``"inline"`` (uniform prior)."""

    __slots__ = ()

    def __init__(self, locations: Sequence[str]) -> None:
        super().__init__(list(locations))

    def __repr__(self) -> str:
        return f"ComputeLocation({list(self.candidates)!r})"

    def __reduce__(self) -> tuple:
        return (ComputeLocation, (list(self.candidates),))


def _register() -> None:
    for cls in (PerfectTile, ComputeLocation):
        try:
            register_distribution(cls)
        except Exception:  # already registered (module reloaded)
            pass


_register()
