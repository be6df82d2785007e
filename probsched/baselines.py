"""Fast float32 baselines for every suite workload: numpy (BLAS) and ``jax.jit`` (XLA).

The benchmarks compare probsched's kernels with these, measured in the same run. Each
baseline computes exactly what the workload's tensor expression computes (layouts,
padding, stride, dilation, groups, stage order; see ``probsched/workloads/*.py``), in
float32, the fastest reasonable way the library offers:

=====  ==========================================================  ===========================================
op     numpy                                                       jax (one ``jax.jit`` per configuration)
=====  ==========================================================  ===========================================
GMM    ``np.matmul``                                               ``jnp.matmul``
C1D,   im2col: windows of the zero-padded input                    ``lax.conv_general_dilated`` (NWC/NHWC/
C2D,   (``sliding_window_view``) copied to a matrix, one matmul    NDHWC with WIO/HWIO/DHWIO; DIL through
C3D,   with the weight (a batched matmul over the groups of GRP);  ``rhs_dilation``, GRP through
GRP,   chunked along the first output axis when the matrix would   ``feature_group_count``)
DIL    exceed :data:`CHUNK_BYTES`
DEP    sum over the k*k kernel taps of strided slices of the       the same sum over taps, fused by XLA (much
       padded input times the tap's weights                        faster than a grouped conv with one group
                                                                   per channel, XLA's slow path for depthwise)
T2D    the equivalent direct conv: zero-dilate the input by        ``conv_general_dilated`` with
       ``stride``, pad by ``k-1-pad``, im2col with the windows     ``lhs_dilation = stride``, padding
       flipped (so the weight needs no copy), one matmul           ``k-1-pad``, the flipped kernel
       (the paper's form: it multiplies the inserted zeros too)
CAP    im2col over (tap, capsule-k, channel), one matmul with the  one conv: the capsule row ``i`` joins the
       weight reordered to rows (tap, ck, rc), columns (j, co)     batch, (ck, rc) are the input features
CBR    C2D's im2col matmul, then bias, scale, offset and relu in   conv, ``(+ bias) * scale + offset``,
       place on each chunk while it is still in cache              ``max(., 0)``, fused by XLA
NRM    ``sqrt`` of BLAS ``sdot(a, a)`` per batch row (float32      ``sqrt(sum(a * a))`` over both axes
       accumulation, SIMD partial sums)
SFM    max-subtracted ``exp`` in place, row sums, divide           ``jax.nn.softmax``
TBG    ``np.matmul`` on the transposed *views* (BLAS reads the     ``jnp.einsum("bihk,bjhk->bhij")``
       strides; no transpose is copied)
=====  ==========================================================  ===========================================

**Threads.** OpenBLAS (numpy's matmul) and XLA's CPU runtime use every core unless told
otherwise; nothing here changes that. To restrict them, set the environment *before*
numpy and jax are first imported (they read it once), e.g. for one thread::

    OPENBLAS_NUM_THREADS=1 \\
    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
    python bench.py

(XLA aborts at import on a flag it does not know, so a misspelt one cannot pass silently.)
The element-wise numpy stages (DEP, SFM, CBR's epilogue, im2col copies) are single-threaded
in any case. On a machine busier than its cores, multi-threaded OpenBLAS can be many times
slower than one thread (its threads wait on each other); compare kernels and baselines with the same
thread count, stated next to the numbers.

The jax callables are compiled by :func:`baselines` (their first call costs no compile;
the jitted function is cached per configuration, so asking twice compiles once) and the
inputs are put on the device once, outside the callable, which calls
``block_until_ready()`` so a timer sees the whole computation.

>>> import numpy as np
>>> import probsched as ps
>>> w = ps.workloads.small("C2D")
>>> inputs = w.random_inputs(np.random.default_rng(0))
>>> fns = check_baselines(w, inputs)   # raises if a baseline differs from the reference
>>> sorted(fns), fns["numpy"]().shape, fns["numpy"]().dtype
(['jax', 'numpy'], (1, 3, 4, 5), dtype('float32'))
>>> sorted(time_baselines(fns, repeat=1, min_repeat_ms=1))
['jax', 'numpy']
"""

from __future__ import annotations

import functools
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .measure.timer import time_callable
from .workloads import names as suite_names
from .workloads.reference import windows
from .workloads.workload import Workload

Output = Union[np.ndarray, Tuple[np.ndarray, ...]]
Baseline = Callable[[], Output]

#: Budget of one im2col matrix; larger convolutions (C3D:0 would need ~400 MB) are chunked.
CHUNK_BYTES = 32 << 20

# Convolutions that are plain im2col + matmul: (spatial dims, dilation, groups), as the
# suite builds them (probsched/workloads/suite.py).
_CONV = {"C1D": (1, 1, 1), "C2D": (2, 1, 1), "C3D": (3, 1, 1), "GRP": (2, 1, 4), "DIL": (2, 2, 1)}
_F32 = np.float32


