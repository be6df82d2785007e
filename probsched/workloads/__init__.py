"""The paper's operator suite and plain workload factories, each with a numpy reference.

>>> import numpy as np
>>> import probsched.workloads as wl
>>> w = wl.get("C2D", 1)
>>> w.name, w.func.name, w.output_shapes, w.flops
('C2D:1', 'C2D', ((1, 56, 56, 64),), 25690112)
>>> t = wl.small("C2D")
>>> inputs = t.random_inputs(np.random.default_rng(0))
>>> from probsched.ir.interpreter import evaluate
>>> t.check(evaluate(t.func, *inputs), t.reference(*inputs))
"""

from .attention import transpose_batch_matmul
from .conv import (
    conv1d_nwc,
    conv2d_bn_relu,
    conv2d_capsule_nhwc,
    conv2d_nhwc,
    conv2d_transpose_nhwc,
    conv3d_ndhwc,
    depthwise_conv2d_nhwc,
)
from .matmul import matmul
from .norm import norm, softmax
from .suite import SuiteEntry, configs, entry, get, names, small, suite
from .workload import Workload, as_workload, scheduled_tolerance, signed_uniform, tolerance

__all__ = [
    "Workload",
    "as_workload",
    "SuiteEntry",
    "get",
    "names",
    "configs",
    "entry",
    "small",
    "suite",
    "tolerance",
    "scheduled_tolerance",
    "signed_uniform",
    "matmul",
    "conv1d_nwc",
    "conv2d_nhwc",
    "conv3d_ndhwc",
    "depthwise_conv2d_nhwc",
    "conv2d_transpose_nhwc",
    "conv2d_capsule_nhwc",
    "conv2d_bn_relu",
    "norm",
    "softmax",
    "transpose_batch_matmul",
]
