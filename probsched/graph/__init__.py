"""Whole networks: import a JAX function, fuse it into tasks, compile and run it.

``ps.from_jax(fn, *args)`` traces ``fn`` into a :class:`Graph` (:mod:`.from_jax`),
``graph.tasks()`` fuses it (:mod:`.fusion`) into de-duplicated :class:`Task` s
(:mod:`.task`), each an ordinary ``PrimFunc`` that the tuner handles like any workload, and
``ps.compile`` (:mod:`.compiler`) builds the network from the best schedule of each task.
"""

from .compiler import CompiledModel, compile
from .from_jax import from_jax
from .fusion import Group, fuse
from .ir import Graph, Node, TensorType
from .task import Task, TaskCall, extract_tasks, lower_group

__all__ = ["compile", "CompiledModel", "from_jax", "fuse", "Group", "Graph", "Node", "TensorType", "Task", "TaskCall", "extract_tasks", "lower_group"]
