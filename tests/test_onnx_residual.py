"""A QDQ residual add reads its convolution's quantized output saturated, not rounded
(probsched.graph.onnx_qdq.unrounded_residuals), unless keep_residual_rounding=True."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import probsched as ps

# quantization parameters: the input (also the skip), the convolution's output, the block's output
S = {"xs": 0.02, "xz": 128, "cs": 0.03, "cz": 120, "os": 0.025, "oz": 0}


def _block(relu: bool = True, requantized: bool = True, skip: str = "bytes", unrounded: bool = False):
    """A residual block as ``quantize_static`` writes it: x -> Q/DQ -> Conv (int8 weight, bias)
    -> Q/DQ -> Add (the skip: x's bytes dequantized, or a constant) -> Relu -> Q/DQ.
    ``unrounded``: the convolution's Q/DQ pair replaced by the Clip it is read as."""
    rng = np.random.default_rng(3)
    c = {k: (np.float32(v) if k.endswith("s") else np.uint8(v)) for k, v in S.items()}
    c["w"] = rng.integers(-127, 128, (8, 8, 1, 1)).astype(np.int8)
    c["ws"] = rng.uniform(0.002, 0.004, 8).astype(np.float32)
    c["b"] = rng.standard_normal(8).astype(np.float32) * 0.2
    c["lo"] = np.float32(0 - S["cz"]) * np.float32(S["cs"])
    c["hi"] = np.float32(255 - S["cz"]) * np.float32(S["cs"])
    c["bias"] = np.float32(0.1)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
             helper.make_node("Conv", ["xd", "wf", "b"], ["y"])]
    if unrounded:
        nodes.append(helper.make_node("Clip", ["y", "lo", "hi"], ["yd"]))
    else:
        nodes += [helper.make_node("QuantizeLinear", ["y", "cs", "cz"], ["yq"]),
                  helper.make_node("DequantizeLinear", ["yq", "cs", "cz"], ["yd"])]
    nodes.append(helper.make_node("Add", ["yd", "xd" if skip == "bytes" else "bias"], ["sum"]))
    last = "sum"
    if relu:
        nodes.append(helper.make_node("Relu", ["sum"], ["r"]))
        last = "r"
    if requantized:
        nodes += [helper.make_node("QuantizeLinear", [last, "os", "oz"], ["oq"]),
                  helper.make_node("DequantizeLinear", ["oq", "os", "oz"], ["out"])]
        last = "out"
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 5, 5])],
                              [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, 8, 5, 5])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in c.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _input():
    return np.random.default_rng(7).uniform(-2.5, 2.5, (1, 8, 5, 5)).astype(np.float32)


def _rounds(g) -> int:
    return sum(n.op == "round" for n in g.nodes)


@pytest.mark.parametrize("relu", [True, False], ids=["relu", "no-relu"])
def test_a_residual_add_reads_the_convolution_saturated_not_rounded(relu):
    x = _input()
    g = ps.from_onnx(_block(relu=relu))
    exact = ps.from_onnx(_block(relu=relu), keep_residual_rounding=True)
    # the input's quantization and the block's; the convolution's rounding is gone
    assert (_rounds(g), _rounds(exact)) == (2, 3)
    step = S["os"]
    # as ONNX computes the block with the convolution's Q/DQ pair a Clip: the same bytes
    # (the integer convolution's float rounding may move a value at a tie by one step)
    want = ReferenceEvaluator(_block(relu=relu, unrounded=True)).run(None, {"x": x})[0]
    got = g.evaluate(x)[0]
    assert np.abs(got - want).max() <= step * 1.001 and np.mean(got == want) > 0.97
    # saturated: a convolution output beyond the byte's range is cut where ONNX cuts it
    y = ReferenceEvaluator(_block(relu=relu, requantized=False, unrounded=True)).run(None, {"x": x})[0]
    assert np.any(y - ReferenceEvaluator(_block(relu=relu, requantized=False)).run(None, {"x": x})[0] != 0)
    # keep_residual_rounding=True is ONNX's model to the bit (up to the same ties)
    want_exact = ReferenceEvaluator(_block(relu=relu)).run(None, {"x": x})[0]
    got_exact = exact.evaluate(x)[0]
    assert np.abs(got_exact - want_exact).max() <= step * 1.001 and np.mean(got_exact == want_exact) > 0.97
    assert np.any(got != got_exact)  # the dropped rounding moves some bytes
    # compiled, the one int8 task computes what the graph says
    np.testing.assert_allclose(ps.compile(g, candidates=2, progress=None)(x), got, rtol=0, atol=step * 1.001)


@pytest.mark.parametrize("case", ["bias", "float-output"])
def test_an_add_that_is_not_a_requantized_skip_keeps_the_rounding(case):
    # a constant added (a bias), or a sum the model returns in float32: ONNX's rounding stays
    model = _block(skip="bytes" if case == "float-output" else "constant", requantized=case != "float-output")
    g = ps.from_onnx(model)
    assert _rounds(g) == _rounds(ps.from_onnx(model, keep_residual_rounding=True))
    x = _input()
    np.testing.assert_allclose(g.evaluate(x)[0], ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=0,
                               atol=S["os"] * 1.001 if case == "bias" else 1e-5)


def test_the_cli_keeps_the_rounding_when_asked(tmp_path, capsys):
    import onnx

    from probsched.cli import main

    path = str(tmp_path / "block.onnx")
    onnx.save(_block(), path)
    tables = []
    for flag in ([], ["--keep-residual-rounding"]):
        assert main(["import", path, *flag]) == 0
        tables.append(capsys.readouterr().out)
    # the residual task rounds the convolution's output only when asked
    assert "conv2d_maximum_minimum" in tables[0] and "conv2d_round" in tables[1], tables
    assert main(["import", "resnet_tiny", "--keep-residual-rounding"]) == 2
    assert "applies to ONNX models only" in capsys.readouterr().err
