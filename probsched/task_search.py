"""Deprecated: moved to :mod:`probsched.tuning.task_search` (issue #59); this alias warns for one release."""

import warnings

from .tuning.task_search import *  # noqa: F401,F403
from .tuning.task_search import __all__  # noqa: F401

warnings.warn("probsched.task_search is deprecated; use probsched.tuning.task_search", DeprecationWarning, stacklevel=2)
