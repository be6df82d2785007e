"""Local moves in trace space: the ``mutate`` handler.

>>> from handlers import Categorical, sample, seed, trace
>>> def program():
...     return sample("a", Categorical([1, 2, 4, 8])) * sample("b", Categorical([0, 16, 64]))
>>> tr = trace(seed(program, 0)).get_trace()
>>> new = trace(mutate(program, tr, sites=["b"], rng_seed=1)).get_trace()
>>> new["a"].value == tr["a"].value, new["b"].value != tr["b"].value
(True, True)
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from .errors import DuplicateSiteError, MissingMethodError
from .runtime import UNSET, Message, Messenger, get_default_rng
from .seeding import make_rng
from .trace_struct import Site, Trace

__all__ = ["mutate"]


def _can_change(site: Site) -> bool:
    if site.observed:
        return False
    support_fn = getattr(site.dist, "support", None)
    if site.dist is None or support_fn is None:
        return True  # unknown support: it may well change
    support = support_fn()
    return support is None or len(support) > 1


class mutate(Messenger):
    """Replay ``trace`` but re-propose the selected sites with their distribution's
    proposal kernel.

    A selected site with recorded value ``old`` gets
    ``new, log_q_ratio = dist.propose(old, rng)``; ``site.log_q_ratio`` records
    ``log q(old | new) - log q(new | old)`` (the Metropolis-Hastings correction of
    that kernel) and ``site.infer["mutated"]`` is True. Other sites keep their recorded
    value; observed sites are never touched. Sites not in ``trace`` (a new
    control-flow path) are sampled from the prior, and a recorded value that left its
    support (an upstream change) is resampled and marked ``repaired``, as in
    non-strict ``replay``. ``log_q_ratio`` covers the proposal kernel only: a strategy
    accounting for new or dropped sites adds their prior terms itself.

    ``sites`` selects the sites to re-propose:

    * a list of names (or one name); every name must be in ``trace``;
    * a predicate on :class:`Site`, evaluated on the sites of ``trace``;
    * an int ``k``: ``k`` sites drawn uniformly without replacement among the
      non-observed sites of ``trace`` whose distribution has more than one value
      (all of them if fewer); ``None`` means ``1``.

    ``rng_seed`` seeds the site choice, the proposals and the prior draws that no
    inner ``seed`` claimed; like ``seed`` the generator is re-created on every entry,
    so a mutation is reproducible. With ``rng_seed=None`` the module default generator
    is used. ``.selected`` holds the names chosen for the last run.

    >>> import numpy as np
    >>> from handlers import Categorical, sample, seed, trace
    >>> def program():
    ...     return [sample(n, Categorical(list(range(10)))) for n in "abcd"]
    >>> tr = trace(seed(program, 0)).get_trace()
    >>> m = mutate(program, tr, sites=2, rng_seed=3)
    >>> new = trace(m).get_trace()
    >>> changed = {n for n in tr if new[n].value != tr[n].value}
    >>> changed == m.selected, len(changed)
    (True, 2)
    >>> new == trace(mutate(program, tr, sites=2, rng_seed=3)).get_trace()
    True
    """

    def __init__(self, fn: Callable | None = None, trace: Trace | None = None,
                 sites: Iterable[str] | str | Callable[[Site], bool] | int | None = None,
                 rng_seed: Any = None) -> None:
        super().__init__(fn)
        if not isinstance(trace, Trace):
            raise TypeError(f"mutate needs a Trace, got {trace!r}")
        self.trace = trace
        self.rng_seed = rng_seed
        self._recorded = trace._sites
        self._k: int | None = None
        self._fixed: frozenset[str] = frozenset()
        if sites is None:
            sites = 1
        if isinstance(sites, (bool, np.bool_)):
            raise TypeError("mutate: sites must be names, a predicate or an int, not a bool")
        if isinstance(sites, (int, np.integer)):
            if sites < 0:
                raise ValueError(f"mutate: cannot pick {sites} sites")
            self._k = int(sites)
            self._eligible = [name for name, site in trace.items() if _can_change(site)]
        elif isinstance(sites, str):
            self._fixed = self._check_names((sites,))
        elif callable(sites):
            self._fixed = frozenset(name for name, site in trace.items() if sites(site))
        else:
            self._fixed = self._check_names(tuple(sites))
        self.selected: frozenset[str] = self._fixed
        self._rng: np.random.Generator | None = None
        self._seen: set[str] = set()

    def _check_names(self, names: tuple) -> frozenset[str]:
        missing = [n for n in names if n not in self._recorded]
        if missing:
            raise ValueError(f"mutate: sites {missing} are not in the trace")
        return frozenset(names)

    def enter_run(self) -> None:
        self._rng = get_default_rng() if self.rng_seed is None else make_rng(self.rng_seed)
        self._seen = set()
        if self._k is not None:
            order = self._rng.permutation(len(self._eligible))[: self._k]
            self.selected = frozenset(self._eligible[i] for i in order)

    def process_message(self, msg: Message) -> None:
        name = msg.name
        seen = self._seen
        n_seen = len(seen)
        seen.add(name)
        if len(seen) == n_seen:
            raise DuplicateSiteError.for_site(name, "mutate")
        if msg.observed:
            return
        site = self._recorded.get(name)
        if site is None:
            if msg.rng is None:
                msg.rng = self._rng
            return
        old = site.value
        try:
            contains = msg.fn.contains
        except AttributeError:
            raise MissingMethodError.for_method(name, msg.fn, "contains", "mutate") from None
        if not contains(old):
            if msg.value is UNSET:
                msg.repaired = True
                if msg.rng is None:
                    msg.rng = self._rng
            return
        if name in self.selected:
            try:
                propose = msg.fn.propose
            except AttributeError:
                raise MissingMethodError.for_method(name, msg.fn, "propose", "mutate") from None
            msg.value, log_q_ratio = propose(old, self._rng)
            msg.log_q_ratio = float(log_q_ratio)
            msg.infer["mutated"] = True
        else:
            msg.value = old
