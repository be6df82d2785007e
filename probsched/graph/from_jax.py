"""``ps.from_jax``: trace a JAX function and import its jaxpr as a :class:`~.ir.Graph`.

The function is traced once with ``jax.make_jaxpr`` on the example arguments' shapes. What
the import does with the jaxpr:

- nested ``jit``/``pjit``, ``closed_call``, ``remat`` and the bodies of ``custom_jvp_call`` and
  ``custom_vjp_call`` (how ``jax.nn.relu``, ``gelu`` and ``softmax`` appear) are inlined: only
  their primal computation matters for inference; so is ``lax.scan(..., unroll=True)``, one
  copy of its body per step (a rolled scan is refused);
- ``stop_gradient``, ``copy`` and a ``convert_element_type`` to the same dtype are the
  identity;
- closed-over arrays (the weights) and literals become constants of the graph, and a node
  whose inputs are all constants is evaluated once, here (constant folding: a batch norm's
  ``gamma / sqrt(var + eps)``), unless its result is much larger than its inputs (a
  broadcast of a scalar stays a cheap node instead of becoming a big constant);
- every other primitive must be one the graph knows (:data:`probsched.graph.ops.OPS`);
- chains of additions and multiplications by constants (a batch norm) fold into one
  multiply-add (:mod:`.simplify`); nodes whose results nothing reads are dropped;
- 8-bit integer values (a quantized network, :mod:`.quantization`) are kept as they are, and so
  is the widening of an 8-bit weight to int32 (the kernels read the 8-bit weight).

A primitive outside that set, a dynamic shape, or a tensor that is not float32 (booleans and
int32 indices excepted) raises one :class:`~probsched.errors.FrontEndError` naming the
primitive, its shapes and the user's source line. Arguments may be float32, int32 (token ids)
or bool. A bfloat16 or float16 weight is accepted only where the function casts it to float32
itself (the cast is folded here); read by anything else, it is refused with its shape and the
fix. Boolean constants (a causal mask) are stored as int32 and compared with zero where read
(:func:`~.simplify.widen_boolean_constants`).

>>> import numpy as np, jax
>>> import probsched as ps
>>> g = ps.from_jax(lambda x: jax.nn.relu(x) * 2.0, np.ones((2, 3), np.float32))
>>> [n.op for n in g.nodes]
['max', 'mul']
>>> ps.from_jax(lambda x: jax.numpy.sort(x), np.ones((3,), np.float32))
Traceback (most recent call last):
...
probsched.errors.FrontEndError: unsupported JAX primitive 'sort' (inputs float32[3]) at ...
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..errors import FrontEndError
from .ir import Graph, Node, TensorType
from .ops import OPS, ALLOWED_DTYPES
from ..ir.dtypes import NARROW_INT_DTYPES as NARROW
from .simplify import fold_affine_chains, prune_dead_nodes, widen_boolean_constants

#: Call-like primitives whose body is inlined (their params hold the jaxpr).
INLINED = frozenset(
    {
        "pjit", "jit", "closed_call", "core_call", "named_call", "remat", "checkpoint",
        "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin",
    }
)
_BODY_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
#: The name-scope prefix of a node of an imported model, whose scope names it better than
#: a line of probsched's importer does.
SOURCE_SCOPE = "ONNX node "
#: The name-scope prefix under which a graph traced again (:mod:`.quantization`) keeps the
#: source line of the node it re-binds.
KEPT_SCOPE = "probsched source "
#: Primitives that compute nothing at inference time.
IDENTITY = frozenset({"stop_gradient", "copy", "copy_p", "optimization_barrier"})
#: A folded constant may be at most this many times larger than the largest folded input
#: (and any result up to this many elements is folded): folding must not turn a broadcast
#: into a weight.
_FOLD_GROWTH = 1
_FOLD_ALWAYS = 4096


def source_line(eqn) -> str:
    """The user's source line of a jaxpr equation (``file:line (function)``), or ``""``."""
    try:
        from jax._src import source_info_util

        scope = str(eqn.source_info.name_stack)
        if SOURCE_SCOPE in scope:  # an imported model's node (from_onnx) names itself
            return scope[scope.index(SOURCE_SCOPE):]
        if KEPT_SCOPE in scope:  # a node of a graph traced again keeps its line
            return scope[scope.index(KEPT_SCOPE) + len(KEPT_SCOPE):]
        return source_info_util.summarize(eqn.source_info)
    except Exception:  # a private API: a JAX without it only loses the line in messages
        return ""


