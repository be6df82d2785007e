"""The engines benchmarks/bench_models.py times beside probsched on one ONNX graph: ONNX
Runtime (all graph optimizations; for BERT also after its transformer optimizer), OpenVINO
(the f32 precision hint, and its default precision, reported as such), PyTorch eager, and
the reference every engine's output is checked against before it is timed (ONNX Runtime
with its graph optimizations off: the ONNX semantics, no fusion).

Each ``*_runner`` returns ``(label, call, output)``: a no-argument callable that runs one
inference on the fixed inputs, and its output; or raises ``Unavailable`` when the engine is
not installed. Threads: as many as the machine has cores, for every engine.
"""

from __future__ import annotations

import os
import tempfile
from typing import Callable, Dict, List, Tuple

import numpy as np

Runner = Tuple[str, Callable[[], object], np.ndarray]


class Unavailable(RuntimeError):
    """The engine's package is not installed."""


def cores() -> int:
    """Threads each engine runs with."""
    return os.cpu_count() or 1


def _ort_session(path: str, optimize: bool):
    try:
        import onnxruntime as ort
    except ImportError:
        raise Unavailable("onnxruntime") from None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = cores()
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def reference(path: str, feeds: Dict[str, np.ndarray]) -> np.ndarray:
    """The model's first output by ONNX Runtime without graph optimizations."""
    return _ort_session(path, optimize=False).run(None, feeds)[0]


def ort_predict(path: str, optimize: bool = True) -> Callable[[Dict[str, np.ndarray]], np.ndarray]:
    """ONNX Runtime on any inputs: a callable from inputs by name to the first output
    (``optimize``: every graph optimization; else none, as :func:`reference`)."""
    sess = _ort_session(path, optimize)
    return lambda feeds: sess.run(None, feeds)[0]


def ort_runner(path: str, feeds: Dict[str, np.ndarray], label: str = "onnxruntime") -> Runner:
    """ONNX Runtime with every graph optimization, intra-op threads = cores."""
    sess = _ort_session(path, optimize=True)
    out = sess.run(None, feeds)[0]
    return label, lambda: sess.run(None, feeds), out


def ort_transformer_runner(path: str, feeds: Dict[str, np.ndarray], num_heads: int, hidden: int) -> Runner:
    """ONNX Runtime after its transformer optimizer (attention, LayerNorm, GELU fused)."""
    try:
        from onnxruntime.transformers import optimizer
    except ImportError:
        raise Unavailable("onnxruntime.transformers") from None
    # opt_level 99: ORT's own graph optimizations first (at the default level the result fails to load)
    opt = optimizer.optimize_model(path, model_type="bert", num_heads=num_heads, hidden_size=hidden, opt_level=99)
    out_path = os.path.join(tempfile.mkdtemp(), "optimized.onnx")
    opt.save_model_to_file(out_path)
    return ort_runner(out_path, feeds, "onnxruntime+transformer-opt")


def _openvino_compiled(path: str, f32: bool):
    """OpenVINO's compiled model of ``path`` on the CPU, and its label naming the precision."""
    try:
        import openvino as ov
    except ImportError:
        raise Unavailable("openvino") from None
    core = ov.Core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": cores()}
    if f32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = core.compile_model(core.read_model(path), "CPU", config)
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    precision = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
    return ("openvino f32" if f32 else f"openvino default ({precision})"), compiled


def openvino_runner(path: str, feeds: Dict[str, np.ndarray], f32: bool) -> Runner:
    """OpenVINO on the CPU: ``f32`` sets the f32 precision hint; otherwise its default
    precision (bf16 where the CPU has it), named in the label."""
    label, compiled = _openvino_compiled(path, f32)
    request = compiled.create_infer_request()
    names = [p.get_any_name() for p in compiled.inputs]
    args = [feeds[n] for n in names]
    out = np.asarray(request.infer(args)[compiled.outputs[0]]).copy()
    return label, lambda: request.infer(args), out


def openvino_predict(path: str, f32: bool) -> Tuple[str, Callable[[Dict[str, np.ndarray]], np.ndarray]]:
    """OpenVINO as :func:`openvino_runner` runs it, on any inputs: its label and a callable
    from inputs by name to a copy of the first output."""
    label, compiled = _openvino_compiled(path, f32)
    request = compiled.create_infer_request()
    names = [p.get_any_name() for p in compiled.inputs]
    out = compiled.outputs[0]
    return label, lambda feeds: np.asarray(request.infer([feeds[n] for n in names])[out]).copy()


def torch_runner(module, feeds: Dict[str, np.ndarray]) -> Runner:
    """PyTorch eager, inference mode, threads = cores."""
    try:
        import torch
    except ImportError:
        raise Unavailable("torch") from None
    torch.set_num_threads(cores())
    tensors = [torch.from_numpy(v) for v in feeds.values()]
    module.eval()

    def call():
        with torch.inference_mode():
            return module(*tensors)

    return "pytorch eager", call, call().numpy()


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    """Largest absolute difference over the output's largest magnitude."""
    got = np.asarray(got, np.float32).reshape(expected.shape)
    return float(np.max(np.abs(got - expected)) / max(float(np.max(np.abs(expected))), 1e-30))


def checked(runners: List[Runner], expected: np.ndarray, tolerance: Dict[str, float]) -> Dict[str, float]:
    """Every runner's relative error, or SystemExit naming the first over its tolerance
    (``tolerance`` by label prefix; 1e-4 otherwise): nothing is timed on a wrong output."""
    errors = {}
    for label, _, out in runners:
        err = relative_error(out, expected)
        limit = next((v for k, v in tolerance.items() if label.startswith(k)), 1e-4)
        if not err <= limit:
            raise SystemExit(f"bench_models: {label}'s output differs from the reference (relative error {err:.2e} > {limit:g})")
        errors[label] = err
    return errors


__all__ = ["Unavailable", "reference", "ort_predict", "ort_runner", "ort_transformer_runner", "openvino_runner", "openvino_predict", "torch_runner",
           "relative_error", "checked", "cores"]
