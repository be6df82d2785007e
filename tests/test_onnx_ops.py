"""ps.from_onnx, operator by operator, against ONNX's reference evaluator (onnx.reference):
odd attributes (pads, strides, groups, dilations, auto_pad, ceil_mode), broadcasting, the
shape subgraphs exporters emit, the channels-last layout, and the errors."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import probsched as ps  # noqa: E402

RNG = np.random.default_rng(0)
_TYPES = {np.dtype("float32"): TP.FLOAT, np.dtype("int64"): TP.INT64, np.dtype("bool"): TP.BOOL,
          np.dtype("int32"): TP.INT32, np.dtype("float16"): TP.FLOAT16, np.dtype("float64"): TP.DOUBLE}


def rand(*shape, positive=False):
    a = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def model_of(nodes, inputs, consts=None, outputs=("y",), opset=17):
    """A model of ``nodes`` with graph inputs ``inputs`` (name -> example) and
    initializers ``consts``; outputs' shapes left to the importer."""
    consts = consts or {}
    g = h.make_graph(
        nodes, "t",
        [h.make_tensor_value_info(k, _TYPES[v.dtype], list(v.shape)) for k, v in inputs.items()],
        [h.make_tensor_value_info(o, TP.UNDEFINED, None) for o in outputs],
        [nh.from_array(v, k) for k, v in consts.items()],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def check(nodes, inputs, consts=None, outputs=("y",), opset=17, rtol=1e-5, atol=1e-5):
    """Import the model, run the graph, compare every output with onnx.reference."""
    model = model_of(nodes, inputs, consts, outputs, opset)
    expected = ReferenceEvaluator(model).run(None, inputs)
    graph = ps.from_onnx(model)
    got = graph.evaluate(*inputs.values())
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape, (g.shape, e.shape)
        if e.dtype == np.bool_:
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g, np.asarray(e).astype(g.dtype), rtol=rtol, atol=atol)
    return graph


def node(op, ins, outs=("y",), **attrs):
    return h.make_node(op, list(ins), list(outs), name=f"the_{op.lower()}", **attrs)


# ----------------------------------------------------------------------------- convolution, pooling

