"""The immutable, structurally compared base class of IR nodes."""

from __future__ import annotations


class Node:
    """An immutable IR node; ``==`` and ``hash`` are structural over ``_fields``.

    Subclasses declare ``__slots__`` and ``_fields`` and set attributes in ``__init__`` with
    ``object.__setattr__``. Immutability is what makes ``Schedule.copy()`` O(1): trees share
    every unchanged subtree.
    """

    __slots__ = ("_hash",)
    _fields: tuple = ()

    def _key(self) -> tuple:
        return (type(self).__name__,) + tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(self) is not type(other):
            return False
        if hash(self) != hash(other):
            return False
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            h = hash(self._key())
            object.__setattr__(self, "_hash", h)
            return h

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"

    def replace(self, **changes):
        """A copy with some fields changed (through ``__init__``, so checks run again)."""
        kwargs = {f: getattr(self, f) for f in self._init_fields()}
        kwargs.update(changes)
        return type(self)(**kwargs)

    @classmethod
    def _init_fields(cls) -> tuple:
        return cls._fields
