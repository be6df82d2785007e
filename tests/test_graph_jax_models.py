"""JAX models as their libraries write them: causal masks (boolean constants), token
embeddings (gather), stack, tile, cumsum, floor, int token ids, reduced-precision weights;
a GPT-2 block with a causal mask in plain JAX, and the same model styles in Flax (linen and
nnx), Equinox, Haiku and Keras when those are installed (skipped otherwise: the plain-JAX
versions always run). Each is imported, compiled and matched against jax.jit."""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import probsched as ps

RNG = np.random.default_rng(0)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def compiled_matches_jit(fn, *args, rtol=1e-4):
    """Import, compile (small candidate pool) and compare with jax.jit; returns the graph."""
    graph = ps.from_jax(fn, *args)
    model = ps.compile(graph, candidates=1)
    got = model(*args)
    want = jax.jit(fn)(*args)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        w = np.asarray(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, float(np.abs(w).max())))
    return graph


# ----------------------------------------------------------------------------- a GPT-2 block in plain JAX

T, D, H, V = 8, 16, 2, 32


def gpt2_params(seed=0):
    r = np.random.default_rng(seed)
    w = lambda *s: (r.standard_normal(s) / math.sqrt(s[0])).astype(np.float32)  # noqa: E731
    return {k: jnp.asarray(v) for k, v in {
        "wte": w(V, D), "wpe": w(T, D), "ln1": np.ones(D, np.float32), "ln1b": np.zeros(D, np.float32),
        "qkv": w(D, 3 * D), "qkvb": w(3 * D) * 0.1, "proj": w(D, D), "ln2": np.ones(D, np.float32),
        "ln2b": np.zeros(D, np.float32), "fc": w(D, 4 * D), "out": w(4 * D, D),
    }.items()}


def layer_norm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + eps) * g + b


