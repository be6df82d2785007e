"""Exceptions raised by probsched. Each names what was wrong (tensor, block, loop, site)."""

from __future__ import annotations


class ProbschedError(Exception):
    """Base class of every error raised by probsched."""


class FrontEndError(ProbschedError, ValueError):
    """A tensor expression is malformed (wrong arity, unknown axis, reduction misuse, dtype)."""


class IRError(ProbschedError, ValueError):
    """A loop-nest IR object is inconsistent or cannot be (de)serialised."""


class ScheduleError(ProbschedError):
    """A schedule primitive's precondition failed; the schedule is left unchanged.

    The message names the primitive, the block and/or loop and the reason, e.g.
    ``reorder: loops i_0 and k_1 are not in one loop nest``.
    """


class BuildError(ProbschedError):
    """Code generation or numba compilation of a kernel failed."""


class KernelArgumentError(ProbschedError, TypeError):
    """A compiled kernel was called with arrays of the wrong number, shape or dtype."""


class ModelFileError(ProbschedError, ValueError):
    """A saved model file cannot be loaded: not a model, truncated, of a newer format, or
    built for CPU features this machine lacks."""
