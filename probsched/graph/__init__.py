"""The front end: networks in (a JAX function or an ONNX model), simplified, fused and cut into tasks.

``ps.from_jax(fn, *args)`` traces ``fn`` into a :class:`Graph` (:mod:`.from_jax`;
``ps.from_onnx(path)`` interprets an ONNX model into the same, :mod:`.from_onnx`),
``graph.tasks()`` fuses it (:mod:`.fusion`) into de-duplicated :class:`Task` s
(:mod:`.task`), each an ordinary ``PrimFunc`` that the tuner handles like any workload.
``ps.quantize(fn, calibration)`` makes an int8 network of a float32 one (:mod:`.quantization`).
The front end only translates: it imports the IR and the tensor-expression layer, never
the tuner, the measurer or the database (``ps.compile`` is :mod:`probsched.tuning`'s, the
compiled model :mod:`probsched.runtime`'s).
"""

from .from_jax import from_jax
from .from_onnx import from_onnx
from .fusion import Group, fuse
from .ir import Graph, Node, TensorType
from .quantization import quantize
from .task import Task, TaskCall, extract_tasks, lower_group


__all__ = ["from_jax", "from_onnx", "quantize", "fuse", "Group", "Graph", "Node", "TensorType", "Task", "TaskCall", "extract_tasks", "lower_group"]
