"""The effect runtime: ``sample``, the thread-local handler stack and ``Messenger``.

A program calls :func:`sample` at every random choice. Each call builds one
:class:`Message` and shows it to the active handlers (:class:`Messenger` instances):

1. ``process_message`` runs from the innermost (most recently entered) handler to the
   outermost. A handler that sets ``msg.stop`` (``block``) hides the site from every
   handler further out.
2. If no handler set ``msg.value``, the value is drawn with
   ``msg.fn.sample(msg.rng)``; ``msg.rng`` is the generator chosen by a handler
   (``seed``) or, if none did, the module default generator.
3. ``postprocess_message`` runs in the reverse order: from the outermost handler that
   saw the message back to the innermost.

This is NumPyro's and Pyro's order. Consequences worth knowing:

* a value set by an outer handler overrides one set further in (``substitute`` outside
  ``replay`` wins), except that ``replay`` and ``mutate`` never touch observed sites;
* a site name rewritten by ``scope`` is seen rewritten by every handler outside it;
* the innermost ``seed`` decides the generator (outer seeds leave ``msg.rng`` alone).

With no handler active, ``sample`` draws from a module-level numpy ``Generator``
(:func:`set_default_rng` resets it), so a program runs on its own:

>>> from handlers import Categorical, sample, set_default_rng
>>> _ = set_default_rng(0)
>>> sample("a", Categorical([1, 2, 4])) in (1, 2, 4)
True

The stack is per thread (``threading.local``): two threads running programs under
different handlers never see each other's handlers.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable

import numpy as np

from .errors import HandlerError, MissingMethodError

__all__ = [
    "UNSET",
    "Message",
    "Messenger",
    "sample",
    "handler_stack",
    "set_default_rng",
    "get_default_rng",
]


class _Unset:
    """Type of :data:`UNSET`: the value of a message no handler has decided yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


#: ``Message.value`` before any handler or the default sampler set it. A sentinel
#: rather than ``None`` because ``None`` is a legitimate candidate value.
UNSET: Any = _Unset()


class _StackState(threading.local):
    def __init__(self) -> None:
        self.stack: list[Messenger] = []
        # Bound hooks of the handlers that override them, in call order, rebuilt on
        # every push and pop: sample() then runs no attribute lookups per handler.
        self.procs: tuple[Callable, ...] = ()
        self.proc_owners: tuple[Messenger, ...] = ()
        self.posts: tuple[Callable, ...] = ()

    def rebuild(self) -> None:
        stack = self.stack
        self.proc_owners = tuple(h for h in reversed(stack) if h._has_process)
        self.procs = tuple(h.process_message for h in self.proc_owners)
        self.posts = tuple(h.postprocess_message for h in stack if h._has_post)


_STATE = _StackState()
_new = object.__new__

# Module-level default generator: used when no ``seed`` handler chose one, so that a
# program also runs with no handler at all. Shared by all threads (numpy Generators
# serialise access internally).
_default_rng: np.random.Generator = np.random.default_rng()


def set_default_rng(seed_or_generator: Any = None) -> np.random.Generator:
    """Reset the module default generator and return it.

    Accepts anything ``np.random.default_rng`` accepts (an int, a SeedSequence,
    ``None`` for fresh entropy) or a ``Generator``, which is used as is.

    >>> from handlers import Categorical, sample
    >>> _ = set_default_rng(42); x = sample("x", Categorical(list(range(100))))
    >>> _ = set_default_rng(42); x == sample("x", Categorical(list(range(100))))
    True
    """
    global _default_rng
    if isinstance(seed_or_generator, np.random.Generator):
        _default_rng = seed_or_generator
    else:
        _default_rng = np.random.default_rng(seed_or_generator)
    return _default_rng


def get_default_rng() -> np.random.Generator:
    """Return the module default generator used when no ``seed`` handler is active.

    >>> g = set_default_rng(1)
    >>> get_default_rng() is g
    True
    """
    return _default_rng


