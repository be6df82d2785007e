"""``benchmarks/bench_int8.py``'s inputs and accuracy metrics for any model (no engine is run)."""

import numpy as np
import pytest
from scripts import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/bench_int8.py")


def test_feeds_of_an_image_model_and_of_a_language_model(bench):
    from onnx import TensorProto, helper

    image = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    bert = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 16]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, 16])]
    (f,) = bench.sample_feeds(image, 1, seed=0)
    assert list(f) == ["x"] and f["x"].shape == (1, 3, 8, 8) and f["x"].dtype == np.float32
    feeds = bench.sample_feeds(bert, 2, seed=0)
    ids, mask = feeds[0]["input_ids"], feeds[0]["attention_mask"]
    assert ids.dtype == np.int64 and 0 <= ids.min() and ids.max() < bench.TOKENS and len(set(ids.ravel())) > 1
    assert (mask == 1).all()
    assert not np.array_equal(ids, feeds[1]["input_ids"])  # n distinct inputs
    again = bench.sample_feeds(bert, 2, seed=1)  # the test inputs: disjoint from the calibration's
    assert not np.array_equal(again[0]["input_ids"], ids)


def test_arg_max_agreement_only_for_a_classifiers_logits(bench):
    rng = np.random.default_rng(0)
    logits = [rng.standard_normal((1, 10)) for _ in range(4)]
    flipped = [np.roll(x, 1, axis=1) for x in logits]
    assert bench.accuracy(logits, logits)["argmax"] == 1 and bench.accuracy(flipped, logits)["argmax"] < 1
    hidden = [rng.standard_normal((1, 16, 8)) for _ in range(4)]  # a transformer's last hidden state
    a = bench.accuracy([1.01 * h for h in hidden], hidden)
    assert "argmax" not in a and a["rel_err"] == pytest.approx(0.01) and a["cosine"] == pytest.approx(1)
