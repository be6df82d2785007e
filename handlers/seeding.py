"""Reproducible randomness: the ``seed`` handler.

>>> from handlers import Categorical, sample
>>> def program():
...     return [sample(f"x{i}", Categorical(list(range(100)))) for i in range(3)]
>>> seed(program, 0)() == seed(program, 0)()
True
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .runtime import Message, Messenger

__all__ = ["seed", "make_rng"]


def make_rng(rng_seed: Any) -> np.random.Generator:
    """A fresh ``numpy.random.Generator`` from a seed, or ``rng_seed`` itself if it
    already is a Generator.

    >>> make_rng(0).integers(100) == make_rng(0).integers(100)
    np.True_
    """
    if isinstance(rng_seed, np.random.Generator):
        return rng_seed
    return np.random.default_rng(rng_seed)


class seed(Messenger):
    """Draw the sites it sees with its own numpy Generator.

    The generator is re-created from ``rng_seed`` (an int, a sequence of ints or a
    ``SeedSequence``) on every entry (every call of the wrapped function, every
    ``with``), so running a seeded program twice gives the same values. A
    ``Generator`` passed as ``rng_seed`` is used as is and keeps its state across
    runs. The innermost ``seed`` wins: it only fills ``msg.rng`` when no handler
    further in chose one.

    >>> from handlers import Categorical, sample, trace
    >>> def program():
    ...     return sample("a", Categorical(list(range(1000))))
    >>> trace(seed(program, 0)).get_trace() == trace(seed(program, 0)).get_trace()
    True
    >>> seed(seed(program, 1), 2)() == seed(program, 1)()
    True
    """

    def __init__(self, fn: Callable | None = None, rng_seed: Any = None) -> None:
        super().__init__(fn)
        if rng_seed is None:
            raise TypeError("seed: rng_seed is required (an int, SeedSequence or Generator)")
        self.rng_seed = rng_seed
        self.rng = make_rng(rng_seed)

    def enter_run(self) -> None:
        self.rng = make_rng(self.rng_seed)

    def process_message(self, msg: Message) -> None:
        if msg.rng is None:
            msg.rng = self.rng
