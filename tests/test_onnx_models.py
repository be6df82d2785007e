"""Small variants of torchvision's ResNet-50, MobileNet-V2, EfficientNet-B0, ViT-B/16 and
Hugging Face's BERT, DistilBERT and GPT-2, exported by benchmarks/export_onnx_models.py
with both torch exporters and committed under tests/data/onnx: imported with ps.from_onnx,
compiled, and matched against the reference outputs saved beside them (onnx.reference's,
or ONNX Runtime's where onnx.reference fails on the export: the .npz says which)."""

import glob
import os

import numpy as np
import pytest

import probsched as ps

DATA = os.path.join(os.path.dirname(__file__), "data", "onnx")
FILES = sorted(glob.glob(os.path.join(DATA, "*.onnx")))
#: One export per model is compiled (the import of every export is checked on the graph, every
#: run), each in a rotation of its own day (tests/conftest.py's --slow): 15-25 s of compiling
#: each, which every run could not afford; ONNX operators are compiled every run by
#: test_onnx_ops.py, a CNN and a transformer from JAX by test_graph_compile.py.
COMPILED = [
    pytest.param(s, marks=pytest.mark.slow(rotation=r))
    for s, r in (("resnet50_torchscript", 0), ("gpt2_torchscript", 3), ("distilbert_dynamo", 2),
                 ("mobilenet_v2_torchscript", 2), ("efficientnet_b0_dynamo", 3), ("vit_b_16_torchscript", 5),
                 ("bert_base_torchscript", 4))]


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _load(stem: str):
    data = dict(np.load(os.path.join(DATA, stem + ".npz")))
    expected = data.pop("expected")
    data.pop("reference")
    graph = ps.from_onnx(os.path.join(DATA, stem + ".onnx"))
    return graph, [data[n] for n in graph.input_names], expected


def _assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    """Relative error at most 1e-4 of the output's scale."""
    assert got.shape == expected.shape
    scale = float(np.abs(expected).max())
    assert scale > 0, "the reference output is all zeros: the check could not fail"
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)


def test_the_seven_models_are_committed_small():
    assert {_stem(f).rsplit("_", 1)[0] for f in FILES} == {
        "resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "bert_base", "distilbert", "gpt2"}
    assert {_stem(f).rsplit("_", 1)[1] for f in FILES} == {"torchscript", "dynamo"}
    assert all(os.path.getsize(f) < 1_000_000 for f in FILES)


@pytest.mark.parametrize("stem", [_stem(f) for f in FILES])
def test_import_matches_the_reference(stem):
    graph, inputs, expected = _load(stem)
    _assert_close(graph.evaluate(*inputs)[0], expected)


@pytest.mark.parametrize("stem", COMPILED)
def test_compiled_model_matches_the_reference(stem):
    graph, inputs, expected = _load(stem)
    model = ps.compile(graph, candidates=1)
    _assert_close(model(*inputs), expected)


@pytest.mark.parametrize("stem", ["resnet50_torchscript", "resnet50_dynamo"])
def test_resnet_has_no_transpose_between_layers(stem):
    """Channels-last from the input on: the only transpose reads the NCHW image."""
    graph, _, _ = _load(stem)
    transposes = [n for n in graph.nodes if n.op == "transpose"]
    assert [n.inputs[0] for n in transposes] == [graph.inputs[0]]
    names = [t.func.name for t in graph.tasks()]
    assert not any("transpose" in n or "relayout" in n for n in names), names
    assert sum("conv2d" in n for n in names) >= 4


# ----------------------------------------------------------------------------- the command line


def _tiny_onnx(path) -> str:
    """A dense layer with a dynamic batch dimension, saved to ``path``."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "dense",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w])
    import onnx

    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_cli_import_an_onnx_file(tmp_path, capsys):
    from probsched.cli import main

    assert main(["import", os.path.join(DATA, "resnet50_torchscript.onnx")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("resnet50_torchscript: ") and "fused_conv2d" in out
    path = _tiny_onnx(tmp_path / "dense.onnx")
    assert main(["import", path]) == 2
    assert "dynamic dimension 0 ('batch')" in capsys.readouterr().err
    assert main(["import", path, "--input-shape", "x=3x8"]) == 0
    assert "3x8" in capsys.readouterr().out
    assert main(["import", path, "--input-shape", "x=3by8"]) == 2
    assert "expected NAME=DIMS" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "none.onnx")]) == 2


def test_cli_compile_fixes_an_onnx_file_s_dynamic_dimensions(tmp_path, capsys):
    from probsched.cli import main

    path, out = _tiny_onnx(tmp_path / "dense.onnx"), str(tmp_path / "dense.psm")
    assert main(["compile", path, "-o", out, "--quiet"]) == 2
    assert "dynamic dimension 0 ('batch')" in capsys.readouterr().err
    assert main(["compile", path, "--input-shape", "x=3x8", "-o", out, "--quiet"]) == 0
    assert os.path.getsize(out) > 0


def test_cli_tune_model_on_an_onnx_file(tmp_path):
    import subprocess
    import sys

    path = _tiny_onnx(tmp_path / "dense.onnx")
    run = subprocess.run(
        [sys.executable, "-m", "probsched.cli", "tune-model", path, "--input-shape", "x=2x8", "--trials", "2",
         "--batch-size", "2", "--strategy", "replay", "--db", str(tmp_path / "d.db")],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert "dense" in run.stdout and "fused_matmul_maximum" in run.stdout
