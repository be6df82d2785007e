"""The :class:`Workload`: a tensor program with its inputs, numpy reference, FLOPs and tolerance.

Conventions shared by every workload of the suite:

- **FLOPs**: 2 per multiply-add of the main reduction, plus 1 per element-wise arithmetic
  operation of every other stage (a ``max``/``sum`` reduction step, ``+``, ``*``, ``/``,
  ``exp``, ``sqrt``, ``relu``). Padding and transposes move data and count 0.
- **Tolerance**: an output ``got`` matches ``expected`` when
  ``|got - expected| <= atol + rtol * |expected|`` elementwise (NaN never matches), with
  ``rtol = 1e-4`` and ``atol = 1e-4 * sqrt(L)``, L the length of the main reduction (1 if
  none). Float32 accumulation error of L terms of magnitude <= 1 grows like ``eps * L``
  (about 6e-8 * L, well under the bound), while inputs are bounded away from zero
  (``|x| >= 0.5``), so one missing or misplaced product moves an output by ~0.25 or more:
  far outside ``atol`` even for L = 8192. Two workloads override this: softmax, whose
  outputs are normalised (``atol = 1e-6``), and the 2-norm, a sum of L *positive* terms
  whose rounding errors do not cancel (``rtol = max(1e-4, L * 2**-24 / 32)``).
- **Inputs** are float32, never exactly zero: ``|x|`` uniform in ``[0.5, 1]`` with a
  random sign unless a workload says otherwise.
- **bfloat16** (:meth:`Workload.with_precision`, :mod:`probsched.precision`): the
  products read their operands in bfloat16, accumulate and output float32. Inputs are the
  same draws rounded to bfloat16 (still never zero); the reference is the float32 workload's
  reference on those values, widened to float32 exactly. The tolerance
  (:func:`tolerance` with ``"bfloat16"``) is derived from bfloat16's 8 significant bits:
  ``rtol = 2 u = 2^-7`` with ``u = 2^-8`` its unit roundoff, one rounding of a result stored
  in bfloat16 (``|x - bf16(x)| <= u |x|``), doubled because two correct kernels summing in
  different orders may round an element to the two neighbours of the exact value; and
  the float32 rule's ``atol = 1e-4 sqrt(L)`` for the accumulation, which stays float32: a
  product of two bfloat16 values is exact in float32 (8 + 8 significant bits), and
  ``vdpbf16ps`` adds each pair of products to its float32 lane rounding to nearest, so
  nothing else is lost. The rounding of the inputs is *not* in the tolerance: the
  reference reads the rounded inputs. A bound covering it (products erring by ``2u``
  each, ``~6 u sqrt(2L/3)`` at six standard deviations: 0.9 for C2D:2's L = 2304) would
  let a kernel that drops a product of magnitude 0.25 pass.
- **Winograd** (:mod:`probsched.schedule.winograd`): a program that computes a 3x3
  convolution by Winograd's F(m x m, 3x3) is checked against the same float32 direct
  reference (:func:`scheduled_tolerance`), ``rtol`` kept and ``atol`` multiplied by
  ``R_m`` (:func:`~probsched.ir.winograd.error_amplification`: 1 for m = 2, 10.5 for
  m = 4). The direct sum of ``L = 9 C`` products of size ``s`` errs by about
  ``eps * 9 C * s``; Winograd sums ``C`` products per transformed position, whose sizes
  and weights in the output grow with the transform matrices' entries (up to 8 for
  m = 4), and errs by about ``eps * 9 C * s * R_m``. The error is absolute (the transforms
  add and subtract; it does not shrink with the output), so ``atol`` takes the factor and
  keeps the margin it has over the direct error. ResNet-50's largest 3x3 layers (C = 512,
  L = 4608) get ``atol = 0.071`` at m = 4: a dropped product (``|x w| >= 0.25``) still
  fails the check, as it does while ``1e-4 sqrt(9 C) R_m < 0.25``, for C up to about 6000.
- **int8** (``"GMM:2:int8"``): the products read ``uint8`` activations and ``int8``
  weights and accumulate in int32, exactly (:mod:`probsched.precision`). Inputs are drawn
  over the whole range, zero excepted (``uint8`` in ``[1, 255]``, ``int8`` in
  ``[-128, 127]``); the reference is the float32 workload's reference on them, computed in
  float64 (exact). An integer output must equal the reference, except that an 8-bit one
  (a requantized activation: a float rounded to an integer) may differ by one in at most
  1% of its elements, where float32 rounding in another order crossed a rounding tie; a
  float output takes the float32 rule.

>>> import numpy as np
>>> from probsched.workloads import matmul
>>> w = matmul(4, 3, 5)
>>> w.name, w.flops, w.output_shapes
('matmul(n=4, m=3, k=5, batch=1)', 120, ((1, 4, 3),))
>>> x, y = w.random_inputs(np.random.default_rng(0))
>>> w.check(w.reference(x, y), w.reference(x, y))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..ir.dtypes import BF16, UNIT_ROUNDOFF, numpy_dtype
from ..ir.stmt import Buffer, PrimFunc
from ..ir.winograd import WINOGRAD, error_amplification
from ..precision import SHORT, canonical, convert, precision_of

RTOL = 1e-4
ATOL_PER_SQRT_TERM = 1e-4

Sampler = Callable[[np.random.Generator, Tuple[int, ...]], np.ndarray]
RngLike = Union[np.random.Generator, int, None]


def tolerance(reduction_length: int, precision: str = "float32") -> Tuple[float, float]:
    """``(rtol, atol)`` for a main reduction of ``reduction_length`` terms in ``precision``
    (``"float32"``, ``"bfloat16"``, ``"int8"`` or ``"int8r"``; see the module docstring).

    >>> tolerance(10000)
    (0.0001, 0.01)
    >>> tolerance(10000, "bf16")
    (0.0078125, 0.01)
    """
    atol = ATOL_PER_SQRT_TERM * math.sqrt(max(1, int(reduction_length)))
    precision = canonical(precision)
    if precision in ("float32", "int8", "int8r"):  # int8: integer outputs exact, float epilogues float32's
        return RTOL, atol
    return max(RTOL, 2 * UNIT_ROUNDOFF[precision]), atol


def scheduled_tolerance(func: Optional[PrimFunc], rtol: float, atol: float) -> Tuple[float, float]:
    """The tolerance ``(rtol, atol)`` of a workload, for outputs of the scheduled program
    ``func``: ``atol`` widened by Winograd's error amplification when the program computes
    a convolution by Winograd's algorithm (module docstring); as given otherwise (or for
    ``func`` None).

    >>> import probsched as ps
    >>> w = ps.workloads.conv2d_nhwc(1, 4, 4, 2, 2, kernel=3, pad=1)
    >>> sch = ps.Schedule(w.func)
    >>> _ = sch.winograd(sch.get_block("conv2d"), 4)
    >>> scheduled_tolerance(sch.mod, w.rtol, w.atol) == (w.rtol, w.atol * error_amplification(4))
    True
    """
    factor = max((error_amplification(m) for _, m, _ in (func.attr(WINOGRAD) if func is not None else None) or ()), default=1.0)
    return rtol, atol * factor


def signed_uniform(lo: float = 0.5, hi: float = 1.0) -> Sampler:
    """A sampler of float32 arrays with ``|x|`` uniform in ``[lo, hi]`` and a random sign.

    With ``lo > 0`` no element is zero, so a kernel that skips a term cannot go unnoticed.

    >>> a = signed_uniform()(np.random.default_rng(0), (1000,))
    >>> a.dtype, bool(np.abs(a).min() >= 0.5), bool((a < 0).any() and (a > 0).any())
    (dtype('float32'), True, True)
    """
    if not 0 < lo <= hi:
        raise ValueError(f"signed_uniform: need 0 < lo <= hi, got lo={lo}, hi={hi}")

    def sample(rng: np.random.Generator, shape: Tuple[int, ...]) -> np.ndarray:
        mag = rng.uniform(lo, hi, size=shape)
        sign = np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
        return (mag * sign).astype(np.float32)

    return sample


DEFAULT_SAMPLER: Sampler = signed_uniform()


def _nonzero_uint8(rng: np.random.Generator, shape: Tuple[int, ...]) -> np.ndarray:
    return rng.integers(1, 256, size=shape).astype(np.uint8)


def _nonzero_int8(rng: np.random.Generator, shape: Tuple[int, ...]) -> np.ndarray:
    v = rng.integers(-128, 127, size=shape)
    return (v + (v >= 0)).astype(np.int8)  # -128..127 without 0


def _nonzero_int8r(rng: np.random.Generator, shape: Tuple[int, ...]) -> np.ndarray:
    v = rng.integers(-64, 64, size=shape)
    return (v + (v >= 0)).astype(np.int8)  # -64..64 without 0


#: the samplers of 8-bit inputs: the whole range of the type but zero (module docstring)
INTEGER_SAMPLERS: Dict[str, Sampler] = {"uint8": _nonzero_uint8, "int8": _nonzero_int8, "int8r": _nonzero_int8r}


def _as_tuple(x) -> tuple:
    if isinstance(x, np.ndarray):
        return (x,)
    return tuple(x)


@dataclass(frozen=True, eq=False)
class Workload:
    """A tensor program of the suite (or a factory call) with everything needed to check it.

    Equality and hashing are structural over name, params, function, FLOPs and tolerance;
    the reference and samplers are plain functions and do not take part. A workload made
    from a bare function by :func:`as_workload` has no numpy reference
    (``reference_fn=None``, see :attr:`has_reference`) and ``flops == 0`` (unknown).
    """

    name: str
    func: PrimFunc
    flops: int
    params: tuple
    reference_fn: Optional[Callable[..., Tuple[np.ndarray, ...]]] = field(repr=False)
    rtol: float = RTOL
    atol: float = ATOL_PER_SQRT_TERM
    samplers: Mapping[str, Sampler] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ identity
    def _key(self) -> tuple:
        return (self.name, self.params, self.func, self.flops, self.rtol, self.atol)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Workload) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def with_precision(self, precision: str) -> "Workload":
        """This float32 workload with its products in ``precision`` (module docstring):
        named ``<name>:bf16``, inputs bfloat16, the reference and FLOPs of this one. A
        workload without products (softmax) is returned as it is.

        >>> import probsched as ps
        >>> w = ps.workloads.small("GMM").with_precision("bf16")
        >>> w.name, [b.dtype for b in w.func.params], w.rtol
        ('GMM:small:bf16', ['bfloat16', 'bfloat16', 'float32'], 0.0078125)
        >>> w.with_precision("bfloat16") is w
        True
        """
        target, now = canonical(precision), precision_of(self.func)
        if target == now:
            return self
        if now != "float32":
            raise ValueError(f"{self.name} is in {now}: make the {target} workload from the float32 one")
        func = convert(self.func, target)
        if func == self.func:
            return self
        reference = None if self.reference_fn is None else widening(self.reference_fn)
        rtol, _ = tolerance(1, target)
        samplers = dict(self.samplers)
        samplers.update({b.name: INTEGER_SAMPLERS[b.dtype] for b in func.input_buffers() if b.dtype in INTEGER_SAMPLERS})
        return replace(
            self, name=f"{self.name}:{SHORT[target]}", func=func, reference_fn=reference, rtol=max(self.rtol, rtol),
            samplers=samplers,
        )

    def renamed(self, name: str, func_name: str, params: Optional[tuple] = None) -> "Workload":
        """The same workload under another name (and function name, and params)."""
        return replace(
            self, name=name, func=self.func.replace(name=func_name), params=self.params if params is None else params
        )

    @property
    def has_reference(self) -> bool:
        """Whether a numpy reference gives the expected outputs. Without one (a bare
        function wrapped by :func:`as_workload`) kernels are checked against the
        unscheduled program, and no numpy or jax.jit baseline is known."""
        return self.reference_fn is not None

    # ------------------------------------------------------------------ shapes
    @property
    def inputs(self) -> Tuple[Buffer, ...]:
        """Input parameters (read-only), in parameter order."""
        return self.func.input_buffers()

    @property
    def outputs(self) -> Tuple[Buffer, ...]:
        """Output parameters, in parameter order."""
        return self.func.output_buffers()

    @property
    def input_shapes(self) -> Tuple[Tuple[int, ...], ...]:
        """Shapes of the inputs."""
        return tuple(b.shape for b in self.inputs)

    @property
    def output_shapes(self) -> Tuple[Tuple[int, ...], ...]:
        """Shapes of the outputs."""
        return tuple(b.shape for b in self.outputs)

    # ------------------------------------------------------------------ data
    def random_inputs(self, rng: RngLike = None) -> Tuple[np.ndarray, ...]:
        """Random float32 inputs, one per input parameter, never exactly zero."""
        rng = np.random.default_rng(rng)
        out = []
        for b in self.inputs:
            a = self.samplers.get(b.name, DEFAULT_SAMPLER)(rng, b.shape)
            out.append(np.ascontiguousarray(a, dtype=numpy_dtype(b.dtype)))
        return tuple(out)

    def empty_outputs(self) -> Tuple[np.ndarray, ...]:
        """Output arrays filled with NaN (integers: their smallest value), so elements a
        kernel forgets to write fail :meth:`check`."""
        return tuple(np.full(b.shape, unwritten_value(b.dtype), dtype=numpy_dtype(b.dtype)) for b in self.outputs)

    def reference(self, *inputs: np.ndarray) -> Tuple[np.ndarray, ...]:
        """The expected outputs (numpy, computed in float64, returned as float32)."""
        if self.reference_fn is None:
            raise ValueError(f"{self.name}: no numpy reference (a bare function: check against its unscheduled program)")
        if len(inputs) != len(self.inputs):
            raise ValueError(f"{self.name}: reference takes {len(self.inputs)} inputs, got {len(inputs)}")
        for b, a in zip(self.inputs, inputs):
            if np.shape(a) != b.shape:
                raise ValueError(f"{self.name}: input {b.name} has shape {np.shape(a)}, expected {b.shape}")
        outs = _as_tuple(self.reference_fn(*inputs))
        return tuple(np.ascontiguousarray(o, dtype=numpy_dtype(b.dtype)) for b, o in zip(self.outputs, outs))

    def check(
        self,
        outputs: Union[np.ndarray, Sequence[np.ndarray]],
        expected: Union[np.ndarray, Sequence[np.ndarray]],
        scheduled: Optional[PrimFunc] = None,
    ) -> None:
        """Raise AssertionError (worst index, max abs/rel error) unless outputs match
        expected; ``scheduled``: the program that computed them, whose algorithm may widen
        the tolerance (:func:`scheduled_tolerance`)."""
        rtol, atol = scheduled_tolerance(scheduled, self.rtol, self.atol)
        outputs, expected = _as_tuple(outputs), _as_tuple(expected)
        if len(outputs) != len(self.outputs) or len(expected) != len(self.outputs):
            raise AssertionError(
                f"{self.name}: expected {len(self.outputs)} output arrays, got {len(outputs)} "
                f"and {len(expected)} expected arrays"
            )
        for b, got, exp in zip(self.outputs, outputs, expected):
            check_close(f"{self.name}: output {b.name}", np.asarray(got), np.asarray(exp), rtol, atol)


def widening(reference: Callable[..., Tuple[np.ndarray, ...]]) -> Callable[..., Tuple[np.ndarray, ...]]:
    """``reference`` taking bfloat16 inputs: it computes on them widened to float32 (exact)."""

    def widened(*inputs: np.ndarray):
        return reference(*(a.astype(np.float32) if a.dtype == numpy_dtype(BF16) else a for a in inputs))

    return widened


def unwritten_value(dtype: str):
    """What an output array starts filled with, so an element a kernel forgets to write fails
    the check: NaN, or an integer type's smallest value."""
    d = numpy_dtype(dtype)
    return np.iinfo(d).min if d.kind in "iu" else np.nan


