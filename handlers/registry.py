"""The registry that lets traces serialise their distributions by name.

A distribution class takes part by implementing ``to_json_dict()`` (parameters made of
values :mod:`handlers.codec` can encode) and a ``from_json_dict(data)`` class method,
and by being registered with :func:`register_distribution`. The built-in
distributions are registered on import. Any other distribution is written as
``{"type": null, "repr": "..."}`` and reads back as ``None``: the trace keeps its
values and log-probs but loses the distribution (and then compares unequal to the
original).

>>> from handlers import Categorical
>>> data = dist_to_json(Categorical([1, 2]))
>>> data["type"], dist_from_json(data) == Categorical([1, 2])
('Categorical', True)
>>> dist_from_json(dist_to_json(object())) is None
True
"""

from __future__ import annotations

from typing import Any, TypeVar

from .codec import decode_value, encode_value
from .distributions import Bernoulli, Categorical, UniformInt

__all__ = ["register_distribution", "dist_to_json", "dist_from_json", "registered_distributions"]

_BY_NAME: dict[str, type] = {}
_BY_CLASS: dict[type, str] = {}

T = TypeVar("T", bound=type)


def register_distribution(cls: T | None = None, *, name: str | None = None) -> Any:
    """Register ``cls`` for JSON serialisation under ``name`` (default: class name).

    Usable as a plain call or as a decorator. Registering the same class twice is
    harmless and a re-definition of it (same module and qualified name) replaces it; a
    different class under a taken name is an error.

    >>> from handlers import Distribution
    >>> @register_distribution
    ... class Const(Distribution):
    ...     def __init__(self, v): self.v = v
    ...     def sample(self, rng): return self.v
    ...     def log_prob(self, value): return 0.0 if value == self.v else float("-inf")
    ...     def params(self): return (self.v,)
    ...     def to_json_dict(self): return {"v": self.v}
    ...     @classmethod
    ...     def from_json_dict(cls, data): return cls(data["v"])
    >>> dist_from_json(dist_to_json(Const((1, 2))))
    Const((1, 2))
    """
    if cls is None:
        return lambda c: register_distribution(c, name=name)
    key = cls.__name__ if name is None else name
    for method in ("to_json_dict", "from_json_dict"):
        if not callable(getattr(cls, method, None)):
            raise TypeError(f"register_distribution: {cls.__name__} has no method {method}")
    existing = _BY_NAME.get(key)
    if existing is not None and existing is not cls:
        # The same class defined again (module reload, notebook cell re-run) replaces
        # the old definition; a genuinely different class may not steal the name.
        if (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(
                f"register_distribution: name {key!r} is already used by {existing!r}")
        del _BY_CLASS[existing]
    _BY_NAME[key] = cls
    _BY_CLASS[cls] = key
    return cls


def registered_distributions() -> dict[str, type]:
    """A copy of the registry, name -> class.

    >>> sorted(n for n in registered_distributions() if n in {"Bernoulli", "Categorical"})
    ['Bernoulli', 'Categorical']
    """
    return dict(_BY_NAME)


def dist_to_json(dist: Any) -> Any:
    """Encode ``dist`` for JSON: registered classes by name and parameters, others by
    ``repr`` only, ``None`` as ``None``.

    >>> from handlers import Bernoulli
    >>> dist_to_json(Bernoulli(0.5))
    {'type': 'Bernoulli', 'params': {'p': 0.5}}
    """
    if dist is None:
        return None
    name = _BY_CLASS.get(type(dist))
    if name is None:
        return {"type": None, "repr": repr(dist)}
    params = dist.to_json_dict()
    if not all(type(k) is str for k in params):
        raise TypeError(f"{type(dist).__name__}.to_json_dict must return a dict with str keys")
    # A plain JSON object of encoded values: easier to read than a tagged $dict.
    return {"type": name, "params": {k: encode_value(v) for k, v in params.items()}}


def dist_from_json(data: Any) -> Any:
    """Decode what :func:`dist_to_json` wrote; unknown distributions become ``None``.

    >>> dist_from_json({"type": "UniformInt", "params": {"low": 0, "high": 2}})
    UniformInt(0, 2)
    >>> dist_from_json({"type": "NotRegisteredHere", "params": {}}) is None
    True
    """
    if data is None:
        return None
    cls = _BY_NAME.get(data.get("type"))
    if cls is None:
        return None
    return cls.from_json_dict({k: decode_value(v) for k, v in data["params"].items()})


for _cls in (Categorical, Bernoulli, UniformInt):
    register_distribution(_cls)