def gpt2_block(p, ids):
    """Token and position embeddings, causal self-attention, tanh GELU MLP."""
    x = jnp.take(p["wte"], ids, axis=0) + p["wpe"][jnp.arange(ids.shape[-1])]
    h = layer_norm(x, p["ln1"], p["ln1b"])
    q, k, v = jnp.split(h @ p["qkv"] + p["qkvb"], 3, axis=-1)
    heads = lambda t: t.reshape(T, H, D // H).transpose(1, 0, 2)  # noqa: E731
    q, k, v = heads(q), heads(k), heads(v)
    s = q @ k.transpose(0, 2, 1) / math.sqrt(D // H)
    mask = jnp.tril(jnp.ones((T, T), bool))
    s = jnp.where(mask, s, jnp.finfo(jnp.float32).min)
    a = (jax.nn.softmax(s, axis=-1) @ v).transpose(1, 0, 2).reshape(T, D)
    x = x + a @ p["proj"]
    h = layer_norm(x, p["ln2"], p["ln2b"])
    return x + jax.nn.gelu(h @ p["fc"], approximate=True) @ p["out"]


def test_gpt2_block_with_causal_mask_compiles_and_matches_jit():
    p = gpt2_params()
    ids = RNG.integers(0, V, size=(T,)).astype(np.int32)
    graph = compiled_matches_jit(lambda i: gpt2_block(p, i), ids)
    assert {"gather", "ne", "select_n"} <= {n.op for n in graph.nodes}
    assert all(a.dtype != np.bool_ for a in graph.constants.values())


@pytest.mark.slow(rotation=0)  # the GPT-2 block's causal mask is checked in every run
def test_dot_product_attention_is_causal():
    q = rand(1, 6, 2, 4)
    compiled_matches_jit(lambda q: jax.nn.dot_product_attention(q, q * 0.5, q, is_causal=True), q)


def test_stack_tile_cumsum_floor_take():
    table = rand(20, 8)

    def f(ids, x):
        e = jnp.take(table, ids, axis=0) + x           # fill mode: out-of-range ids read NaN
        y = jnp.stack([e, e * 2.0], axis=1).reshape(4, 16)
        z = jnp.tile(y, (2, 1))
        return jnp.floor(jnp.cumsum(z, axis=1)) + jnp.ceil(z * 3.0)

    compiled_matches_jit(f, np.asarray([3, 0, 19, 5], np.int32), rand(4, 8))


def test_int64_ids_are_taken_and_range_checked():
    table = rand(5, 3)
    graph = ps.from_jax(lambda i: jnp.take(table, i, axis=0, mode="clip"), np.asarray([1, 4], np.int32))
    model = ps.compile(graph, candidates=1)
    np.testing.assert_array_equal(model(np.asarray([4, 0], np.int64)), table[[4, 0]])
    with pytest.raises(ps.KernelArgumentError, match="outside int32"):
        model(np.asarray([2**40, 0], np.int64))


def test_bfloat16_weights_cast_by_the_model_fold_and_others_are_refused():
    w = jnp.asarray(rand(4, 3), jnp.bfloat16)
    x = rand(2, 4)
    graph = compiled_matches_jit(lambda x: x @ w.astype(jnp.float32), x)
    assert all(a.dtype == np.float32 for a in graph.constants.values())
    # computing in bfloat16 itself: refused at import with the shape, the source line and the fix
    with pytest.raises(ps.FrontEndError, match=r"test_graph_jax_models.py.*bfloat16\[2, 4\].*jax.tree.map\(lambda a"):
        ps.from_jax(lambda x: (x.astype(jnp.bfloat16) @ w).astype(jnp.float32), x)


# ----------------------------------------------------------------------------- the libraries' styles


def mlp_reference(params, x):
    """The plain-JAX twin of the library MLPs below: dense, relu, dense."""
    (w1, b1), (w2, b2) = params
    return jax.nn.relu(x @ w1 + b1) @ w2 + b2


def test_plain_jax_closure_over_params():
    params = [(rand(6, 8), rand(8)), (rand(8, 3), rand(3))]
    compiled_matches_jit(lambda x: mlp_reference(params, x), rand(2, 6))


def test_flax_linen_apply():
    nn = pytest.importorskip("flax.linen")

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Dense(8)(x))
            x = nn.LayerNorm()(x)
            return nn.Dense(3)(x)

    x = rand(2, 6)
    variables = MLP().init(jax.random.key(0), x)
    compiled_matches_jit(lambda x: MLP().apply(variables, x), x)


def test_flax_nnx_eval():
    nnx = pytest.importorskip("flax.nnx")

    class CNN(nnx.Module):
        def __init__(self, rngs):
            self.conv = nnx.Conv(3, 4, kernel_size=(3, 3), rngs=rngs)
            self.bn = nnx.BatchNorm(4, rngs=rngs)
            self.out = nnx.Linear(4, 2, rngs=rngs)

        def __call__(self, x):
            x = nnx.relu(self.bn(self.conv(x)))
            return self.out(x.mean(axis=(1, 2)))

    model = CNN(nnx.Rngs(0))
    model.eval()
    graphdef, state = nnx.split(model)
    compiled_matches_jit(lambda x: nnx.merge(graphdef, state)(x), rand(1, 6, 6, 3))


def test_equinox_module():
    eqx = pytest.importorskip("equinox")
    model = eqx.nn.MLP(6, 3, width_size=8, depth=2, key=jax.random.key(0))
    compiled_matches_jit(lambda x: jax.vmap(model)(x), rand(2, 6))


def test_haiku_transform():
    hk = pytest.importorskip("haiku")
    f = hk.without_apply_rng(hk.transform(lambda x: hk.nets.MLP([8, 3])(x)))
    x = rand(2, 6)
    params = f.init(jax.random.key(0), x)
    compiled_matches_jit(lambda x: f.apply(params, x), x)


def test_keras_stateless_call():
    os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras is first imported
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "jax":
        pytest.skip("Keras is not on the JAX backend (KERAS_BACKEND=jax)")
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    tv = [v.value for v in model.trainable_variables]
    ntv = [v.value for v in model.non_trainable_variables]
    compiled_matches_jit(lambda x: model.stateless_call(tv, ntv, x)[0], rand(2, 6))


def test_unrolled_scan_is_inlined_and_a_rolled_one_refused():
    w = rand(3, 3, scale=0.5)

    def rnn(xs, unroll=True):
        def step(h, x):
            h = jnp.tanh(h @ w + x)
            return h, h * 2.0

        return jax.lax.scan(step, jnp.zeros(3, jnp.float32), xs, unroll=unroll, reverse=True)

    graph = compiled_matches_jit(rnn, rand(4, 3))
    assert "scan" not in {n.op for n in graph.nodes}
    with pytest.raises(ps.FrontEndError, match=r"lax.scan of 4 steps.*unroll=True"):
        ps.from_jax(lambda xs: rnn(xs, unroll=1), rand(4, 3))
