"""probsched.baselines: numpy and jax.jit baselines match the references of every suite op."""

import numpy as np
import pytest

import probsched as ps
from probsched.baselines import baselines, check_baselines, time_baselines

# Real configurations cheap enough for the default run (reference + jit compile < ~1 s each);
# together they cover im2col without padding, stride-2 depthwise, the dilated T2D path with
# a 3-channel output, capsules, the sdot norm, softmax and strided-view TBG at full size.
CHEAP_REAL = ["GMM:0", "C2D:1", "GRP:1", "DEP:3", "T2D:3", "CAP:3", "NRM:1", "SFM:0", "CBR:2", "TBG:2"]


def _inputs(w):
    return w.random_inputs(np.random.default_rng(7))


@pytest.mark.parametrize("op", ps.workloads.names())
def test_small_baselines_match_reference(op):
    w = ps.workloads.small(op)
    fns = check_baselines(w, _inputs(w))
    assert sorted(fns) == ["jax", "numpy"]


@pytest.mark.parametrize("name", CHEAP_REAL)
def test_real_baselines_match_reference(name):
    w = ps.workloads.get(name)
    check_baselines(w, _inputs(w))


def test_wrong_baseline_is_named():
    w = ps.workloads.small("C2D")
    inputs = _inputs(w)
    fns = baselines(w, inputs)
    good = fns["numpy"]()
    fns["numpy"] = lambda: good + np.float32(0.5)  # every element off by far more than atol
    with pytest.raises(AssertionError, match=r"C2D:small: baseline 'numpy' differs from the reference"):
        check_baselines(w, inputs, fns)


def test_float64_baseline_is_rejected():
    w = ps.workloads.small("GMM")
    inputs = _inputs(w)
    exact = w.reference(*inputs)[0].astype(np.float64)
    with pytest.raises(AssertionError, match=r"GMM:small: baseline 'slow'.*float64"):
        check_baselines(w, inputs, {"slow": lambda: exact})


def test_bad_workload_or_inputs_raise():
    with pytest.raises(ValueError, match="suite workloads"):
        baselines(ps.workloads.matmul(4, 3, 5), ps.workloads.matmul(4, 3, 5).random_inputs(0))
    w = ps.workloads.small("SFM")
    with pytest.raises(ValueError, match=r"SFM:small: input 0 has shape \(7, 4\)"):
        baselines(w, (np.ones((7, 4), np.float32),))


def test_jax_compiles_once_per_configuration_and_timing():
    from probsched.baselines import _jax_fn

    w = ps.workloads.small("TBG")
    inputs = _inputs(w)
    baselines(w, inputs)
    before = _jax_fn.cache_info()
    fns = baselines(w, inputs)
    after = _jax_fn.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    times = time_baselines(fns, repeat=2, min_repeat_ms=1)
    assert sorted(times) == ["jax", "numpy"] and all(t > 0 for t in times.values())
