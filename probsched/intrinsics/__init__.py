"""Tensor intrinsics: register-blocked micro-kernels that ``Schedule.tensorize`` swaps in.

>>> import probsched as ps
>>> sorted(n for n in ps.intrinsics.list() if n.startswith("matmul_"))[:3]
['matmul_3x32', 'matmul_4x16', 'matmul_4x24']
"""

from .disk_cache import cache_dir, clear  # noqa: F401
from .matmul import register_all as _register_matmul
from .registry import Intrinsic, get, list, register  # noqa: F401

_register_matmul()
