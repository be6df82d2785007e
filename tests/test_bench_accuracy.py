"""``benchmarks/bench_accuracy.py``'s metrics, inputs and table (no engine is run)."""

import doctest

import numpy as np
import pytest
from scripts import ROOT, load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/bench_accuracy.py")


def test_its_docstring_examples(bench):
    result = doctest.testmod(bench, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 4 and result.failed == 0


def test_metrics_of_exact_scaled_and_wrong_outputs(bench):
    rng = np.random.default_rng(0)
    want = [rng.standard_normal(10) for _ in range(5)]
    exact = bench.metrics(want, want, classes=True)
    assert exact["rel_err_max"] == 0 and exact["cosine_min"] == pytest.approx(1) and exact["argmax_agreement"] == 1
    # a scale changes the relative error, not the direction or the class
    scaled = bench.metrics([1.02 * w for w in want], want, classes=True)
    assert scaled["rel_err_median"] == pytest.approx(0.02) and scaled["cosine_min"] == pytest.approx(1)
    assert scaled["argmax_agreement"] == 1
    # the worst input sets the max and the min, not the medians
    one_bad = [w if k else -w for k, w in enumerate(want)]
    m = bench.metrics(one_bad, want, classes=True)
    assert m["rel_err_max"] == pytest.approx(2) and m["rel_err_median"] == 0
    assert m["cosine_min"] == pytest.approx(-1) and m["cosine_median"] == pytest.approx(1)
    assert m["argmax_agreement"] == pytest.approx(4 / 5)
    assert "argmax_agreement" not in bench.metrics(want, want, classes=False)


def test_metrics_refuse_mismatched_outputs(bench):
    with pytest.raises(ValueError, match="2 outputs for 1 references"):
        bench.metrics([np.ones(3)] * 2, [np.ones(3)], classes=False)
    with pytest.raises(ValueError, match="4 values for a reference of 3"):
        bench.metrics([np.ones(4)], [np.ones(3)], classes=False)


def test_images_are_normalised_pictures_and_seeds_disjoint(bench):
    a, b = bench.images((1, 3, 64, 64), 3, seed=0), bench.images((1, 3, 64, 64), 3, seed=1)
    pixels = np.stack(a) * bench.STD[:, None, None] + bench.MEAN[:, None, None]
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6
    # smooth: neighbouring pixels differ far less than pixels at random
    assert np.abs(np.diff(pixels, axis=-1)).mean() < 0.5 * np.abs(pixels - pixels.mean()).mean()
    assert not {x.tobytes() for x in a} & {x.tobytes() for x in b}
    assert all(np.array_equal(x, y) for x, y in zip(a, bench.images((1, 3, 64, 64), 3, seed=0)))


def test_tokens_are_framed_sentences_of_varied_lengths(bench):
    feeds = bench.tokens(((1, 32), (1, 32)), vocab=30522, n=16, seed=0)
    lengths = [int(f["attention_mask"].sum()) for f in feeds]
    assert len(set(lengths)) > 4 and min(lengths) >= 8
    for f, n in zip(feeds, lengths):
        ids = f["input_ids"][0]
        assert ids[0] == bench.CLS and ids[n - 1] == bench.SEP and not ids[n:].any()
        assert (ids[1:n - 1] > bench.SEP).all() and (ids < 30522).all()
        assert f["attention_mask"][0, :n].all() and f["input_ids"].dtype == np.int64


def test_inputs_follow_the_onnx_model(bench):
    images, is_image = bench.network_inputs(str(ROOT / "tests/data/onnx/resnet50_torchscript.onnx"), 2, seed=0)
    assert is_image and images[0]["x"].shape == (1, 3, 64, 64)
    specs, vocab = bench.model_inputs(str(ROOT / "tests/data/onnx/bert_base_torchscript.onnx"))
    assert [s[0] for s in specs] == ["input_ids", "attention_mask"] and vocab == 100  # the tiny BERT's table
    text, is_image = bench.network_inputs(str(ROOT / "tests/data/onnx/bert_base_torchscript.onnx"), 2, seed=0)
    assert not is_image and (text[0]["input_ids"] < 100).all()


def test_the_table_names_every_engine_and_why_one_is_missing(bench):
    m = bench.metrics([np.arange(3.0)], [np.arange(3.0)], classes=False)
    row = {"model": "bert", "engines": {"probsched bf16": m}, "skipped": {"openvino-f32": "openvino is not installed"}}
    lines = bench.table([row]).splitlines()
    assert len(lines) == 4 and "| bert | probsched bf16 | 1 |" in lines[2] and lines[2].endswith("| - | - | - | - |")
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    assert "left out: openvino is not installed" in lines[3]


def test_centered_metrics_see_an_engine_that_ignores_its_input(bench):
    # random-weight networks: a large common output, a small part that depends on the input
    rng = np.random.default_rng(1)
    common = 10 * rng.standard_normal(50)
    want = [common + 0.1 * rng.standard_normal(50) for _ in range(8)]
    blind = bench.metrics([np.mean(want, 0)] * 8, want, classes=True)
    assert blind["rel_err_median"] < 0.02 and blind["cosine_min"] > 0.999 and blind["argmax_agreement"] == 1
    assert blind["centered_rel_err_median"] == pytest.approx(1) and abs(blind["centered_cosine_median"]) < 0.5
    assert blind["centered_argmax_agreement"] < 0.5
    sighted = bench.metrics([w + 0.01 * rng.standard_normal(50) for w in want], want, classes=True)
    assert sighted["centered_rel_err_median"] < 0.2 and sighted["centered_cosine_median"] > 0.98
