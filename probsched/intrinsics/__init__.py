"""Tensor intrinsics: register-blocked micro-kernels that ``Schedule.tensorize`` swaps in.

>>> import probsched as ps
>>> sorted(n for n in ps.intrinsics.list() if n.startswith("matmul_"))[:3]
['matmul_12x32', 'matmul_14x32', 'matmul_3x32']
"""

from ..ir.intrinsic import Intrinsic, get, list, register, unregister  # noqa: F401
from .disk_cache import cache_dir, clear  # noqa: F401
from .matmul import register_all as _register_matmul
from .matmul_bf16 import register_all as _register_matmul_bf16
from .matmul_int8 import register_all as _register_matmul_int8
from .matmul_amx import register_all as _register_matmul_amx

_register_matmul()
_register_matmul_bf16()
_register_matmul_int8()
_register_matmul_amx()


def _register_codegen() -> None:
    from ..codegen import register_block_emitter
    from ..schedule.tensorize import TENSORIZE_KEY
    from .emit import emit_tensorized

    register_block_emitter(TENSORIZE_KEY, emit_tensorized)


_register_codegen()
