"""ps.from_jax: every supported primitive, imported, fused, lowered and run, matches JAX.

The lowered tasks run through the IR interpreter here (no numba compile, so many shapes are
cheap); tests/test_graph_compile.py runs whole models through numba.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jax
import jax.numpy as jnp

import probsched as ps
from probsched.graph import fuse, lower_group
from probsched.ir.interpreter import evaluate


def run_lowered(fn, *args):
    """The graph of ``fn`` run task by task through the interpreter: its outputs."""
    g = ps.from_jax(fn, *args)
    env = {v: c.reshape(c.shape or (1,)) for v, c in g.constants.items()}
    env.update({v: np.asarray(a).reshape(np.shape(a) or (1,)) for v, a in zip(g.inputs, args)})
    producer = g.producer()
    for grp in fuse(g):
        low = lower_group(g, grp, producer)
        outs = evaluate(low.func, *(env[v] for v in low.inputs))
        env.update(zip(low.outputs, outs))
    return [env[v].reshape(g.types[v].shape) for v in g.outputs]


def assert_matches_jax(fn, *args, rtol=1e-5, atol=1e-5):
    expected = jax.jit(fn)(*args)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    got = run_lowered(fn, *args)
    assert len(got) == len(expected)
    for g_, e in zip(got, expected):
        np.testing.assert_allclose(g_, np.asarray(e), rtol=rtol, atol=atol)


def rand(*shape, seed=0, lo=-1.0, hi=1.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


X = rand(2, 3, 4)
POS = rand(2, 3, 4, lo=0.5, hi=2.0)

ELEMENTWISE = {
    "add": lambda x: x + 1.5,
    "sub": lambda x: 2.0 - x,
    "mul": lambda x: x * x,
    "div": lambda x: x / 3.0,
    "max": lambda x: jnp.maximum(x, 0.25),
    "min": lambda x: jnp.minimum(x, 0.25),
    "neg": lambda x: -x,
    "exp": jnp.exp,
    "tanh": jnp.tanh,
    "logistic": jax.nn.sigmoid,
    "erf": jax.lax.erf,
    "abs": jnp.abs,
    "sign": jnp.sign,
    "square": jnp.square,
    "integer_pow": lambda x: x**3,
    "integer_pow_negative": lambda x: (x + 2.0) ** -2,
    "select_n": lambda x: jnp.where(x > 0, x, 0.1 * x),
    "clamp": lambda x: jnp.clip(x, -0.5, 0.5),
    "comparisons": lambda x: (x < 0.2).astype(jnp.float32) + (x >= -0.1) * 2.0 + (x == x) * 1.0 + (x != 0.3) * 1.0,
    "logical": lambda x: jnp.where(jnp.logical_and(x > -0.5, jnp.logical_not(x > 0.5)), x, 0.0),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_erf": lambda x: jax.nn.gelu(x, approximate=False),
    "relu6": jax.nn.relu6,
}
POSITIVE = {
    "log": jnp.log,
    "sqrt": jnp.sqrt,
    "rsqrt": jax.lax.rsqrt,
    "pow": lambda x: x**2.5,
    "log1p": jnp.log1p,
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise(name):
    assert_matches_jax(ELEMENTWISE[name], X)


@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_elementwise_positive(name):
    assert_matches_jax(POSITIVE[name], POS)


def test_expm1():
    assert_matches_jax(jnp.expm1, X, atol=1e-6)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: jnp.sum(x, axis=1),
        lambda x: jnp.max(x, axis=(0, 2)),
        lambda x: jnp.min(x, axis=-1, keepdims=True),
        lambda x: jnp.mean(x),
        lambda x: jnp.argmax(x, axis=1).astype(jnp.float32),
        lambda x: jnp.argmin(x, axis=2),
        lambda x: jax.nn.softmax(x, axis=-1),
        lambda x: jax.nn.log_softmax(x, axis=1),
    ],
    ids=["sum", "max", "min_keepdims", "mean_all", "argmax", "argmin", "softmax", "log_softmax"],
)
def test_reductions(fn):
    assert_matches_jax(fn, X)


def test_argmax_output_is_int32_and_first_on_ties():
    x = np.array([[1.0, 3.0, 3.0, 2.0], [0.5, 0.5, 0.5, 0.5]], np.float32)
    (got,) = run_lowered(lambda a: jnp.argmax(a, axis=1), x)
    assert got.dtype == np.int32 and got.tolist() == [1, 0]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: jnp.broadcast_to(x[:, :1, :], (2, 3, 4)) * 2.0,
        lambda x: x.reshape(6, 4) * 1.0,
        lambda x: x.reshape(4, 6) + 1.0,
        lambda x: x.reshape(2, 12)[:, 5:11:2] + 1.0,
        lambda x: jnp.transpose(x, (2, 0, 1)) - 1.0,
        lambda x: jnp.squeeze(x[:, :1, :], axis=1) * 3.0,
        lambda x: jnp.expand_dims(x, 1) * 2.0,
        lambda x: x[::-1, 1:, ::2] + 0.0,
        lambda x: jnp.concatenate([x, x * 2.0], axis=1),
        lambda x: jnp.pad(x, ((0, 0), (1, 2), (2, 0))) * 1.0,
        lambda x: jnp.pad(x, ((1, 1), (0, 0), (0, 0)), constant_values=3.0) + 1.0,
        lambda x: jax.lax.pad(x, 0.5, ((0, 0, 1), (1, 0, 0), (0, 1, 2))),
        lambda x: sum(jnp.split(x, 2, axis=2)),
        lambda x: x + jnp.arange(4.0),
        lambda x: x.T.reshape(-1)[3:9] * 1.0,
        lambda x: jnp.flip(x, axis=2) + x,
    ],
    ids=[
        "broadcast", "reshape_merge", "reshape_regroup", "reshape_slice", "transpose", "squeeze",
        "expand_dims", "slice_strided_rev", "concatenate", "pad", "pad_value", "pad_interior", "split",
        "iota", "transpose_reshape_slice", "rev",
    ],
)
def test_views_and_data_movement(fn):
    assert_matches_jax(fn, X)


def test_view_only_output_is_copied():
    assert_matches_jax(lambda x: jnp.transpose(x, (1, 0, 2)), X)


def test_outputs_that_are_inputs_or_several():
    assert_matches_jax(lambda x: (x, jnp.exp(x), jnp.sum(x, axis=0)), X)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=st.sampled_from([(), (2,), (1, 2)]),
    m=st.integers(1, 4),
    n=st.integers(1, 4),
    k=st.integers(1, 5),
    transpose_a=st.booleans(),
    transpose_b=st.booleans(),
)
def test_dot_general(batch, m, n, k, transpose_a, transpose_b):
    a = rand(*batch, *((k, m) if transpose_a else (m, k)), seed=1)
    b = rand(*batch, *((n, k) if transpose_b else (k, n)), seed=2)
    nb = len(batch)
    lc, rc = (nb if transpose_a else nb + 1), (nb + 1 if transpose_b else nb)
    dims = (((lc,), (rc,)), (tuple(range(nb)), tuple(range(nb))))
    assert_matches_jax(lambda x, y: jax.lax.dot_general(x, y, dims), a, b)


def test_dot_general_two_contracting_dims_and_weights():
    w = rand(3, 4, 5, seed=3)
    assert_matches_jax(lambda x: jax.lax.dot_general(x, w, (((1, 2), (0, 1)), ((), ()))), X)
    assert_matches_jax(lambda x: jnp.einsum("bik,bjk->bij", x, x), X)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    layout=st.sampled_from([("NHWC", "HWIO", "NHWC"), ("NCHW", "OIHW", "NCHW")]),
    stride=st.integers(1, 2),
    dilation=st.integers(1, 2),
    kernel=st.integers(1, 3),
    groups=st.sampled_from([1, 2, "depthwise"]),
    padding=st.sampled_from(["SAME", "VALID", "explicit"]),
)
def test_conv_general_dilated(data, layout, stride, dilation, kernel, groups, padding):
    ci = 4
    g = ci if groups == "depthwise" else groups
    co = ci * data.draw(st.integers(1, 2)) if groups == "depthwise" else 2 * g
    h, w = data.draw(st.integers(kernel * dilation, 7)), data.draw(st.integers(kernel * dilation, 6))
    if padding == "explicit":
        padding = ((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))), (1, 0))
    lhs_shape = (1, h, w, ci) if layout[0] == "NHWC" else (1, ci, h, w)
    rhs_shape = (kernel, kernel, ci // g, co) if layout[1] == "HWIO" else (co, ci // g, kernel, kernel)
    x, wt = rand(*lhs_shape, seed=4), rand(*rhs_shape, seed=5)

    def fn(a):
        return jax.lax.conv_general_dilated(
            a, wt, (stride, stride), padding, rhs_dilation=(dilation, dilation), dimension_numbers=layout,
            feature_group_count=g,
        )

    assert_matches_jax(fn, x, rtol=1e-4, atol=1e-4)


def test_conv1d_nwc():
    wt = rand(3, 4, 5, seed=6)
    fn = lambda a: jax.lax.conv_general_dilated(a, wt, (2,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))  # noqa: E731
    assert_matches_jax(fn, rand(2, 9, 4), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("padding", ["SAME", "VALID", ((0, 0), (1, 1), (0, 2), (0, 0))])
def test_pooling(padding):
    x = rand(1, 7, 6, 3)
    assert_matches_jax(lambda a: jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), padding), x)
    assert_matches_jax(lambda a: jax.lax.reduce_window(a, 0.0, jax.lax.add, (1, 2, 3, 1), (1, 1, 2, 1), padding), x)
    assert_matches_jax(lambda a: jax.lax.reduce_window(a, jnp.inf, jax.lax.min, (1, 2, 2, 1), (1, 2, 2, 1), padding), x)


def test_nested_jit_custom_jvp_custom_vjp_and_stop_gradient_are_inlined():
    @jax.custom_vjp
    def clip_grad(x):
        return jnp.tanh(x)

    clip_grad.defvjp(lambda x: (jnp.tanh(x), x), lambda x, g: (g,))

    @jax.jit
    def inner(x):
        return jax.nn.relu(x) + jax.lax.stop_gradient(x)

    fn = lambda x: clip_grad(inner(x)) * 2.0  # noqa: E731
    g = ps.from_jax(fn, X)
    assert [n.op for n in g.nodes] == ["max", "add", "tanh", "mul"]
    assert_matches_jax(fn, X)


def test_weights_become_constants_and_folding():
    w = rand(4, 3, seed=7)
    gamma = rand(3, seed=8, lo=0.5, hi=1.5)
    fn = lambda x: (x @ w) / jnp.sqrt(gamma + 1e-5)  # noqa: E731
    g = ps.from_jax(fn, X)
    assert [n.op for n in g.nodes] == ["dot_general", "div"]  # sqrt(gamma + eps) folded
    assert any(c.shape == (4, 3) for c in g.constants.values())
    assert_matches_jax(fn, X)


def test_a_weight_used_twice_is_one_constant():
    w = rand(4, 4, seed=9)
    g = ps.from_jax(lambda x: (x @ w) @ w, rand(2, 4))
    assert sum(c.shape == (4, 4) for c in g.constants.values()) == 1


# ----------------------------------------------------------------------------- bad input


def test_unsupported_primitive_names_it_and_the_line():
    with pytest.raises(ps.FrontEndError) as err:
        ps.from_jax(lambda x: jnp.sort(x, axis=0), X)
    msg = str(err.value)
    assert "sort" in msg and "float32[2, 3, 4]" in msg and "test_graph_import.py" in msg


def test_dynamic_shape_is_refused():
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 3"), jnp.float32)
    with pytest.raises(ps.FrontEndError, match="dynamic shape"):
        ps.from_jax(lambda x: x * 2.0, spec)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.uint8])
def test_non_float32_input_is_refused(dtype):  # int32/int64 (token ids) and bool are taken
    with pytest.raises(ps.FrontEndError, match=f"argument 0 is {np.dtype(dtype).name}"):
        ps.from_jax(lambda x: x * 2, np.ones((2, 2), dtype))


def test_float16_inside_the_function_is_refused():
    with pytest.raises(ps.FrontEndError, match="float16"):
        ps.from_jax(lambda x: (x.astype(jnp.float16) * 2).astype(jnp.float32), X)


def test_transposed_convolution_is_refused_clearly():
    wt = rand(3, 3, 4, 4)
    fn = lambda a: jax.lax.conv_transpose(a, wt, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))  # noqa: E731
    with pytest.raises(ps.FrontEndError, match="lhs_dilation"):
        ps.from_jax(fn, rand(1, 5, 5, 4))


def test_evaluate_checks_its_arguments():
    g = ps.from_jax(lambda x: x * 2.0, X)
    with pytest.raises(ps.FrontEndError, match=r"argument 0 has shape \(3, 2, 4\)"):
        g.evaluate(np.ones((3, 2, 4), np.float32))
    with pytest.raises(ps.FrontEndError, match="expected 1 arguments, got 2"):
        g.evaluate(X, X)


def test_batch_norm_folds_into_one_multiply_add():
    c = [rand(4, seed=s, lo=0.5, hi=1.5) for s in range(4)]
    fn = lambda x: jax.nn.relu((x - c[0]) / c[1] * c[2] + c[3])  # noqa: E731
    x = rand(2, 3, 4)
    g = ps.from_jax(fn, x)
    assert [n.op for n in g.nodes] == ["mul", "add", "max"]
    assert_matches_jax(fn, x)
    c_minus = lambda x: 2.0 - (x * c[0] + c[1])  # noqa: E731  constant minus the chain
    assert [n.op for n in ps.from_jax(c_minus, x).nodes] == ["mul", "add"]
    assert_matches_jax(c_minus, x)


def test_a_chain_link_read_twice_is_not_folded_away():
    c = rand(4, seed=5, lo=0.5, hi=1.5)

    def fn(x):
        y = x * c
        return (y + c) * c, y  # y is an output and read again: the chain stops there

    x = rand(2, 4)
    g = ps.from_jax(fn, x)
    assert [n.op for n in g.nodes] == ["mul", "mul", "add"]
    assert_matches_jax(fn, x)
