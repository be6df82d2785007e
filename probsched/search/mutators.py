"""Which decision a mutation changes: MetaSchedule's mutators as site selectors.

MetaSchedule mutates a trace by one of four mutators, drawn by weight: tile sizes (0.90),
compute location (0.05), unroll depth (0.03) and parallel extent (0.02). Here every
mutator is a predicate on the sites of a decision trace; one mutator is drawn by weight
among those with at least one site, then one of its sites uniformly, and the ``mutate``
handler re-proposes it with its distribution's kernel. The other categorical decisions
(micro-kernel shape, packing, write cache, consumer fusion, rfactor), which MetaSchedule
does not mutate, get a small weight of their own (0.02).

>>> from handlers.trace_struct import Site, Trace
>>> from probsched.schedule.distributions import PerfectTile
>>> tr = Trace([Site("C/i/tile", (2, 4), PerfectTile(8, 2))])
>>> choose_site(tr, np.random.default_rng(0))
'C/i/tile'
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from handlers.trace_struct import Site, Trace

from ..schedule.distributions import ALGORITHM, PARALLEL, UNROLL, ComputeLocation, PerfectTile


def _is_tile(site: Site) -> bool:
    return isinstance(site.dist, PerfectTile)


def _is_location(site: Site) -> bool:
    return isinstance(site.dist, ComputeLocation)


def _tag(site: Site) -> object:
    return site.infer.get("tag") if site.infer else None


def _is_unroll(site: Site) -> bool:
    return _tag(site) == UNROLL


def _is_parallel(site: Site) -> bool:
    return _tag(site) == PARALLEL


def _is_other(site: Site) -> bool:
    return not (_is_tile(site) or _is_location(site) or _is_unroll(site) or _is_parallel(site))


#: name -> (weight, site predicate)
MUTATORS: Dict[str, Tuple[float, Callable[[Site], bool]]] = {
    "tile_size": (0.90, _is_tile),
    "compute_location": (0.05, _is_location),
    "unroll": (0.03, _is_unroll),
    "parallel": (0.02, _is_parallel),
    "other": (0.02, _is_other),
}


def structural_family(decisions: Trace) -> Tuple:
    """The values of the structural decisions (the "other" mutator's sites: micro-kernel
    shape, packing, write cache, rfactor, ...), which pick a program's family; tiles,
    locations, unroll and parallel extents vary within one.

    >>> from handlers.trace_struct import Site, Trace
    >>> from handlers import Categorical
    >>> tr = Trace([Site("C/write_cache", 3, Categorical([0, 3]), infer={"tag": "algorithm"}),
    ...             Site("C/unroll", 16, Categorical([0, 16]), infer={"tag": "unroll"})])
    >>> structural_family(tr)
    (('C/write_cache', 3),)
    """
    return tuple((n, decisions[n].value) for n in decisions if _is_other(decisions[n]))


def algorithm_family(decisions: Trace) -> Tuple:
    """The values of the sites that choose a block's algorithm: where its writes are staged
    (``write_cache``) and how a reduction is split (``rfactor``). Programs of different
    algorithms can differ by large factors (a norm's "outer" and "inner" rfactor);
    micro-kernel shape, packing and vector lanes vary within one, where the programs lie
    closer together. :class:`.EvolutionarySearch`'s family cap keys on this.

    >>> from handlers.trace_struct import Site, Trace
    >>> from handlers import Categorical
    >>> tr = Trace([Site("C/rfactor", "outer", Categorical(["none", "outer"]), infer={"tag": "algorithm"}),
    ...             Site("C/lanes", 16, Categorical([16, 32]))])
    >>> algorithm_family(tr)
    (('C/rfactor', 'outer'),)
    """
    return tuple((n, decisions[n].value) for n in decisions if _tag(decisions[n]) == ALGORITHM)


def _mutable(site: Site) -> bool:
    if site.observed or site.dist is None:
        return False
    support = getattr(site.dist, "support", None)
    values = support() if support is not None else None
    return values is None or len(values) > 1


def choose_site(
    decisions: Trace, rng: np.random.Generator, mutators: Optional[Dict[str, Tuple[float, Callable[[Site], bool]]]] = None
) -> Optional[str]:
    """A site to mutate: a mutator by weight (among those that apply), then a site uniformly."""
    mutators = MUTATORS if mutators is None else mutators
    sites = [decisions[n] for n in decisions if _mutable(decisions[n])]
    groups: List[Tuple[float, List[str]]] = []
    for weight, pred in mutators.values():
        names = [s.name for s in sites if pred(s)]
        if names and weight > 0:
            groups.append((weight, names))
    if not groups:
        return None
    w = np.array([g[0] for g in groups])
    names = groups[int(rng.choice(len(groups), p=w / w.sum()))][1]
    return names[int(rng.integers(len(names)))]


__all__ = ["MUTATORS", "algorithm_family", "choose_site", "structural_family"]
