"""Quantized networks: ps.quantize (calibration, skipped layers, the integer layers of
quant_ops), QDQ ONNX models, their int8 tasks, and accuracy against float32 (and against
ONNX Runtime's int8 on the same QDQ model, where it is installed)."""

from __future__ import annotations

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax

import probsched as ps
from probsched.errors import FrontEndError
from probsched.graph import quant_ops
from probsched.graph.quantization import calibrate, layers
from probsched.precision import precision_of

N_CAL, N_TEST = 16, 64


def inputs(shape, n, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


@pytest.fixture(scope="module")
def resnet():
    """resnet_tiny, its int8 graph (8-bit weights) calibrated on N_CAL inputs, and that graph compiled."""
    fn, args = ps.models.get("resnet_tiny")
    q = ps.quantize(fn, inputs(args[0].shape, N_CAL, 0), reduce_range=False)  # 8-bit weights on every CPU
    return fn, args, q, ps.compile(q, candidates=4, progress=None)


def accuracy(got, want):
    """(relative error, cosine similarity, arg-max agreement) of logits batches."""
    got, want = np.concatenate(got).reshape(len(got), -1), np.concatenate(want).reshape(len(want), -1)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    cos = np.mean(np.sum(got * want, 1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1)))
    return float(rel), float(cos), float(np.mean(got.argmax(1) == want.argmax(1)))


@pytest.mark.slow(rotation=2)  # one network compile for the four; int8 tasks are tuned and checked in every run
def test_an_int8_cnn_is_close_to_float32_on_inputs_it_was_not_calibrated_on(resnet):
    fn, args, q, model = resnet
    test = inputs(args[0].shape, N_TEST, 1)  # another seed: disjoint from the calibration set
    rel, cos, agree = accuracy([model(x) for x in test], [np.asarray(jax.jit(fn)(x)) for x in test])
    assert 0 < rel < 0.05 and cos > 0.999 and agree >= 0.9, (rel, cos, agree)


@pytest.mark.slow(rotation=2)  # one network compile for the four; int8 tasks are tuned and checked in every run
def test_the_compiled_int8_model_computes_its_graph(resnet):
    fn, args, q, model = resnet
    x = inputs(args[0].shape, 1, 2)[0]
    want = q.evaluate(x)[0]
    # an 8-bit activation may round a tie the other way (float32 in another order): a step of
    # one, far below what quantization itself costs
    assert np.abs(model(x) - want).max() <= 1e-3 * np.abs(want).max()


@pytest.mark.slow(rotation=2)  # one network compile for the four; int8 tasks are tuned and checked in every run
def test_quantized_layers_are_int8_tasks_with_records_of_their_own(resnet):
    fn, args, q, model = resnet
    float_keys = {t.key for t in ps.from_jax(fn, *args).tasks()}
    int8 = [t for t in q.tasks() if precision_of(t.func) == "int8"]
    assert len(int8) >= 8 and not {t.key for t in int8} & float_keys
    convs = [t for t in int8 if "conv2d" in t.func.name]
    assert all({"uint8", "int8"} <= {b.dtype for b in t.func.input_buffers()} for t in convs)
    # requantized where the next layer reads it: most convolutions hand on uint8
    assert sum(b.dtype == "uint8" for t in convs for b in t.func.output_buffers()) >= len(convs) // 2
    kernels = [b.annotation("tensorize") for c in model.choices for b in c.schedule.mod.blocks() if b.annotation("tensorize")]
    assert kernels and all(k.startswith("matmul_int8") for k in kernels)


