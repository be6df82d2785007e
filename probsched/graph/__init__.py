"""Whole networks: import a JAX function or an ONNX model, fuse it into tasks, compile and run it.

``ps.from_jax(fn, *args)`` traces ``fn`` into a :class:`Graph` (:mod:`.from_jax`;
``ps.from_onnx(path)`` interprets an ONNX model into the same, :mod:`.from_onnx`),
``graph.tasks()`` fuses it (:mod:`.fusion`) into de-duplicated :class:`Task` s
(:mod:`.task`), each an ordinary ``PrimFunc`` that the tuner handles like any workload, and
``ps.compile`` (:mod:`.compiler`) builds the network from the best schedule of each task.
"""

from .compiler import CompiledModel, compile
from .from_jax import from_jax
from .from_onnx import from_onnx
from .fusion import Group, fuse
from .ir import Graph, Node, TensorType
from .task import Task, TaskCall, extract_tasks, lower_group

__all__ = ["compile", "CompiledModel", "from_jax", "from_onnx", "fuse", "Group", "Graph", "Node", "TensorType", "Task", "TaskCall", "extract_tasks", "lower_group"]