def source_scope(source: str) -> str:
    """The name scope under which to bind a graph's node again so that the new equation
    reports ``source`` (:func:`source_line`)."""
    return source if source.startswith(SOURCE_SCOPE) else KEPT_SCOPE + source


def _dtype_name(dtype) -> str:
    return np.dtype(dtype).name


#: How to fix a model whose parameters are in a reduced precision.
CAST_FIX = "cast the parameters to float32 once, e.g. params = jax.tree.map(lambda a: a.astype(np.float32), params)"
#: Float dtypes a weight may have when the function casts it to float32 itself.
_CASTABLE = ("bfloat16", "float16", "float64")


def _aval_type(aval, what: Callable[[], str], reduced_ok: bool = False) -> TensorType:
    shape = tuple(getattr(aval, "shape", ()))
    for d in shape:
        if not isinstance(d, (int, np.integer)):
            raise FrontEndError(f"{what()}: dynamic shape {shape}; probsched compiles static shapes only")
    dtype = _dtype_name(aval.dtype)
    if dtype not in ALLOWED_DTYPES and not (reduced_ok and dtype in _CASTABLE):
        fix = f"; {CAST_FIX}" if dtype in _CASTABLE else ""
        raise FrontEndError(
            f"{what()}: dtype {dtype}{list(shape)} is not supported (the graph computes in float32, with "
            f"{', '.join(ALLOWED_DTYPES)} values){fix}"
        )
    return TensorType(tuple(int(d) for d in shape), dtype)


def _shapes(types: Sequence[TensorType]) -> str:
    return ", ".join(str(t) for t in types) or "none"


