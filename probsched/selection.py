"""Deprecated: moved to :mod:`probsched.tuning.selection` (issue #59); this alias warns for one release."""

import warnings

from .tuning.selection import *  # noqa: F401,F403
from .tuning.selection import __all__  # noqa: F401

warnings.warn("probsched.selection is deprecated; use probsched.tuning.selection", DeprecationWarning, stacklevel=2)
