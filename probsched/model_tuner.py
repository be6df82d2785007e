"""Deprecated: moved to :mod:`probsched.tuning.tune_network` (issue #59); this alias warns for one release."""

import warnings

from .tuning.tune_network import *  # noqa: F401,F403
from .tuning.tune_network import __all__  # noqa: F401

warnings.warn("probsched.model_tuner is deprecated; use probsched.tuning.tune_network", DeprecationWarning, stacklevel=2)
