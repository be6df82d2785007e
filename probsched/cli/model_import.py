"""``probsched import MODEL``: a network's fused tasks as a table.

``MODEL`` is a shipped model (``resnet50``, ``mobilenet_v2``, ``bert_base`` and their
``*_tiny`` variants), an ONNX file (``model.onnx``; ``--input-shape NAME=1x128`` fixes a
dynamic dimension; with ``--keep-residual-rounding`` a QDQ model's residual adds round as
ONNX says, see :func:`probsched.graph.onnx_qdq.unrounded_residuals`), or
``path/to/file.py:name`` / ``module:name`` naming a function of no arguments that returns
``(fn, example_args)`` (as ``ps.models.resnet50`` does) or a ``ps.Graph``. For each
distinct task: its name, input and output shapes, weight (calls per inference), FLOPs per
call and its share of the network's FLOPs. ``--precision`` lists the tasks in bf16, or of
the int8 network (:mod:`.calibration`).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Callable, Optional, Tuple

from .common import CLIError, add_precision_option, float_precision, load_object

if TYPE_CHECKING:
    from ..graph import Graph

MODEL_HELP = (
    "a shipped model (resnet50, mobilenet_v2, bert_base, resnet_tiny, mobilenet_tiny, bert_tiny), an ONNX file "
    "(model.onnx), or path/to/file.py:name / module:name naming a function that returns (fn, example_args) or a ps.Graph"
)
INPUT_SHAPE_HELP = "an ONNX model input's shape, NAME=1x128 (fixes its dynamic dimensions); repeatable"
KEEP_RESIDUAL_ROUNDING_HELP = (
    "a QDQ ONNX model's residual adds round the convolution's quantized output as ONNX says "
    "(by default it is saturated, not rounded, as OpenVINO does: faster, nearer float32)"
)


def add_onnx_options(p) -> None:
    """The options of the commands that load a model that apply to ONNX files:
    ``--input-shape`` and ``--keep-residual-rounding`` (read by :func:`load_model_of`)."""
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS", help=INPUT_SHAPE_HELP)
    p.add_argument("--keep-residual-rounding", action="store_true", help=KEEP_RESIDUAL_ROUNDING_HELP)


def load_model_of(args: argparse.Namespace) -> Tuple[Optional[Callable], tuple, "Graph"]:
    """:func:`load_model` of a command's ``model`` argument and its :func:`add_onnx_options`."""
    return load_model(args.model, parse_input_shapes(args.input_shape), args.keep_residual_rounding)


def parse_input_shapes(items) -> dict:
    """``{"input_ids": (1, 128)}`` of ``["input_ids=1x128"]``; raises CLIError."""
    shapes = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shapes[name] = None
        if not sep or not name or shapes[name] is None or any(d <= 0 for d in shapes[name]):
            raise CLIError(f"--input-shape {item!r}: expected NAME=DIMS such as input_ids=1x128")
    return shapes


def load_model(spec: str, input_shapes: Optional[dict] = None,
               keep_residual_rounding: bool = False) -> Tuple[Optional[Callable], tuple, "Graph"]:
    """``(fn, example_args, graph)`` of a command-line model spec (see the module
    docstring); ``fn`` is None when the spec names a ready ``ps.Graph`` or an ONNX file.
    Raises CLIError."""
    from .. import models
    from ..errors import FrontEndError
    from ..graph import Graph, from_jax, from_onnx

    if spec.lower().endswith(".onnx"):
        if not os.path.isfile(spec):
            raise CLIError(f"{spec}: no such file")
        try:
            return None, (), from_onnx(spec, inputs=input_shapes or None, keep_residual_rounding=keep_residual_rounding)
        except FrontEndError as exc:
            raise CLIError(f"{spec}: {exc}") from None
    if input_shapes:
        raise CLIError("--input-shape applies to ONNX models only")
    if keep_residual_rounding:
        raise CLIError("--keep-residual-rounding applies to ONNX models only")
    if ":" not in spec:
        try:
            fn, args = models.get(spec)
        except KeyError as exc:
            raise CLIError(f"{exc.args[0]} (or path/to/file.py:name / module:name)") from None
        name = models.ALIASES.get(spec.lower(), spec.lower())
    else:
        obj = load_object(spec)
        if isinstance(obj, Graph):
            return None, (), obj
        if not callable(obj):
            raise CLIError(f"{spec}: is a {type(obj).__name__}, expected a function returning (fn, example_args)")
        try:
            made = obj()
        except Exception as exc:
            raise CLIError(f"{spec}: calling it failed: {type(exc).__name__}: {exc}") from None
        if isinstance(made, Graph):
            return None, (), made
        if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
            raise CLIError(f"{spec}: returned a {type(made).__name__}, expected (fn, example_args) or a ps.Graph")
        fn, args = made
        name = spec.rpartition(":")[2]
    try:
        return fn, tuple(args), from_jax(fn, *args, name=name)
    except FrontEndError as exc:
        raise CLIError(f"{spec}: {exc}") from None


def task_table(graph: "Graph", precision: str = "float32") -> str:
    """The Markdown task table of a graph, its products in ``precision``."""
    tasks = [t.in_precision(precision) for t in graph.tasks()]
    total = sum(t.flops * t.weight for t in tasks) or 1
    lines = [
        f"{graph.name}: {len(graph.nodes)} operators, {len(graph.fuse())} fused groups, {len(tasks)} distinct tasks, "
        f"{total / 1e9:.3g} GFLOP, weights {graph.constant_bytes / 2**20:.1f} MiB",
        "",
        "| # | task | inputs -> outputs | weight | MFLOP per call | share of FLOPs |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for i, t in enumerate(tasks):
        ins = ", ".join("x".join(map(str, b.shape)) for b in t.func.input_buffers())
        outs = ", ".join("x".join(map(str, b.shape)) for b in t.func.output_buffers())
        share = t.flops * t.weight / total
        lines.append(f"| {i} | {t.func.name} | {ins} -> {outs} | {t.weight} | {t.flops / 1e6:.1f} | {share:.1%} |")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("import", help="import a JAX or ONNX model and print its fused tasks", description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("model", help=MODEL_HELP)
    add_onnx_options(p)
    add_precision_option(p, int8=True)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from .calibration import int8_graph

    graph = int8_graph(args, load_model_of(args)[2])
    precision = float_precision(args.precision)
    print(task_table(graph, precision))
    return 0
