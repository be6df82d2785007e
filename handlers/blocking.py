"""Hiding sites from outer handlers: the ``block`` handler.

>>> from handlers import Categorical, sample, trace
>>> def program():
...     return sample("a", Categorical([1])) + sample("b", Categorical([2]))
>>> list(trace(block(program, hide=["a"])).get_trace())
['b']
"""

from __future__ import annotations

from typing import Callable, Iterable

from .runtime import Message, Messenger

__all__ = ["block"]


def _names(names: str | Iterable[str]) -> frozenset[str]:
    # A lone string means one name, not a set of characters.
    return frozenset((names,)) if isinstance(names, str) else frozenset(names)


class block(Messenger):
    """Stop the sites it selects from reaching any handler outside it.

    Give at most one of: ``hide`` (names to hide), ``expose`` (hide all but these
    names), ``hide_fn`` (a predicate on the :class:`~handlers.runtime.Message`). With
    none, every site is hidden. Hidden sites are still sampled (by the handlers
    inside and the default sampler); only the outer handlers miss them.

    >>> from handlers import Categorical, sample, trace
    >>> def program():
    ...     return [sample(n, Categorical([0])) for n in ("a", "b", "c")]
    >>> list(trace(block(program, expose=["c"])).get_trace())
    ['c']
    >>> list(trace(block(program, hide_fn=lambda msg: msg.name != "b")).get_trace())
    ['b']
    >>> len(trace(block(program)).get_trace())
    0
    """

    def __init__(self, fn: Callable | None = None, hide: str | Iterable[str] | None = None,
                 expose: str | Iterable[str] | None = None,
                 hide_fn: Callable[[Message], bool] | None = None) -> None:
        super().__init__(fn)
        given = [x is not None for x in (hide, expose, hide_fn)]
        if sum(given) > 1:
            raise ValueError("block: give at most one of hide, expose and hide_fn")
        if hide_fn is not None:
            self.hide_fn = hide_fn
        elif hide is not None:
            hidden = _names(hide)
            self.hide_fn = lambda msg: msg.name in hidden
        elif expose is not None:
            exposed = _names(expose)
            self.hide_fn = lambda msg: msg.name not in exposed
        else:
            self.hide_fn = lambda msg: True

    def process_message(self, msg: Message) -> None:
        if self.hide_fn(msg):
            msg.stop = True
