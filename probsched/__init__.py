"""probsched: tensor program optimization on the CPU by probabilistic programming.

>>> import probsched as ps
>>> A = ps.placeholder((4,), name="A")
>>> B = ps.compute((4,), lambda i: A[i] * 2.0, name="B")
>>> func = ps.create_func([A, B])
>>> [b.name for b in func.blocks()]
['B']
"""

__version__ = "0.1.0"

from .errors import (  # noqa: F401
    BuildError,
    FrontEndError,
    IRError,
    KernelArgumentError,
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
from . import workloads  # noqa: E402,F401
from .workloads import as_workload  # noqa: E402,F401
from . import intrinsics  # noqa: E402,F401
from . import space  # noqa: E402,F401
from . import measure  # noqa: E402,F401
from . import database  # noqa: E402,F401
from . import cost_model  # noqa: E402,F401
from . import search  # noqa: E402,F401
from .graph import Graph, Task, from_jax  # noqa: E402,F401
from . import runtime  # noqa: E402,F401
from .runtime import CompiledModel  # noqa: E402,F401
from . import tuning  # noqa: E402,F401
from .tuning import ModelTuneResult, TuneResult, TuningOptions, compile, tune, tune_model  # noqa: E402,F401
from .tuning import task_scheduler  # noqa: E402,F401
from . import models  # noqa: E402,F401


def __getattr__(name: str) -> object:
    # ps.ScheduleTrace was renamed ps.InstructionLog (issue #52: "trace" means the handlers'
    # record of sample sites); the old name resolves, with a warning, for one release.
    if name == "ScheduleTrace":
        import warnings

        warnings.warn("ps.ScheduleTrace is deprecated; use ps.InstructionLog", DeprecationWarning, stacklevel=2)
        return InstructionLog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
