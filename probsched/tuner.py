"""Deprecated: moved to :mod:`probsched.tuning.tune_operator` (issue #59); this alias warns for one release."""

import warnings

from .tuning.tune_operator import *  # noqa: F401,F403
from .tuning.tune_operator import __all__  # noqa: F401

warnings.warn("probsched.tuner is deprecated; use probsched.tuning.tune_operator", DeprecationWarning, stacklevel=2)
