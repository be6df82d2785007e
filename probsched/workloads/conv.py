"""Convolutions, channels-last (C1D, C2D, C3D, GRP, DIL, DEP, T2D, CAP, CBR).

Every convolution is two stages, as in TVM's topi: ``padded`` (zero padding through a
select, a plain copy when ``pad == 0``) and the reduction. Output size per spatial axis:
``(I + 2*pad - dilation*(kernel-1) - 1) // stride + 1``. FLOPs: 2 per multiply-add of the
reduction (plus 4 per output element for CBR's bias, scale, offset and relu).

>>> w = conv2d_nhwc(1, 6, 6, 4, 4, kernel=3, stride=2, pad=1)
>>> [b.name for b in w.func.blocks()], w.output_shapes
(['padded', 'conv2d'], ((1, 3, 3, 4),))
>>> w.flops == 2 * 3 * 3 * 4 * (3 * 3 * 4)
True
"""

from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

from ..ir.expr import all_of, eq, if_then_else, maximum, minimum
from ..te import Tensor, create_func, placeholder, reduce_axis
from ..te import sum as te_sum
from . import reference as ref
from .stages import named_compute, pad as pad_stage
from .workload import Workload, conv_out_size, make_workload, nonnegative_ints, positive_ints


def _conv_te(
    spatial: Sequence[str],
    n: int,
    sizes: Sequence[int],
    ci: int,
    co: int,
    kernel: int,
    stride: int,
    pad: int,
    dilation: int,
    groups: int,
    out_name: str,
    in_name: str = "inputs",
    w_name: str = "weight",
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Placeholders, pad stage and reduction of an N-d channels-last convolution.

    Returns ``(inputs, weight, padded, out)``; the caller must hold ``padded`` until
    ``create_func`` (the front end maps buffers to tensors weakly).

    Axes are ``n, <spatial>, co`` and the reduction ``r<spatial>, rc``; with groups, output
    channel ``co`` reads input channels ``co // (co_total/groups) * (ci/groups) + rc``.
    """
    positive_ints(out_name, n=n, ci=ci, co=co, kernel=kernel, stride=stride, dilation=dilation, groups=groups)
    positive_ints(out_name, **dict(zip(spatial, sizes)))
    nonnegative_ints(out_name, pad=pad)
    if ci % groups or co % groups:
        raise ValueError(f"{out_name}: groups={groups} must divide ci={ci} and co={co}")
    nsp = len(sizes)
    out_sizes = tuple(conv_out_size(s, kernel, stride, pad, dilation, out_name) for s in sizes)
    ci_g, co_g = ci // groups, co // groups
    x = placeholder((n,) + tuple(sizes) + (ci,), name=in_name)
    wt = placeholder((kernel,) * nsp + (ci_g, co), name=w_name)
    zeros = (0,) + (pad,) * nsp + (0,)
    xp = pad_stage(x, zeros, zeros, ("n",) + tuple(spatial) + ("c",))
    r_sp = [reduce_axis(kernel, name=f"r{s}") for s in spatial]
    rc = reduce_axis(ci_g, name="rc")

    def body(nn, *rest):
        *sp, c = rest
        chan = rc if groups == 1 else c // co_g * ci_g + rc
        src = (nn,) + tuple(o * stride + r * dilation for o, r in zip(sp, r_sp)) + (chan,)
        return te_sum(xp[src] * wt[tuple(r_sp) + (rc, c)], axis=r_sp + [rc])

    out = named_compute((n,) + out_sizes + (co,), ("n",) + tuple(spatial) + ("co",), body, out_name)
    return x, wt, xp, out


def _conv_workload(func_name: str, spatial: Sequence[str], args: dict, out_name: str) -> Workload:
    sizes = [args[s] for s in spatial]
    x, wt, _padded, out = _conv_te(
        spatial, args["n"], sizes, args["ci"], args["co"], args["kernel"], args["stride"], args["pad"],
        args["dilation"], args["groups"], out_name,
    )
    red = args["kernel"] ** len(spatial) * (args["ci"] // args["groups"])

    def reference(xa: np.ndarray, wa: np.ndarray):
        return (ref.conv_nd(xa, wa, args["stride"], args["pad"], args["dilation"], args["groups"]),)

    return make_workload(
        func_name, args, create_func([x, wt, out], name=func_name),
        flops=2 * int(np.prod(out.shape)) * red, reference=reference, reduction_length=red,
    )


def conv1d_nwc(
    n: int, l: int, ci: int, co: int, kernel: int, stride: int = 1, pad: int = 0, dilation: int = 1, groups: int = 1
) -> Workload:
    """1-D convolution (C1D): inputs (n, l, ci), weight (kernel, ci/groups, co) -> (n, lo, co)."""
    args = dict(n=n, l=l, ci=ci, co=co, kernel=kernel, stride=stride, pad=pad, dilation=dilation, groups=groups)
    return _conv_workload("conv1d_nwc", ("l",), args, "conv1d")


def conv2d_nhwc(
    n: int, h: int, w: int, ci: int, co: int, kernel: int, stride: int = 1, pad: int = 0, dilation: int = 1,
    groups: int = 1,
) -> Workload:
    """2-D convolution (C2D; GRP with groups=4; DIL with dilation=2).

    inputs (n, h, w, ci), weight (kernel, kernel, ci/groups, co) -> (n, ho, wo, co).
    """
    args = dict(n=n, h=h, w=w, ci=ci, co=co, kernel=kernel, stride=stride, pad=pad, dilation=dilation, groups=groups)
    return _conv_workload("conv2d_nhwc", ("h", "w"), args, "conv2d")


def conv3d_ndhwc(
    n: int, d: int, h: int, w: int, ci: int, co: int, kernel: int, stride: int = 1, pad: int = 0,
    dilation: int = 1, groups: int = 1,
) -> Workload:
    """3-D convolution (C3D): inputs (n, d, h, w, ci), weight (k, k, k, ci/groups, co)."""
    args = dict(
        n=n, d=d, h=h, w=w, ci=ci, co=co, kernel=kernel, stride=stride, pad=pad, dilation=dilation, groups=groups
    )
    return _conv_workload("conv3d_ndhwc", ("d", "h", "w"), args, "conv3d")


def depthwise_conv2d_nhwc(n: int, h: int, w: int, c: int, kernel: int, stride: int = 1, pad: int = 0) -> Workload:
    """Depthwise convolution (DEP, multiplier 1): inputs (n, h, w, c), weight (k, k, c).

    ``out[n, h, w, c] = sum_{rh, rw} padded[n, h*s + rh, w*s + rw, c] * weight[rh, rw, c]``.
    """
    where = "depthwise_conv2d_nhwc"
    positive_ints(where, n=n, h=h, w=w, c=c, kernel=kernel, stride=stride)
    nonnegative_ints(where, pad=pad)
    ho, wo = (conv_out_size(s, kernel, stride, pad, 1, where) for s in (h, w))
    x = placeholder((n, h, w, c), name="inputs")
    wt = placeholder((kernel, kernel, c), name="weight")
    xp = pad_stage(x, (0, pad, pad, 0), (0, pad, pad, 0), ("n", "h", "w", "c"))
    rh, rw = reduce_axis(kernel, name="rh"), reduce_axis(kernel, name="rw")
    out = named_compute(
        (n, ho, wo, c),
        ("n", "h", "w", "c"),
        lambda nn, hh, ww, cc: te_sum(xp[nn, hh * stride + rh, ww * stride + rw, cc] * wt[rh, rw, cc], axis=[rh, rw]),
        "depthwise_conv2d",
    )

    def reference(xa: np.ndarray, wa: np.ndarray):
        return (ref.depthwise_conv2d(xa, wa, stride, pad),)

    args = dict(n=n, h=h, w=w, c=c, kernel=kernel, stride=stride, pad=pad)
    return make_workload(
        where, args, create_func([x, wt, out], name=where), flops=2 * n * ho * wo * c * kernel * kernel,
        reference=reference, reduction_length=kernel * kernel,
    )


def conv2d_transpose_nhwc(
    n: int, h: int, w: int, ci: int, co: int, kernel: int, stride: int = 1, pad: int = 0,
    skip_zeros: bool = True,
) -> Workload:
    """Transposed convolution (T2D): inputs (n, h, w, ci), weight (k, k, ci, co).

    Output ``(h-1)*stride - 2*pad + k`` per axis. TVM writes it as a direct convolution of
    the stride-dilated, padded input with the flipped kernel, the dilation being the test
    ``index % stride == 0`` inside the reduction: ``(stride**2 - 1) / stride**2`` of its
    multiply-adds are by inserted zeros. ``skip_zeros=False`` is that form (the paper's).

    With ``skip_zeros`` (the default) the reduction runs over the taps that meet a real
    input only: for output row ``hh`` they are ``rh = q + stride*j`` with ``q = (-(hh +
    border)) % stride``, a rectangular domain of ``ceil(k/stride)`` taps per axis (plus a
    ``rh < k`` test when ``stride`` does not divide ``k``), so every schedule does the useful
    work only, the way a good schedule of the dilated form does after splitting by the
    stride and unrolling (TVM's simplifier). When ``stride`` divides the output size this is
    written *sub-pixel*: a reduction ``phases[n, ph, pw, a, b, co]`` over output pixel
    ``(stride*a + ph, stride*b + pw)``, one ordinary convolution per phase ``(ph, pw)`` whose
    taps depend on the phase only (matmul-like: the micro-kernel rule takes it), then an
    interleave into the output. FLOPs count the inserted zeros either way, as the paper
    does: ``2 * n * ho * wo * co * k * k * ci``.

    >>> t = conv2d_transpose_nhwc(1, 3, 3, 2, 2, 4, 2, 1)
    >>> [b.name for b in t.func.blocks()]
    ['padded', 'phases', 'conv2d_transpose']
    >>> [(a.var.name, a.extent) for a in t.func.blocks()[1].iters if a.kind == "R"]
    [('v_rh', 2), ('v_rw', 2), ('v_rc', 2)]
    """
    where = "conv2d_transpose_nhwc"
    positive_ints(where, n=n, h=h, w=w, ci=ci, co=co, kernel=kernel, stride=stride)
    nonnegative_ints(where, pad=pad)
    if pad > kernel - 1:
        raise ValueError(f"{where}: pad={pad} must be at most kernel - 1 = {kernel - 1}")
    bpad = kernel - 1 - pad  # padding of the dilated input in the equivalent direct conv
    p = (bpad + stride - 1) // stride  # the same padding counted in undilated input elements
    border = (stride - bpad % stride) % stride  # the extra dilated elements that padding adds
    ho, wo = (h - 1) * stride - 2 * pad + kernel, (w - 1) * stride - 2 * pad + kernel
    x = placeholder((n, h, w, ci), name="inputs")
    wt = placeholder((kernel, kernel, ci, co), name="weight")
    xp = pad_stage(x, (0, p, p, 0), (0, p, p, 0), ("n", "h", "w", "c"))
    gather = skip_zeros and stride > 1
    subpixel = gather and ho % stride == 0 and wo % stride == 0
    taps = -(-kernel // stride) if gather else kernel
    rh, rw, rc = reduce_axis(taps, name="rh"), reduce_axis(taps, name="rw"), reduce_axis(ci, name="rc")

    def first_tap(phase):
        # first useful tap of an output row/column of this phase (hh % stride):
        # (-(hh + border)) % stride, written with a non-negative left operand
        return ((stride - 1) * (phase + border)) % stride

    def useful_taps(qh, qw, row, col, nn, c):
        """The sum over the taps that meet real inputs; ``row``/``col`` index ``xp``."""
        th, tw = qh + rh * stride, qw + rw * stride
        val = xp[nn, row, col, rc]
        if kernel % stride:
            # past the kernel: a zero term; clamp the weight index so the load stays in bounds
            val = if_then_else(all_of(th < kernel, tw < kernel), val, 0.0)
            th, tw = minimum(th, kernel - 1), minimum(tw, kernel - 1)
        return te_sum(val * wt[kernel - 1 - th, kernel - 1 - tw, rc, c], axis=[rh, rw, rc])

    if subpixel:
        def phase_body(nn, ph, pw, a, b, c):
            qh, qw = first_tap(ph), first_tap(pw)
            # (stride*a + ph + border + qh) // stride, with the multiple of stride taken out
            row = a + (ph + border + qh) // stride + rh
            col = b + (pw + border + qw) // stride + rw
            return useful_taps(qh, qw, row, col, nn, c)

        phases = named_compute(
            (n, stride, stride, ho // stride, wo // stride, co), ("n", "ph", "pw", "a", "b", "co"), phase_body, "phases"
        )
        out = named_compute(
            (n, ho, wo, co), ("n", "h", "w", "co"),
            lambda nn, hh, ww, c: phases[nn, hh % stride, ww % stride, hh // stride, ww // stride, c],
            "conv2d_transpose",
        )
    else:
        def body(nn, hh, ww, c):
            if gather:
                qh, qw = first_tap(hh), first_tap(ww)
                row, col = (hh + border + qh) // stride + rh, (ww + border + qw) // stride + rw
                return useful_taps(qh, qw, row, col, nn, c)
            ih, iw = hh + rh + border, ww + rw + border
            if stride == 1:
                val = xp[nn, ih, iw, rc]
            else:
                nonzero = all_of(eq(ih % stride, 0), eq(iw % stride, 0))
                val = if_then_else(nonzero, xp[nn, ih // stride, iw // stride, rc], 0.0)
            return te_sum(val * wt[kernel - 1 - rh, kernel - 1 - rw, rc, c], axis=[rh, rw, rc])

        out = named_compute((n, ho, wo, co), ("n", "h", "w", "co"), body, "conv2d_transpose")
    red = kernel * kernel * ci

    def reference(xa: np.ndarray, wa: np.ndarray):
        return (ref.conv2d_transpose(xa, wa, stride, pad),)

    args = dict(n=n, h=h, w=w, ci=ci, co=co, kernel=kernel, stride=stride, pad=pad)
    return make_workload(
        where, args, create_func([x, wt, out], name=where), flops=2 * n * ho * wo * co * red,
        reference=reference, reduction_length=red,
    )


def conv2d_capsule_nhwc(
    n: int, h: int, w: int, ci: int, co: int, kernel: int, stride: int = 1, pad: int = 0, capsule: int = 4
) -> Workload:
    """Capsule convolution (CAP): inputs (n, h, w, cap, cap, ci), weight (k, k, cap, cap, ci, co).

    ``out[n,h,w,i,j,co] = sum_{rh,rw,cap_k,rc} padded[n, h*s+rh, w*s+rw, i, cap_k, rc]
    * weight[rh, rw, cap_k, j, rc, co]``: a 4x4 matrix product per pixel and kernel tap.
    """
    where = "conv2d_capsule_nhwc"
    positive_ints(where, n=n, h=h, w=w, ci=ci, co=co, kernel=kernel, stride=stride, capsule=capsule)
    nonnegative_ints(where, pad=pad)
    ho, wo = (conv_out_size(s, kernel, stride, pad, 1, where) for s in (h, w))
    x = placeholder((n, h, w, capsule, capsule, ci), name="inputs")
    wt = placeholder((kernel, kernel, capsule, capsule, ci, co), name="weight")
    xp = pad_stage(x, (0, pad, pad, 0, 0, 0), (0, pad, pad, 0, 0, 0), ("n", "h", "w", "cap_i", "cap_j", "c"))
    rh, rw = reduce_axis(kernel, name="rh"), reduce_axis(kernel, name="rw")
    cap_k, rc = reduce_axis(capsule, name="cap_k"), reduce_axis(ci, name="rc")
    out = named_compute(
        (n, ho, wo, capsule, capsule, co),
        ("n", "h", "w", "cap_i", "cap_j", "co"),
        lambda nn, hh, ww, cap_i, cap_j, c: te_sum(
            xp[nn, hh * stride + rh, ww * stride + rw, cap_i, cap_k, rc] * wt[rh, rw, cap_k, cap_j, rc, c],
            axis=[rh, rw, cap_k, rc],
        ),
        "conv2d_capsule",
    )
    red = kernel * kernel * capsule * ci

    def reference(xa: np.ndarray, wa: np.ndarray):
        return (ref.conv2d_capsule(xa, wa, stride, pad),)

    args = dict(n=n, h=h, w=w, ci=ci, co=co, kernel=kernel, stride=stride, pad=pad, capsule=capsule)
    return make_workload(
        where, args, create_func([x, wt, out], name=where), flops=2 * int(np.prod(out.shape)) * red,
        reference=reference, reduction_length=red,
    )


def conv2d_bn_relu(n: int, h: int, w: int, ci: int, co: int, kernel: int, stride: int = 1, pad: int = 0) -> Workload:
    """C2D then bias add, batch-norm scale, batch-norm offset and relu (CBR), one stage each.

    Parameters in order: data (n, h, w, ci), kernel (k, k, ci, co), bias, bn_offset,
    bn_scale (each (co,)), and the output relu (n, ho, wo, co).
    """
    data, kern, _padded, conv = _conv_te(
        ("h", "w"), n, (h, w), ci, co, kernel, stride, pad, 1, 1, "conv2d", in_name="data", w_name="kernel"
    )
    bias = placeholder((co,), name="bias")
    bn_offset = placeholder((co,), name="bn_offset")
    bn_scale = placeholder((co,), name="bn_scale")
    shape, axes = conv.shape, ("n", "h", "w", "co")
    biased = named_compute(shape, axes, lambda *i: conv[i] + bias[i[3]], "bias_add")
    scaled = named_compute(shape, axes, lambda *i: biased[i] * bn_scale[i[3]], "bn_mul")
    shifted = named_compute(shape, axes, lambda *i: scaled[i] + bn_offset[i[3]], "bn_add")
    relu = named_compute(shape, axes, lambda *i: maximum(shifted[i], 0.0), "relu")
    red = kernel * kernel * ci

    def reference(x, k, b, off, scale):
        y = ref.conv_nd(x, k, stride, pad)
        y = (y + b.astype(np.float64)) * scale.astype(np.float64) + off.astype(np.float64)
        return (np.maximum(y, 0.0),)

    args = dict(n=n, h=h, w=w, ci=ci, co=co, kernel=kernel, stride=stride, pad=pad)
    out_elems = int(np.prod(shape))
    return make_workload(
        "conv2d_bn_relu", args, create_func([data, kern, bias, bn_offset, bn_scale, relu], name="conv2d_bn_relu"),
        flops=2 * out_elems * red + 4 * out_elems, reference=reference, reduction_length=red,
    )