#: the share of an 8-bit output's elements that may be one off (module docstring)
ONE_OFF_SHARE = 0.01


def check_close(what: str, got: np.ndarray, exp: np.ndarray, rtol: float, atol: float) -> None:
    """Raise AssertionError (how many differ, the worst index, max abs/rel error) unless
    ``|got - expected| <= atol + rtol * |expected|`` everywhere, in float64; equal
    infinities and NaNs in the same places match (``-inf - -inf`` is NaN, which no
    tolerance admits: a causal mask's ``-inf`` would fail every kernel). The one check of
    kernels: the measurer's and ``ps.compile``'s both end here.

    >>> inf = float("inf")
    >>> check_close("y", np.array([-inf, 1.0, np.nan]), np.array([-inf, 1.0, np.nan]), 1e-4, 1e-4)
    >>> check_close("y", np.array([inf, 1.0]), np.array([-inf, 1.0]), 1e-4, 1e-4)
    Traceback (most recent call last):
    ...
    AssertionError: y: 1 of 2 elements differ (rtol=0.0001, atol=0.0001); worst at index (0,): got inf, expected -inf; ...
    """
    if got.shape != exp.shape:
        raise AssertionError(f"{what}: shape {got.shape}, expected {exp.shape}")
    if exp.dtype.kind in "iu":
        return _check_integers(what, got, exp)
    g, e = got.astype(np.float64), exp.astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(g - e)
    same = (g == e) | (np.isnan(g) & np.isnan(e))
    err[same] = 0.0
    tol = atol + rtol * np.abs(e)
    # an infinity's tolerance is infinite too: unequal values pass the rule only when both are finite
    bad = ~same & ~((err <= tol) & np.isfinite(g) & np.isfinite(e))
    if not bad.any():
        return
    err[bad & np.isnan(err)] = np.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(bad, err / tol, 0.0)
        rel = np.where(bad, err / np.abs(e), 0.0)
    rel[np.isnan(rel)] = np.inf  # a number where an infinity was expected
    worst = np.unravel_index(int(np.argmax(ratio)), err.shape)
    worst_idx = tuple(int(i) for i in worst)
    raise AssertionError(
        f"{what}: {int(bad.sum())} of {err.size} elements differ (rtol={rtol:g}, atol={atol:g}); "
        f"worst at index {worst_idx}: got {float(g[worst]):.9g}, expected {float(e[worst]):.9g}; "
        f"max abs err {np.max(err):.3g}, max rel err {np.max(rel):.3g}"
    )


