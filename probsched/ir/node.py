"""The immutable, structurally compared base class of IR nodes."""

from __future__ import annotations

from typing import Optional


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

    def __reduce__(self):
        # pickled field by field (what a saved model's generated-module record holds);
        # restored without __init__, as replace() copies fields; with the slots __init__
        # derives (an expression's dtype), which restoring would otherwise leave unset
        derived = {name: getattr(self, name) for name in _derived_slots(type(self)) if hasattr(self, name)}
        return _restore, (type(self), tuple(getattr(self, f) for f in self._fields), derived)

    #: field -> test that a value is already in the form ``__init__`` would store: a
    #: ``replace`` changing only such fields skips ``__init__`` (see :meth:`replace`)
    _as_given: dict = {}

    def replace(self, **changes):
        """A copy with some fields changed (through ``__init__``, so checks run again).

        When every change passes its class's ``_as_given`` test, the fields are copied
        without ``__init__``. Replaying one candidate rebuilds hundreds of loops on the
        paths its primitives change, and re-checking what did not change (kind, extent,
        annotations) would more than double the cost of each rebuild
        (``python benchmarks/bench_search.py`` times the replays).

        >>> from probsched.ir.expr import Var
        >>> from probsched.ir.stmt import Loop
        >>> outer = Loop(Var("i"), 4, "parallel", (), {"note": 1})
        >>> moved = outer.replace(body=(Loop(Var("j"), 2),))
        >>> moved.kind, moved.annotations, [l.name for l in moved.body]
        ('parallel', (('note', 1),), ['j'])
        """
        as_given = self._as_given
        if as_given and all(f in as_given and as_given[f](v) for f, v in changes.items()):
            new = object.__new__(type(self))
            for f in self._fields:
                object.__setattr__(new, f, changes[f] if f in changes else getattr(self, f))
            return new
        kwargs = {f: getattr(self, f) for f in self._init_fields()}
        kwargs.update(changes)
        return type(self)(**kwargs)

    @classmethod
    def _init_fields(cls) -> tuple:
        return cls._fields


def _derived_slots(cls: type) -> tuple:
    """Slots of ``cls`` that ``__init__`` sets but that are not fields (caches excluded)."""
    slots = [name for c in cls.__mro__ for name in getattr(c, "__slots__", ())]
    return tuple(n for n in dict.fromkeys(slots) if n not in cls._fields and not n.startswith("_"))


def _restore(cls: type, values: tuple, derived: Optional[dict] = None) -> Node:
    """A node of ``cls`` with its ``_fields`` set to ``values`` and its derived slots to
    ``derived`` (the inverse of pickling it).

    >>> import pickle
    >>> from probsched.ir.expr import Var, Load
    >>> from probsched.ir.stmt import Buffer, Loop
    >>> loop = Loop(Var("i"), 4, "parallel", (), {"note": 1})
    >>> pickle.loads(pickle.dumps(loop)) == loop
    True
    >>> pickle.loads(pickle.dumps(Load(Buffer("A", (4,), "bfloat16"), [Var("i")]))).dtype
    'bfloat16'
    """
    node = object.__new__(cls)
    for f, v in zip(cls._fields, values):
        object.__setattr__(node, f, v)
    for f, v in (derived or {}).items():
        object.__setattr__(node, f, v)
    return node