CONV_CASES = [
    dict(pads=[1, 2, 0, 1], strides=[2, 1]),
    dict(dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(group=2, strides=[2, 2]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(auto_pad="VALID", dilations=[1, 2]),
]


@pytest.mark.parametrize("attrs", CONV_CASES, ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
def test_conv_attributes(attrs):
    g = attrs.get("group", 1)
    check([node("Conv", ["x", "w", "b"], kernel_shape=[3, 3], **attrs)], {"x": rand(1, 4, 9, 8)},
          {"w": rand(6, 4 // g, 3, 3), "b": rand(6)})


def test_depthwise_and_1d_conv():
    check([node("Conv", ["x", "w"], group=4, pads=[1, 1, 1, 1])], {"x": rand(1, 4, 7, 7)}, {"w": rand(4, 1, 3, 3)})
    check([node("Conv", ["x", "w"], pads=[1, 0], strides=[2])], {"x": rand(2, 3, 10)}, {"w": rand(5, 3, 3)})


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[2, 3], dilations=[2, 1], pads=[0, 1, 1, 0]),
    dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
], ids=str)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pools(op, attrs):
    if op == "AveragePool" and "dilations" in attrs:
        attrs = {k: v for k, v in attrs.items() if k != "dilations"}
    check([node(op, ["x"], **attrs)], {"x": rand(1, 3, 8, 9)}, opset=19)
    if op == "AveragePool" and "pads" in attrs:
        check([node(op, ["x"], count_include_pad=1, **attrs)], {"x": rand(1, 3, 8, 9)}, opset=19)


def test_global_pools_batch_norm_flatten():
    nodes = [
        node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"], epsilon=1e-3),
        node("GlobalAveragePool", ["bn"], ["ga"]),
        node("GlobalMaxPool", ["bn"], ["gm"]),
        node("Add", ["ga", "gm"], ["a"]),
        node("Flatten", ["a"], ["y"], axis=1),
    ]
    check(nodes, {"x": rand(2, 4, 5, 5)}, {"s": rand(4), "b": rand(4), "m": rand(4), "v": rand(4, positive=True)})


def test_convolution_chain_stays_channels_last():
    """Transposes only where the graph's input enters and its output leaves: none between
    the convolutions, batch norms, activations, residual adds and pools."""
    nodes = [
        node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["n1"]),
        node("Relu", ["n1"], ["r1"]),
        node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=4),
        node("Add", ["c2", "r1"], ["a"]),
        node("HardSwish", ["a"], ["hs"]),
        node("Mul", ["hs", "scale"], ["ms"]),
        node("MaxPool", ["ms"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        node("Concat", ["p", "p"], ["y"], axis=1),
    ]
    consts = {"w1": rand(4, 3, 3, 3), "w2": rand(4, 1, 3, 3), "s": rand(4), "b": rand(4), "m": rand(4),
              "v": rand(4, positive=True), "scale": rand(4, 1, 1)}
    graph = check(nodes, {"x": rand(1, 3, 8, 8)}, consts)
    transposes = [n for n in graph.nodes if n.op == "transpose"]
    assert [n.inputs[0] for n in transposes] == [graph.inputs[0]] + [transposes[-1].inputs[0]]
    assert transposes[-1].outputs[0] in graph.outputs
    assert not any("transpose" in t.func.name for t in graph.tasks())


# ----------------------------------------------------------------------------- elementwise

UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Erf", "Floor", "Ceil", "Softplus", "Sign"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check([node(op, ["x"])], {"x": rand(2, 3, 4) * 2})


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal"])
def test_unary_positive(op):
    check([node(op, ["x"])], {"x": rand(2, 5, positive=True)})


@pytest.mark.parametrize("op,attrs,opset", [
    ("LeakyRelu", dict(alpha=0.3), 17), ("Elu", dict(alpha=0.7), 17), ("HardSigmoid", dict(alpha=0.3, beta=0.4), 17),
    ("HardSwish", {}, 17), ("Gelu", {}, 20), ("Gelu", dict(approximate="tanh"), 20),
])
def test_activations_with_attributes(op, attrs, opset):
    check([node(op, ["x"], **attrs)], {"x": rand(3, 7) * 3}, opset=opset)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu"])
def test_binary_broadcasting(op):
    x, y = rand(2, 3, 4, 5, positive=op == "Pow"), rand(3, 1, 5)
    check([node(op, ["x", "y0"])], {"x": x}, {"y0": y})
    if op in ("Add", "Sub", "Mul", "Div", "Pow"):  # onnx.reference's Mean, Max, ... broadcast one way only
        check([node(op, ["a", "b"])], {"a": rand(4, 1, positive=True), "b": rand(1, 5)})


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_comparisons_and_where(op):
    nodes = [node(op, ["a", "b"], ["c"]), node("Not", ["c"], ["nc"]), node("Where", ["nc", "a", "b"], ["y"])]
    a = np.round(rand(3, 4))
    check(nodes, {"a": a, "b": np.round(rand(1, 4))})


def test_integer_division_truncates_toward_zero():
    consts = {"a": np.asarray([7, -7, 7, -7], np.int64), "b": np.asarray([2, 2, -2, -2], np.int64)}
    nodes = [node("Div", ["a", "b"], ["q"]), node("Cast", ["q"], ["qf"], to=TP.FLOAT), node("Add", ["x", "qf"])]
    check(nodes, {"x": rand(4)}, consts)


def test_if_on_a_condition_known_at_import_runs_its_branch():
    then = h.make_graph([node("Relu", ["x"], ["t"])], "then", [], [h.make_tensor_value_info("t", TP.FLOAT, None)])
    other = h.make_graph([node("Neg", ["x"], ["e"])], "else", [], [h.make_tensor_value_info("e", TP.FLOAT, None)])
    nodes = [node("Shape", ["x"], ["s"]), node("ReduceProd", ["s"], ["n"], keepdims=0),
             node("Greater", ["n", "four"], ["big"]), node("If", ["big"], then_branch=then, else_branch=other)]
    graph = check(nodes, {"x": rand(2, 3)}, {"four": np.asarray(4, np.int64)})
    assert [n.op for n in graph.nodes] == ["max"]
    msg = _error([node("ReduceSum", ["x"], ["s"], keepdims=0), node("Greater", ["s", "zero"], ["c"]),
                  node("If", ["c"], then_branch=then, else_branch=other)], {"x": rand(3)}, {"zero": np.float32(0)})
    assert "If 'the_if'" in msg and "control flow" in msg


def test_clip_cast_and_logical():
    nodes = [
        node("Clip", ["x", "lo", "hi"], ["c"]),
        node("Cast", ["c"], ["ci"], to=TP.INT64),
        node("Cast", ["ci"], ["cf"], to=TP.FLOAT),
        node("Greater", ["x", "zero"], ["g"]),
        node("Less", ["x", "one"], ["l"]),
        node("And", ["g", "l"], ["band"]),
        node("Or", ["band", "g"], ["bor"]),
        node("Cast", ["bor"], ["bf"], to=TP.FLOAT),
        node("Add", ["cf", "bf"], ["y"]),
    ]
    check(nodes, {"x": rand(4, 6) * 4}, {"lo": np.float32(-1.5), "hi": np.float32(2.5), "zero": np.float32(0),
                                         "one": np.float32(1)})


# ----------------------------------------------------------------------------- shapes and data movement


def test_shape_subgraph_folds_away():
    """The exporters' Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain, Range,
    ConstantOfShape, Expand: folded for static shapes, only the data ops remain."""
    i64 = lambda *v: np.asarray(v, np.int64)  # noqa: E731
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "zero"], ["n"], axis=0),
        node("Gather", ["s", "one"], ["t"], axis=0),
        node("Unsqueeze", ["n", "ax0"], ["n1"]),
        node("Unsqueeze", ["t", "ax0"], ["t1"]),
        node("Concat", ["n1", "t1", "neg1"], ["shape"], axis=0),
        node("Reshape", ["x", "shape"], ["r"]),
        node("Range", ["zero", "t", "one"], ["pos"]),
        node("Cast", ["pos"], ["posf"], to=TP.FLOAT),
        node("Unsqueeze", ["posf", "ax1"], ["pos2"]),
        node("ConstantOfShape", ["shape3"], ["ones"], value=nh.from_array(np.ones(1, np.float32))),
        node("Expand", ["pos2", "shape3"], ["pe"]),
        node("Mul", ["pe", "ones"], ["pm"]),
        node("Add", ["r", "pm"], ["y"]),
    ]
    scalar = lambda v: np.asarray(v, np.int64)  # noqa: E731
    consts = {"zero": scalar(0), "one": scalar(1), "ax0": i64(0), "ax1": i64(1), "neg1": i64(-1), "shape3": i64(2, 6, 4)}
    graph = check(nodes, {"x": rand(2, 6, 2, 2)}, consts)
    assert {n.op for n in graph.nodes} <= {"reshape", "add"}


