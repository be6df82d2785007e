"""``Trace`` and ``Site``: the record of one run of a program.

A :class:`Trace` is an ordered mapping from site name to :class:`Site`, in the order
the sites were reached. It serialises to JSON exactly (see :mod:`handlers.codec` for
values and :mod:`handlers.registry` for distributions) and prints as an aligned table
for interactive exploration.

>>> from handlers import Categorical, Bernoulli
>>> tr = Trace([Site("a", 4, Categorical([1, 2, 4, 8])), Site("b", True, Bernoulli(0.5))])
>>> list(tr), tr["a"].value, round(tr.log_prob(), 4)
(['a', 'b'], 4, -2.0794)
>>> print(tr)
name  distribution               value  log_prob
a     Categorical([1, 2, 4, 8])  4       -1.3863
b     Bernoulli(0.5)             True    -0.6931
total                                    -2.0794
>>> Trace.from_json(tr.to_json()) == tr
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Iterable, Iterator

from .codec import decode_value, encode_value, exact_equal
from .errors import DuplicateSiteError
from .registry import dist_from_json, dist_to_json

__all__ = ["Site", "Trace"]

_FORMAT = "handlers.Trace"
_VERSION = 1


class Site:
    """One sample site of a trace.

    Fields: ``name``, ``value``, ``dist``, ``log_prob`` (of the value under ``dist``;
    computed when not given and ``dist`` is known), ``observed``, ``infer`` (strategy
    metadata), ``log_q_ratio`` (written by ``mutate``:
    ``log q(old | new) - log q(new | old)``, 0.0 otherwise) and ``repaired`` (the
    recorded value was outside the support when replayed, so it was resampled).

    Sites compare equal when name, value (exactly, type included), observed flag and
    distribution are equal.

    >>> from handlers import Categorical
    >>> s = Site("a", 2, Categorical([1, 2]))
    >>> s.log_prob, s == Site("a", 2, Categorical([1, 2])), s == Site("a", 2.0, Categorical([1, 2]))
    (-0.6931471805599453, True, False)
    """

    __slots__ = ("name", "value", "dist", "log_prob", "observed", "infer", "log_q_ratio",
                 "repaired")

    def __init__(self, name: str, value: Any, dist: Any = None, log_prob: float | None = None,
                 observed: bool = False, infer: dict | None = None, log_q_ratio: float = 0.0,
                 repaired: bool = False) -> None:
        self.name = name
        self.value = value
        self.dist = dist
        if log_prob is None:
            log_prob = float(dist.log_prob(value)) if dist is not None else 0.0
        self.log_prob = log_prob
        self.observed = observed
        self.infer = {} if infer is None else infer
        self.log_q_ratio = log_q_ratio
        self.repaired = repaired

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Site):
            return NotImplemented
        return (self.name == other.name and self.observed == other.observed
                and exact_equal(self.value, other.value) and self.dist == other.dist)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = ", observed=True" if self.observed else ""
        return f"Site({self.name!r}, {self.value!r}, {self.dist!r}{extra})"

    def to_dict(self) -> dict:
        """JSON-compatible form (see :meth:`Trace.to_json`).

        >>> Site("a", (1, 2)).to_dict()["value"]
        {'$tuple': [1, 2]}
        """
        try:
            return {
                "name": self.name,
                "value": encode_value(self.value),
                "dist": dist_to_json(self.dist),
                "log_prob": encode_value(float(self.log_prob)),
                "observed": bool(self.observed),
                "infer": encode_value(dict(self.infer)),
                "log_q_ratio": encode_value(float(self.log_q_ratio)),
                "repaired": bool(self.repaired),
            }
        except TypeError as err:
            raise TypeError(f"site {self.name!r}: {err}") from None

    @classmethod
    def from_dict(cls, data: dict) -> "Site":
        """Inverse of :meth:`to_dict`.

        >>> Site.from_dict(Site("a", (1, 2)).to_dict())
        Site('a', (1, 2), None)
        """
        return cls(
            data["name"],
            decode_value(data["value"]),
            dist_from_json(data.get("dist")),
            decode_value(data.get("log_prob", 0.0)),
            bool(data.get("observed", False)),
            decode_value(data.get("infer", {"$dict": []})),
            decode_value(data.get("log_q_ratio", 0.0)),
            bool(data.get("repaired", False)),
        )


class Trace(Mapping):
    """An ordered mapping name -> :class:`Site` recording one run.

    ``tr["a"]``, ``"a" in tr``, ``len(tr)``, iteration in run order and ``.items()``
    work as for a dict. ``==`` compares the sites in order (names, exact values,
    observed flags, distributions).

    >>> from handlers import Categorical, sample, seed, trace
    >>> def program():
    ...     return sample("a", Categorical([1, 2])) * sample("b", Categorical([3]), obs=3)
    >>> tr = trace(seed(program, 0)).get_trace()
    >>> tr.choices(), tr.choices(observed=False)
    ({'a': 2, 'b': 3}, {'a': 2})
    >>> tr
    <Trace: 2 sites, log_prob=-0.6931>
    """

    __slots__ = ("_sites",)

    def __init__(self, sites: Iterable[Site] = ()) -> None:
        self._sites: dict[str, Site] = {}
        for site in sites:
            self.add_site(site)

    def add_site(self, site: Site) -> None:
        """Append ``site``; a name already present raises ``DuplicateSiteError``.

        >>> tr = Trace(); tr.add_site(Site("a", 1)); tr.add_site(Site("a", 2))
        Traceback (most recent call last):
        ...
        handlers.errors.DuplicateSiteError: site 'a' is sampled twice in one run (detected by Trace); ...
        """
        if site.name in self._sites:
            raise DuplicateSiteError.for_site(site.name, "Trace")
        self._sites[site.name] = site

    # -- Mapping ------------------------------------------------------------------
    def __getitem__(self, name: str) -> Site:
        return self._sites[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sites)

    def __len__(self) -> int:
        return len(self._sites)

    def __contains__(self, name: object) -> bool:
        return name in self._sites

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return (len(self) == len(other) and list(self._sites) == list(other._sites)
                and all(a == b for a, b in zip(self._sites.values(), other._sites.values())))

    __hash__ = None  # type: ignore[assignment]

    # -- summaries ----------------------------------------------------------------
    def log_prob(self) -> float:
        """Sum of the sites' log-probabilities (``-inf`` if any value is impossible).

        >>> from handlers import Categorical
        >>> Trace([Site("a", 3, Categorical([1, 2]))]).log_prob()
        -inf
        """
        total = 0.0
        for site in self._sites.values():
            total += site.log_prob
        return total

    def choices(self, observed: bool = True) -> dict[str, Any]:
        """Plain dict name -> value of all sites; ``observed=False`` leaves out
        observed sites (keeping only the random choices).

        >>> Trace([Site("a", 1), Site("b", 2, observed=True)]).choices(observed=False)
        {'a': 1}
        """
        if observed:
            return {name: site.value for name, site in self._sites.items()}
        return {name: site.value for name, site in self._sites.items() if not site.observed}

    @property
    def repaired(self) -> tuple[str, ...]:
        """Names of the sites a non-strict ``replay`` or ``mutate`` had to resample
        because their recorded value was outside the support.

        >>> Trace([Site("a", 1, repaired=True), Site("b", 2)]).repaired
        ('a',)
        """
        return tuple(name for name, site in self._sites.items() if site.repaired)

    # -- JSON -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """JSON-compatible dict (what :meth:`to_json` dumps).

        >>> Trace([Site("a", 1.5)]).to_dict()["sites"][0]["value"]
        1.5
        """
        return {"format": _FORMAT, "version": _VERSION,
                "sites": [site.to_dict() for site in self._sites.values()]}

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        """Inverse of :meth:`to_dict`.

        >>> Trace.from_dict(Trace([Site("a", (1,))]).to_dict())["a"].value
        (1,)
        """
        if data.get("format") != _FORMAT:
            raise ValueError(f"not a serialised Trace (format {data.get('format')!r})")
        if data.get("version") != _VERSION:
            raise ValueError(f"unsupported Trace format version {data.get('version')!r}")
        return cls(Site.from_dict(s) for s in data["sites"])

    def to_json(self, indent: int | None = None) -> str:
        """Serialise to standard JSON (no NaN/Infinity literals). Values round-trip
        exactly; distributions round-trip when registered, else come back as ``None``.

        >>> import numpy as np
        >>> tr = Trace([Site("x", np.float32(0.1)), Site("y", (True, None, float("nan")))])
        >>> back = Trace.from_json(tr.to_json())
        >>> back == tr, type(back["x"].value).__name__
        (True, 'float32')
        """
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        """Inverse of :meth:`to_json`.

        >>> Trace.from_json(Trace([Site("a", -0.0)]).to_json())["a"].value
        -0.0
        """
        return cls.from_dict(json.loads(text))

    # -- display --------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<Trace: {len(self)} sites, log_prob={self.log_prob():.4f}>"

    def __str__(self) -> str:
        if not self._sites:
            return "Trace (no sites)"
        rows = [("name", "distribution", "value", "log_prob", "")]
        for site in self._sites.values():
            notes = []
            if site.observed:
                notes.append("observed")
            if site.repaired:
                notes.append("repaired")
            if site.infer.get("mutated"):
                notes.append("mutated")
            if site.log_q_ratio:
                notes.append(f"log_q_ratio={site.log_q_ratio:.4g}")
            rows.append((site.name, _clip(repr(site.dist), 40), _clip(repr(site.value), 30),
                         _fmt_lp(site.log_prob), " ".join(notes)))
        rows.append(("total", "", "", _fmt_lp(self.log_prob()), ""))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = []
        for r in rows:
            line = (f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  "
                    f"{r[3]:>{widths[3]}}  {r[4]}")
            lines.append(line.rstrip())
        return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _fmt_lp(lp: float) -> str:
    return f"{lp:.4f}" if math.isfinite(lp) else str(float(lp))
