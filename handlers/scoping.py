"""Namespacing site names: the ``scope`` handler.

>>> from handlers import Categorical, sample, trace
>>> def layer():
...     return sample("w", Categorical([1, 2]))
>>> list(trace(scope(scope(layer, "inner"), "outer")).get_trace())
['outer/inner/w']
"""

from __future__ import annotations

from typing import Callable

from .runtime import Message, Messenger

__all__ = ["scope"]


class scope(Messenger):
    """Prefix the names of the sites it sees with ``prefix + divider``.

    Handlers outside the scope see the prefixed name, handlers inside see the plain
    one, and nested scopes compose as ``outer/inner/name``. Use it to call the same
    sub-program twice without duplicate site names.

    >>> from handlers import Categorical, sample, trace
    >>> def pick():
    ...     return sample("x", Categorical([1, 2]))
    >>> def program():
    ...     return scope(pick, "left")() + scope(pick, "right", divider=".")()
    >>> list(trace(program).get_trace())
    ['left/x', 'right.x']
    """

    def __init__(self, fn: Callable | None = None, prefix: str | None = None,
                 divider: str = "/") -> None:
        super().__init__(fn)
        if not isinstance(prefix, str):
            raise TypeError(f"scope: prefix must be a str, got {prefix!r}")
        self.prefix = prefix
        self.divider = divider
        self._head = prefix + divider

    def process_message(self, msg: Message) -> None:
        msg.name = self._head + msg.name
