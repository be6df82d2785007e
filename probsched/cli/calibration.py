"""``--precision int8``: the commands that load a model quantize it first.

``probsched tune-model``, ``compile`` and ``import`` given ``--precision int8`` run
:func:`probsched.quantize` on the loaded model (per-channel int8 weights, uint8 activations
from the ranges ``--calibration`` gives them) and work on the int8 network. A QDQ ONNX model
(quantized by ONNX Runtime's tools) is int8 already: it is taken as it is, without
calibration.

``--calibration`` is a ``.npz`` file (one array per model input, named as the input or
``arr_0``, ``arr_1``, ... in input order, each with a leading axis of samples), a ``.npy``
file (a model of one input), or ``random:N`` (N random inputs,
:func:`probsched.graph.quantization.random_calibration`: to time an int8 network, not to
deploy one). The same model and calibration make the same int8 network, so ``compile``
finds the records ``tune-model`` stored.

>>> import argparse
>>> p = argparse.ArgumentParser()
>>> add_int8_options(p)
>>> args = p.parse_args(["--calibration", "random:4", "--float-layers", "conv1"])
>>> args.calibration, args.calibration_method, args.float_layers
('random:4', 'minmax', ['conv1'])
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, List, Tuple

import numpy as np

from .common import CLIError

if TYPE_CHECKING:
    from ..graph import Graph

CALIBRATION_HELP = (
    "with --precision int8: the inputs whose ranges calibrate the activations, a .npz file (one array per model "
    "input, by name or arr_0, arr_1... in order, each with a leading axis of samples), a .npy file (one input), or "
    "random:N (N random inputs: to time an int8 network, not to deploy one)"
)


def add_int8_options(p: argparse.ArgumentParser) -> None:
    """``--calibration``, ``--calibration-method`` and ``--float-layers`` (read by :func:`int8_graph`)."""
    p.add_argument("--calibration", metavar="FILE|random:N", default=None, help=CALIBRATION_HELP)
    p.add_argument("--calibration-method", choices=("minmax", "percentile"), default="minmax",
                   help="with --precision int8: an activation's range, the smallest and largest value seen (minmax, "
                        "default) or the 0.01 and 99.99 percentiles (robust to outliers)")
    p.add_argument("--float-layers", action="append", default=[], metavar="NAME",
                   help="with --precision int8: layers whose source (an ONNX node's name, a JAX file:line) contains "
                        "NAME stay float32; repeatable")


def int8_graph(args: argparse.Namespace, graph: "Graph") -> "Graph":
    """``graph`` for the command's ``--precision``: quantized when it is int8 (see the module
    docstring); as it is otherwise. Raises CLIError."""
    from ..errors import FrontEndError
    from ..graph.quantization import layers, quantize

    if args.precision != "int8":
        if args.calibration is not None or args.float_layers:
            raise CLIError("--calibration and --float-layers apply with --precision int8")
        return graph
    if _quantized(graph):  # its float layers, if any, are those its quantizer left in float32
        if args.calibration is not None:
            raise CLIError(f"{graph.name} is quantized already (a QDQ model): it takes no --calibration")
        return graph
    if not layers(graph):
        raise CLIError(f"{graph.name}: no convolution or matmul with a weight to quantize")
    if args.calibration is None:
        raise CLIError("--precision int8 needs --calibration (a .npz of the model's inputs, or random:N to time it)")
    samples = calibration_samples(args.calibration, graph)
    try:
        out = quantize(graph, samples, method=args.calibration_method, skip=list(args.float_layers))
    except FrontEndError as exc:
        raise CLIError(f"--calibration {args.calibration}: {exc}") from None
    if not _quantized(out):
        raise CLIError(f"--float-layers {' '.join(args.float_layers)}: every layer of {graph.name} stays float32, "
                       "none is left to quantize")
    return out


def calibration_samples(spec: str, graph: "Graph") -> List[Tuple[np.ndarray, ...]]:
    """The samples ``--calibration spec`` names for ``graph`` (not yet checked against its
    inputs: :func:`probsched.quantize` does that, naming the input). Raises CLIError."""
    from ..graph.quantization import random_calibration

    if spec.startswith("random:"):
        count = spec.partition(":")[2]
        if not count.isdigit() or int(count) < 1:
            raise CLIError(f"--calibration {spec}: expected random:N with N >= 1, such as random:32")
        return random_calibration(graph, int(count))
    if not os.path.isfile(spec):
        raise CLIError(f"--calibration {spec}: no such file (a .npz or .npy of inputs, or random:N)")
    try:
        loaded = np.load(spec, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CLIError(f"--calibration {spec}: not a .npz or .npy file ({exc})") from None
    if isinstance(loaded, np.ndarray):
        arrays = [loaded]
        if len(graph.inputs) != 1:
            raise CLIError(f"--calibration {spec}: one array for a model of {len(graph.inputs)} inputs; give a .npz")
    else:
        with loaded:
            arrays = _by_input(spec, dict(loaded), graph)
    counts = {len(a) if a.ndim else 0 for a in arrays}
    if len(counts) != 1 or 0 in counts:
        raise CLIError(f"--calibration {spec}: every array needs the same leading axis of samples, got "
                       f"{[a.shape for a in arrays]}")
    return [tuple(a[i] for a in arrays) for i in range(counts.pop())]


def _by_input(spec: str, arrays: dict, graph: "Graph") -> List[np.ndarray]:
    """The arrays of a .npz in the graph's input order: by input name, else arr_0, arr_1..."""
    names = graph.input_names or []
    for keys in (names, [f"arr_{i}" for i in range(len(graph.inputs))]):
        if keys and all(k in arrays for k in keys):
            extra = sorted(set(arrays) - set(keys))
            if extra:
                raise CLIError(f"--calibration {spec}: arrays {extra} are no input of the model (its inputs: "
                               f"{', '.join(keys)})")
            return [arrays[k] for k in keys]
    wanted = ", ".join(names) if names else ", ".join(f"arr_{i}" for i in range(len(graph.inputs)))
    raise CLIError(f"--calibration {spec}: holds {sorted(arrays)}; expected one array per input: {wanted}")


def _quantized(graph: "Graph") -> bool:
    """Whether ``graph`` already computes in int8 (a QDQ model imported)."""
    return any(str(t.dtype) in ("int8", "uint8") for t in graph.types.values())
