"""A minimal set of discrete distributions implementing the duck-typed protocol.

Any object with these methods can be passed to ``sample``; handlers call only what
they need:

* ``sample(rng)`` — draw a value with a numpy ``Generator``;
* ``log_prob(value)`` — log-probability, ``-inf`` outside the support;
* ``contains(value)`` — whether ``value`` is in the support;
* ``support()`` — the values with nonzero probability as a finite sequence, or
  ``None`` when infinite or unknown;
* ``propose(value, rng) -> (new_value, log_q_ratio)`` — the proposal kernel used by
  ``mutate``, with ``log_q_ratio = log q(value | new_value) - log q(new_value | value)``.

:class:`Distribution` supplies defaults (``contains`` from ``log_prob``, unknown
support, and independent resampling from the prior as proposal). The concrete classes
are immutable and hashable; ``==`` requires the same type and exactly equal
parameters (so ``Categorical([1, 2]) != Categorical([True, 2])``).

>>> import math
>>> d = Categorical(["a", "b"], probs=[1, 3])
>>> d.log_prob("b") == math.log(0.75), d.contains("c"), d.support()
(True, False, ['a', 'b'])
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any, Iterable, Sequence

import numpy as np

from .codec import exact_equal

__all__ = ["Distribution", "Categorical", "Bernoulli", "UniformInt"]

_NEG_INF = -math.inf


class Distribution:
    """Base class supplying the protocol defaults; subclasses implement ``sample`` and
    ``log_prob`` and, for ``==``/``hash``/``repr``, ``params()``.

    The default ``propose`` resamples independently from the distribution itself:
    ``q(new | old) = p(new)``, so ``log_q_ratio = log p(old) - log p(new)``.

    >>> import numpy as np
    >>> class Die(Distribution):
    ...     def sample(self, rng):
    ...         return int(rng.integers(1, 7))
    ...     def log_prob(self, value):
    ...         return -np.log(6) if value in range(1, 7) else -np.inf
    ...     def params(self):
    ...         return ()
    >>> d = Die()
    >>> new, log_q_ratio = d.propose(3, np.random.default_rng(0))
    >>> d.contains(new), log_q_ratio, d == Die(), d
    (True, 0.0, True, Die())
    """

    __slots__ = ()

    def sample(self, rng: np.random.Generator) -> Any:
        """Draw one value using ``rng``.

        >>> Distribution().sample(None)
        Traceback (most recent call last):
        ...
        NotImplementedError: Distribution.sample
        """
        raise NotImplementedError(f"{type(self).__name__}.sample")

    def log_prob(self, value: Any) -> float:
        """Log-probability of ``value`` (``-inf`` outside the support).

        >>> Distribution().log_prob(0)
        Traceback (most recent call last):
        ...
        NotImplementedError: Distribution.log_prob
        """
        raise NotImplementedError(f"{type(self).__name__}.log_prob")

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is in the support (default: ``log_prob(value) > -inf``).

        >>> Bernoulli(1.0).contains(False)
        False
        """
        return bool(self.log_prob(value) > _NEG_INF)

    def support(self) -> Sequence[Any] | None:
        """The values with nonzero probability, or ``None`` if infinite or unknown.

        >>> Distribution().support() is None
        True
        """
        return None

    def propose(self, value: Any, rng: np.random.Generator) -> tuple[Any, float]:
        """Propose a new value given the current ``value``; return it and
        ``log q(value | new) - log q(new | value)``.

        >>> import numpy as np
        >>> UniformInt(0, 4).propose(1, np.random.default_rng(0))
        (3, 0.0)
        """
        new = self.sample(rng)
        return new, float(self.log_prob(value) - self.log_prob(new))

    def params(self) -> tuple | None:
        """The parameters defining the distribution, used by ``==``, ``hash`` and
        ``repr``; ``None`` (the default) means identity semantics.

        >>> Categorical([1, 2]).params()
        ((1, 2), (0.5, 0.5))
        """
        return None

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(self) is not type(other):
            return NotImplemented if not isinstance(other, Distribution) else False
        mine = self.params()
        return mine is not None and exact_equal(mine, other.params())

    def __hash__(self) -> int:
        params = self.params()
        return id(self) if params is None else hash((type(self).__name__, params))

    def __repr__(self) -> str:
        params = self.params()
        if params is None:
            return object.__repr__(self)
        return f"{type(self).__name__}({', '.join(map(repr, params))})"


