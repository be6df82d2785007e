"""``benchmarks/bench_layers.py`` and ``benchmarks/layer_categories.py``: each engine's layers
and probsched's kernel calls fall into the same rows, aligned to the same ONNX nodes
(engines are not run here, except ONNX Runtime's and OpenVINO's profilers on a tiny export
when they are installed)."""

import doctest
import importlib
import sys
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from scripts import ROOT

import probsched as ps
from probsched.graph.task import lower_group

TINY = ROOT / "tests" / "data" / "onnx"


@pytest.fixture(scope="module")
def bench():
    # imported by name, as it imports its neighbours (engines, layer_categories, bench_models)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    return importlib.import_module("bench_layers")


@pytest.fixture(scope="module")
def lc(bench):
    return bench.lc


def test_their_doctests_pass(bench, lc):
    for module in (bench, lc):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted >= 5 and result.failed == 0


def test_bench_models_pairs_each_round(bench):
    models = importlib.import_module("bench_models")  # beside bench_layers on the path
    result = doctest.testmod(models, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 2 and result.failed == 0
    row = {"model": "m", "rounds_ms": {"probsched tuned bf16": [2.0, 4.0], "openvino default (bf16)": [1.0, 6.0]}}
    # slower in one round, faster in the other: the median of the two ratios, and the range
    assert models.paired_ratios(row)["probsched tuned bf16"]["openvino default (bf16)"] == (1.0, 0.5, 1.5)
    assert "openvino default (bf16) 1.00x (0.50-1.50)" in models.ratios_lines([row])


def _init(name, *dims):
    return helper.make_tensor(name, TensorProto.FLOAT, dims, np.zeros(int(np.prod(dims)), np.float32))


def _cnn():
    """stem 7x7 -> maxpool -> 1x1 -> 3x3 -> depthwise 3x3 -> residual add -> relu -> global pool -> gemm."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w0"], ["c0"], name="/conv1/Conv", kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3]),
        n("Relu", ["c0"], ["r0"], name="/relu/Relu"),
        n("MaxPool", ["r0"], ["p0"], name="/maxpool/MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Conv", ["p0", "w1"], ["c1"], name="/l1/conv1/Conv"),
        n("Relu", ["c1"], ["r1"], name="/l1/relu/Relu"),
        n("Conv", ["r1", "w2"], ["c2"], name="/l1/conv2/Conv", pads=[1, 1, 1, 1]),
        n("Conv", ["c2", "w3"], ["c3"], name="/l1/dw/Conv", pads=[1, 1, 1, 1], group=4),
        n("Add", ["c3", "p0"], ["a"], name="/l1/Add"),
        n("Relu", ["a"], ["r2"], name="/l1/relu_2/Relu"),
        n("GlobalAveragePool", ["r2"], ["g"], name="/avgpool/GlobalAveragePool"),
        n("Flatten", ["g"], ["f"], name="/Flatten"),
        n("Gemm", ["f", "wfc", "bfc"], ["y"], name="/fc/Gemm", transB=1),
    ]
    inits = [_init("w0", 4, 3, 7, 7), _init("w1", 4, 4, 1, 1), _init("w2", 4, 4, 3, 3), _init("w3", 4, 1, 3, 3),
             _init("wfc", 5, 4), _init("bfc", 5)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _attention():
    """embedding, q/k/v dense, scores scaled and masked, softmax, attention output, dense,
    residual add, layer norm, gelu (erf); the mask prepared from an input."""
    n = helper.make_node
    nodes = [
        n("Gather", ["table", "ids"], ["e"], name="/emb/Gather"),
        n("LayerNormalization", ["e", "g0", "b0"], ["h"], name="/emb/LayerNorm"),
        n("MatMul", ["h", "wq"], ["q"], name="/q/MatMul"),
        n("MatMul", ["h", "wk"], ["k"], name="/k/MatMul"),
        n("MatMul", ["h", "wv"], ["v"], name="/v/MatMul"),
        n("Transpose", ["k"], ["kt"], name="/k/Transpose", perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["s"], name="/att/MatMul"),
        n("Div", ["s", "scale"], ["s2"], name="/att/Div"),
        n("Cast", ["mask"], ["mf"], name="/mask/Cast"),
        n("Sub", ["one", "mf"], ["mneg"], name="/mask/Sub"),
        n("Add", ["s2", "mneg"], ["s3"], name="/att/Add"),
        n("Softmax", ["s3"], ["p"], name="/att/Softmax", axis=-1),
        n("MatMul", ["p", "v"], ["o"], name="/att/MatMul_1"),
        n("MatMul", ["o", "wo"], ["o2"], name="/out/MatMul"),
        n("Add", ["o2", "h"], ["res"], name="/out/Add"),
        n("LayerNormalization", ["res", "g1", "b1"], ["h2"], name="/out/LayerNorm"),
        n("Erf", ["h2"], ["y"], name="/act/Erf"),
    ]
    d = 8
    inits = [_init("table", 20, d), _init("g0", d), _init("b0", d), _init("g1", d), _init("b1", d),
             _init("wq", d, d), _init("wk", d, d), _init("wv", d, d), _init("wo", d, d), _init("scale"), _init("one")]
    graph = helper.make_graph(
        nodes, "bert",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 6]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, d])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_nodes_of_a_cnn_fall_into_the_cnn_rows(lc):
    idx = lc.OnnxIndex(_cnn())
    assert idx.kind == "cnn" and idx.stem == "/conv1/Conv"
    cats = {name: idx.category(node) for name, node in idx.by_name.items()}
    assert cats == {"/conv1/Conv": "stem conv", "/relu/Relu": "other", "/maxpool/MaxPool": "pooling",
                    "/l1/conv1/Conv": "1x1 conv", "/l1/relu/Relu": "other", "/l1/conv2/Conv": "3x3 conv",
                    "/l1/dw/Conv": "depthwise conv", "/l1/Add": "other", "/l1/relu_2/Relu": "other",
                    "/avgpool/GlobalAveragePool": "pooling", "/Flatten": "other", "/fc/Gemm": "dense"}
    assert idx.ordinal("/avgpool/GlobalAveragePool") == ("pooling", 2)


@pytest.mark.parametrize("op, name, expected", [
    # ONNX Runtime names a fused convolution after its activation's output, NCHWc-suffixed
    ("Conv", "r0_nchwc", ("stem conv", "/conv1/Conv")),
    ("Conv", "r1_nchwc", ("1x1 conv", "/l1/conv1/Conv")),
    # ... and one that absorbed the residual add and relu after its own output
    ("Conv", "r2_nchwc", ("depthwise conv", "/l1/dw/Conv")),
    ("MaxPool", "p0_nchwc", ("pooling", "/maxpool/MaxPool")),
    ("ReorderOutput", "ReorderOutput", ("other", None)),
    # OpenVINO: the convolution's own name with a suffix, the fully connected layer after its output
    ("Convolution", "/l1/conv2/Conv/WithoutBiases", ("3x3 conv", "/l1/conv2/Conv")),
    ("GroupConvolution", "/l1/dw/Conv/WithoutBiases", ("depthwise conv", "/l1/dw/Conv")),
    ("FullyConnected", "y", ("dense", "/fc/Gemm")),
    ("ReduceMean", "/avgpool/GlobalAveragePool", ("pooling", "/avgpool/GlobalAveragePool")),
    ("Reorder", "x_abcd_acdb_/conv1/Conv/WithoutBiases", ("other", None)),
    # an engine's convolution nothing maps back to: counted, in "other", unaligned
    ("Convolution", "Convolution_1234", ("other", None)),
    # ONNX Runtime's QDQ fusion: the Conv it replaced, numbered
    ("QLinearConv", "/l1/conv2/Conv_token_7", ("3x3 conv", "/l1/conv2/Conv")),
])
def test_engine_layers_map_back_to_the_onnx_node_they_grew_from(lc, op, name, expected):
    assert lc.OnnxIndex(_cnn()).layer(op, name) == expected


def test_a_qdq_convolution_is_categorised_by_the_weight_it_dequantizes(lc):
    from onnx import TensorProto, helper, numpy_helper  # the test extra installs onnx

    w = numpy_helper.from_array(np.ones((8, 4, 3, 3), np.int8), "w")
    s = numpy_helper.from_array(np.ones(8, np.float32), "s")
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=0),
             helper.make_node("Conv", ["x", "wf"], ["y"], name="/c1/Conv", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["y", "wf2"], ["z"], name="/c2/Conv", pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["w2", "s"], ["wf2"], axis=0)]
    w2 = numpy_helper.from_array(np.ones((8, 8, 3, 3), np.int8), "w2")
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 6, 6])], [w, s, w2])
    idx = lc.OnnxIndex(helper.make_model(graph))
    assert [idx.category(idx.by_name[n]) for n in ("/c1/Conv", "/c2/Conv")] == ["stem conv", "3x3 conv"]


def test_onnx_nodes_of_a_transformer_fall_into_the_transformer_rows(lc):
    idx = lc.OnnxIndex(_attention())
    assert idx.kind == "transformer"
    cats = {name: idx.category(node) for name, node in idx.by_name.items()}
    assert cats == {
        "/emb/Gather": "embedding", "/emb/LayerNorm": "layer norm",
        "/q/MatMul": "dense matmul", "/k/MatMul": "dense matmul", "/v/MatMul": "dense matmul",
        "/k/Transpose": "other", "/att/MatMul": "attention", "/att/Div": "attention",
        # the mask is prepared from an input, outside the scores' path
        "/mask/Cast": "other", "/mask/Sub": "elementwise",
        "/att/Add": "attention", "/att/Softmax": "attention", "/att/MatMul_1": "attention",
        "/out/MatMul": "dense matmul", "/out/Add": "elementwise", "/out/LayerNorm": "layer norm",
        "/act/Erf": "elementwise"}
    # ONNX Runtime's fusions keep the node's name before their suffix, or lose it
    assert idx.layer("FusedMatMul", "/att/MatMul/MatMulScaleFusion/") == ("attention", "/att/MatMul")
    assert idx.layer("Gemm", "/q/MatMul/MatMulAddFusion") == ("dense matmul", "/q/MatMul")
    assert idx.layer("SkipLayerNormalization", "SkipLayerNormalization_token_4") == ("layer norm", None)
    assert idx.layer("Gelu", "Gelu_token_9") == ("elementwise", None)
    assert idx.layer("Transpose", "/k/Transpose") == ("other", "/k/Transpose")


def _calls(graph):
    """The kernel calls ps.compile makes of a graph (one per fused group, in run order)."""
    producer = graph.producer()
    return [types.SimpleNamespace(inputs=low.inputs, outputs=low.outputs)
            for low in (lower_group(graph, grp, producer) for grp in graph.fuse())]


@pytest.mark.parametrize("model, rows", [
    ("_cnn", {"stem conv": 1, "pooling": 2, "1x1 conv": 1, "3x3 conv": 1, "depthwise conv": 1, "dense": 1}),
    ("resnet50_torchscript", {"stem conv": 1, "pooling": 2, "1x1 conv": 12, "3x3 conv": 4, "dense": 1}),
    ("mobilenet_v2_torchscript", {"stem conv": 1, "depthwise conv": 7, "1x1 conv": 14, "pooling": 1, "dense": 1}),
    ("bert_base_torchscript", {"embedding": 1, "dense matmul": 12, "attention": 6, "layer norm": 4}),
])
def test_probsched_calls_fall_into_the_rows_of_the_onnx_nodes_they_grew_from(lc, model, rows):
    """Categorised from JAX primitives, each kernel call lands in the row its ONNX anchor
    (the node its main operator was imported from) lands in."""
    proto = _cnn() if model == "_cnn" else onnx.load(str(TINY / f"{model}.onnx"))
    idx = lc.OnnxIndex(proto)
    graph = ps.from_onnx(proto)
    layers = lc.probsched_layers(graph, _calls(graph))
    counts = {}
    for cat, anchor in layers:
        counts[cat] = counts.get(cat, 0) + 1
        assert anchor in idx.by_name and idx.category(idx.by_name[anchor]) == cat, (cat, anchor)
    assert counts == rows
    convs = [n.name for n in idx.nodes if n.op_type == "Conv"]
    assert [a for c, a in layers if c.endswith("conv")] == convs  # every convolution its own call, in order


def test_table_has_a_row_per_category_present_and_the_totals(bench):
    def engine(cats, measured):
        layers = [bench.Layer(c, "op", c, None, t) for c, t in cats.items()]
        return {"layers": layers, "categories": bench.category_totals(layers), "measured_ms": measured,
                "total_ms": sum(cats.values())}

    result = {"kind": "cnn", "engines": {"probsched": engine({"1x1 conv": 3.0, "dense": 1.0}, 4.5),
                                         "ort": engine({"1x1 conv": 2.0, "other": 2.0}, 4.2)}}
    lines = bench.table(result).splitlines()
    assert lines[0] == "| category | probsched ms (share) | ort ms (share) |"
    assert lines[2:] == ["| 1x1 conv | 3.00 (75%) | 2.00 (50%) |", "| dense | 1.00 (25%) | - |",
                         "| other | - | 2.00 (50%) |", "| total of layers | 4.00 | 4.00 |",
                         "| measured inference | 4.50 | 4.20 |"]
    result["engines"]["probsched"]["layers"][0].record_ms = 2.0  # the task's time when tuned
    result["engines"]["probsched"]["hot_categories"] = {"1x1 conv": 1.5, "dense": 0.5}
    lines = bench.table(result).splitlines()
    assert lines[0] == "| category | probsched ms (share) | probsched, each call again (weights hot) | ort ms (share) |"
    assert lines[2:] == ["| 1x1 conv | 3.00 (75%) | 1.50 (75%) | 2.00 (50%) |", "| dense | 1.00 (25%) | 0.50 (25%) | - |",
                         "| other | - | - | 2.00 (50%) |", "| total of layers | 4.00 | 2.00 | 4.00 |",
                         "| measured inference | 4.50 | - | 4.20 |", "| its tasks' records | 2.00 | - | - |"]
    result["engines"]["probsched"]["cold_weights_categories"] = {"1x1 conv": 2.5, "dense": 0.75}
    assert bench.table(result).splitlines()[0] == ("| category | probsched ms (share) | probsched, each call again (weights hot) | "
                                                   "probsched, each call again, weights flushed | ort ms (share) |")


def test_losses_rank_aligned_layers_by_the_time_lost_to_the_fastest_peer(bench, lc):
    idx = lc.OnnxIndex(_cnn())
    L = bench.Layer
    ours = [L("0", "k", "stem conv", "/conv1/Conv", 2.0), L("1", "k", "3x3 conv", "/l1/conv2/Conv", 1.5),
            L("2", "k", "1x1 conv", "/l1/conv1/Conv", 0.5), L("3", "k", "other", None, 9.0)]
    peers = {"ort": [L("a", "Conv", "stem conv", "/conv1/Conv", 1.5), L("b", "Conv", "3x3 conv", "/l1/conv2/Conv", 0.2),
                     L("c", "Conv", "1x1 conv", "/l1/conv1/Conv", 0.9)],
             "ov": [L("a", "Convolution", "stem conv", "/conv1/Conv", 1.2)]}
    rows = bench.losses(ours, peers, idx)
    assert [(r["layer"], r["peer"], round(r["loss_ms"], 6)) for r in rows] == [("3x3 conv #1", "ort", 1.3),
                                                                               ("stem conv #1", "ov", 0.8)]


def _feeds(path):
    import bench_models

    return bench_models._feeds(str(path), path.stem)


def test_onnx_runtime_profile_of_a_tiny_resnet_aligns_every_convolution(bench, lc):
    pytest.importorskip("onnxruntime")
    path = TINY / "resnet50_torchscript.onnx"
    idx = lc.OnnxIndex(onnx.load(str(path)))
    prof = bench.OrtProfile(str(path), _feeds(path), idx)
    for _ in range(3):
        prof.round()
    layers = prof.layers(skip=1)
    convs = [n.name for n in idx.nodes if n.op_type == "Conv"]
    conv_layers = [layer for layer in layers if layer.category.endswith("conv")]
    assert sorted(layer.anchor for layer in conv_layers) == sorted(convs)
    assert all(layer.ms > 0 for layer in conv_layers)
    assert {layer.category for layer in layers} >= {"stem conv", "3x3 conv", "1x1 conv", "pooling", "dense"}


def test_openvino_counters_of_a_tiny_bert_align_its_matmuls(bench, lc):
    pytest.importorskip("openvino")
    path = TINY / "bert_base_torchscript.onnx"
    idx = lc.OnnxIndex(onnx.load(str(path)))
    prof = bench.OpenvinoProfile(str(path), _feeds(path), True, idx)
    for _ in range(3):
        prof.round()
    layers = prof.layers(skip=1)
    matmuls = [n.name for n in idx.nodes if n.op_type == "MatMul"]
    assert sorted(layer.anchor for layer in layers if layer.category in ("dense matmul", "attention")
                  and ("MatMul" in layer.op or "FullyConnected" in layer.op)) == sorted(matmuls)
    assert {"dense matmul", "attention", "layer norm"} <= {layer.category for layer in layers}


def test_probsched_profile_times_each_kernel_call_and_names_its_schedule(bench):
    import jax

    w = np.random.default_rng(0).random((8, 16), np.float32)
    x = np.random.default_rng(1).random((4, 8), np.float32)

    def net(x):
        h = jax.nn.relu(x @ w)
        return jax.nn.softmax(h @ h.T, axis=-1)

    model = ps.compile(ps.from_jax(net, x), candidates=2, progress=None)
    prof = bench.ProbschedProfile(model, [x], "probsched")
    for _ in range(3):
        prof.round()
    layers = prof.layers(skip=1)
    assert [layer.category for layer in layers] == ["dense matmul", "attention", "attention"]
    assert all(layer.ms > 0 and layer.hot_ms > 0 and layer.cold_weights_ms > 0 and layer.source == "predicted"
               and layer.record_ms is None for layer in layers)
    assert len(prof.samples[0]) == len(prof.hot[0]) == len(prof.cold[0]) == 3
    # the output left in the arena by the calls run twice is still the network's
    left = model._context().arrays[model.interface.outputs[0]].reshape(4, 4)
    np.testing.assert_allclose(left, net(x), rtol=1e-4, atol=1e-5)
