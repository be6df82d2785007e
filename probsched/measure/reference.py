"""Reference data for checking kernels: random inputs, expected outputs and tolerances.

Every worker checks every kernel against the same data, so it is made once per workload
and shared through a ``.npz`` file written atomically (a worker that starts later, or a
replacement for a crashed one, loads it instead of recomputing):

- for a :class:`~probsched.workloads.Workload`, the caller computes the numpy reference
  (:func:`from_workload`);
- for a bare :class:`~probsched.ir.stmt.PrimFunc` the expected outputs are those of the
  unscheduled program compiled by ``ps.build`` (:func:`from_func`): a worker makes them,
  so the caller never compiles or runs a kernel.

Inputs are random and never zero (the workloads' convention), so a kernel that skips a term
cannot match by accident; outputs are checked with the workloads' tolerance rule.

>>> import numpy as np, probsched as ps, tempfile, os
>>> w = ps.workloads.small("GMM")
>>> ref = from_workload(w, seed=0)
>>> sorted(ref.inputs), sorted(ref.expected)
(['X', 'Y'], ['Z'])
>>> path = os.path.join(tempfile.mkdtemp(), "ref.npz")
>>> ref.save(path)
>>> again = Reference.load(path)
>>> bool(np.array_equal(again.expected["Z"], ref.expected["Z"])), again.atol == ref.atol
(True, True)
>>> again.check(w.func, {"Z": ref.expected["Z"] + 1})
Traceback (most recent call last):
...
AssertionError: GMM: output Z: 48 of 48 elements differ ...
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Optional, Tuple

import numpy as np

from ..aligned import aligned_copy, aligned_empty
from ..ir.dtypes import BF16, as_storage, numpy_dtype
from ..ir.stmt import Block, PrimFunc
from ..precision import precision_of
from ..workloads import Workload, scheduled_tolerance, signed_uniform, tolerance
from ..workloads.workload import INTEGER_SAMPLERS, unwritten_value

if TYPE_CHECKING:
    from ..codegen.kernel import Kernel


@dataclass
class Reference:
    """Inputs and expected outputs by parameter name, and the tolerance of the check."""

    inputs: Dict[str, np.ndarray]
    expected: Dict[str, np.ndarray]
    rtol: float
    atol: float

    def __post_init__(self) -> None:
        # kernels are timed on these arrays: cache-line aligned, as TVM's are, so that no
        # measurement depends on where the heap put them (see probsched.aligned)
        self.inputs = {k: aligned_copy(v) for k, v in self.inputs.items()}
        self._screens: Dict[tuple, tuple] = {}  # (output name, rtol, atol) -> (tolerance, scratch) of the fast check

    def empty_outputs(self, kernel: "Kernel") -> Dict[str, np.ndarray]:
        """Aligned output arrays for ``kernel``, filled with NaN (integers: their smallest
        value; a kernel that skips an element cannot pass the check by leaving an earlier
        value behind)."""
        outs = {b.name: aligned_empty(b.shape, numpy_dtype(b.dtype)) for b in kernel.outputs}
        for a in outs.values():
            a.fill(unwritten_value(a.dtype))
        return outs

    def arguments(self, kernel: "Kernel", outputs: Dict[str, np.ndarray]) -> list:
        """``kernel``'s arrays in parameter order: ``outputs`` and these inputs."""
        return [outputs[b.name] if b.name in outputs else self.inputs[b.name] for b in kernel.params]

    def save(self, path: str) -> None:
        """Write a ``.npz`` file atomically (readers never see a partial file)."""
        arrays = {f"in:{k}": v for k, v in self.inputs.items()}
        arrays.update({f"out:{k}": v for k, v in self.expected.items()})
        # .npz keeps numpy's own dtypes only: a bfloat16 array goes as its bits, named here
        bf16 = sorted(k for k, v in arrays.items() if v.dtype == numpy_dtype(BF16))
        arrays.update({k: as_storage(arrays[k]) for k in bf16})
        arrays["meta"] = np.array(json.dumps({"rtol": self.rtol, "atol": self.atol, "bfloat16": bf16}))
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)

    def to_data(self) -> dict:
        """Plain data (arrays, floats): what travels to a Dask worker (:meth:`from_data`)."""
        return {"inputs": dict(self.inputs), "expected": dict(self.expected), "rtol": self.rtol, "atol": self.atol}

    @staticmethod
    def from_data(data: dict) -> "Reference":
        """Rebuild a reference from :meth:`to_data`.

        >>> import probsched as ps
        >>> ref = from_workload(ps.workloads.small("GMM"))
        >>> again = Reference.from_data(ref.to_data())
        >>> sorted(again.expected), again.rtol == ref.rtol
        (['Z'], True)
        """
        return Reference(dict(data["inputs"]), dict(data["expected"]), float(data["rtol"]), float(data["atol"]))

    @staticmethod
    def load(path: str) -> "Reference":
        """Read a file written by :meth:`save`."""
        with np.load(path) as data:
            meta = json.loads(str(data["meta"]))
            bf16 = set(meta.get("bfloat16", ()))

            def read(k: str) -> np.ndarray:
                return data[k].view(numpy_dtype(BF16)) if k in bf16 else data[k]

            inputs = {k[3:]: read(k) for k in data.files if k.startswith("in:")}
            expected = {k[4:]: read(k) for k in data.files if k.startswith("out:")}
        return Reference(inputs, expected, meta["rtol"], meta["atol"])

    def check(self, func: PrimFunc, outputs: Dict[str, np.ndarray]) -> None:
        """Raise AssertionError (worst element, errors) unless ``outputs`` of ``func`` (the
        scheduled program, whose algorithm may widen the tolerance:
        :func:`~probsched.workloads.scheduled_tolerance`) match.

        The workloads' rule, ``|got - expected| <= atol + rtol * |expected|`` in float64, is
        first screened in float32 against a tolerance computed once per reference and
        shrunk by 2^-20: float32's rounding of the difference (at most 2^-24 of it) cannot
        then turn a failing element into a passing one, so outputs that pass the screen pass
        the rule (checked: :func:`screen_tolerance`), and anything else (a mismatch, NaN,
        an overflow) gets the exact float64 check and its message. Every candidate is
        checked, so this is a per-candidate cost: 3 float32 passes over the outputs instead
        of 8 float64 ones, which matters for large outputs such as C3D:1's.
        """
        names = [b.name for b in func.output_buffers()]
        rtol, atol = scheduled_tolerance(func, self.rtol, self.atol)
        if all(self._screen(n, outputs[n], rtol, atol) for n in names):
            return
        checker = Workload(func.name, func, 0, (), reference_fn=None, rtol=rtol, atol=atol)
        checker.check(tuple(outputs[n] for n in names), tuple(self.expected[n] for n in names))

    def _screen(self, name: str, got: np.ndarray, rtol: float, atol: float) -> bool:
        """Whether ``got`` passes the float32 screen of :meth:`check` (False: check exactly)."""
        exp = self.expected[name]
        if got.shape != exp.shape or got.dtype != np.float32 or exp.dtype != np.float32:
            return False
        entry = self._screens.get((name, rtol, atol))
        if entry is None:
            special = np.flatnonzero(~np.isfinite(exp))  # expected infinities and NaNs: matched by equality
            entry = self._screens[name, rtol, atol] = (
                screen_tolerance(exp, rtol, atol), np.empty(exp.shape, np.float32), np.empty(exp.shape, bool),
                special, exp.ravel()[special],
            )
        tol, diff, ok, special, exp_special = entry
        with np.errstate(over="ignore", invalid="ignore"):
            np.subtract(got, exp, out=diff)
        np.abs(diff, out=diff)
        np.less_equal(diff, tol, out=ok)  # NaN compares False: a NaN output takes the exact path
        if special.size:
            g = got.ravel()[special]
            ok.ravel()[special] = (g == exp_special) | (np.isnan(g) & np.isnan(exp_special))
        return bool(ok.all())