def handler_stack() -> tuple["Messenger", ...]:
    """Return a snapshot of this thread's handler stack, outermost first.

    >>> from handlers import seed, trace
    >>> with trace(), seed(rng_seed=0):
    ...     [type(h).__name__ for h in handler_stack()]
    ['trace', 'seed']
    >>> handler_stack()
    ()
    """
    return tuple(_STATE.stack)


class Message:
    """The record of one sample site as it travels through the handler stack.

    Fields: ``name``; ``fn`` (the distribution); ``value`` (:data:`UNSET` until
    decided); ``observed``; ``infer`` (a dict of strategy metadata, fresh per
    message); ``rng`` (the generator the default sampler will use, ``None`` for the
    module default); ``stop`` (set by ``block`` to hide the site from outer handlers);
    ``log_q_ratio`` (proposal log-ratio written by ``mutate``, default 0.0);
    ``repaired`` (the recorded value was outside the support and is resampled).

    >>> from handlers import Bernoulli
    >>> msg = Message("a", Bernoulli(0.5))
    >>> msg.value, msg.observed, msg.log_q_ratio
    (UNSET, False, 0.0)
    """

    __slots__ = ("name", "fn", "value", "observed", "infer", "rng", "stop", "log_q_ratio",
                 "repaired")

    def __init__(self, name: str, fn: Any, infer: dict | None = None) -> None:
        self.name = name
        self.fn = fn
        self.value = UNSET
        self.observed = False
        # Copied so that handlers writing metadata never mutate the caller's dict.
        self.infer = {} if infer is None else dict(infer)
        self.rng = None
        self.stop = False
        self.log_q_ratio = 0.0
        self.repaired = False

    def __repr__(self) -> str:
        return (f"Message(name={self.name!r}, fn={self.fn!r}, value={self.value!r}, "
                f"observed={self.observed})")


def sample(name: str, dist: Any, *, obs: Any = None, infer: dict | None = None) -> Any:
    """Draw (or observe) the value of the random choice ``name`` with distribution ``dist``.

    With ``obs`` the value is ``obs`` and the site is observed (``None`` therefore
    cannot be observed). ``infer`` is copied into the message for handlers to read.
    Duplicate names in one run are detected by the handlers that track runs
    (``trace``, ``replay``, ``condition``, ``substitute``, ``mutate``); with no such
    handler active ``sample`` cannot tell runs apart and does not check.

    >>> from handlers import Categorical, trace, seed
    >>> def program():
    ...     return sample("a", Categorical([1, 2])) + sample("b", Categorical([10]), obs=10)
    >>> tr = trace(seed(program, 0)).get_trace()
    >>> tr["b"].observed, tr["b"].value
    (True, 10)
    """
    if name.__class__ is not str:
        raise TypeError(f"site name must be a str, got {name!r}")
    stack = _STATE.stack
    if not stack:
        if obs is not None:
            return obs
        try:
            draw = dist.sample
        except AttributeError:
            raise MissingMethodError.for_method(name, dist, "sample", "sample") from None
        return draw(_default_rng)

    msg = _new(Message)
    msg.name = name
    msg.fn = dist
    if obs is None:
        msg.value = UNSET
        msg.observed = False
    else:
        msg.value = obs
        msg.observed = True
    msg.infer = {} if infer is None else dict(infer)
    msg.rng = None
    msg.stop = False
    msg.log_q_ratio = 0.0
    msg.repaired = False

    # Hot path: Pyro's apply_stack inlined, the message built without calling
    # __init__, and only the hooks handlers actually override called.
    state = _STATE
    procs = state.procs
    for process in procs:
        process(msg)
        if msg.stop:
            return _finish_stopped(msg, stack, state.proc_owners[procs.index(process)])
    if msg.value is UNSET:
        _draw(msg)
    for post in state.posts:
        post(msg)
    return msg.value


def _draw(msg: Message) -> None:
    try:
        draw = msg.fn.sample
    except AttributeError:
        raise MissingMethodError.for_method(msg.name, msg.fn, "sample", "sample") from None
    rng = msg.rng
    msg.value = draw(_default_rng if rng is None else rng)


