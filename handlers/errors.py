"""Exceptions and warnings raised by the effect handlers.

Every error caused by a particular sample site names that site (and keeps it in
``.site``) so that a failure deep inside a long program points at the decision that
caused it.

>>> from handlers import HandlerError, SupportError
>>> issubclass(SupportError, HandlerError) and issubclass(SupportError, ValueError)
True
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = [
    "HandlerError",
    "DuplicateSiteError",
    "SupportError",
    "ReplayError",
    "UnmatchedKeyError",
    "MissingMethodError",
    "UnmatchedKeyWarning",
]


class HandlerError(Exception):
    """Base class of every error raised by the handlers package.

    ``site`` is the name of the offending sample site, or ``None`` when the error is
    not about a single site.

    >>> err = HandlerError("something went wrong", site="a")
    >>> err.site, str(err)
    ('a', 'something went wrong')
    """

    def __init__(self, message: str, site: str | None = None) -> None:
        super().__init__(message)
        self.site = site


class DuplicateSiteError(HandlerError):
    """Two ``sample`` calls used the same site name within one run.

    >>> raise DuplicateSiteError.for_site("a", "trace")
    Traceback (most recent call last):
    ...
    handlers.errors.DuplicateSiteError: site 'a' is sampled twice in one run (detected by trace); ...
    """

    @classmethod
    def for_site(cls, name: str, handler: str) -> "DuplicateSiteError":
        """Build the error for site ``name`` detected by the handler called ``handler``.

        >>> DuplicateSiteError.for_site("x", "replay").site
        'x'
        """
        return cls(
            f"site {name!r} is sampled twice in one run (detected by {handler}); "
            "give every sample call a unique name, e.g. with scope()",
            site=name,
        )


class SupportError(HandlerError, ValueError):
    """A value given for a site lies outside the support of its distribution.

    >>> from handlers import Categorical
    >>> raise SupportError.for_value("a", 3, Categorical([1, 2]), "condition")
    Traceback (most recent call last):
    ...
    handlers.errors.SupportError: site 'a': value 3 is outside the support of Categorical([1, 2]) (condition)
    """

    @classmethod
    def for_value(cls, name: str, value: Any, dist: Any, handler: str) -> "SupportError":
        """Build the error for ``value`` at site ``name`` with distribution ``dist``.

        >>> SupportError.for_value("a", 3, "D", "substitute").site
        'a'
        """
        return cls(
            f"site {name!r}: value {value!r} is outside the support of {dist!r} ({handler})",
            site=name,
        )


class ReplayError(HandlerError):
    """``replay(..., strict=True)`` could not replay a recorded trace faithfully.

    >>> issubclass(ReplayError, HandlerError)
    True
    """


class UnmatchedKeyError(HandlerError, LookupError):
    """A ``condition``/``substitute`` key matched no sample site (``strict=True``).

    ``keys`` holds the unmatched keys.

    >>> UnmatchedKeyError.for_keys(["z"], "condition").keys
    ('z',)
    """

    def __init__(self, message: str, keys: Iterable[Any] = ()) -> None:
        super().__init__(message)
        self.keys = tuple(keys)

    @classmethod
    def for_keys(cls, keys: Iterable[Any], handler: str) -> "UnmatchedKeyError":
        """Build the error listing the unmatched ``keys`` of handler ``handler``.

        >>> str(UnmatchedKeyError.for_keys(["z", "y"], "substitute"))
        "substitute: keys ['y', 'z'] matched no sample site"
        """
        keys = sorted(keys, key=repr)
        return cls(f"{handler}: keys {keys!r} matched no sample site", keys)


class MissingMethodError(HandlerError, TypeError):
    """A distribution lacks a method of the protocol that a handler needs.

    >>> raise MissingMethodError.for_method("b", object(), "propose", "mutate")
    Traceback (most recent call last):
    ...
    handlers.errors.MissingMethodError: site 'b': distribution object has no method propose required by mutate
    """

    @classmethod
    def for_method(cls, name: str, dist: Any, method: str, handler: str) -> "MissingMethodError":
        """Build the error for ``dist`` at site ``name`` missing ``method``.

        >>> MissingMethodError.for_method("b", 1, "sample", "sample").site
        'b'
        """
        return cls(
            f"site {name!r}: distribution {type(dist).__name__} has no method {method} "
            f"required by {handler}",
            site=name,
        )


class UnmatchedKeyWarning(UserWarning):
    """A ``condition``/``substitute`` key matched no sample site (default, non-strict).

    >>> issubclass(UnmatchedKeyWarning, UserWarning)
    True
    """
