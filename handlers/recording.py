"""Recording and replaying runs: the ``trace`` and ``replay`` handlers.

>>> from handlers import Categorical, sample, seed
>>> def program():
...     return sample("a", Categorical([1, 2, 4, 8])) * sample("b", Categorical([0, 16, 64]))
>>> tr = trace(seed(program, 0)).get_trace()
>>> replay(program, tr)() == tr["a"].value * tr["b"].value
True
"""

from __future__ import annotations

from typing import Any, Callable

from .errors import DuplicateSiteError, MissingMethodError, ReplayError
from .runtime import UNSET, Message, Messenger
from .trace_struct import Site, Trace

__all__ = ["trace", "replay"]

_new = object.__new__


class trace(Messenger):
    """Record every site that reaches this handler into a :class:`Trace`.

    Each run (call or ``with`` block) starts a fresh trace, kept in ``.trace``;
    ``with trace() as tr:`` binds the trace itself. A site name seen twice in one run
    raises ``DuplicateSiteError``. Sites hidden by a ``block`` inside are not recorded.

    >>> from handlers import Categorical, sample, seed
    >>> def program(n):
    ...     return [sample(f"x{i}", Categorical([0, 1])) for i in range(n)]
    >>> tr = trace(seed(program, 0)).get_trace(3)
    >>> list(tr), tr == trace(seed(program, 0)).get_trace(3)
    (['x0', 'x1', 'x2'], True)
    >>> with trace() as tr2, seed(rng_seed=0):
    ...     _ = program(2)
    >>> len(tr2)
    2
    """

    def __init__(self, fn: Callable | None = None) -> None:
        super().__init__(fn)
        self.trace = Trace()

    def enter_run(self) -> None:
        self.trace = Trace()
        self._sites = self.trace._sites

    def __enter__(self) -> Trace:
        super().__enter__()
        return self.trace

    def postprocess_message(self, msg: Message) -> None:
        name = msg.name
        sites = self._sites
        if name in sites:
            raise DuplicateSiteError.for_site(name, "trace")
        fn = msg.fn
        value = msg.value
        try:
            log_prob = fn.log_prob(value)
        except AttributeError:
            if hasattr(fn, "log_prob"):
                raise  # raised inside log_prob: not ours to rename
            raise MissingMethodError.for_method(name, fn, "log_prob", "trace") from None
        # Site built field by field: skipping Site.__init__ saves a call per site.
        site = _new(Site)
        site.name = name
        site.value = value
        site.dist = fn
        site.log_prob = log_prob
        site.observed = msg.observed
        site.infer = msg.infer
        site.log_q_ratio = msg.log_q_ratio
        site.repaired = msg.repaired
        sites[name] = site

    def get_trace(self, *args: Any, **kwargs: Any) -> Trace:
        """Run the wrapped function with the arguments and return its trace.

        >>> from handlers import Categorical, sample
        >>> trace(lambda: sample("a", Categorical([7]))).get_trace()["a"].value
        7
        """
        self(*args, **kwargs)
        return self.trace


class replay(Messenger):
    """Give each site the value recorded for it in ``trace``.

    Observed sites keep their observation. Sites absent from ``trace`` are sampled
    as usual. A recorded value outside the site's support at replay time (an upstream
    decision changed the distribution) is resampled and the site marked ``repaired``
    (see ``Trace.repaired``); with ``strict=True`` it raises ``ReplayError`` instead,
    as does a recorded site the run never reaches.

    >>> from handlers import Categorical, sample, seed, trace
    >>> def program():
    ...     n = sample("n", Categorical([2, 3]))
    ...     return sample("k", Categorical(list(range(n))))
    >>> old = Trace([Site("n", 2, Categorical([2, 3])), Site("k", 1, Categorical([0, 1]))])
    >>> replay(program, old)()
    1
    >>> def changed():
    ...     return sample("k", Categorical([5, 6]))
    >>> trace(seed(replay(changed, old), 0)).get_trace().repaired
    ('k',)
    >>> replay(changed, old, strict=True)()
    Traceback (most recent call last):
    ...
    handlers.errors.ReplayError: site 'k': recorded value 1 is outside the support of Categorical([5, 6]) at replay time
    """

    def __init__(self, fn: Callable | None = None, trace: Trace | None = None,
                 strict: bool = False) -> None:
        super().__init__(fn)
        if not isinstance(trace, Trace):
            raise TypeError(f"replay needs a Trace, got {trace!r}")
        self.trace = trace
        self.strict = strict
        self._recorded = trace._sites
        self._seen: set[str] = set()

    def enter_run(self) -> None:
        self._seen = set()

    def process_message(self, msg: Message) -> None:
        name = msg.name
        seen = self._seen
        n_seen = len(seen)
        seen.add(name)
        if len(seen) == n_seen:
            raise DuplicateSiteError.for_site(name, "replay")
        site = self._recorded.get(name)
        if site is None or msg.observed:
            return
        value = site.value
        try:
            contains = msg.fn.contains
        except AttributeError:
            raise MissingMethodError.for_method(name, msg.fn, "contains", "replay") from None
        if contains(value):
            msg.value = value
        elif self.strict:
            raise ReplayError(f"site {name!r}: recorded value {value!r} is outside the support "
                              f"of {msg.fn!r} at replay time", site=name)
        elif msg.value is UNSET:
            msg.repaired = True

    def exit_run(self, ok: bool) -> None:
        if ok and self.strict:
            missing = [name for name in self._recorded if name not in self._seen]
            if missing:
                raise ReplayError(f"recorded sites {missing} were not reached by the replayed "
                                  "run", site=missing[0])