class _Frozen:
    """Mixin refusing attribute assignment after construction."""

    __slots__ = ()

    def _set(self, **fields: Any) -> None:
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")


def _boolish(x: Any) -> bool:
    return x.__class__ is bool or x.__class__ is np.bool_


_np_bool = np.bool_


class Categorical(_Frozen, Distribution):
    """A choice among ``candidates`` (any hashable values), uniform unless ``probs``.

    The value is the candidate itself, not its index. ``probs`` is normalised; a
    candidate with probability 0 is outside the support. Membership is by ``==`` except
    that bools and numbers are told apart (``True`` is not a candidate of
    ``Categorical([1, 2])``).

    ``propose`` moves to another candidate of the support, uniformly: a symmetric
    kernel, so ``log_q_ratio`` is 0. With a single-value support it returns the value
    unchanged (ratio 0); from a value outside the support it picks any supported
    candidate and the ratio is ``-inf`` (the reverse move is impossible).

    >>> import numpy as np
    >>> d = Categorical([1, 2, 4, 8])
    >>> d.sample(np.random.default_rng(0)) in d.support()
    True
    >>> d.log_prob(4), d.log_prob(True), d.contains((1,))
    (-1.3862943611198906, -inf, False)
    >>> new, ratio = d.propose(4, np.random.default_rng(0))
    >>> new != 4, ratio
    (True, 0.0)
    >>> Categorical([(1, 2), False], probs=[3, 1])
    Categorical([(1, 2), False], probs=[0.75, 0.25])
    """

    # Bool candidates live in their own table: 1 == True and hash(1) == hash(True), so
    # one dict would let True match the candidate 1.
    __slots__ = ("candidates", "probs", "_logp", "_logp_bool", "_support", "_support_pos",
                 "_cdf")

    def __init__(self, candidates: Iterable[Any], probs: Iterable[float] | None = None) -> None:
        cands = tuple(candidates)
        if not cands:
            raise ValueError("Categorical needs at least one candidate")
        n = len(cands)
        if probs is None:
            normalised = (1.0 / n,) * n
        else:
            ps = [float(p) for p in probs]
            if len(ps) != n:
                raise ValueError(f"Categorical: {n} candidates but {len(ps)} probabilities")
            if any(not math.isfinite(p) or p < 0 for p in ps):
                raise ValueError(f"Categorical: probabilities must be finite and >= 0, got {ps}")
            total = math.fsum(ps)
            if total <= 0:
                raise ValueError("Categorical: probabilities sum to 0")
            normalised = tuple(p / total for p in ps)
        self._setup(cands, normalised)

    @classmethod
    def _from_normalised(cls, candidates: tuple, probs: tuple) -> "Categorical":
        # Renormalising already-normalised floats can change their last bit, which
        # would break exact equality after a JSON or pickle round trip.
        self = cls.__new__(cls)
        self._setup(tuple(candidates), tuple(float(p) for p in probs))
        return self

    def _setup(self, cands: tuple, probs: tuple) -> None:
        # Keyed by (is-bool, candidate) so that True and 1 are distinct candidates.
        seen: set[tuple[bool, Any]] = set()
        for c in cands:
            try:
                if (_boolish(c), c) in seen:
                    raise ValueError(
                        f"Categorical: duplicate candidate {c!r} (note that 1 == 1.0)")
            except TypeError:
                raise TypeError(f"Categorical: candidate {c!r} is not hashable") from None
            seen.add((_boolish(c), c))
        support = tuple(c for c, p in zip(cands, probs) if p > 0)
        lps = [math.log(p) if p > 0 else _NEG_INF for p in probs]
        cdf, acc = [], 0.0
        for p in probs:
            acc += p
            cdf.append(acc)
        # Everything from the last supported candidate on is 1.0, so that rounding
        # never lets bisect pick a zero-probability tail or run off the end.
        last = max(i for i, p in enumerate(probs) if p > 0)
        for i in range(last, len(cdf)):
            cdf[i] = 1.0
        self._set(
            candidates=cands,
            probs=probs,
            _logp={c: lp for c, lp in zip(cands, lps) if not _boolish(c)},
            _logp_bool={c: lp for c, lp in zip(cands, lps) if _boolish(c)},
            _support=support,
            _support_pos={(_boolish(c), c): i for i, c in enumerate(support)},
            _cdf=cdf,
        )

    def sample(self, rng: np.random.Generator) -> Any:
        """Draw a candidate.

        >>> import numpy as np
        >>> Categorical(["x"]).sample(np.random.default_rng(0))
        'x'
        """
        return self.candidates[bisect_right(self._cdf, rng.random())]

    def log_prob(self, value: Any) -> float:
        """Log-probability of ``value`` (a dict lookup).

        >>> Categorical([True, False], probs=[1, 0]).log_prob(False)
        -inf
        """
        cls = value.__class__
        try:
            lp = (self._logp_bool if cls is bool or cls is _np_bool else self._logp).get(value)
        except TypeError:  # unhashable values are never candidates
            return _NEG_INF
        return _NEG_INF if lp is None else lp

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a candidate with nonzero probability.

        >>> d = Categorical([0, 1])
        >>> d.contains(1), d.contains(True), d.contains(np.int64(1))
        (True, False, True)
        """
        cls = value.__class__
        try:
            lp = (self._logp_bool if cls is bool or cls is _np_bool else self._logp).get(value)
        except TypeError:
            return False
        return lp is not None and lp != _NEG_INF

    def support(self) -> list[Any]:
        """The candidates with nonzero probability, in order.

        >>> Categorical([1, 2, 3], probs=[1, 0, 1]).support()
        [1, 3]
        """
        return list(self._support)

    def propose(self, value: Any, rng: np.random.Generator) -> tuple[Any, float]:
        """Move to another supported candidate, uniformly (see the class docstring).

        >>> import numpy as np
        >>> Categorical([1, 2]).propose(1, np.random.default_rng(0))
        (2, 0.0)
        """
        support = self._support
        k = len(support)
        if not self.contains(value):
            return support[min(int(rng.random() * k), k - 1)], _NEG_INF
        if k == 1:
            return value, 0.0
        j = min(int(rng.random() * (k - 1)), k - 2)
        if j >= self._support_pos[(_boolish(value), value)]:
            j += 1
        return support[j], 0.0

    def params(self) -> tuple:
        """``(candidates, normalised probs)``.

        >>> Categorical("ab", probs=[1, 1]).params()
        (('a', 'b'), (0.5, 0.5))
        """
        return (self.candidates, self.probs)

    def to_json_dict(self) -> dict:
        """Parameters for the JSON registry.

        >>> Categorical([1, (2, 3)]).to_json_dict()
        {'candidates': [1, (2, 3)], 'probs': [0.5, 0.5]}
        """
        return {"candidates": list(self.candidates), "probs": list(self.probs)}

    @classmethod
    def from_json_dict(cls, data: dict) -> "Categorical":
        """Inverse of :meth:`to_json_dict`.

        >>> d = Categorical([1, 2], probs=[0.1, 0.2])
        >>> Categorical.from_json_dict(d.to_json_dict()) == d
        True
        """
        return cls._from_normalised(tuple(data["candidates"]), tuple(data["probs"]))

    def __reduce__(self) -> tuple:
        return (Categorical._from_normalised, (self.candidates, self.probs))

    def __repr__(self) -> str:
        probs = self.probs
        if all(p == probs[0] for p in probs):
            return f"Categorical({list(self.candidates)!r})"
        return f"Categorical({list(self.candidates)!r}, probs={list(probs)!r})"


class Bernoulli(Categorical):
    """``True`` with probability ``p``, else ``False`` (a Categorical over the two bools).

    Its proposal flips the value (symmetric, ``log_q_ratio`` 0) unless the other value
    has probability 0. Only bools are in the support: ``1`` is not.

    >>> import math
    >>> b = Bernoulli(0.25)
    >>> b.log_prob(True) == math.log(0.25), b.contains(1), b.propose(True, None)
    (True, False, (False, 0.0))
    """

    __slots__ = ("p",)

    def __init__(self, p: float) -> None:
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Bernoulli: p must be in [0, 1], got {p}")
        self._setup((True, False), (p, 1.0 - p))
        self._set(p=p)

    def propose(self, value: Any, rng: np.random.Generator) -> tuple[Any, float]:
        """Flip the value (no randomness needed when both values are possible).

        >>> Bernoulli(0.5).propose(False, None)
        (True, 0.0)
        """
        if len(self._support) == 2 and self.contains(value):
            return (not value), 0.0
        return super().propose(value, rng)

    def params(self) -> tuple:
        """``(p,)``.

        >>> Bernoulli(0.5).params()
        (0.5,)
        """
        return (self.p,)

    def to_json_dict(self) -> dict:
        """Parameters for the JSON registry.

        >>> Bernoulli(0.5).to_json_dict()
        {'p': 0.5}
        """
        return {"p": self.p}

    @classmethod
    def from_json_dict(cls, data: dict) -> "Bernoulli":
        """Inverse of :meth:`to_json_dict`.

        >>> Bernoulli.from_json_dict({"p": 0.3})
        Bernoulli(0.3)
        """
        return cls(data["p"])

    def __reduce__(self) -> tuple:
        return (Bernoulli, (self.p,))

    def __repr__(self) -> str:
        return f"Bernoulli({self.p!r})"


class UniformInt(_Frozen, Distribution):
    """A uniform integer in ``[low, high)``: ``low`` inclusive, ``high`` exclusive,
    like ``range`` and ``numpy.random.Generator.integers``.

    Values are Python ints; any integer type (not bool) is in the support. ``support()``
    is a ``range``. The proposal is the default independent resample.

    >>> import math, numpy as np
    >>> u = UniformInt(0, 3)
    >>> u.support(), u.contains(3), u.log_prob(np.int64(2)) == -math.log(3)
    (range(0, 3), False, True)
    """

    __slots__ = ("low", "high", "_lp")

    def __init__(self, low: int, high: int) -> None:
        if _boolish(low) or _boolish(high) or not all(
                isinstance(x, (int, np.integer)) for x in (low, high)):
            raise TypeError(f"UniformInt: low and high must be integers, got {low!r}, {high!r}")
        low, high = int(low), int(high)
        if high <= low:
            raise ValueError(f"UniformInt: empty range [{low}, {high})")
        self._set(low=low, high=high, _lp=-math.log(high - low))

    def sample(self, rng: np.random.Generator) -> int:
        """Draw an int in ``[low, high)``.

        >>> import numpy as np
        >>> 0 <= UniformInt(0, 10).sample(np.random.default_rng(0)) < 10
        True
        """
        return int(rng.integers(self.low, self.high))

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is an integer (not a bool) in ``[low, high)``.

        >>> UniformInt(0, 2).contains(1), UniformInt(0, 2).contains(1.0)
        (True, False)
        """
        return (isinstance(value, (int, np.integer)) and not _boolish(value)
                and self.low <= value < self.high)

    def log_prob(self, value: Any) -> float:
        """``-log(high - low)`` inside the range, ``-inf`` outside.

        >>> UniformInt(0, 4).log_prob(5)
        -inf
        """
        return self._lp if self.contains(value) else _NEG_INF

    def support(self) -> range:
        """``range(low, high)``.

        >>> list(UniformInt(2, 5).support())
        [2, 3, 4]
        """
        return range(self.low, self.high)

    def params(self) -> tuple:
        """``(low, high)``.

        >>> UniformInt(0, 8).params()
        (0, 8)
        """
        return (self.low, self.high)

    def to_json_dict(self) -> dict:
        """Parameters for the JSON registry.

        >>> UniformInt(0, 8).to_json_dict()
        {'low': 0, 'high': 8}
        """
        return {"low": self.low, "high": self.high}

    @classmethod
    def from_json_dict(cls, data: dict) -> "UniformInt":
        """Inverse of :meth:`to_json_dict`.

        >>> UniformInt.from_json_dict({"low": 0, "high": 8})
        UniformInt(0, 8)
        """
        return cls(data["low"], data["high"])

    def __reduce__(self) -> tuple:
        return (UniformInt, (self.low, self.high))