def test_a_layer_left_in_float32_and_the_skip_rules():
    fn, args = ps.models.get("resnet_tiny")
    graph = ps.from_jax(fn, *args)
    cal = inputs(args[0].shape, 2, 0)
    all_layers = layers(graph)
    last = all_layers[-1]
    assert last.op == "dot_general" and last.index == len(all_layers) - 1
    for rule in (last.index, last.source, lambda layer: layer.op == "dot_general"):
        kept = layers(ps.quantize(graph, cal, skip=[rule]))
        assert [(k.op, k.source) for k in kept] == [(last.op, last.source)]
    with pytest.raises(FrontEndError, match="skip takes layer indices"):
        ps.quantize(graph, cal, skip=[2.5])
    with pytest.raises(FrontEndError, match="non-empty list of samples"):
        ps.quantize(graph, [])
    with pytest.raises(FrontEndError, match="unknown calibration method 'kl'"):
        ps.quantize(graph, cal, method="kl")
    with pytest.raises(FrontEndError, match="calibration input 1"):
        ps.quantize(graph, [cal[0], np.ones((2, 2), np.float32)])


@pytest.mark.parametrize("name", ["resnet_tiny", "mobilenet_tiny"])
def test_a_quantized_cnn_passes_bytes_between_its_tasks(name):
    """Residual blocks read their skip connection as bytes, a shortcut convolution and the
    stem's max pool store bytes, a ReLU is the quantization's saturation: as in a QDQ model
    (:mod:`probsched.graph.quant_plan`), only the global pool's input and the logits are
    float32 between tasks; and the network still computes what the float one does."""
    fn, args = ps.models.get(name)
    q = ps.quantize(ps.from_jax(fn, *args), inputs(args[0].shape, 4, 0))
    between = [b.dtype for t in q.tasks() for b in t.func.output_buffers()]
    assert between.count("float32") == 2 and between.count("uint8") == len(between) - 2, between
    assert not any(t.func.name.startswith("fused_add") or "max_pool_" in t.func.name for t in q.tasks())


