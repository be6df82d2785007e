"""Cache-line aligned arrays: :mod:`probsched.aligned` (used below the code generator too);
this module is its name in the code generator."""

from ..aligned import ALIGNMENT, aligned_copy, aligned_empty  # noqa: F401

__all__ = ["aligned_copy", "aligned_empty"]
