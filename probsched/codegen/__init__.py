"""Code generation: loop-nest IR -> Python source -> numba-compiled :class:`Kernel`.

- :mod:`.names` — unique, safe identifiers for IR names;
- :mod:`.exprs` — expressions to numba-friendly source (float32 constants, affine indices);
- :mod:`.emit` — statements and functions to a module's source (loops by kind, blocks,
  init hoisting, buffers, parallel forms);
- :mod:`.registry` — ``register_stmt_emitter`` for new statement kinds and
  ``register_block_emitter`` for annotated blocks (micro-kernels);
- :mod:`.compile` — numba options, the SLP setting, compiling and error reporting;
- :mod:`.kernel` — the :class:`Kernel` callable;
- :mod:`.build` — :func:`build`.
"""

from .build import build  # noqa: F401
from .compile import FASTMATH, compile_options, warm_up  # noqa: F401
from .emit import MAX_UNROLL_NODES, ModuleSource, emit_module, emitted_size  # noqa: F401
from .kernel import BoundKernel, Kernel  # noqa: F401
from .compile import configure_numba  # noqa: F401
from .registry import (  # noqa: F401
    register_block_emitter,
    register_stmt_emitter,
    unregister_block_emitter,
    unregister_stmt_emitter,
)

__all__ = [
    "build",
    "Kernel",
    "BoundKernel",
    "emit_module",
    "register_stmt_emitter",
    "unregister_stmt_emitter",
    "register_block_emitter",
    "unregister_block_emitter",
    "configure_numba",
    "MAX_UNROLL_NODES",
    "emitted_size",
]
