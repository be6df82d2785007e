"""``ps.from_onnx``: import an ONNX model as the same :class:`~.ir.Graph` ``ps.from_jax`` makes.

The model's nodes are interpreted once, in order, inside a JAX trace
(:mod:`.onnx_ops` has one converter per operator): what depends on the model's inputs is
traced into the graph, everything else is computed here with numpy, so the shape
subgraphs exporters emit (``Shape``, ``Gather``, ``Concat``, ``Reshape``,
``ConstantOfShape``, ``Range``, ...) fold away for static shapes, and initializers become
the graph's constants. Then :func:`~.from_jax.from_jax` imports the trace as for any JAX
function: ``graph.tasks()``, ``ps.compile`` and ``ps.tune_model`` take the result unchanged.

- Inputs keep their names (:attr:`Graph.input_names`, in the model's order, initializers
  listed as inputs excepted); outputs too (:attr:`Graph.output_names`). int64 inputs (token
  ids) are int32 in the graph; the compiled model takes either.
- A dynamic dimension (``batch``, ``sequence``) is fixed by an example input or its shape
  (``inputs={"input_ids": ids}``, ``inputs={"input_ids": (1, 128)}``, or a list in the
  model's order); without one it is an error naming the input and the dimension.
- Convolution chains are kept channels-last (:mod:`.onnx_layout`): a model's NCHW input is
  transposed once, where it enters, and no transpose is left between layers.
- A quantized model in QDQ form (``QuantizeLinear`` / ``DequantizeLinear`` around its
  convolutions and matmuls, as ONNX Runtime's ``quantize_static`` writes it) is imported
  with those layers in int8 (:mod:`.onnx_qdq`), as :func:`probsched.quantize` makes them;
  a quantized elementwise chain of one byte tensor (a GELU) is a table (:mod:`.onnx_tables`);
  a residual add saturates the convolution's quantized output without rounding it, as
  OpenVINO does (``keep_residual_rounding=True`` rounds it, as ONNX says).
- An operator, attribute, data type or dynamic dimension the import does not handle raises
  one :class:`~probsched.errors.FrontEndError` naming the node (operator, name, input
  shapes) and what is supported.

Needs the ``onnx`` package only (``pip install "probsched[onnx]"``).

>>> import numpy as np, onnx
>>> from onnx import helper, TensorProto
>>> import probsched as ps
>>> node = helper.make_node("Relu", ["x"], ["y"], name="act")
>>> model = helper.make_model(helper.make_graph([node], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])]))
>>> g = ps.from_onnx(model, inputs={"x": np.ones((2, 4), np.float32)})
>>> g.input_names, [n.op for n in g.nodes], str(g.types[g.inputs[0]])
(['x'], ['max'], 'float32[2, 4]')
>>> ps.from_onnx(model)
Traceback (most recent call last):
...
probsched.errors.FrontEndError: from_onnx: input 'x' has the dynamic dimension 0 ('batch'); ...
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, MutableMapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import FrontEndError
from .from_jax import SOURCE_SCOPE as SCOPE
from .from_jax import from_jax
from .ir import Graph
from . import onnx_qdq, onnx_tables
from .onnx_layout import Value
from .onnx_ops import CONVERTERS, DTYPES, SUPPORTED, Attrs

#: Element types a model's inputs may have.
INPUT_DTYPES = ("float32", "int64", "int32", "bool")
#: Reduced-precision types refused where a computation reads them.
_REDUCED = ("float16", "bfloat16")


def _onnx():
    try:
        import onnx
    except ImportError:
        raise FrontEndError('from_onnx needs the onnx package: pip install "probsched[onnx]"') from None
    return onnx


def _load(model_or_path: Any):
    onnx = _onnx()
    if isinstance(model_or_path, (str, os.PathLike)):
        try:
            return onnx.load(os.fspath(model_or_path))
        except FileNotFoundError:
            raise FrontEndError(f"from_onnx: no file {os.fspath(model_or_path)!r}") from None
        except Exception as exc:
            raise FrontEndError(f"from_onnx: {os.fspath(model_or_path)!r} is not an ONNX model ({exc})") from None
    if isinstance(model_or_path, bytes):
        return onnx.load_from_string(model_or_path)
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    raise FrontEndError(f"from_onnx: expected an onnx.ModelProto or a path, got {type(model_or_path).__name__}")


def _attribute(attr) -> Any:
    from onnx import helper, numpy_helper

    value = helper.get_attribute_value(attr)
    if attr.type == attr.TENSOR:
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def _input_specs(inputs_info, examples: Any) -> List[Tuple[str, Tuple[int, ...], str]]:
    """``(name, shape, dtype)`` of each model input: the model's static dimensions, its
    dynamic ones from the example inputs."""
    names = [i.name for i in inputs_info]
    if examples is None:
        given: Dict[str, Any] = {}
    elif isinstance(examples, Mapping):
        unknown = sorted(set(examples) - set(names))
        if unknown:
            raise FrontEndError(f"from_onnx: example inputs {unknown} are not inputs of the model (it takes {names})")
        given = dict(examples)
    else:
        examples = list(examples)
        if len(examples) != len(names):
            raise FrontEndError(f"from_onnx: {len(examples)} example inputs for a model of {len(names)} inputs {names}")
        given = dict(zip(names, examples))
    specs = []
    for info in inputs_info:
        tt = info.type.tensor_type
        dtype = DTYPES.get(tt.elem_type, f"ONNX type {tt.elem_type}")
        if dtype not in INPUT_DTYPES:
            raise FrontEndError(f"from_onnx: input {info.name!r} is {dtype}; supported input types: {', '.join(INPUT_DTYPES)}")
        example = given.get(info.name)
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        if isinstance(example, (tuple, list)) and all(isinstance(d, (int, np.integer)) for d in example):
            example = np.empty(tuple(example), dtype)  # a shape alone: the model's element type
        if example is not None:
            shape = tuple(int(d) for d in np.shape(example))
            if dims is not None and (len(dims) != len(shape) or any(
                    d.HasField("dim_value") and d.dim_value != s for d, s in zip(dims, shape))):
                want = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
                raise FrontEndError(f"from_onnx: example input {info.name!r} has shape {list(shape)}, the model wants {want}")
            ex_dtype = np.dtype(getattr(example, "dtype", np.asarray(example).dtype)).name
            if ex_dtype != dtype and not (dtype in ("int64", "int32") and ex_dtype in ("int64", "int32")):
                raise FrontEndError(f"from_onnx: example input {info.name!r} is {ex_dtype}, the model wants {dtype}")
        elif dims is None:
            raise FrontEndError(f"from_onnx: input {info.name!r} has no shape in the model; pass an example input")
        else:
            for k, d in enumerate(dims):
                if not d.HasField("dim_value"):
                    label = f" ({d.dim_param!r})" if d.dim_param else ""
                    raise FrontEndError(
                        f"from_onnx: input {info.name!r} has the dynamic dimension {k}{label}; pass example inputs to fix "
                        f"it, e.g. ps.from_onnx(model, inputs={{{info.name!r}: array}})"
                    )
            shape = tuple(int(d.dim_value) for d in dims)
        specs.append((info.name, shape, dtype))
    return specs


class _Interpreter:
    """Runs a model's nodes on :class:`Value` s (see the module docstring)."""

    def __init__(self, opset: int, tables: Optional[Dict[str, onnx_tables.ByteFunction]] = None,
                 unrounded: frozenset = frozenset()) -> None:
        self.opset = opset
        self.tables = tables or {}  # QuantizeLinear outputs read from a byte table (.onnx_tables)
        self.unrounded = unrounded  # DequantizeLinear outputs read without their rounding (.onnx_qdq)

    def run_graph(self, graph, env: Dict[str, Value]) -> None:
        import jax

        for node in graph.node:
            ins = [env.get(n) if n else None for n in node.input]
            for n, v in zip(node.input, ins):
                if n and v is None:
                    raise FrontEndError(f"{self.label(node, ins)}: reads {n!r}, which no node computes")
            label = self.label(node, ins)
            with jax.named_scope(label):
                fn = self.tables.get(node.output[0]) if node.op_type == "QuantizeLinear" else None
                looked_up = onnx_tables.lookup(fn, env, self.run_static) if fn is not None else None
                if looked_up is None and node.output[0] in self.unrounded:
                    looked_up = onnx_qdq.unrounded(ins[0])
                outs = [looked_up] if looked_up is not None else self.node(node, ins, env, label)
            for name, v in zip(node.output, outs):
                if name and v is not None:
                    env[name] = v

    def run_static(self, node, values: MutableMapping[str, Value]) -> None:
        """Run ``node`` on the static ``values`` (by name) and store its outputs there."""
        ins = [values.get(n) if n else None for n in node.input]
        for name, v in zip(node.output, self.node(node, ins, values, self.label(node, ins))):
            if name and v is not None:
                values[name] = v

    @staticmethod
    def label(node, ins: Sequence[Optional[Value]]) -> str:
        shapes = ", ".join(f"{n}: {v.describe()}" if v is not None else "none" for n, v in zip(node.input, ins))
        return f"{SCOPE}{node.op_type} {node.name or node.output[0]!r} (inputs {shapes or 'none'})"

    def node(self, node, ins: List[Optional[Value]], env: Dict[str, Value], label: str) -> List[Value]:
        if node.domain not in ("", "ai.onnx"):
            raise FrontEndError(f"{label}: operators of the domain {node.domain!r} are not supported; "
                                f"probsched imports the standard operators: {', '.join(SUPPORTED)}")
        attrs = Attrs({a.name: _attribute(a) for a in node.attribute}, n_outputs=len(node.output))
        if node.op_type == "If":
            return self.if_node(node, ins, env, label)
        fn = CONVERTERS.get(node.op_type)
        if fn is None:
            raise FrontEndError(f"{label}: unsupported operator; probsched imports: {', '.join(SUPPORTED)}")
        self.check_precision(node, ins, label)
        try:
            out = fn(ins, attrs, self.opset)
        except FrontEndError as exc:
            raise FrontEndError(f"{label}: {exc}") from None
        except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError) as exc:
            raise FrontEndError(f"{label}: {type(exc).__name__}: {exc}") from None
        unread = attrs.unread()
        if unread:
            raise FrontEndError(f"{label}: attributes {unread} are not supported")
        return out if isinstance(out, list) else [out]

    @staticmethod
    def check_precision(node, ins: List[Optional[Value]], label: str) -> None:
        """A float16/bfloat16 initializer computed with traced values: one clear error."""
        if node.op_type in ("Cast", "CastLike", "Shape", "Size") or all(v is None or v.static for v in ins):
            return
        for n, v in zip(node.input, ins):
            if v is not None and v.dtype in _REDUCED:
                raise FrontEndError(f"{label}: reads {n!r}, a {v.describe()} value; probsched computes in float32 "
                                    "(export the model in float32)")

    def if_node(self, node, ins, env, label) -> List[Value]:
        cond = ins[0]
        if cond is None or not cond.static:
            raise FrontEndError(f"{label}: an If on a computed condition (control flow) is not supported")
        branch = next(a for a in node.attribute if a.name == ("then_branch" if bool(np.asarray(cond.data)) else "else_branch"))
        inner = dict(env)
        self.run_graph(branch.g, inner)
        return [inner[o.name] for o in branch.g.output]