def _finish_stopped(msg: Message, stack: list, stopper: "Messenger") -> Any:
    # Only the stopping handler and those inside it see the postprocess phase.
    if msg.value is UNSET:
        _draw(msg)
    for handler in stack[stack.index(stopper):]:
        if handler._has_post:
            handler.postprocess_message(msg)
    return msg.value


class Messenger:
    """Base class of effect handlers.

    A subclass overrides ``process_message(msg)`` and/or ``postprocess_message(msg)``
    and, for per-run state, ``enter_run()`` (called on each entry, before the handler
    is pushed) and ``exit_run(ok)`` (called after it is popped; ``ok`` is False when
    an exception is propagating). Every handler works three ways::

        handler(fn, ...)(*args)        # wrap a callable
        @handler(...)                  # decorate (fn omitted)
        with handler(...): ...         # scope a block of code

    Whatever happens inside, leaving the handler restores the stack to exactly what
    it was on entry. A handler instance holds the state of the run in progress, so it
    cannot be entered again while active (recursion, or the same instance used by two
    threads at once): wrap the function once per thread instead.

    >>> from handlers import Categorical, sample
    >>> class double(Messenger):
    ...     def postprocess_message(self, msg):
    ...         msg.value = 2 * msg.value
    >>> @double()
    ... def program():
    ...     return sample("a", Categorical([21]))
    >>> program()
    42
    >>> with double():
    ...     sample("a", Categorical([4]))
    8
    """

    # Whether the class overrides each hook; sample() skips the no-op calls.
    _has_process = False
    _has_post = False
    # Stack depth at entry while active, None otherwise (class default so that a
    # subclass forgetting super().__init__ still works).
    _depth: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._has_process = cls.process_message is not Messenger.process_message
        cls._has_post = cls.postprocess_message is not Messenger.postprocess_message

    def __init__(self, fn: Callable | None = None) -> None:
        if fn is not None and not callable(fn):
            raise TypeError(f"{type(self).__name__}: fn must be callable, got {fn!r}")
        self.fn = fn

    # -- per-run hooks -------------------------------------------------------------
    def enter_run(self) -> None:
        """Reset per-run state; called on every entry before the handler is pushed.

        >>> Messenger().enter_run() is None
        True
        """

    def exit_run(self, ok: bool) -> None:
        """Finish a run; called after the handler is popped (``ok``: no exception).

        >>> Messenger().exit_run(True) is None
        True
        """

    # -- message hooks ---------------------------------------------------------------
    def process_message(self, msg: Message) -> None:
        """Inspect or change ``msg`` on its way out (innermost handler first).

        >>> Messenger().process_message(Message("a", None)) is None
        True
        """

    def postprocess_message(self, msg: Message) -> None:
        """Inspect or change ``msg`` once its value is known (outermost handler first).

        >>> Messenger().postprocess_message(Message("a", None)) is None
        True
        """

    # -- the three ways of use -------------------------------------------------------
    def __enter__(self) -> Any:
        if self._depth is not None:
            raise HandlerError(
                f"{type(self).__name__} handler is already active; a handler instance "
                "cannot be entered twice at once (recursion or sharing across threads)")
        self.enter_run()
        stack = _STATE.stack
        self._depth = len(stack)
        stack.append(self)
        _STATE.rebuild()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        depth = self._depth
        self._depth = None
        # Truncate rather than pop: the stack is restored exactly even if something
        # inside left extra handlers behind.
        state = _STATE
        del state.stack[depth:]
        state.rebuild()
        self.exit_run(exc_type is None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fn is None:
            if len(args) == 1 and not kwargs and callable(args[0]):
                bound = copy.copy(self)
                bound.fn = args[0]
                return bound
            raise TypeError(
                f"{type(self).__name__} has no function to run; pass one as fn, use it "
                "as a decorator, or as a context manager")
        with self:
            return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        fn = getattr(self.fn, "__name__", self.fn)
        return f"<{type(self).__name__} handler of {fn!r}>"