# ---------------------------------------------------------------------------------- numpy


def _pad(x: np.ndarray, pad: int, nsp: int) -> np.ndarray:
    """Zero-pad the ``nsp`` spatial axes after the batch axis (zeros + one copy: faster than np.pad)."""
    if pad == 0:
        return x
    shape = list(x.shape)
    for a in range(1, 1 + nsp):
        shape[a] += 2 * pad
    xp = np.zeros(shape, dtype=x.dtype)
    xp[(slice(None),) + (slice(pad, -pad),) * nsp] = x
    return xp


def _im2col_conv(
    xp: np.ndarray,
    w: np.ndarray,
    stride: int,
    dilation: int = 1,
    groups: int = 1,
    flip: bool = False,
    epilogue: Optional[Callable[[np.ndarray], None]] = None,
) -> np.ndarray:
    """Channels-last conv of padded ``xp`` (N, *S, CI) with ``w`` (*K, CI/groups, CO), float32.

    The windows are ordered (*K, ci) to match the weight's row-major layout, so the weight is
    used as a (K*ci, CO) view and the im2col copy reads contiguous channel runs. ``flip``
    reverses the kernel taps (T2D) on the window view instead of copying the weight.
    ``epilogue`` runs in place on each finished output chunk while it is still in cache.
    """
    nsp = xp.ndim - 2
    kernel, ci_g, co = w.shape[:nsp], w.shape[nsp], w.shape[-1]
    co_g = co // groups
    win = np.moveaxis(windows(xp, kernel, stride, dilation), 1 + nsp, -1)  # (N, *O, *K, CI)
    if flip:
        win = win[(Ellipsis,) + (slice(None, None, -1),) * nsp + (slice(None),)]
    n, out_sp = win.shape[0], win.shape[1 : 1 + nsp]
    # Split CI into (groups, ci_g) and lead with the group: one batched matmul for GRP.
    win = np.moveaxis(win.reshape(win.shape[:-1] + (groups, ci_g)), -2, 0)  # (G, N, *O, *K, ci_g)
    red = ci_g * int(np.prod(kernel))
    wmat = w.reshape(red, groups, co_g).transpose(1, 0, 2)  # (G, red, co_g), a view
    out = np.empty((n,) + tuple(out_sp) + (co,), dtype=_F32)
    slab = groups * n * int(np.prod(out_sp[1:], dtype=np.int64)) * red * 4  # bytes per output row
    step = max(1, CHUNK_BYTES // max(1, slab))
    for lo in range(0, out_sp[0], step):
        cols = win[:, :, lo : lo + step].reshape(groups, -1, red)  # the im2col copy
        dst = out[:, lo : lo + step]
        if groups == 1 and dst.flags.c_contiguous:
            np.matmul(cols[0], wmat[0], out=dst.reshape(-1, co))  # straight into the output
        else:
            dst[...] = np.matmul(cols, wmat).transpose(1, 0, 2).reshape(dst.shape)
        if epilogue is not None:
            epilogue(dst)
    return out


def _np_conv(op: str, params: tuple) -> Callable[..., np.ndarray]:
    nsp, dilation, groups = _CONV[op]
    kernel, stride, pad = params[-3:]
    return lambda x, w: _im2col_conv(_pad(x, pad, nsp), w, stride, dilation, groups)


def _depthwise_taps(xp, params: tuple):
    """``((rh, rw), tap)`` for every kernel tap of DEP: the strided slice of padded ``xp``
    (numpy or jax) that tap multiplies, shaped like the output."""
    n, h, wd, c, k, s, p = params
    ho, wo = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
    for rh in range(k):
        for rw in range(k):
            yield (rh, rw), xp[:, rh : rh + s * (ho - 1) + 1 : s, rw : rw + s * (wo - 1) + 1 : s]


def _np_depthwise(params: tuple) -> Callable[..., np.ndarray]:
    pad = params[-1]

    def run(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        out = tmp = None
        for tap_index, tap in _depthwise_taps(_pad(x, pad, 2), params):
            if out is None:
                out, tmp = tap * w[tap_index], np.empty(tap.shape, dtype=_F32)
            else:
                np.multiply(tap, w[tap_index], out=tmp)  # tmp is reused: no allocation per tap
                out += tmp
        return out

    return run


def _np_conv_transpose(params: tuple) -> Callable[..., np.ndarray]:
    n, h, wd, ci, co, k, s, p = params
    bpad = k - 1 - p  # padding of the dilated input in the equivalent direct conv

    def run(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        dh, dw = (h - 1) * s + 1, (wd - 1) * s + 1
        xd = np.zeros((n, dh + 2 * bpad, dw + 2 * bpad, ci), dtype=_F32)
        xd[:, bpad : bpad + dh : s, bpad : bpad + dw : s] = x  # dilate and pad in one copy
        return _im2col_conv(xd, w, 1, flip=True)

    return run


def _np_capsule(params: tuple) -> Callable[..., np.ndarray]:
    n, h, wd, ci, co, k, s, p = params

    def run(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        cap = x.shape[3]
        win = windows(_pad(x, p, 2), (k, k), s, 1)  # (N, Ho, Wo, i, ck, rc, rh, rw)
        ho, wo = win.shape[1:3]
        cols = win.transpose(0, 1, 2, 3, 6, 7, 4, 5).reshape(n * ho * wo * cap, -1)  # rows (n,h,w,i)
        wmat = w.transpose(0, 1, 2, 4, 3, 5).reshape(cols.shape[1], cap * co)  # (rh,rw,ck,rc) x (j,co)
        return (cols @ wmat).reshape(n, ho, wo, cap, cap, co)

    return run


def _np_conv_bn_relu(params: tuple) -> Callable[..., np.ndarray]:
    kernel, stride, pad = params[-3:]

    def run(x: np.ndarray, w: np.ndarray, bias: np.ndarray, offset: np.ndarray, scale: np.ndarray) -> np.ndarray:
        def epilogue(y: np.ndarray) -> None:
            # The TE's stage order, each in place: (conv + bias) * scale + offset, relu.
            y += bias
            y *= scale
            y += offset
            np.maximum(y, 0.0, out=y)

        return _im2col_conv(_pad(x, pad, 2), w, stride, epilogue=epilogue)

    return run


def _np_norm(a: np.ndarray) -> np.ndarray:
    flat = a.reshape(a.shape[0], -1)
    # BLAS sdot keeps many float32 partial sums (accurate enough for the tolerance) and reads
    # the data once, unlike (a * a).sum() which writes a temporary first.
    return np.sqrt(np.array([np.dot(row, row) for row in flat], dtype=_F32))


def _np_softmax(a: np.ndarray) -> np.ndarray:
    e = a - a.max(axis=1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=1, keepdims=True)
    return e


def _np_tbg(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    # Transposed views: each (seq, dim) / (dim, seq) matrix is BLAS-compatible as strided.
    return np.matmul(q.transpose(0, 2, 1, 3), v.transpose(0, 2, 3, 1))


def _numpy_fn(op: str, params: tuple) -> Callable[..., np.ndarray]:
    """The numpy implementation of suite operator ``op`` at configuration ``params``."""
    if op in _CONV:
        return _np_conv(op, params)
    simple = {"GMM": np.matmul, "NRM": _np_norm, "SFM": _np_softmax, "TBG": _np_tbg}
    if op in simple:
        return simple[op]
    builders = {"DEP": _np_depthwise, "T2D": _np_conv_transpose, "CAP": _np_capsule, "CBR": _np_conv_bn_relu}
    return builders[op](params)


# ---------------------------------------------------------------------------------- jax


def _jax_conv(x, w, nsp: int, stride: int, pad: int, dilation: int = 1, groups: int = 1, lhs_dilation: int = 1):
    from jax import lax

    sp = "DHW"[3 - nsp :]
    return lax.conv_general_dilated(
        x, w, window_strides=(stride,) * nsp, padding=[(pad, pad)] * nsp,
        lhs_dilation=(lhs_dilation,) * nsp, rhs_dilation=(dilation,) * nsp,
        dimension_numbers=(f"N{sp}C", f"{sp}IO", f"N{sp}C"), feature_group_count=groups,
    )


@functools.lru_cache(maxsize=None)
def _jax_fn(op: str, params: tuple) -> Callable:
    """``jax.jit`` of suite operator ``op`` at ``params``, cached so each configuration compiles once."""
    import jax
    import jax.numpy as jnp

    if op in _CONV:
        nsp, dilation, groups = _CONV[op]
        k, s, p = params[-3:]
        f = functools.partial(_jax_conv, nsp=nsp, stride=s, pad=p, dilation=dilation, groups=groups)
    elif op == "GMM":
        f = jnp.matmul
    elif op == "DEP":
        pad = params[-1]

        def f(x, w):
            # The same sum over taps as numpy, fused by XLA into one loop: an order of
            # magnitude faster on the CPU than conv_general_dilated with feature_group_count=C.
            xp = jnp.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
            return sum(tap * w[tap_index] for tap_index, tap in _depthwise_taps(xp, params))
    elif op == "T2D":
        k, s, p = params[-3:]
        f = lambda x, w: _jax_conv(x, w[::-1, ::-1], 2, 1, k - 1 - p, lhs_dilation=s)  # noqa: E731
    elif op == "CAP":
        k, s, p = params[-3:]

        def f(x, w):
            n, h, wd, cap, _, ci = x.shape
            co = w.shape[-1]
            # Capsule row i joins the batch; (ck, rc) are the features; (j, co) the outputs.
            lhs = x.transpose(0, 3, 1, 2, 4, 5).reshape(n * cap, h, wd, cap * ci)
            rhs = w.transpose(0, 1, 2, 4, 3, 5).reshape(k, k, cap * ci, cap * co)
            y = _jax_conv(lhs, rhs, 2, s, p)
            ho, wo = y.shape[1:3]
            return y.reshape(n, cap, ho, wo, cap, co).transpose(0, 2, 3, 1, 4, 5)
    elif op == "CBR":
        k, s, p = params[-3:]

        def f(x, w, bias, offset, scale):
            return jnp.maximum((_jax_conv(x, w, 2, s, p) + bias) * scale + offset, 0.0)
    elif op == "NRM":
        f = lambda a: jnp.sqrt(jnp.sum(a * a, axis=(1, 2)))  # noqa: E731
    elif op == "SFM":
        f = lambda a: jax.nn.softmax(a, axis=1)  # noqa: E731
    elif op == "TBG":
        f = lambda q, v: jnp.einsum("bihk,bjhk->bhij", q, v)  # noqa: E731
    else:  # pragma: no cover - _op() admits suite operators only
        raise ValueError(f"no jax baseline for {op}")
    return jax.jit(f)


def _jax_available() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------- API


def _op(workload: Workload) -> str:
    op = workload.name.partition(":")[0].upper()
    if op not in suite_names():
        raise ValueError(
            f"{workload.name}: baselines exist for suite workloads ('<OP>:<index>' or '<OP>:small' "
            f"from probsched.workloads.get/small) only; the suite has {', '.join(suite_names())}"
        )
    return op


def _checked_inputs(workload: Workload, inputs: Sequence[np.ndarray]) -> Tuple[np.ndarray, ...]:
    shapes = workload.input_shapes
    if len(inputs) != len(shapes):
        raise ValueError(f"{workload.name}: baselines take {len(shapes)} inputs, got {len(inputs)}")
    for i, (a, shape) in enumerate(zip(inputs, shapes)):
        if np.shape(a) != shape:
            raise ValueError(f"{workload.name}: input {i} has shape {np.shape(a)}, expected {shape}")
    return tuple(np.ascontiguousarray(a, dtype=_F32) for a in inputs)


def baselines(workload: Workload, inputs: Sequence[np.ndarray]) -> Dict[str, Baseline]:
    """Zero-argument callables computing ``workload`` on ``inputs``: keys ``"numpy"`` and ``"jax"``.

    ``inputs`` are the workload's inputs in parameter order (``workload.random_inputs(rng)``).
    Both callables return the single float32 output. The jax callable is already compiled
    and its inputs already on the device; it blocks until the result is ready. A baseline
    that cannot run here (jax not installed) is absent. Raises ValueError for a workload
    that is not from the suite or for inputs of the wrong number or shape.
    """
    op = _op(workload)
    params = tuple(workload.params)
    args = _checked_inputs(workload, inputs)
    np_fn = _numpy_fn(op, params)
    fns: Dict[str, Baseline] = {"numpy": lambda: np_fn(*args)}
    if _jax_available():
        import jax

        jitted = _jax_fn(op, params)
        dev = tuple(jax.device_put(a) for a in args)
        jitted(*dev).block_until_ready()  # compile now, so no caller times the compilation
        fns["jax"] = lambda: jitted(*dev).block_until_ready()
    return fns


def check_baselines(
    workload: Workload, inputs: Sequence[np.ndarray], fns: Optional[Mapping[str, Baseline]] = None
) -> Dict[str, Baseline]:
    """Check every baseline (``fns``, default :func:`baselines`) against the reference; return them.

    Raises AssertionError naming the workload and the baseline when an output is not float32
    or does not pass ``workload.check`` (whose message gives the worst element).
    """
    fns = dict(baselines(workload, inputs) if fns is None else fns)
    expected = workload.reference(*inputs)
    for key, fn in fns.items():
        got = fn()
        got = tuple(np.asarray(g) for g in (got if isinstance(got, tuple) else (got,)))
        try:
            for g in got:
                if g.dtype != _F32:
                    raise AssertionError(f"output dtype {g.dtype}, expected float32")
            workload.check(got, expected)
        except AssertionError as err:
            raise AssertionError(f"{workload.name}: baseline {key!r} differs from the reference: {err}") from err
    return fns


def time_baselines(fns: Mapping[str, Baseline], repeat: int = 5, min_repeat_ms: float = 50) -> Dict[str, float]:
    """Median seconds per call of each baseline (``probsched.measure.timer.time_callable``)."""
    return {key: time_callable(fn, repeat=repeat, min_repeat_ms=min_repeat_ms).median for key, fn in fns.items()}