def from_onnx(model_or_path: Any, inputs: Union[Mapping[str, Any], Sequence[Any], None] = None,
              name: Optional[str] = None, keep_residual_rounding: bool = False) -> Graph:
    """Import an ONNX model (an ``onnx.ModelProto``, or a path to a ``.onnx`` file) as a
    :class:`~.ir.Graph`; ``inputs`` are example inputs (by name or in order) that fix the
    model's dynamic dimensions. ``keep_residual_rounding``: a QDQ model's residual adds
    round the convolution's quantized output as ONNX says, instead of only saturating it
    (:func:`.onnx_qdq.unrounded_residuals`). See the module docstring."""
    _onnx()  # the one clear error when the package is missing
    from onnx import numpy_helper

    model = _load(model_or_path)
    if model.functions:
        from onnx import inliner

        model = inliner.inline_local_functions(model)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    g = model.graph
    initializers = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    if g.sparse_initializer:
        raise FrontEndError(f"from_onnx: sparse initializers ({g.sparse_initializer[0].values.name!r}) are not supported")
    inputs_info = [i for i in g.input if i.name not in initializers]
    specs = _input_specs(inputs_info, inputs)
    unrounded = frozenset() if keep_residual_rounding else onnx_qdq.unrounded_residuals(g, initializers)
    interp = _Interpreter(opset, onnx_tables.byte_functions(g, initializers), unrounded)
    out_names = [o.name for o in g.output]

    def fn(*args):
        import jax.numpy as jnp

        env: Dict[str, Value] = {k: Value(np.asarray(v)) for k, v in initializers.items()}
        env.update({s[0]: Value(a) for s, a in zip(specs, args)})
        interp.run_graph(g, env)
        outs = []
        for n in out_names:
            if n not in env:
                raise FrontEndError(f"from_onnx: no node computes the output {n!r}")
            x = env[n].logical()
            outs.append(jnp.asarray(x.astype(np.float32) if x.dtype == np.float64 else x))
        return outs[0] if len(outs) == 1 else tuple(outs)

    import jax

    graph_name = name or (os.path.splitext(os.path.basename(os.fspath(model_or_path)))[0]
                          if isinstance(model_or_path, (str, os.PathLike)) else (g.name or "onnx_model"))
    examples = [jax.ShapeDtypeStruct(shape, np.dtype(dtype)) for _, shape, dtype in specs]
    graph = from_jax(fn, *examples, name=graph_name)
    graph.input_names = [s[0] for s in specs]
    graph.output_names = out_names
    return graph


__all__ = ["from_onnx", "INPUT_DTYPES"]