def screen_tolerance(expected: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """float32 tolerances no element can pass in float32 unless it passes the float64 rule.

    ``fl32(|g - e|)`` is within a factor ``1 ± 2^-24`` of ``|g - e|`` (one rounding of a
    difference of two float32 numbers), and each tolerance here is the float64 one times
    ``1 - 2^-20``, rounded down to float32: so ``fl32(|g - e|) <= t32`` implies
    ``|g - e| <= t32 (1 + 2^-23) < t64``.

    >>> e = np.array([1.0, -3.0, 0.0], np.float32)
    >>> t = screen_tolerance(e, 1e-4, 1e-4)
    >>> bool(np.all(t.astype(np.float64) < 1e-4 + 1e-4 * np.abs(e.astype(np.float64))))
    True
    >>> screen_tolerance(np.array([np.inf, np.nan], np.float32), 1e-4, 1e-4)
    array([nan, nan], dtype=float32)
    """
    tol64 = (atol + rtol * np.abs(expected.astype(np.float64))) * (1.0 - 2.0**-20)
    tol32 = tol64.astype(np.float32)
    too_big = tol32.astype(np.float64) > tol64  # rounded up: take the float32 below
    tol32[too_big] = np.nextafter(tol32[too_big], np.float32(0.0))
    tol32[~np.isfinite(expected)] = np.nan  # an infinity's tolerance is no tolerance: nothing passes by it
    return tol32


def from_workload(workload: Workload, seed: int = 0) -> Reference:
    """Random inputs of ``workload`` and its numpy reference outputs."""
    arrays = workload.random_inputs(np.random.default_rng(seed))
    expected = workload.reference(*arrays)
    return Reference(
        {b.name: a for b, a in zip(workload.inputs, arrays)},
        {b.name: a for b, a in zip(workload.outputs, expected)},
        workload.rtol,
        workload.atol,
    )


def from_func(func: PrimFunc, kernel: Optional["Kernel"] = None, seed: int = 0) -> Reference:
    """Random inputs of a bare function and the outputs of its unscheduled program
    (``kernel``: that program already compiled by ``ps.build``; compiled here if None).

    >>> import probsched as ps
    >>> ref = from_func(ps.workloads.small("GMM").func)
    >>> sorted(ref.inputs), ref.expected["Z"].shape
    (['X', 'Y'], (2, 4, 6))
    """
    if kernel is None:
        from ..codegen import build

        kernel = build(func)
    inputs = func_inputs(func, seed)
    outs = kernel.run(*(inputs[b.name] for b in kernel.inputs))
    rtol, atol = func_tolerance(func)
    return Reference(inputs, {b.name: o for b, o in zip(kernel.outputs, outs)}, rtol, atol)


def func_inputs(func: PrimFunc, seed: int = 0) -> Dict[str, np.ndarray]:
    """Random inputs for a bare function: ``|x|`` in ``[0.5, 1]``, random signs, never zero
    (8-bit integers: their whole range but zero)."""
    rng = np.random.default_rng(seed)
    sample = signed_uniform()
    return {
        b.name: np.ascontiguousarray(INTEGER_SAMPLERS.get(b.dtype, sample)(rng, b.shape), dtype=numpy_dtype(b.dtype))
        for b in func.input_buffers()
    }


def func_tolerance(func: PrimFunc) -> Tuple[float, float]:
    """The workloads' tolerance rule with the longest reduction of any block of ``func``, in
    its precision (:func:`probsched.precision.precision_of`).

    >>> import probsched as ps
    >>> func_tolerance(ps.workloads.small("GMM").func) == ps.workloads.tolerance(5)
    True
    >>> func_tolerance(ps.workloads.small("GMM", "bf16").func) == ps.workloads.tolerance(5, "bf16")
    True
    """
    longest = 1
    for blk in func.blocks():
        if isinstance(blk, Block):
            longest = max(longest, math.prod(iv.extent for iv in blk.iters if iv.kind == "R"))
    return tolerance(longest, precision_of(func))
