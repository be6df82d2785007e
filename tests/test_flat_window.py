"""flatten_window: a bf16 or int8 convolution over few input channels reads its window rows
flat, one reduction of whole pairs (quads) the dot-product kernels take; the sums are
those of the convolution it rewrites, interpreted and compiled, and network tasks get it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jax
import jax.numpy as jnp
from jax import lax

import probsched as ps
import probsched.workloads as wl
from handlers import seed, trace
from probsched.ir.interpreter import evaluate
from probsched.schedule.flat_window import GROUPS, flatten_window

GROUP = {"bf16": 2, "int8": 4}
FAMILY = {"bf16": "matmul_bf16", "int8": "matmul_int8"}


def stem(ci=3, co=16, kernel=3, stride=2, pad=1, h=9, w=9, precision="bf16"):
    return wl.conv2d_nhwc(1, h, w, ci, co, kernel=kernel, stride=stride, pad=pad).with_precision(precision)


def typed_inputs(w, seed_=0):
    return [a.astype(b_dtype) for a, b_dtype in zip(w.random_inputs(np.random.default_rng(seed_)),
                                                    [ps.ir.dtypes.numpy_dtype(b.dtype) for b in w.func.input_buffers()])]


@settings(max_examples=30, deadline=None)
@given(ci=st.integers(1, 6), kernel=st.integers(1, 5), stride=st.integers(1, 2), pad=st.integers(0, 2),
       h=st.integers(5, 9), w=st.integers(5, 9), precision=st.sampled_from(sorted(GROUP)))
def test_the_flat_window_computes_the_same_sums(ci, kernel, stride, pad, h, w, precision):
    work = stem(ci, 16, kernel, stride, pad, h, w, precision)
    flat = flatten_window(work.func)
    if ci % GROUP[precision] == 0:
        assert flat is work.func  # whole pairs (quads) already
        return
    conv = flat.blocks()[-1]
    j = conv.iters[-1]  # (kw, c) as one reduction, innermost
    assert [it.kind for it in conv.iters].count("R") == 2 and j.kind == "R"
    assert j.extent == -(-kernel * ci // GROUP[precision]) * GROUP[precision]  # (kw, c) padded to the group, no more
    x = typed_inputs(work, 1)
    # the same products in the same order, then zeros: equal, not just close
    assert np.array_equal(evaluate(flat, *x)[0], evaluate(work.func, *x)[0])


def test_only_grouped_products_of_few_channels_are_flattened():
    assert set(GROUPS.values()) == {2, 4}
    f32 = wl.conv2d_nhwc(1, 9, 9, 3, 16, kernel=3, stride=2, pad=1).func
    assert flatten_window(f32) is f32  # float32 products read no groups
    gmm = wl.matmul(8, 16, 6, batch=None).with_precision("bf16").func
    assert flatten_window(gmm) is gmm  # not a convolution
    dil = wl.conv2d_nhwc(1, 9, 9, 3, 16, kernel=3, stride=1, pad=2, dilation=2).with_precision("bf16").func
    assert flatten_window(dil) is dil  # a dilated window's row is not contiguous


@pytest.mark.parametrize("precision", sorted(GROUP))
def test_the_default_space_tiles_the_flat_window_around_the_kernels_and_it_compiles_right(precision):
    w = stem(precision=precision)
    w = replace(w, func=flatten_window(w.func))
    x = w.random_inputs(np.random.default_rng(2))
    sch = ps.Schedule(w.func)
    trace(seed(ps.space.default(), 0)).get_trace(sch)
    kernels = [b.annotation("tensorize") for b in sch.mod.blocks() if b.annotation("tensorize")]
    assert kernels and all(k.startswith(FAMILY[precision]) for k in kernels)
    w.check(ps.build(sch).run(*x), w.reference(*x))


def test_a_networks_first_convolution_reads_its_window_flat_in_bf16_only():
    rng = np.random.default_rng(0)
    k = rng.standard_normal((3, 3, 3, 16)).astype(np.float32)

    def fn(x):
        y = lax.conv_general_dilated(x, k, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y)

    (task,) = ps.from_jax(fn, np.ones((1, 8, 8, 3), np.float32)).tasks()
    assert not [b for b in task.func.allocs if b.name.endswith("_window")]  # float32: as it was
    half = task.in_precision("bf16")
    assert [b for b in half.func.allocs if b.name.endswith("_window")]
    w = half.workload
    x = w.random_inputs(np.random.default_rng(1))
    w.check(ps.build(half.func).run(*x), w.reference(*x))