def _check_integers(what: str, got: np.ndarray, exp: np.ndarray) -> None:
    """An integer output: exact, but for an 8-bit one's few ties rounded the other way."""
    err = np.abs(got.astype(np.int64) - exp.astype(np.int64))
    off = int(np.count_nonzero(err))
    allowed = int(ONE_OFF_SHARE * err.size) if exp.dtype.itemsize == 1 else 0
    if off <= allowed and (not off or int(err.max()) <= 1):
        return
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape))
    raise AssertionError(
        f"{what}: {off} of {err.size} elements differ ({'at most ' + str(allowed) + ' may, by one' if allowed else 'integers must be exact'}); "
        f"worst at index {worst}: got {int(got[worst])}, expected {int(exp[worst])}"
    )


def as_workload(workload: Union[Workload, PrimFunc]) -> Workload:
    """``workload`` as a :class:`Workload`: a Workload as it is, a bare
    :class:`~probsched.PrimFunc` wrapped as one, under the function's name, with no numpy
    reference (kernels of it are checked against its unscheduled program) and 0 FLOPs
    (unknown). What every entry point that takes "a Workload or a PrimFunc" calls first.

    >>> import probsched as ps
    >>> w = ps.workloads.small("GMM")
    >>> as_workload(w) is w
    True
    >>> bare = as_workload(w.func)
    >>> bare.name, bare.func is w.func, bare.has_reference, bare.flops
    ('GMM', True, False, 0)
    >>> as_workload("GMM:2")
    Traceback (most recent call last):
    ...
    TypeError: as_workload: expected a Workload or a PrimFunc, got str
    """
    if isinstance(workload, Workload):
        return workload
    if isinstance(workload, PrimFunc):
        return Workload(workload.name, workload, 0, (), reference_fn=None)
    raise TypeError(f"as_workload: expected a Workload or a PrimFunc, got {type(workload).__name__}")


