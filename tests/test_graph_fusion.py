"""Fusion: which nodes become one task, de-duplication, and values computed once."""

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import probsched as ps
from probsched.graph import fuse
from probsched.models.layers import Params, batch_norm, conv2d, layer_norm


def ops_of(groups):
    return [[n.op for n in g.nodes] for g in groups]


def test_conv_bias_batch_norm_relu_is_one_task():
    p = Params(0)
    w, b, bn = p.conv(3, 3, 4, 8), p.bias(8), p.batch_norm(8)
    fn = lambda x: jax.nn.relu(batch_norm(conv2d(x, w) + b, bn))  # noqa: E731
    g = ps.from_jax(fn, np.ones((1, 6, 6, 4), np.float32))
    (grp,) = fuse(g)
    assert grp.kind == "anchor" and grp.nodes[0].op == "conv_general_dilated" and grp.nodes[-1].op == "max"
    (task,) = g.tasks()
    assert [b.name for b in task.func.blocks()][:2] == ["pad", "conv2d"]
    assert task.func.name.startswith("fused_conv2d_")


def test_softmax_and_layer_norm_are_one_task_each():
    p = Params(1)
    ln = p.layer_norm(16)
    fn = lambda x: layer_norm(jax.nn.softmax(x, axis=-1), ln)  # noqa: E731
    g = ps.from_jax(fn, np.ones((4, 16), np.float32))
    groups = fuse(g)
    assert ops_of(groups)[0] == ["reduce_max", "max", "sub", "exp", "reduce_sum", "div"]
    assert [grp.kind for grp in groups] == ["reduce", "reduce"]
    assert sum(n.op == "reduce_sum" for n in groups[1].nodes) == 2  # the mean and the variance


def test_a_tensor_with_two_consumers_is_computed_once():
    p = Params(2)
    w1, w2 = p.dense(8, 8), p.dense(8, 8)

    def fn(x):
        y = jnp.exp(x @ w1)
        return y @ w2, y * 2.0

    g = ps.from_jax(fn, np.ones((3, 8), np.float32))
    groups = fuse(g)
    exp_groups = [grp for grp in groups if any(n.op == "exp" for n in grp.nodes)]
    assert len(exp_groups) == 1
    (exp_value,) = [v for n in exp_groups[0].nodes if n.op == "exp" for v in n.outputs]
    assert exp_value in exp_groups[0].outputs
    readers = [grp for grp in groups if exp_value in grp.inputs]
    assert len(readers) == 2  # the second matmul and the doubling read the stored value


def test_groups_come_in_an_executable_order():
    fn, args = ps.models.get("bert_tiny")
    g = ps.from_jax(fn, *args)
    made = set(g.inputs) | set(g.constants)
    for grp in fuse(g):
        assert all(v in made for v in grp.inputs), grp
        made.update(grp.outputs)
    assert set(g.outputs) <= made


def test_residual_add_joins_the_last_convolution_of_the_block():
    fn, args = ps.models.get("resnet_tiny")
    g = ps.from_jax(fn, *args)
    adds = [grp for grp in fuse(g) if grp.nodes and grp.nodes[0].op == "conv_general_dilated" and len(grp.inputs) > 0]
    residual = [grp for grp in adds if sum(1 for v in grp.inputs if v not in g.constants) == 2]
    assert residual and all(grp.nodes[-1].op == "max" for grp in residual)


