"""Fixing site values: the ``condition`` and ``substitute`` handlers.

Both take ``data``: a mapping name -> value, or a callable name -> value that returns
``None`` to leave a site alone. A value outside the site's support raises
``SupportError``. With a mapping, keys that match no site by the end of a run are
reported: ``UnmatchedKeyWarning`` by default, ``UnmatchedKeyError`` with
``strict=True`` (a callable cannot be checked this way).

>>> from handlers import Categorical, sample
>>> def program():
...     return sample("a", Categorical([1, 2, 4, 8]))
>>> condition(program, {"a": 4})()
4
>>> condition(program, {"a": 3})()
Traceback (most recent call last):
...
handlers.errors.SupportError: site 'a': value 3 is outside the support of Categorical([1, 2, 4, 8]) (condition)
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from typing import Any, Callable

from .errors import (DuplicateSiteError, MissingMethodError, SupportError, UnmatchedKeyError,
                     UnmatchedKeyWarning)
from .runtime import Message, Messenger

__all__ = ["condition", "substitute"]


def _user_stacklevel() -> int:
    # Attribute the warning to the first frame outside this package (the user's
    # `with` line or call), however many handler layers sit in between.
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").startswith("handlers."):
        frame, level = frame.f_back, level + 1
    return level


class _FixValues(Messenger):
    _observe = False

    def __init__(self, fn: Callable | None = None,
                 data: Mapping[str, Any] | Callable[[str], Any] | None = None,
                 strict: bool = False) -> None:
        super().__init__(fn)
        if isinstance(data, Mapping):
            self._data: Mapping[str, Any] | None = data
            self._lookup = None
        elif callable(data):
            self._data = None
            self._lookup = data
        else:
            raise TypeError(f"{type(self).__name__}: data must be a mapping or a callable, "
                            f"got {data!r}")
        self.strict = strict
        self._seen: set[str] = set()

    def enter_run(self) -> None:
        self._seen = set()

    def process_message(self, msg: Message) -> None:
        name = msg.name
        seen = self._seen
        n_seen = len(seen)
        seen.add(name)
        if len(seen) == n_seen:
            raise DuplicateSiteError.for_site(name, type(self).__name__)
        data = self._data
        if data is not None:
            if name not in data:
                return
            value = data[name]
        else:
            value = self._lookup(name)
            if value is None:
                return
        try:
            contains = msg.fn.contains
        except AttributeError:
            raise MissingMethodError.for_method(name, msg.fn, "contains",
                                                type(self).__name__) from None
        if not contains(value):
            raise SupportError.for_value(name, value, msg.fn, type(self).__name__)
        msg.value = value
        if self._observe:
            msg.observed = True

    def exit_run(self, ok: bool) -> None:
        # After an exception the run ended early, so unmatched keys mean nothing.
        if not ok or self._data is None:
            return
        unmatched = [key for key in self._data if key not in self._seen]
        if not unmatched:
            return
        error = UnmatchedKeyError.for_keys(unmatched, type(self).__name__)
        if self.strict:
            raise error
        warnings.warn(str(error), UnmatchedKeyWarning, stacklevel=_user_stacklevel())


class condition(_FixValues):
    """Fix site values and mark the sites observed (they become evidence, not choices).

    >>> from handlers import Categorical, sample, trace
    >>> def program():
    ...     return sample("a", Categorical([1, 2]))
    >>> tr = trace(condition(program, {"a": 2})).get_trace()
    >>> tr["a"].value, tr["a"].observed
    (2, True)
    >>> condition(program, {"typo": 1}, strict=True)()
    Traceback (most recent call last):
    ...
    handlers.errors.UnmatchedKeyError: condition: keys ['typo'] matched no sample site
    """

    _observe = True


class substitute(_FixValues):
    """Fix site values without marking them observed (still choices of the trace).

    >>> from handlers import Categorical, sample, trace
    >>> def program():
    ...     return sample("a", Categorical([1, 2])), sample("b", Categorical([3, 4]))
    >>> tr = trace(substitute(program, lambda name: 4 if name == "b" else None)).get_trace()
    >>> tr["b"].value, tr["b"].observed
    (4, False)
    """
