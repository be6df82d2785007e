"""A quantized elementwise chain of one byte tensor imported as a table (probsched.graph.onnx_tables)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import probsched as ps


def _gelu_qdq(per_channel_bias: bool = False, quantized_constants: bool = False):
    """BERT's GELU as ``quantize_static`` writes it: a Q/DQ pair after each of its five
    operators (per-tensor scales), then a float add (a per-channel bias when asked: no table)."""
    c = {"s0": np.float32(0.03), "z0": np.uint8(120), "s1": np.float32(0.02), "z1": np.uint8(128),
         "s2": np.float32(0.008), "z2": np.uint8(0), "s3": np.float32(0.015), "z3": np.uint8(10),
         "sqrt2": np.float32(1.4142135), "one": np.float32(1.0), "half": np.float32(0.5),
         "bias": np.linspace(-1, 1, 8, dtype=np.float32) if per_channel_bias else np.float32(0.25)}

    def qdq(x, k, out):
        return [helper.make_node("QuantizeLinear", [x, f"s{k}", f"z{k}"], [f"{out}_q"]),
                helper.make_node("DequantizeLinear", [f"{out}_q", f"s{k}", f"z{k}"], [out])]

    nodes = qdq("x", 0, "d")
    nodes += [helper.make_node("Div", ["d", "sqrt2"], ["a"])] + qdq("a", 1, "ad")
    nodes += [helper.make_node("Erf", ["ad"], ["e"])] + qdq("e", 1, "ed")
    one = "one"
    if quantized_constants:  # as quantize_static writes GELU's 1: the bytes of a constant, dequantized
        c["one_q"], c["s4"], c["z4"] = np.uint8(255), np.float32(1 / 255), np.uint8(0)
        nodes += [helper.make_node("DequantizeLinear", ["one_q", "s4", "z4"], ["one_d"])]
        one = "one_d"
    nodes += [helper.make_node("Add", ["ed", one], ["p"])] + qdq("p", 2, "pd")
    nodes += [helper.make_node("Mul", ["d", "pd"], ["m"])] + qdq("m", 3, "md")
    nodes += [helper.make_node("Mul", ["md", "half"], ["g"])] + qdq("g", 3, "gd")
    nodes += [helper.make_node("Add", ["gd", "bias"], ["y"])]
    graph = helper.make_graph(
        nodes, "gelu_qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in c.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("quantized_constants", [False, True])
def test_a_quantized_gelu_is_one_table_read_with_the_values_of_its_operators(quantized_constants):
    # five requantizations, three divisions and an erf per element before; now one read
    model = _gelu_qdq(quantized_constants=quantized_constants)
    g = ps.from_onnx(model)
    ops = [n.op for n in g.nodes]
    # the input's quantization only (x / s0, rounded): no erf, no requantization
    assert "erf" not in ops and ops.count("div") == 1 and ops.count("round") == 1, ops
    x = np.linspace(-4, 3, 16, dtype=np.float32).reshape(2, 8)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = g.evaluate(x)[0]
    # the table computes each operator on the 256 byte values as the reference does
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ps.compile(g, candidates=2, progress=None)(x), want, rtol=0, atol=1e-6)


def test_a_chain_that_depends_on_the_channel_is_not_a_table():
    # a per-channel constant makes the chain after it a function of the byte and its
    # channel: the add and the product after it stay, quantized (the input, the add, the
    # product: three roundings); the erf before it is a table of the input's bytes, the
    # last multiplication one of the product's
    model = _gelu_qdq()
    bias = np.linspace(-1, 1, 8, dtype=np.float32)
    for init in model.graph.initializer:
        if init.name == "one":
            init.CopyFrom(numpy_helper.from_array(bias, "one"))
    g = ps.from_onnx(model)
    ops = [n.op for n in g.nodes]
    assert "erf" not in ops and ops.count("round") == 3, ops
    x = np.linspace(-4, 3, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_allclose(g.evaluate(x)[0], ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=0, atol=1e-5)


def test_a_value_inside_the_chain_read_elsewhere_keeps_its_value():
    # the Erf's dequantized output is also the graph's second output: read from its own table
    model = _gelu_qdq()
    model.graph.output.append(helper.make_tensor_value_info("ed", TensorProto.FLOAT, [2, 8]))
    g = ps.from_onnx(model)
    assert "erf" not in [n.op for n in g.nodes]
    x = np.linspace(-4, 3, 16, dtype=np.float32).reshape(2, 8)
    for got, want in zip(g.evaluate(x), ReferenceEvaluator(model).run(None, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