@pytest.mark.parametrize("case", [
    dict(starts=[1, -3], ends=[100, -1], axes=[0, 2], steps=[1, 1]),
    dict(starts=[-1], ends=[-100], axes=[1], steps=[-2]),
    dict(starts=[0, 1], ends=[2, 4], axes=[-1, 0], steps=[2, 2]),
], ids=str)
def test_slice(case):
    consts = {k: np.asarray(v, np.int64) for k, v in case.items()}
    check([node("Slice", ["x", "starts", "ends", "axes", "steps"])], {"x": rand(4, 5, 6)}, consts)


def test_split_squeeze_unsqueeze_transpose_concat():
    nodes = [
        node("Split", ["x", "sizes"], ["a", "b"], axis=1),
        node("Transpose", ["a"], ["at"], perm=[2, 0, 1]),
        node("Unsqueeze", ["b", "ax"], ["bu"]),
        node("Squeeze", ["bu", "ax"], ["bs"]),
        node("Concat", ["bs", "bs"], ["c"], axis=-1),
        node("Reshape", ["c", "shape"], ["cr"]),
        node("Flatten", ["at"], ["y"], axis=2),
    ]
    consts = {"sizes": np.asarray([2, 3], np.int64), "ax": np.asarray([0, 3], np.int64),
              "shape": np.asarray([0, -1], np.int64)}
    check(nodes, {"x": rand(2, 5, 4)}, consts, outputs=("y", "cr"))
    check([node("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3)], {"x": rand(7, 2)},
          outputs=("a", "b", "c"), opset=18)


def test_gather_embedding_from_int64_ids():
    """Token embeddings: int64 ids from the caller (negative ones wrap), a weight table."""
    table = rand(10, 6)
    ids = np.asarray([[0, 3, 9, -1]], np.int64)
    graph = check([node("Gather", ["table", "ids"], ["e"], axis=0), node("Relu", ["e"])], {"ids": ids}, {"table": table})
    assert graph.input_names == ["ids"]
    model = ps.compile(graph, candidates=2)
    np.testing.assert_allclose(model(ids), np.maximum(table[ids], 0), rtol=1e-6)


def test_gather_static_indices_and_tile_trilu_cumsum_pad():
    nodes = [
        node("Gather", ["x", "idx"], ["g"], axis=1),
        node("Tile", ["g", "reps"], ["t"]),
        node("Trilu", ["t"], ["tr"], upper=0),
        node("CumSum", ["tr", "axis"], ["cs"], reverse=1),
        node("Pad", ["cs", "pads", "val"], ["y"], mode="constant"),
    ]
    consts = {"idx": np.asarray([2, 0, 2], np.int64), "reps": np.asarray([1, 2], np.int64),
              "axis": np.asarray(1, np.int64), "pads": np.asarray([1, 0, 0, 2], np.int64), "val": np.float32(0.5)}
    check(nodes, {"x": rand(4, 3)}, consts)


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_pad_modes(mode):
    check([node("Pad", ["x", "pads"], mode=mode)], {"x": rand(1, 2, 4, 5)},
          {"pads": np.asarray([0, 0, 1, 2, 0, 0, 2, 1], np.int64)})


# ----------------------------------------------------------------------------- reductions, normalisation, linear


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions(op, keepdims):
    check([node(op, ["x", "axes"], keepdims=keepdims)], {"x": rand(2, 3, 4)}, {"axes": np.asarray([-1, 1], np.int64)},
          opset=18)


def test_argmax_softmax_layer_norm():
    nodes = [
        node("Softmax", ["x"], ["s"], axis=1),
        node("LogSoftmax", ["x"], ["ls"], axis=-1),
        node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
        node("ArgMax", ["x"], ["am"], axis=2, keepdims=0),
    ]
    check(nodes, {"x": rand(2, 3, 8)}, {"g": rand(8), "b": rand(8)}, outputs=("s", "ls", "ln", "am"))


def test_matmul_gemm_einsum():
    nodes = [
        node("MatMul", ["x", "w"], ["m"]),
        node("Gemm", ["a", "b", "c"], ["gm"], alpha=0.5, beta=2.0, transA=1, transB=1),
        node("Einsum", ["x", "x"], ["e"], equation="bij,bkj->bik"),
    ]
    check(nodes, {"x": rand(2, 3, 4), "a": rand(5, 3)}, {"w": rand(4, 6), "b": rand(2, 5), "c": rand(2)},
          outputs=("m", "gm", "e"), rtol=1e-4)


def test_compiled_convolution_and_pool_variants_match_the_reference():
    """One compiled model with several odd convolutions and pools (shared compile)."""
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], strides=[2, 1], pads=[1, 2, 0, 1]),
        node("Conv", ["x", "w2"], ["c2"], kernel_shape=[3, 3], group=2, dilations=[2, 2], auto_pad="SAME_UPPER"),
        node("Relu", ["c2"], ["r2"]),
        node("AveragePool", ["r2"], ["p2"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        node("MaxPool", ["c1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 0, 0]),
    ]
    inputs = {"x": rand(1, 4, 9, 8)}
    model = model_of(nodes, inputs, {"w1": rand(6, 4, 3, 3), "b1": rand(6), "w2": rand(6, 2, 3, 3)}, outputs=("p1", "p2"))
    expected = ReferenceEvaluator(model).run(None, inputs)
    compiled = ps.compile(ps.from_onnx(model), candidates=2)
    for got, exp in zip(compiled(inputs["x"]), expected):
        np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- errors


def _error(nodes, inputs, consts=None, **kw) -> str:
    with pytest.raises(ps.FrontEndError) as exc:
        ps.from_onnx(model_of(nodes, inputs, consts, **kw))
    return str(exc.value)


def test_unsupported_operator_names_the_node_and_the_supported_list():
    msg = _error([node("Det", ["x"])], {"x": rand(3, 3)})
    assert "Det 'the_det'" in msg and "x: float32[3, 3]" in msg and "Conv" in msg and "Softmax" in msg


def test_unsupported_attribute_and_dtype():
    msg = _error([node("MaxPool", ["x"], kernel_shape=[2, 2], storage_order=1)], {"x": rand(1, 1, 4, 4)})
    assert "MaxPool 'the_maxpool'" in msg and "storage_order" in msg
    msg = _error([node("Relu", ["x"], bogus=3)], {"x": rand(2)})
    assert "bogus" in msg and "Relu" in msg
    msg = _error([node("Relu", ["x"])], {"x": np.ones(3, np.float64)})
    assert "'x'" in msg and "float64" in msg and "float32" in msg
    msg = _error([node("MatMul", ["x", "w"])], {"x": rand(2, 3)}, {"w": rand(3, 2).astype(np.float16)})
    assert "MatMul 'the_matmul'" in msg and "float16[3, 2]" in msg and "'w'" in msg


def test_reduced_precision_weight_cast_to_float_folds():
    graph = check([node("Cast", ["w"], ["wf"], to=TP.FLOAT), node("MatMul", ["x", "wf"])], {"x": rand(2, 3)},
                  {"w": rand(3, 2).astype(np.float16)}, rtol=1e-3)
    assert all(a.dtype != np.float16 for a in graph.constants.values())


def test_dynamic_dimension_needs_an_example():
    g = h.make_graph([node("Relu", ["x"])], "t", [h.make_tensor_value_info("x", TP.FLOAT, ["batch", 3])],
                     [h.make_tensor_value_info("y", TP.FLOAT, None)])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(ps.FrontEndError, match=r"input 'x' has the dynamic dimension 0 \('batch'\)"):
        ps.from_onnx(model)
    assert ps.from_onnx(model, inputs=[np.ones((5, 3), np.float32)]).types[0].shape == (5, 3)
    with pytest.raises(ps.FrontEndError, match="wants"):
        ps.from_onnx(model, inputs={"x": np.ones((5, 4), np.float32)})
    with pytest.raises(ps.FrontEndError, match="not inputs of the model"):
        ps.from_onnx(model, inputs={"z": np.ones((5, 3), np.float32)})


def test_a_shape_computed_from_data_is_refused_with_the_node():
    msg = _error([node("Cast", ["x"], ["xi"], to=TP.INT64), node("Reshape", ["x", "xi"])], {"x": np.ones(2, np.float32)})
    assert "Reshape 'the_reshape'" in msg and "dynamic shape" in msg


def test_foreign_domain_and_missing_file(tmp_path):
    n = h.make_node("FusedMatMul", ["x", "x"], ["y"], domain="com.microsoft", name="fm")
    msg = _error([n], {"x": rand(2, 2)})
    assert "com.microsoft" in msg and "FusedMatMul 'fm'" in msg
    with pytest.raises(ps.FrontEndError, match="no file"):
        ps.from_onnx(str(tmp_path / "none.onnx"))


# ----------------------------------------------------------------------------- random attributes

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilations=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.tuples(*[st.integers(0, 2)] * 4),
    auto_pad=st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]),
    groups=st.sampled_from([1, 2, 4]),
    pool=st.sampled_from(["MaxPool", "AveragePool"]),
    ceil_mode=st.integers(0, 1),
)
def test_random_convolution_and_pool_attributes(kernel, strides, dilations, pads, auto_pad, groups, pool, ceil_mode):
    """Any window attributes: the import computes what onnx.reference computes, and the
    convolution's output stays channels-last into the pool."""
    attrs = dict(kernel_shape=list(kernel), strides=list(strides), dilations=list(dilations))
    attrs.update(auto_pad=auto_pad) if auto_pad != "NOTSET" else attrs.update(pads=list(pads))
    pool_attrs = dict(kernel_shape=[2, 2], strides=[2, 1], ceil_mode=ceil_mode)
    x = rand(1, 4, 12, 11)  # every convolution's output is at least 3 x 3
    nodes = [node("Conv", ["x", "w"], ["c"], group=groups, **attrs), node(pool, ["c"], **pool_attrs)]
    graph = check(nodes, {"x": x}, {"w": rand(4, 4 // groups, *kernel)}, opset=19, rtol=1e-4, atol=1e-5)
    (conv,) = [n for n in graph.nodes if n.op == "conv_general_dilated"]
    (window,) = [n for n in graph.nodes if n.op.startswith("reduce_window")]
    assert window.inputs[0] == conv.outputs[0]
