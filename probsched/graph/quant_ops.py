"""Quantized layers as JAX computes them in integers: what a quantized graph holds.

A quantized convolution or matmul reads its activation as ``uint8`` with a per-tensor
scale and zero point (``x = s_x (q - z)``) and its weight as ``int8`` with a scale per output
channel and no zero point (``w = s_w[c] v``). Its product is then an integer one::

    sum_k x w = s_x s_w[c] (sum_k q v - z sum_k v)

and the graph computes exactly that: ``q`` padded with ``z`` (a padded zero), the integer
product accumulated in int32 (``preferred_element_type=int32``: what the VNNI kernels
compute, :mod:`probsched.intrinsics.matmul_int8`), the zero point's share ``z sum_k v``
(per output channel, from the weights: a constant) subtracted, and one float32
multiplication by ``s_x s_w[c]`` (also a constant) that *dequantizes*. What follows (a bias,
an activation, the next layer's :func:`quantize_activation`) is ordinary float32 arithmetic
that fusion puts in the same task (:mod:`.fusion`): the next activation is stored as the
``uint8`` it is read as.

:func:`probsched.quantize <probsched.graph.quantization.quantize>` builds graphs of these from a
float32 network; :func:`probsched.from_onnx` from the ``QuantizeLinear`` /
``DequantizeLinear`` pairs of a QDQ model.

>>> import numpy as np, jax.numpy as jnp
>>> w = quantize_weight(np.array([[0.5, -2.0], [1.0, 1.0]], np.float32), axis=1)
>>> w.values.tolist(), w.scale.tolist()
([[64, -127], [127, 64]], [0.007874015718698502, 0.015748031437397003])
>>> q = quantize_activation(jnp.array([[0.0, 1.0]], jnp.float32), 0.01, 10)
>>> q.tolist(), float(dot(q, 10, 0.01, w, (((1,), (0,)), ((), ())))[0, 0])
([[10, 110]], 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ..errors import FrontEndError
from ..ir.dtypes import INT_RANGE

#: a weight's values span ``[-127, 127]``: symmetric, so ``-v`` is representable too
WEIGHT_RANGE = 127
#: with ``reduce_range``: ``[-64, 64]`` (ONNX Runtime's reduced range), the ``"int8r"`` type
#: whose products CPUs without VNNI compute faster (:mod:`probsched.ir.dtypes`)
REDUCED_WEIGHT_RANGE = 64


@dataclass(frozen=True)
class QuantizedWeight:
    """A constant weight in int8: ``float weight = scale[c] * values`` along ``axis``."""

    values: np.ndarray  # int8
    scale: np.ndarray  # float32, one per index of ``axis`` (or one for the whole tensor)
    axis: int

    def column_sums(self, reduced: Sequence[int]) -> np.ndarray:
        """``sum v`` over the axes ``reduced`` (what a zero point multiplies), int32."""
        return self.values.astype(np.int64).sum(axis=tuple(reduced)).astype(np.int32)


def quantize_weight(w: np.ndarray, axis: int, reduce_range: bool = False) -> QuantizedWeight:
    """``w`` quantized per channel along ``axis``, symmetric: each channel's scale maps its
    largest magnitude to 127 (64 with ``reduce_range``; a channel of zeros gets scale 1).

    >>> quantize_weight(np.array([[0.5, -2.0]], np.float32), axis=1, reduce_range=True).values.tolist()
    [[64, -64]]
    """
    top = REDUCED_WEIGHT_RANGE if reduce_range else WEIGHT_RANGE
    w = np.asarray(w, np.float32)
    axis = axis % w.ndim
    others = tuple(d for d in range(w.ndim) if d != axis)
    peak = np.abs(w).max(axis=others) if others else np.abs(w)
    scale = np.where(peak > 0, peak / top, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    values = np.clip(np.rint(w / scale.reshape(shape)), -top, top).astype(np.int8)
    return QuantizedWeight(values, scale, axis)


def activation_params(lo: float, hi: float, dtype: str = "uint8") -> Tuple[float, int]:
    """``(scale, zero_point)`` of an affine 8-bit quantization covering ``[lo, hi]`` (widened
    to hold 0, which then has an exact code: a padded zero, a ReLU's zeros).

    >>> activation_params(-1.0, 3.0), activation_params(0.0, 0.0)
    ((0.01568627543747425, 64), (1.0, 0))
    """
    qmin, qmax = INT_RANGE[dtype]
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise FrontEndError(f"activation range [{lo}, {hi}] is not finite; calibrate on finite inputs")
    scale = float(np.float32((hi - lo) / (qmax - qmin))) if hi > lo else 1.0
    zero = int(np.clip(np.rint(qmin - lo / scale), qmin, qmax))
    return scale, zero


def along_last_axis(value: float, x: Any) -> np.ndarray:
    """A per-tensor ``value`` as a float32 vector along ``x``'s last axis (a scalar for a 0-d
    ``x``). A one-element constant is folded into a task's expressions, so two layers of one
    shape with other scales would be two tasks; as a vector it is an input, and they are one
    task (ResNet-50's bottleneck blocks share their records)."""
    shape = np.shape(x)
    return np.full(shape[-1:] if shape else (), value, np.float32)


def quantize_activation(x: Any, scale: float, zero_point: int, dtype: str = "uint8",
                        bounds: Optional[Tuple[int, int]] = None) -> Any:
    """``saturate(round(x / scale) + zero_point)`` in ``dtype``, rounding to nearest even (ONNX's
    ``QuantizeLinear``, per tensor); ``bounds``: saturate to these codes instead of the
    type's (a ReLU folded in: its floor is the zero point's code)."""
    import jax.numpy as jnp

    lo, hi = INT_RANGE[dtype] if bounds is None else bounds
    q = jnp.round(x / along_last_axis(scale, x)) + along_last_axis(zero_point, x)
    return jnp.clip(q, np.float32(lo), np.float32(hi)).astype(dtype)


def dequantize_activation(q: Any, scale: float, zero_point: int) -> Any:
    """``(q - zero_point) * scale`` in float32 (ONNX's ``DequantizeLinear``, per tensor)."""
    import jax.numpy as jnp

    return (q.astype(jnp.float32) - along_last_axis(zero_point, q)) * along_last_axis(scale, q)


def _dequantized(acc: Any, correction: Optional[np.ndarray], scale: np.ndarray, shape: Sequence[int]) -> Any:
    """``float32(acc - correction) * scale``, both constants broadcast as ``shape``."""
    import jax.numpy as jnp

    if correction is not None and correction.any():
        acc = acc - correction.reshape(shape)
    return acc.astype(jnp.float32) * scale.astype(np.float32).reshape(shape)


def _scale(x_scale: float, weight: QuantizedWeight) -> np.ndarray:
    return (np.float32(x_scale) * weight.scale.astype(np.float32)).astype(np.float32)


def conv(q: Any, zero_point: int, x_scale: float, weight: QuantizedWeight, window_strides: Sequence[int],
         padding: Sequence[Tuple[int, int]], rhs_dilation: Optional[Sequence[int]], dimension_numbers: Any,
         feature_group_count: int = 1) -> Any:
    """The float32 convolution of ``x = x_scale (q - zero_point)`` and ``weight``, computed in
    integers (module docstring); ``weight.axis`` must be the output feature axis. Arguments
    as ``lax.conv_general_dilated`` takes them, ``padding`` as explicit pairs."""
    import jax.numpy as jnp
    from jax import lax

    dn = lax.conv_dimension_numbers(q.shape, weight.values.shape, dimension_numbers)
    lhs_spec, rhs_spec, out_spec = dn
    if weight.axis != rhs_spec[0]:
        raise FrontEndError(f"a convolution's weight is quantized along axis {weight.axis}, not its output channels")
    config = [(0, 0, 0)] * q.ndim
    for k, (lo, hi) in enumerate(padding):
        config[lhs_spec[2 + k]] = (int(lo), int(hi), 0)
    if any(c != (0, 0, 0) for c in config):  # a padded zero is the zero point
        q = lax.pad(q, np.array(zero_point, q.dtype), config)
    acc = lax.conv_general_dilated(
        q.astype(jnp.int32), jnp.asarray(weight.values).astype(jnp.int32), tuple(window_strides),
        [(0, 0)] * len(window_strides), rhs_dilation=rhs_dilation, dimension_numbers=dn,
        feature_group_count=feature_group_count, preferred_element_type=jnp.int32,
    )
    shape = [1] * q.ndim
    shape[out_spec[1]] = -1
    correction = zero_point * weight.column_sums([d for d in range(weight.values.ndim) if d != rhs_spec[0]])
    return _dequantized(acc, correction, _scale(x_scale, weight), shape)


def dot(q: Any, zero_point: int, x_scale: float, weight: QuantizedWeight, dimension_numbers: Any) -> Any:
    """The float32 ``lax.dot_general`` of ``x = x_scale (q - zero_point)`` and ``weight`` (no
    batch dimensions), computed in integers (module docstring)."""
    import jax.numpy as jnp
    from jax import lax

    (lc, rc), (lb, rb) = dimension_numbers
    if lb or rb:
        raise FrontEndError("a quantized matmul has no batch dimensions (its weight is a constant)")
    acc = lax.dot_general(q, jnp.asarray(weight.values), dimension_numbers, preferred_element_type=jnp.int32)
    free = [d for d in range(weight.values.ndim) if d not in tuple(rc)]
    if weight.axis not in free:
        raise FrontEndError(f"a matmul's weight is quantized along axis {weight.axis}, which it sums over")
    shape = [1] * len(free)
    shape[free.index(weight.axis)] = -1
    correction = zero_point * weight.column_sums(rc)
    scale = _scale(x_scale, weight).reshape(shape) * np.ones([weight.values.shape[d] for d in free], np.float32)
    return _dequantized(acc, correction, scale, scale.shape)


__all__ = ["QuantizedWeight", "quantize_weight", "activation_params", "quantize_activation", "dequantize_activation",
           "along_last_axis", "conv", "dot", "WEIGHT_RANGE", "REDUCED_WEIGHT_RANGE"]
