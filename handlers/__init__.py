"""A small, domain-free effect-handler library in the style of Pyro and NumPyro.

A probabilistic program is a plain Python function that calls :func:`sample` at each
random choice. Handlers change what ``sample`` does without touching the program:

>>> from handlers import (Categorical, Trace, condition, mutate, replay, sample, seed,
...                       trace)
>>> def program():
...     a = sample("a", Categorical([1, 2, 4, 8]))
...     b = sample("b", Categorical([0, 16, 64]))
...     return a * b
>>> tr = trace(seed(program, rng_seed=0)).get_trace()     # record the decisions
>>> Trace.from_json(tr.to_json()) == tr
True
>>> replay(program, tr)() == tr["a"].value * tr["b"].value  # same decisions again
True
>>> condition(program, {"a": 4, "b": 16})()                # fix decisions
64
>>> new = trace(mutate(seed(program, 1), tr, sites=["b"])).get_trace()
>>> new["a"].value == tr["a"].value                        # only "b" re-proposed
True

Modules: :mod:`~handlers.runtime` (``sample``, the stack, ``Messenger``),
:mod:`~handlers.trace_struct` (``Trace``, ``Site``), :mod:`~handlers.distributions`,
:mod:`~handlers.codec` (exact JSON values), :mod:`~handlers.registry` (distributions
by name), one module per handler family and :mod:`~handlers.errors`.
"""

from .blocking import block
from .codec import decode_value, encode_value, exact_equal
from .conditioning import condition, substitute
from .distributions import Bernoulli, Categorical, Distribution, UniformInt
from .errors import (DuplicateSiteError, HandlerError, MissingMethodError, ReplayError,
                     SupportError, UnmatchedKeyError, UnmatchedKeyWarning)
from .mutation import mutate
from .recording import replay, trace
from .registry import dist_from_json, dist_to_json, register_distribution
from .runtime import (UNSET, Message, Messenger, get_default_rng, handler_stack, sample,
                      set_default_rng)
from .scoping import scope
from .seeding import seed
from .trace_struct import Site, Trace

__all__ = [
    # running programs
    "sample", "set_default_rng", "get_default_rng", "handler_stack", "Messenger", "Message",
    "UNSET",
    # handlers
    "trace", "replay", "condition", "substitute", "seed", "block", "scope", "mutate",
    # traces
    "Trace", "Site",
    # distributions and serialisation
    "Distribution", "Categorical", "Bernoulli", "UniformInt", "register_distribution",
    "dist_to_json", "dist_from_json", "encode_value", "decode_value", "exact_equal",
    # errors
    "HandlerError", "DuplicateSiteError", "SupportError", "ReplayError", "UnmatchedKeyError",
    "MissingMethodError", "UnmatchedKeyWarning",
]