def test_residual_blocks_and_a_max_pool_on_bytes_compute_what_the_float_network_does():
    """The plan's rewrites (skip connections dequantized from bytes, a max pool on the codes,
    ReLUs as saturation) keep the int8 network near the float one: a stem, a max pool and
    two residual blocks, one with a shortcut convolution."""
    rng = np.random.default_rng(0)

    def conv(x, c_out, k, stride=1):
        w = rng.standard_normal((k, k, x.shape[-1], c_out)).astype(np.float32) / np.sqrt(k * k * x.shape[-1])
        return lambda y: lax.conv_general_dilated(y, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    x0 = np.zeros((1, 16, 16, 3), np.float32)
    stem, c1, c2, c3, short = conv(x0, 8, 3), conv(np.zeros((1, 8, 8, 8)), 8, 3), conv(np.zeros((1, 8, 8, 8)), 8, 3), \
        conv(np.zeros((1, 8, 8, 8)), 16, 1), conv(np.zeros((1, 8, 8, 8)), 16, 1)

    def fn(x):
        y = lax.reduce_window(jax.nn.relu(stem(x)), -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        y = jax.nn.relu(c2(jax.nn.relu(c1(y))) + y)  # identity skip
        return jax.nn.relu(c3(y) + short(y))  # shortcut convolution

    graph = ps.from_jax(fn, x0)
    q = ps.quantize(graph, inputs(x0.shape, 8, 0))
    assert [t.func.name for t in q.tasks() if "max_pool" in t.func.name] == ["fused_max_pool"]
    test = inputs(x0.shape, 4, 1)
    rel, cos, _ = accuracy([q.evaluate(x)[0] for x in test], [np.asarray(fn(x)) for x in test])
    assert cos > 0.999 and rel < 0.05, (rel, cos)  # 0.9998 and 0.02 measured


def test_a_relu_before_a_quantization_is_its_saturation():
    from probsched.graph.quant_plan import relu_bounds

    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    fn = lambda x: jax.nn.relu6(x @ w) @ w  # noqa: E731
    g = ps.from_jax(fn, np.ones((4, 8), np.float32))
    read = layers(g)[1].node.inputs[0]
    y, floor, ceiling = relu_bounds(g, read)
    assert (floor, ceiling) == (0.0, 6.0) and g.producer()[y].op == "dot_general"
    q = ps.quantize(fn, inputs((4, 8), 8, 0))
    sixes = [n for n in q.nodes if n.op == "min" and any(v in q.constants and np.all(q.constants[v] == 6.0) for v in n.inputs)]
    assert not sixes  # the ReLU6 is the codes' saturation, not a clamp of the floats
    x = inputs((4, 8), 1, 1)[0]
    np.testing.assert_allclose(q.evaluate(x)[0], fn(x), rtol=0.1, atol=0.1 * np.abs(fn(x)).max())


def test_percentile_calibration_ignores_an_outlier():
    x = np.linspace(-1, 1, 10001).astype(np.float32)
    outlier = x.copy()
    outlier[0] = -1000.0
    g = ps.from_jax(lambda v: jnp.tanh(v), x)
    (v,) = g.inputs
    lo, hi = calibrate(g, [v], [(x,), (outlier,)], "minmax")[v]
    assert (lo, hi) == (-1000.0, 1.0)
    lo, hi = calibrate(g, [v], [(x,), (outlier,)], "percentile", 99.0)[v]
    assert -1.0 < lo < -0.9 and 0.9 < hi < 1.0


@pytest.mark.parametrize("padding, zero_point", [((1, 1), 37), ((0, 2), 0)])
def test_an_integer_convolution_equals_the_float_one_on_dequantized_values(padding, zero_point):
    rng = np.random.default_rng(3)
    q = rng.integers(0, 256, (1, 7, 6, 8)).astype(np.uint8)
    w = quant_ops.quantize_weight(rng.standard_normal((3, 3, 8, 16)).astype(np.float32), axis=3)
    spec = ("NHWC", "HWIO", "NHWC")
    pads = [padding, padding]
    got = quant_ops.conv(jnp.asarray(q), zero_point, 0.02, w, (2, 1), pads, (1, 1), spec)
    x = (q.astype(np.float64) - zero_point) * 0.02  # a padded zero is a zero point
    wf = w.values.astype(np.float64) * w.scale
    want = lax.conv_general_dilated(x, wf, (2, 1), pads, dimension_numbers=spec, precision="highest")
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_activation_and_weight_quantization():
    assert quant_ops.activation_params(0.0, 2.55) == (pytest.approx(0.01), 0)
    w = quant_ops.quantize_weight(np.array([[1.0, -0.5], [0.0, 0.0]], np.float32), axis=0)
    assert w.values.tolist() == [[127, -64], [0, 0]] and w.scale.tolist() == [pytest.approx(1 / 127), 1.0]
    q = quant_ops.quantize_activation(jnp.array([-1.0, 0.015, 0.025, 9.0]), 0.01, 0)
    assert np.asarray(q).tolist() == [0, 2, 2, 255]  # saturated, ties to even


# ----------------------------------------------------------------------------- QDQ ONNX models


def tiny_cnn():
    """A float32 ONNX CNN: two convolutions with ReLU, a global pooling, a dense layer."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    weights = [init("w1", (16, 3, 3, 3), 0.3), init("b1", (16,), 0.1), init("w2", (16, 16, 3, 3), 0.1),
               init("b2", (16,), 0.1), init("w3", (10, 16), 0.3), init("b3", (10,), 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def qdq_model(name: str, nodes, x_shape, y_shape, consts: dict):
    """An ONNX model (opset 19) of ``nodes`` from float input ``x`` to float output ``y``, with
    ``consts`` as its initializers."""
    from onnx import TensorProto, helper, numpy_helper

    return helper.make_model(helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]), opset_imports=[helper.make_opsetid("", 19)])


# 7-bit weights (ONNX Runtime's reduce_range) are typed int8r, whose kernels CPUs without VNNI run faster
@pytest.mark.parametrize("top, weights", [(127, "int8"), (64, "int8r")])
def test_a_hand_written_qdq_convolution_imports_as_an_int8_task(top, weights):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(4)
    consts = {
        "xs": np.float32(0.02), "xz": np.int8(-5),  # a signed activation: read as uint8, zero point + 128
        "w": rng.integers(-top, top + 1, (16, 8, 3, 3)).astype(np.int8), "ws": rng.uniform(0.01, 0.02, 16).astype(np.float32),
        "b": rng.standard_normal(16).astype(np.float32),
    }
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "xs", "xz"], ["dq"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
             helper.make_node("Conv", ["dq", "wf", "b"], ["y"], pads=[1, 1, 1, 1])]
    model = qdq_model("qdq_conv", nodes, (1, 8, 6, 6), (1, 16, 6, 6), consts)
    g = ps.from_onnx(model)
    (task,) = [t for t in g.tasks() if "conv2d" in t.func.name]
    assert [b.dtype for b in task.func.input_buffers()][:2] == ["uint8", weights]
    x = rng.uniform(-2, 2, (1, 8, 6, 6)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(g.evaluate(x)[0], want, rtol=1e-5, atol=1e-4)
    with pytest.raises(FrontEndError, match="QuantizeLinear to int32"):
        bad = onnx.helper.make_node("QuantizeLinear", ["x", "xs", "bz"], ["q"])
        ps.from_onnx(helper.make_model(helper.make_graph(
            [bad], "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("q", TensorProto.INT32, [2])],
            [numpy_helper.from_array(np.float32(1.0), "xs"), numpy_helper.from_array(np.int32(0), "bz")])))


@pytest.mark.parametrize("zero", [np.uint8(7), np.int8(-5)], ids=["uint8", "int8"])
def test_a_qdq_max_pool_runs_on_the_bytes_and_its_requantization_is_dropped(zero):
    """uint8 activations: the pool runs on the bytes. int8 ones are read as uint8 requantized
    from their float source, which the pool does not have: it pools the floats."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(5)
    consts = {"xs": np.float32(0.03), "xz": zero, "w": rng.integers(-127, 128, (4, 4, 1, 1)).astype(np.int8),
              "ws": rng.uniform(0.01, 0.02, 4).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "xs", "xz"], ["dq"]),
             helper.make_node("MaxPool", ["dq"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["p", "xs", "xz"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "xs", "xz"], ["pdq"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
             helper.make_node("Conv", ["pdq", "wf"], ["y"])]
    model = qdq_model("qdq_pool", nodes, (1, 4, 7, 7), (1, 4, 4, 4), consts)
    g = ps.from_onnx(model)
    (pool,) = [n for n in g.nodes if n.op == "reduce_window_max"]
    x = rng.uniform(-1, 1, (1, 4, 7, 7)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(g.evaluate(x)[0], want, rtol=1e-5, atol=1e-5)
    if zero.dtype == np.int8:
        assert g.types[pool.inputs[0]].dtype == "float32"
        return
    assert g.types[pool.inputs[0]].dtype == "uint8"
    assert sum(n.op == "round" for n in g.nodes) == 1  # the input's quantization; the pool's is dropped
    np.testing.assert_allclose(ps.compile(g, candidates=2, progress=None)(x), want, rtol=1e-5, atol=1e-5)


def test_qdq_pairs_around_a_transpose_and_a_reshape_are_one_quantization():
    """A transformer's QDQ file puts a Q/DQ pair around each Transpose and Reshape of its
    attention: the layout op moves the bytes, so the next pair with the same parameters is
    no requantization (each was one per element before)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    consts = {"s": np.float32(0.02), "z": np.uint8(100), "shape": np.array([1, 6, 4], np.int64), "b": np.float32(0.5)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"]),
             helper.make_node("DequantizeLinear", ["q0", "s", "z"], ["d0"]),
             helper.make_node("Transpose", ["d0"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("QuantizeLinear", ["t", "s", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["d1"]),
             helper.make_node("Reshape", ["d1", "shape"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["d2"]),
             helper.make_node("Add", ["d2", "b"], ["y"])]
    model = qdq_model("qdq_moves", nodes, (1, 2, 3, 4), (1, 6, 4), consts)
    g = ps.from_onnx(model)
    assert sum(n.op == "round" for n in g.nodes) == 1  # the input's quantization only
    x = np.random.default_rng(3).uniform(-2, 2, (1, 2, 3, 4)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    # a byte off would be 0.02 off; the dequantization's float arithmetic differs in the last bit
    np.testing.assert_allclose(g.evaluate(x)[0], want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ps.compile(g, candidates=2, progress=None)(x), want, rtol=0, atol=1e-5)


def test_onnx_runtime_quantized_model_runs_here_as_onnx_runtime_runs_it(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    import onnx

    f32_path, qdq_path = str(tmp_path / "f32.onnx"), str(tmp_path / "qdq.onnx")
    onnx.save(tiny_cnn(), f32_path)
    cal = iter([{"x": x} for x in inputs((1, 3, 16, 16), N_CAL, 0)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(cal, None)

    from probsched.graph.quantization import reduce_range_default

    # 7-bit weights without VNNI, as ONNX Runtime asks there: its 8-bit products would saturate
    quantize_static(f32_path, qdq_path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    reduce_range=reduce_range_default(ps.Target.host()))
    model = ps.compile(ps.from_onnx(qdq_path), candidates=4, progress=None)
    runs = {p: ort.InferenceSession(p, providers=["CPUExecutionProvider"]) for p in (f32_path, qdq_path)}
    test = inputs((1, 3, 16, 16), N_TEST, 1)
    ours = [model(x) for x in test]
    theirs = [runs[qdq_path].run(None, {"x": x})[0] for x in test]
    floats = [runs[f32_path].run(None, {"x": x})[0] for x in test]
    rel, cos, agree = accuracy(ours, theirs)
    assert rel < 1e-3 and agree == 1.0, (rel, cos, agree)  # the same integers: rounding ties aside
    ours_vs_float, theirs_vs_float = accuracy(ours, floats), accuracy(theirs, floats)
    assert ours_vs_float[1] > 0.999 and abs(ours_vs_float[0] - theirs_vs_float[0]) < 1e-3


@pytest.mark.slow(rotation=2)  # one network compile for the four; int8 tasks are tuned and checked in every run
def test_a_saved_int8_model_loads_and_computes_the_same(resnet, tmp_path):
    fn, args, q, model = resnet
    model.save(str(tmp_path / "q.psm"))
    again = ps.load(str(tmp_path / "q.psm"))
    x = inputs(args[0].shape, 1, 3)[0]
    np.testing.assert_array_equal(again(x), model(x))


def test_compiling_a_float_network_in_int8_asks_for_calibration():
    fn, args = ps.models.get("resnet_tiny")
    with pytest.raises(ps.errors.ProbschedError, match="quantize it with ps.quantize"):
        ps.compile(fn, *args, precision="int8", progress=None)


def test_conversions_to_8_bits_compute_what_jax_computes():
    def fn(x):
        t = jnp.clip(x * 40.0, -128.0, 255.0)  # truncated toward zero, not rounded
        wrapped = (jnp.round(x * 300.0).astype(jnp.int32)).astype(jnp.int8)  # an integer: modulo 256
        away = lax.round(x * 4.0)  # lax's default: half away from zero (jnp.round: to even)
        return t.astype(jnp.uint8).astype(jnp.float32) + t.astype(jnp.int8).astype(jnp.float32) + wrapped.astype(jnp.float32) + away

    x = np.linspace(-2, 2, 4 * 64, dtype=np.float32).reshape(4, 64)
    x[0, :4] = [-0.625, -0.375, 0.375, 0.625]  # ties of x * 4
    model = ps.compile(fn, x, candidates=2, progress=None)
    np.testing.assert_array_equal(model(x), np.asarray(jax.jit(fn)(x)))


@pytest.mark.parametrize("name", ["resnet_tiny", "mobilenet_tiny"])
def test_the_int8_graph_holds_smaller_weights_and_no_broadcast_constants(name):
    fn, args = ps.models.get(name)
    f = ps.from_jax(fn, *args)
    q = ps.quantize(f, inputs(args[0].shape, 1, 0))
    assert q.constant_bytes < 0.5 * f.constant_bytes  # int8 weights, and a ReLU6's bounds stay scalars
    assert max(a.size for a in q.constants.values()) <= max(a.size for a in f.constants.values())


def test_a_broadcast_constant_stays_a_node_in_the_int8_graph():
    w = np.ones((64, 64), np.float32)
    fn = lambda x: x @ w + jnp.full((128, 64), 2.0, jnp.float32)  # noqa: E731 - kept as a node by the import
    x = np.ones((128, 64), np.float32)
    f, q = ps.from_jax(fn, x), ps.quantize(fn, [x])
    assert "broadcast_in_dim" in [n.op for n in f.nodes] and "broadcast_in_dim" in [n.op for n in q.nodes]
    assert max(a.size for a in q.constants.values()) == 64 * 64


def test_tune_model_measures_the_int8_tasks_of_a_quantized_graph(tmp_path):
    from probsched.measure import LocalMeasurer

    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    fn = lambda x: jax.nn.relu(x @ w1) @ w2  # noqa: E731
    q = ps.quantize(fn, inputs((16, 64), 4, 0))
    with LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1.0) as m:
        r = ps.tune_model(q, trials=6, measurer=m, database=str(tmp_path / "q.db"), strategy="replay", cost_model=None,
                          retime_top=0, candidates=2)
    assert len(r.history) == 6 and not [e.trial.error for e in r.history if e.trial.error]
    x = inputs((16, 64), 1, 1)[0]
    want = q.evaluate(x)[0]
    assert np.abs(r.model(x) - want).max() <= 1e-3 * np.abs(want).max()


def test_weights_quantized_to_reduced_range_are_int8r_tasks_that_compute_their_graph(tmp_path):
    """reduce_range: weights in [-64, 64], typed int8r in the tasks (other keys, other
    records), tiled around the kernels the CPU runs fastest on them, exact on the graph."""
    from probsched.graph.quantization import reduce_range_default
    from probsched.space.intrin_tiling import int8_weights

    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    fn = lambda x: jax.nn.relu(x @ w1) @ w2  # noqa: E731
    cal = inputs((16, 64), 4, 0)
    full, reduced = ps.quantize(fn, cal, reduce_range=False), ps.quantize(fn, cal, reduce_range=True)
    chosen = ps.quantize(fn, cal)  # this machine's default: 7-bit where the CPU has no VNNI
    assert chosen.constants.keys() == full.constants.keys()
    same = reduced if reduce_range_default(ps.Target.host()) else full
    assert all(np.array_equal(chosen.constants[k], same.constants[k]) for k in same.constants)
    weights = [a for a in reduced.constants.values() if a.dtype == np.int8]
    assert weights and all(np.abs(a).max() == 64 for a in weights)
    typed = [{b.dtype for b in t.func.input_buffers() if b.name.startswith("w")} for t in reduced.tasks()]
    assert sum("int8r" in d for d in typed) == 2 and not any("int8" in d for d in typed)
    assert not {t.key for t in reduced.tasks() if "matmul" in t.func.name} & {t.key for t in full.tasks()}
    model = ps.compile(reduced, candidates=2, progress=None)
    family = "matmul_int8r_" if int8_weights(ps.Target.host(), "int8r") == "int8r" else "matmul_int8"
    kernels = [b.annotation("tensorize") for c in model.choices for b in c.schedule.mod.blocks() if b.annotation("tensorize")]
    assert kernels and all(k.startswith(family) for k in kernels), kernels
    x = inputs((16, 64), 1, 1)[0]
    want = reduced.evaluate(x)[0]
    assert np.abs(model(x) - want).max() <= 1e-3 * np.abs(want).max()
    model.save(str(tmp_path / "r.psm"))
    np.testing.assert_array_equal(ps.load(str(tmp_path / "r.psm"))(x), model(x))
    test = inputs((16, 64), 8, 2)
    rel8, _, _ = accuracy([full.evaluate(t)[0] for t in test], [np.asarray(fn(t)) for t in test])
    rel7, cos7, _ = accuracy([reduced.evaluate(t)[0] for t in test], [np.asarray(fn(t)) for t in test])
    assert rel8 < rel7 < 0.1 and cos7 > 0.99, (rel8, rel7, cos7)  # a bit of precision given up


# ----------------------------------------------------------------------------- the command line

NET = '''
import numpy as np, jax

rng = np.random.default_rng(0)
w1, w2 = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)


def model():
    return (lambda x: jax.nn.relu(x @ w1) @ w2), (np.zeros((16, 64), np.float32),)
'''


@pytest.mark.slow(rotation=4)  # the int8 options are checked in every run (below), int8 tuning above
def test_the_command_line_tunes_compiles_and_runs_a_model_in_int8(tmp_path, capsys):
    """``--precision int8 --calibration FILE``: tune-model and compile quantize the model the
    same way (compile finds tune-model's records), and the model file computes the int8
    network ps.quantize makes of the same calibration."""
    from probsched.cli import main

    (tmp_path / "net.py").write_text(NET)
    spec, cal = f"{tmp_path / 'net.py'}:model", inputs((16, 64), 4, 0)  # the model and inputs of the test above
    np.savez(tmp_path / "cal.npz", arr_0=np.stack(cal))
    int8 = ["--precision", "int8", "--calibration", str(tmp_path / "cal.npz")]
    db, out = str(tmp_path / "q.db"), str(tmp_path / "q.psm")
    assert main(["tune-model", spec, *int8, "--trials", "4", "--batch-size", "2", "--strategy", "replay",
                 "--retime-top", "0", "--workers", "1", "--db", db, "--no-compare", "--quiet"]) == 0
    assert "model_int8" in capsys.readouterr().out
    assert main(["compile", spec, *int8, "--db", db, "-o", out, "--quiet"]) == 0
    table = capsys.readouterr().out
    assert table.count("| database |") >= 2, table  # both int8 matmuls from the records tune-model stored
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    want_graph = ps.quantize(lambda x: jax.nn.relu(x @ w1) @ w2, cal)
    x = inputs((16, 64), 1, 1)[0]
    want = want_graph.evaluate(x)[0]
    assert np.abs(ps.load(out)(x) - want).max() <= 1e-3 * np.abs(want).max()


def test_int8_options_on_the_command_line_say_what_is_wrong(tmp_path, capsys):
    from probsched.cli import main

    (tmp_path / "net.py").write_text(NET)
    spec = f"{tmp_path / 'net.py'}:model"
    np.savez(tmp_path / "named.npz", x=np.zeros((2, 16, 64), np.float32))
    np.savez(tmp_path / "shape.npz", arr_0=np.zeros((2, 16, 32), np.float32))
    cases = [
        (["--precision", "int8"], "needs --calibration"),
        (["--calibration", "random:2"], "apply with --precision int8"),
        (["--precision", "int8", "--calibration", "random:0"], "random:N with N >= 1"),
        (["--precision", "int8", "--calibration", str(tmp_path / "none.npz")], "no such file"),
        (["--precision", "int8", "--calibration", str(tmp_path / "named.npz")], "expected one array per input: arr_0"),
        (["--precision", "int8", "--calibration", str(tmp_path / "shape.npz")], "calibration input 0: argument 0"),
    ]
    for extra, message in cases:
        assert main(["import", spec, *extra]) == 2, extra
        assert message in capsys.readouterr().err, extra
    assert main(["import", spec, "--precision", "int8", "--calibration", "random:2", "--float-layers", "net.py"]) == 2
    assert "none is left to quantize" in capsys.readouterr().err


def test_a_qdq_model_is_int8_already_on_the_command_line(tmp_path, capsys):
    pytest.importorskip("onnx")
    from onnx import helper

    from probsched.cli import main

    rng = np.random.default_rng(4)
    consts = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": rng.integers(-127, 128, (16, 8, 1, 1)).astype(np.int8),
              "ws": rng.uniform(0.01, 0.02, 16).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "xs", "xz"], ["dq"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
             helper.make_node("Conv", ["dq", "wf"], ["y"])]
    model = qdq_model("qdq", nodes, (1, 8, 4, 4), (1, 16, 4, 4), consts)
    path = str(tmp_path / "qdq.onnx")
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
    assert main(["import", path, "--precision", "int8"]) == 0  # no calibration: its int8 layers as they are
    assert "fused_conv2d" in capsys.readouterr().out
    assert main(["import", path, "--precision", "int8", "--calibration", "random:2"]) == 2
    assert "quantized already" in capsys.readouterr().err