def test_a_lone_elementwise_value_is_computed_again_in_its_one_reader():
    """A quantized network's dequantized skip connection: the byte value is read by the next
    convolution too, so its dequantization cannot join the group that makes it; it moves into
    the residual add's group instead of being stored in float32 by a task of its own."""
    p = Params(3)
    w1, w2 = p.conv(1, 1, 4, 4), p.conv(1, 1, 4, 4)

    def fn(x, b):
        skip = (x - 3.0) * 0.5
        y = jax.nn.relu(conv2d(x, w1))
        per_channel = (b - 1.0) * 2.0  # broadcast over the pixels where it is read: stays apart
        return jax.nn.relu(conv2d(y, w2) + skip) * per_channel

    rng = np.random.default_rng(0)
    args = (rng.standard_normal((1, 5, 5, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32))
    g = ps.from_jax(fn, *args)
    groups = fuse(g)
    x, b = g.inputs
    assert [grp.kind for grp in groups] == ["anchor", "elemwise", "anchor"]
    assert groups[1].inputs[0] == b and x not in groups[1].inputs
    last = groups[2]
    assert x in last.inputs and sum(n.op == "conv_general_dilated" for n in last.nodes) == 1
    model = ps.compile(g, check=False, progress=None)
    np.testing.assert_allclose(model(*args), np.asarray(jax.jit(fn)(*args)), rtol=1e-5, atol=1e-5)


def test_a_group_stores_the_bytes_a_later_group_dequantizes_not_their_floats():
    """A quantized downsampling convolution's output is dequantized only for the residual
    add: the convolution stores the bytes, and the add's group dequantizes what it reads."""
    p = Params(4)
    w1, w2, w3 = p.conv(1, 1, 4, 4), p.conv(1, 1, 4, 4), p.conv(1, 1, 4, 4)

    def fn(x):
        q = jnp.clip(jnp.round(conv2d(x, w1) / 0.1) + 128.0, 0.0, 255.0).astype(jnp.uint8)
        skip = (q.astype(jnp.float32) - 128.0) * 0.1
        return conv2d(jax.nn.relu(conv2d(x, w2)), w3) + skip

    x = np.random.default_rng(1).standard_normal((1, 5, 5, 4)).astype(np.float32)
    g = ps.from_jax(fn, x)
    groups = fuse(g)
    assert len(groups) == 3
    (down,) = [grp for grp in groups if any(n.op == "convert_element_type" for n in grp.nodes)]
    assert [g.types[v].dtype for v in down.outputs] == ["uint8"]
    assert down.outputs[0] in groups[-1].inputs
    model = ps.compile(g, check=False, progress=None)
    np.testing.assert_allclose(model(x), np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-5)


def test_a_reduction_reads_the_bytes_it_dequantizes_once_each():
    """The last quantized block before a global average pool: the pool reads each element
    once, so it dequantizes the bytes as it sums them and the block stores bytes."""
    w = Params(5).conv(1, 1, 4, 4)

    def fn(x):
        q = jnp.clip(jnp.round(conv2d(x, w) / 0.1) + 128.0, 0.0, 255.0).astype(jnp.uint8)
        return jnp.mean((q.astype(jnp.float32) - 128.0) * 0.1, axis=(1, 2))

    x = np.random.default_rng(2).standard_normal((1, 5, 5, 4)).astype(np.float32)
    g = ps.from_jax(fn, x)
    conv, pool = fuse(g)
    assert [g.types[v].dtype for v in conv.outputs] == ["uint8"] and pool.inputs[0] == conv.outputs[0]
    model = ps.compile(g, check=False, progress=None)
    np.testing.assert_allclose(model(x), np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name, groups, tasks",
    [pytest.param("resnet50", 56, 31, marks=pytest.mark.slow(rotation=1)),  # the largest import; the others every run
     ("mobilenet_v2", 54, 32), ("bert_base", 132, 8)],
)
def test_full_models_deduplicate(name, groups, tasks):
    """ResNet-50's 53 convolutions, pool and dense become 31 distinct tasks; BERT-base's 12
    identical layers, 8."""
    fn, args = ps.models.get(name)
    g = ps.from_jax(fn, *args)
    assert len(fuse(g)) == groups
    ts = g.tasks()
    assert len(ts) == tasks
    assert sum(t.weight for t in ts) == groups
    assert len({t.key for t in ts}) == tasks


@pytest.mark.parametrize("name", ["resnet_tiny", "mobilenet_tiny", "bert_tiny"])
def test_the_default_space_schedules_every_task(name):
    """Every task is a program the design space can schedule: no draw raises (a reshape read
    with k // 16 once made the micro-kernel rule fail to tensorize)."""
    from handlers import seed, trace

    fn, args = ps.models.get(name)
    for task in ps.from_jax(fn, *args).tasks():
        for s in range(6):
            trace(seed(ps.space.default(), s)).get_trace(ps.Schedule(task.func))


def test_matmul_operands_are_brought_into_the_micro_kernel_layout():
    """A batch matmul of a reshaped, transposed operand (attention's q @ k^T) reads stages
    laid out as the micro-kernel rule wants, so the rule applies."""
    from probsched.space.intrin_tiling import matmul_roles

    def fn(q, k):
        qh = q.reshape(1, 8, 2, 4).transpose(0, 2, 1, 3)
        kh = k.reshape(1, 8, 2, 4).transpose(0, 2, 1, 3)
        return jnp.einsum("bhqd,bhkd->bhqk", qh, kh)

    x = np.ones((1, 8, 8), np.float32)
    (task,) = ps.from_jax(fn, x, x).tasks()
    names = [b.name for b in task.func.blocks()]
    assert names[-1] == "batch_matmul" and "transpose" in names and "relayout" in names
    roles = matmul_roles(ps.Schedule(task.func), "batch_matmul")
    assert roles is not None and {roles.a, roles.b} == {"relayout", "transpose"}
