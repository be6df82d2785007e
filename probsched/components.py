"""Named components: one way to find a strategy, a task scheduler, a cost model or a measurer.

Each kind of component the tuner plugs together has one :class:`Registry`:
``ps.search.STRATEGIES``, ``ps.tuning.SCHEDULERS``, ``ps.cost_model.COST_MODELS`` and
``ps.measure.MEASURERS``. A registry maps a name to a factory; ``registry.get(spec,
**options)`` makes a component from a name (calling the factory with ``options``) or passes
an object through after checking it has the methods the tuner will call. A user's
component is registered in one line and is then known by name everywhere (the API and
every command-line option that lists the kind's names):

>>> registry = Registry("greeter", required=("greet",))
>>> @registry.register("hello")
... class Hello:
...     def __init__(self, punctuation="!"):
...         self.punctuation = punctuation
...     def greet(self):
...         return "hello" + self.punctuation
>>> registry.get("hello", punctuation="?").greet()
'hello?'
>>> list(registry), "hello" in registry
(['hello'], True)
>>> registry.get("bye")
Traceback (most recent call last):
...
ValueError: unknown greeter 'bye'; known: hello
>>> registry.get(object())
Traceback (most recent call last):
...
TypeError: a greeter needs a greet() method; got object
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Generic, Iterator, Mapping, Optional, Sequence, TypeVar, Union

T = TypeVar("T")


class Registry(Mapping[str, Callable[..., T]], Generic[T]):
    """Factories of one kind of component by name, in registration order (the first
    registered is listed first: registries put their default there)."""

    def __init__(self, kind: str, required: Sequence[str] = ()) -> None:
        self.kind = kind
        self.required = tuple(required)
        self._factories: Dict[str, Callable[..., T]] = {}

    def register(self, name: str, factory: Optional[Callable[..., T]] = None, *, replace: bool = False):
        """Register ``factory`` (a class or a function returning a component) under ``name``;
        without ``factory``, a decorator. A name registered twice is an error unless ``replace``."""

        def add(f: Callable[..., T]) -> Callable[..., T]:
            if not replace and name in self._factories and self._factories[name] is not f:
                raise ValueError(f"a {self.kind} named {name!r} is registered already (replace=True to override)")
            self._factories[name] = f
            return f

        return add if factory is None else add(factory)

    def get(self, spec: Union[str, T], **options: Any) -> T:
        """A component from its name (its factory called with ``options``), or ``spec``
        itself when it is an object with the kind's methods (``options`` must then be empty)."""
        if isinstance(spec, str):
            try:
                factory = self._factories[spec]
            except KeyError:
                raise ValueError(f"unknown {self.kind} {spec!r}; known: {', '.join(self._factories)}") from None
            return factory(**options)
        for method in self.required:
            if not callable(getattr(spec, method, None)):
                raise TypeError(f"a {self.kind} needs a {method}() method; got {type(spec).__name__}")
        if options:
            raise TypeError(f"{self.kind} options {sorted(options)} apply to a name, not to a {type(spec).__name__} object")
        return spec

    def name_of(self, component: Any) -> str:
        """The name a component is shown under: its ``name`` attribute, else its class name."""
        return getattr(component, "name", None) or type(component).__name__

    def __getitem__(self, name: str) -> Callable[..., T]:
        return self._factories[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)

    def __len__(self) -> int:
        return len(self._factories)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._factories)})"


__all__ = ["Registry"]
