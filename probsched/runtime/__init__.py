"""The runtime: what running a compiled network needs, and nothing of tuning.

- :mod:`.model` — :class:`CompiledModel`: the kernel calls in order over one arena, with
  the constants laid out once, safe to call from several threads;
- :mod:`.interface` — :class:`ModelInterface`: what the network takes and gives;
- :mod:`.memory` — :func:`plan_memory`: where each value of a call lives in the arena;
- :mod:`.artifact` — a compiled model saved as one file, and loaded without the tuner.

It imports the code generator's kernels and numpy only: a process that only runs a model
never loads the tuner, the cost model or the database (``probsched.tuning.compile_network``
hands it the kernels it chose).
"""

from .artifact import load
from .interface import ModelInterface, OutputTree, TensorSpec
from .memory import MemoryPlan, plan_memory
from .model import CompiledModel, KernelStep, plan_arena

__all__ = ["load", "CompiledModel", "KernelStep", "ModelInterface", "OutputTree", "TensorSpec", "MemoryPlan", "plan_memory", "plan_arena"]
