"""probsched: tensor program optimization on the CPU by probabilistic programming.

>>> import probsched as ps
>>> A = ps.placeholder((4,), name="A")
>>> B = ps.compute((4,), lambda i: A[i] * 2.0, name="B")
>>> func = ps.create_func([A, B])
>>> [b.name for b in func.blocks()]
['B']
"""

from .version import __version__  # noqa: E402,F401

from .errors import (  # noqa: F401
    BuildError,
    FrontEndError,
    IRError,
    KernelArgumentError,
    ModelFileError,
    ProbschedError,
    ScheduleError,
)
from .ir.expr import (  # noqa: F401
    Expr,
    Var,
    abs,
    all_of,
    any_of,
    cast,
    const,
    eq,
    exp,
    if_then_else,
    log,
    maximum,
    minimum,
    ne,
    rint,
    sigmoid,
    sqrt,
    tanh,
)
from .ir.stmt import Block, Buffer, IterVar, Loop, PrimFunc, Store  # noqa: F401
from .te import (  # noqa: F401
    Tensor,
    compute,
    create_func,
    max,
    min,
    placeholder,
    reduce_axis,
    sum,
)
from .schedule import BlockRV, InstructionLog, LoopRV, Schedule  # noqa: F401
from .codegen import Kernel, build, register_stmt_emitter  # noqa: F401,E402
from .target import Target  # noqa: F401,E402
from . import intrinsics  # noqa: E402,F401
from . import runtime  # noqa: E402,F401
from .runtime import CompiledModel, load  # noqa: E402,F401

# The rest loads when first used (PEP 562): a process that only runs a compiled model
# (ps.load) never imports the tuner, the design space, the cost model or the database.
_LAZY_MODULES = ("workloads", "space", "measure", "database", "cost_model", "search", "graph", "tuning", "models")
_LAZY_NAMES = {
    "as_workload": "workloads",
    "Graph": "graph",
    "Task": "graph",
    "from_jax": "graph",
    "from_onnx": "graph",
    "quantize": "graph",
    "ModelTuneResult": "tuning",
    "TuneResult": "tuning",
    "TuningOptions": "tuning",
    "compile": "tuning",
    "tune": "tuning",
    "tune_model": "tuning",
    "task_scheduler": "tuning",
}


def __getattr__(name: str) -> object:
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY_NAMES:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY_NAMES[name]}"), name)
        globals()[name] = value  # found once
        return value
    # ps.ScheduleTrace was renamed ps.InstructionLog (issue #52: "trace" means the handlers'
    # record of sample sites); the old name resolves, with a warning, for one release.
    if name == "ScheduleTrace":
        import warnings

        warnings.warn("ps.ScheduleTrace is deprecated; use ps.InstructionLog", DeprecationWarning, stacklevel=2)
        return InstructionLog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY_MODULES) | set(_LAZY_NAMES))