class _Importer:
    """Builds a :class:`Graph` from nested jaxprs, one equation at a time."""

    def __init__(self, name: str) -> None:
        self.graph = Graph(name, {}, [], [], [], {})
        self._next = 0
        # id(array object) -> (the object, its value): a weight closed over twice is one
        # constant; holding the object keeps its id from being reused by another array
        self._const_ids: Dict[int, tuple] = {}

    def new_value(self, t: TensorType) -> int:
        v = self._next
        self._next += 1
        self.graph.types[v] = t
        return v

    def constant(self, array: Any, what: Callable[[], str]) -> int:
        key = id(array)
        if key in self._const_ids:
            return self._const_ids[key][1]
        arr = np.asarray(array)
        t = _aval_type(arr, what, reduced_ok=True)  # refused below when a node computes with it
        v = self.new_value(t)
        self.graph.constants[v] = np.array(arr, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
        self._const_ids[key] = (array, v)
        return v

    # ------------------------------------------------------------------ jaxpr walking
    def run(self, jaxpr, consts: Sequence[Any], args: Sequence[int], outer: str = "") -> List[int]:
        from jax.extend.core import Literal

        env: Dict[Any, int] = {}
        for var, c in zip(jaxpr.constvars, consts):
            env[var] = self.constant(c, lambda: "a constant of the traced function")
        for var, v in zip(jaxpr.invars, args):
            env[var] = v

        def read(x, eqn) -> int:
            if isinstance(x, Literal):
                # reshaped to the aval's: numpy reads a jaxpr's 0-d literal as shape (1,)
                value = np.asarray(x.val, dtype=x.aval.dtype).reshape(x.aval.shape)
                return self.constant(value, lambda: f"a literal of {eqn.primitive.name}")
            return env[x]

        for eqn in jaxpr.eqns:
            ins = [read(x, eqn) for x in eqn.invars]
            outs = self.equation(eqn, ins, outer)
            for var, v in zip(eqn.outvars, outs):
                env[var] = v
        return [read(x, None) for x in jaxpr.outvars]

    def equation(self, eqn, ins: List[int], outer: str = "") -> List[int]:
        name = eqn.primitive.name
        # inside an inlined call (jnp.cumsum is a jit) the line is JAX's own: the user's is
        # the call site's
        src = outer or source_line(eqn)
        in_types = [self.graph.types[v] for v in ins]

        def where() -> str:
            return f"JAX primitive '{name}' (inputs {_shapes(in_types)}){' at ' + src if src else ''}"

        if name in INLINED:
            body = next((eqn.params[k] for k in _BODY_PARAMS if k in eqn.params), None)
            if body is None:
                raise FrontEndError(f"{where()}: found no body to inline")
            inner, consts = (body.jaxpr, body.consts) if hasattr(body, "consts") else (body, ())
            # custom_vjp_call passes the residual functions' inputs too: the body takes the first n
            return self.run(inner, consts, ins[len(ins) - len(inner.invars):], src)
        if name == "scan":
            return self.unrolled_scan(eqn, ins, src or "", where)
        folding = bool(ins) and all(v in self.graph.constants for v in ins)
        out_types = [_aval_type(o.aval, where, reduced_ok=folding) for o in eqn.outvars]
        if name in IDENTITY or (
            name == "convert_element_type" and out_types[0].dtype == in_types[0].dtype
        ) or (name == "reduce_precision" and out_types[0].dtype == "float32" and
              (eqn.params.get("exponent_bits"), eqn.params.get("mantissa_bits")) == (8, 23)):
            return list(ins[: len(out_types)])
        if name not in OPS:
            raise FrontEndError(
                f"unsupported {where()}; probsched imports: {', '.join(sorted(OPS))}"
            )
        node = Node(name, tuple(ins), (), dict(eqn.params), eqn.primitive, src)
        # an 8-bit weight widened for an integer product stays 8-bit: what the kernels read
        widening = name == "convert_element_type" and in_types[0].dtype in NARROW
        if ins and all(v in self.graph.constants for v in ins) and self._foldable(in_types, out_types) and not widening:
            results = node.evaluate(*(self.graph.constants[v] for v in ins))
            return [self.constant(r, where) for r in results]
        for t in in_types + out_types:
            if t.dtype not in ALLOWED_DTYPES:
                raise FrontEndError(f"{where()}: computes with a {t} parameter; probsched computes in float32: {CAST_FIX}")
        OPS[name].check(node, in_types, out_types, where)
        outs = tuple(self.new_value(t) for t in out_types)
        self.graph.nodes.append(Node(name, tuple(ins), outs, node.params, eqn.primitive, src))
        return list(outs)

    def traced(self, fn: Callable, ins: List[int], src: str) -> List[int]:
        """``fn`` (a small JAX function: an index, a stack) applied to graph values, imported
        as the equations ``jax.make_jaxpr`` makes of it: the primitives' parameters are JAX's own."""
        import jax

        specs = [jax.ShapeDtypeStruct(self.graph.types[v].shape, np.dtype(self.graph.types[v].dtype)) for v in ins]
        closed = jax.make_jaxpr(fn)(*specs)
        return self.run(closed.jaxpr, closed.consts, ins, src)

    def unrolled_scan(self, eqn, ins: List[int], src: str, where: Callable[[], str]) -> List[int]:
        """``lax.scan(..., unroll=True)``: the body inlined once per step, the scanned
        inputs indexed and the per-step outputs stacked (a rolled loop is refused)."""
        p = eqn.params
        length, n_consts, n_carry = int(p["length"]), int(p["num_consts"]), int(p["num_carry"])
        if p.get("unroll") is not True and int(p.get("unroll", 1)) < length:
            raise FrontEndError(f"{where()}: a loop (lax.scan of {length} steps); probsched imports a scan fully "
                                f"unrolled: lax.scan(..., unroll=True)")
        body = p["jaxpr"]
        consts, carry, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
        steps = range(length - 1, -1, -1) if p.get("reverse") else range(length)
        ys: List[List[int]] = []
        for t in steps:
            x_t = [self.traced(lambda a, t=t: a[t], [x], src)[0] for x in xs]
            outs = self.run(body.jaxpr, body.consts, consts + carry + x_t, src)
            carry, y_t = outs[:n_carry], outs[n_carry:]
            ys.append(y_t)
        if p.get("reverse"):
            ys.reverse()
        import jax.numpy as jnp

        stacked = [self.traced(lambda *a: jnp.stack(a), [y[k] for y in ys], src)[0] for k in range(len(eqn.outvars) - n_carry)]
        return list(carry) + stacked

    @staticmethod
    def _foldable(in_types: List[TensorType], out_types: List[TensorType]) -> bool:
        biggest = max(t.size for t in in_types)
        return all(t.size <= max(_FOLD_ALWAYS, _FOLD_GROWTH * biggest) for t in out_types)


#: Argument dtypes a model may take, and the graph's dtype for each (JAX computes 64-bit
#: integers as int32 unless x64 is on).
ARGUMENT_DTYPES = {"float32": "float32", "int32": "int32", "int64": "int32", "bool": "bool"}


def _refuse_pytree(i: int, a: Any) -> None:
    """A container of arrays (dict, tuple, list: a JAX pytree) as one argument is refused,
    naming its leaves: the graph, the compiled model and the tuner take positional arrays."""
    import jax

    if a is None:  # an empty pytree to JAX: no array to trace
        raise FrontEndError(f"from_jax: argument {i} is None; probsched traces functions of arrays")
    leaves, tree = jax.tree_util.tree_flatten_with_path(a)
    if jax.tree_util.treedef_is_leaf(tree):
        return
    paths = [f"argument {i}{jax.tree_util.keystr(p)}" for p, _ in leaves]
    shown = ", ".join(paths[:4]) + (", ..." if len(paths) > 4 else "")
    raise FrontEndError(
        f"from_jax: argument {i} is a {type(a).__name__} of {len(paths)} arrays ({shown}); probsched traces functions "
        "of positional arrays: pass them as separate arguments (e.g. ps.from_jax(lambda a, b: fn({'a': a, 'b': b}), a, b))"
    )


def _example_type(i: int, a: Any) -> TensorType:
    shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
    if shape is None or dtype is None:
        a = np.asarray(a)
        shape, dtype = a.shape, a.dtype
    for d in shape:
        if not isinstance(d, (int, np.integer)):
            raise FrontEndError(f"from_jax: argument {i} has the dynamic shape {tuple(shape)}; static shapes only")
    name = _dtype_name(dtype)
    if name not in ARGUMENT_DTYPES:
        raise FrontEndError(
            f"from_jax: argument {i} is {name}{list(shape)}; probsched compiles models of "
            f"{', '.join(ARGUMENT_DTYPES)} arguments (cast the input, e.g. x.astype(np.float32))"
        )
    return TensorType(tuple(int(d) for d in shape), ARGUMENT_DTYPES[name])


def from_jax(fn: Callable, *example_args: Any, name: Optional[str] = None) -> Graph:
    """Trace ``fn`` on the shapes of ``example_args`` (arrays, or ``jax.ShapeDtypeStruct``)
    and import it as a :class:`~.ir.Graph`; see the module docstring.

    ``fn`` takes positional float32 arrays and returns an array or a tuple/list of arrays.
    """
    import jax

    for i, a in enumerate(example_args):
        _refuse_pytree(i, a)
    types = [_example_type(i, a) for i, a in enumerate(example_args)]
    specs = [jax.ShapeDtypeStruct(t.shape, np.dtype(t.dtype)) for t in types]
    try:
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*specs)
    except FrontEndError:
        raise
    except Exception as exc:  # dynamic-shape and tracing errors come out of JAX itself
        raise FrontEndError(f"from_jax: tracing {getattr(fn, '__name__', fn)!r} with JAX failed: {exc}") from exc
    imp = _Importer(name or getattr(fn, "__name__", "model").strip("<>") or "model")
    imp.graph.inputs = [imp.new_value(t) for t in types]
    outs = imp.run(closed.jaxpr, closed.consts, imp.graph.inputs)
    for v in outs:
        t = imp.graph.types[v]
        if t.dtype not in ALLOWED_DTYPES:
            raise FrontEndError(f"from_jax: an output is a {t} parameter; probsched computes in float32: {CAST_FIX}")
    imp.graph.outputs = outs
    imp.graph.out_tree = jax.tree_util.tree_structure(out_shape)
    return widen_boolean_constants(fold_affine_chains(prune_dead_nodes(imp.graph)))


__all__ = ["from_jax", "INLINED", "IDENTITY", "SOURCE_SCOPE", "KEPT_SCOPE", "source_line", "source_scope"]
