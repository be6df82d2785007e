"""The machine kernels are built for: ``Target`` (host CPU description).

``Target.host()`` reads ``/proc/cpuinfo`` (model name, ISA flags), the CPUs this process
may run on, and LLVM's name for the CPU (what numba compiles for). ``build(..., target=)``
accepts ``None`` (the host), a ``Target``, or a string:

- ``"cpu"``: the host;
- ``"cpu -threads=N"``: the host, kernels' parallel loops on ``N`` threads (default: every
  CPU this process may use).

numba always compiles for the host CPU, so a target describes the host; it is recorded
with tuning results and tells schedule rules the vector width. A feature that numba is
told to compile without (``NUMBA_CPU_FEATURES`` naming ``-avx512f``, as when an AVX2 machine
is simulated on an AVX-512 one) is not the target's either.

Precisions. :attr:`Target.precisions` names the element types the CPU multiplies natively:
``"float32"`` always, ``"bfloat16"`` with ``avx512_bf16`` (``vdpbf16ps``: pairs of bf16
products summed into float32 lanes), ``"int8"`` with ``avx512_vnni`` or ``avx_vnni``
(``vpdpbusd``). They are derived from the ISA flags, which the JSON form carries, so a
tuning record's target says which precisions its machine ran. AMX (``amx_tile``,
``amx_bf16``, ``amx_int8``) is detected and reported (:attr:`Target.amx`, ``str(target)``);
bfloat16 tasks use its tiles where the process may (:mod:`probsched.intrinsics.amx`).

>>> t = Target.from_str("cpu -threads=1")
>>> t.threads, t.kind
(1, 'cpu')
>>> Target.from_json(t.to_json()) == t
True
>>> t.vector_lanes("float32") in (4, 8, 16)
True
>>> t.precisions[0], Target(isa=("avx2", "avx512_bf16", "avx512f")).precisions
('float32', ('float32', 'bfloat16'))
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Optional, Tuple, Union

_ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "amx", "f16c", "bmi", "popcnt")

#: precision -> the ISA flags of which any one makes the CPU multiply it natively
NATIVE_PRECISIONS = (
    ("float32", ()),
    ("bfloat16", ("avx512_bf16",)),
    ("int8", ("avx512_vnni", "avx_vnni")),
)
#: AMX units (bf16 tile kernels: :mod:`probsched.intrinsics.matmul_amx`)
AMX_FLAGS = ("amx_tile", "amx_bf16", "amx_int8")


def _read_cpuinfo() -> tuple:
    model, flags = "", ()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = tuple(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    if not model:
        import platform

        model = platform.processor() or platform.machine() or "unknown cpu"
    return model, flags


def _disabled_by_numba() -> frozenset:
    """The features ``NUMBA_CPU_FEATURES`` turns off (``-avx512f``), spelt without ``-``/``_``
    (LLVM's ``avx512bf16`` and ``amx-tile`` are /proc/cpuinfo's ``avx512_bf16``, ``amx_tile``)."""
    features = os.environ.get("NUMBA_CPU_FEATURES") or ""
    return frozenset(f.strip()[1:].replace("-", "").replace("_", "") for f in features.split(",") if f.strip().startswith("-"))


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _llvm_cpu() -> str:
    try:
        import llvmlite.binding as llvm

        return llvm.get_host_cpu_name()
    except Exception:  # pragma: no cover - llvmlite always present with numba
        return ""


@dataclass(frozen=True)
class Target:
    """A CPU: model name, LLVM cpu name, usable cores, ISA flags, threads kernels use."""

    kind: str = "cpu"
    model: str = ""
    llvm_cpu: str = ""
    cores: int = 1
    isa: Tuple[str, ...] = field(default_factory=tuple)
    threads: int = 1

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def host() -> "Target":
        """The machine this process runs on."""
        model, flags = _read_cpuinfo()
        off = _disabled_by_numba()
        isa = tuple(sorted(f for f in flags if f.startswith(_ISA_PREFIXES) and f.replace("_", "") not in off))
        cores = _usable_cpus()
        return Target("cpu", model, _llvm_cpu(), cores, isa, cores)

    @staticmethod
    def from_str(text: str) -> "Target":
        """Parse ``"cpu"`` or ``"cpu -threads=N"`` (see the module docstring)."""
        parts = text.split()
        if not parts or parts[0] != "cpu":
            raise ValueError(f"target {text!r}: expected 'cpu' optionally followed by -threads=N")
        t = Target.host()
        for opt in parts[1:]:
            key, eq, value = opt.lstrip("-").partition("=")
            if key == "threads" and eq:
                try:
                    n = int(value)
                except ValueError:
                    n = 0
                if n <= 0:
                    raise ValueError(f"target {text!r}: -threads needs a positive integer, got {value!r}")
                t = replace(t, threads=n)
            else:
                raise ValueError(f"target {text!r}: unknown option {opt!r} (known: -threads=N)")
        return t

    @staticmethod
    def parse(target: Union[None, str, "Target"]) -> "Target":
        """``None`` -> host, a string -> :meth:`from_str`, a ``Target`` -> itself."""
        if target is None:
            return Target.host()
        if isinstance(target, Target):
            return target
        if isinstance(target, str):
            return Target.from_str(target)
        raise TypeError(f"target {target!r}: expected None, a Target or a string like 'cpu -threads=2'")

    @property
    def vector_bytes(self) -> int:
        """Width of the widest vector registers: 64 (AVX-512), 32 (AVX/AVX2) or 16."""
        if "avx512f" in self.isa:
            return 64
        if "avx2" in self.isa or "avx" in self.isa:
            return 32
        return 16

    def vector_lanes(self, dtype: str = "float32") -> int:
        """Elements of ``dtype`` per vector register."""
        import numpy as np

        return self.vector_bytes // np.dtype(dtype).itemsize

    def has(self, flag: str) -> bool:
        """Whether the CPU has ISA extension ``flag`` (``"avx2"``, ``"avx512f"``, ``"fma"``,
        ``"avx512_bf16"``, ``"amx_bf16"``: the names of ``/proc/cpuinfo``)."""
        return flag in self.isa

    @property
    def precisions(self) -> Tuple[str, ...]:
        """The element types this CPU multiplies natively (see the module docstring)."""
        return tuple(p for p, flags in NATIVE_PRECISIONS if not flags or any(f in self.isa for f in flags))

    def runs_natively(self, precision: str) -> bool:
        """Whether ``precision`` (``"float32"``, ``"bfloat16"``, ``"int8"``) is native here."""
        return precision in self.precisions

    @property
    def amx(self) -> Tuple[str, ...]:
        """The AMX flags present (tile registers, bf16 and int8 tile multiplies)."""
        return tuple(f for f in AMX_FLAGS if f in self.isa)

    def __str__(self) -> str:
        main = [f for f in ("avx512f", "avx2", "avx", "fma", "sse4_2") if f in self.isa]
        if "avx512f" in main:
            main = [f for f in main if f not in ("avx2", "avx", "sse4_2")]
        elif "avx2" in main:
            main = [f for f in main if f not in ("avx", "sse4_2")]
        cpu = self.model + (f" ({self.llvm_cpu})" if self.llvm_cpu else "")
        precisions = f", precisions {'/'.join(self.precisions)}" if len(self.precisions) > 1 else ""
        amx = f", AMX {' '.join(self.amx)}" if self.amx else ""
        simd = " ".join(main) or "no SIMD flags"
        return f"{self.kind}: {cpu}, {self.cores} cores, {simd}{precisions}{amx}, {self.threads} threads"

    def to_json(self) -> str:
        """JSON text (see :meth:`from_json`)."""
        d = asdict(self)
        d["isa"] = list(self.isa)
        return json.dumps(d, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> "Target":
        """Rebuild a target from :meth:`to_json` text."""
        d = json.loads(text)
        d["isa"] = tuple(d.get("isa", ()))
        return Target(**d)

    def options_str(self) -> Optional[str]:
        """The string form that :meth:`from_str` accepts for this target on this host."""
        return f"{self.kind} -threads={self.threads}"