def make_workload(
    func_name: str,
    args: Dict[str, object],
    func: PrimFunc,
    flops: int,
    reference: Callable[..., Tuple[np.ndarray, ...]],
    reduction_length: int,
    samplers: Optional[Mapping[str, Sampler]] = None,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
) -> Workload:
    """Build a factory's :class:`Workload` named ``func_name(arg=value, ...)``."""
    default_rtol, default_atol = tolerance(reduction_length)
    rtol = default_rtol if rtol is None else rtol
    name = f"{func_name}({', '.join(f'{k}={v}' for k, v in args.items())})"
    return Workload(
        name=name,
        func=func,
        flops=int(flops),
        params=tuple(args.values()),
        reference_fn=reference,
        rtol=rtol,
        atol=default_atol if atol is None else atol,
        samplers=dict(samplers or {}),
    )


def positive_ints(where: str, **values: int) -> None:
    """Raise ValueError unless every value is a positive int."""
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise ValueError(f"{where}: {k}={v!r} must be a positive integer")


def nonnegative_ints(where: str, **values: int) -> None:
    """Raise ValueError unless every value is an int >= 0."""
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{where}: {k}={v!r} must be a non-negative integer")


def conv_out_size(size: int, kernel: int, stride: int, pad: int, dilation: int, where: str) -> int:
    """``(size + 2*pad - dilation*(kernel-1) - 1) // stride + 1``, checked to be positive."""
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    if out <= 0:
        raise ValueError(
            f"{where}: input size {size} with pad {pad} is smaller than the dilated kernel "
            f"{dilation * (kernel - 1) + 1}"
        )
    return out

