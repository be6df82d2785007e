"""The machine's float32, bfloat16 and int8 ceilings, as numba reaches them, and each
micro-kernel against them: what a tuned kernel can hope for.

Prints, for one thread and for all threads, each figure the best of 5 runs of about a
millisecond (the machine may be shared: the best run is the one least disturbed; one thread
runs without numba's thread pool, whose waiting main thread takes a core of its own):

- ``fma``: independent vector FMAs on values held in registers, no memory traffic: the
  arithmetic peak. The vectors are the widest the target has (16 lanes with AVX-512, 8 with
  AVX2), and there are enough independent accumulators to keep every FMA pipe busy: a core
  with two pipes of 4-5 cycles latency needs 8-10 (:func:`fma_chains`). Fewer read half the
  peak of an Intel core with two 512-bit pipes, though they suffice on one that splits
  512-bit FMAs in two (AMD Zen 4);
- ``vdpbf16ps``: 16 independent bfloat16 dot products (:func:`~probsched.intrinsics.simd.dot_pairs`,
  4 flops per float32 lane: two products, two sums), on CPUs with ``avx512_bf16``: the
  bfloat16 peak, beside the float32 one;
- ``vpdpbusd``: 16 independent u8 x s8 dot products (:func:`~probsched.intrinsics.simd_int8.dot_quads`,
  128 integer ops per instruction: 16 int32 lanes of 4 products and 4 sums; on 256 bits
  with AVX-VNNI only; without VNNI ``vpmaddwd`` on bytes widened to 16 bits, as the
  kernels there compute, :func:`int8_peak_vectors`): the int8 peak; there also
  ``vpmaddubsw``, the peak of the kernels of int8r weights (``[-64, 64]``, which it
  multiplies exactly);
- ``tdpbf16ps``: AMX tile multiplies on tiles held in the tile registers (6 independent
  16 x 16 float32 accumulators, 16 x 32 bf16 times 32 x 16 bf16 each: 16384 flops), where
  AMX is usable (:mod:`probsched.intrinsics.amx`): the AMX bfloat16 peak;
- ``tdpbusd``: the same with int8 tiles (16 x 64 uint8 times 64 x 16 int8 into int32: 32768
  integer ops each), where AMX int8 is usable: the AMX int8 peak (GOP/s);
- ``matmul_MxN``, ``matmul_bf16_MxN``, ``matmul_bf16amx_MxN``, ``matmul_int8_MxN``,
  ``matmul_int8amx_MxN``: each micro-kernel on operands that stay in L1 (a K
  panel sized so that A's and B's panels fill at most 3/4 of the L1 data cache:
  :func:`l1_panel`), called from a numba loop as a tuned kernel calls it: the best a
  tensorized matmul or convolution can do per core; a bf16 kernel as a fraction of the
  ``vdpbf16ps`` peak (where there is none, it runs its emulated path: the fraction is of the
  FMA peak), an AMX one of its instruction's peak (``tdpbf16ps``, ``tdpbusd``), an int8 one of the ``vpdpbusd`` peak
  (GOP/s: integer operations). By default: the float32 kernels the design space offers on
  this target (their accumulators fit its registers), a few bf16 and int8 ones, and the AMX
  ones where AMX is usable.

A tuned GMM, C2D or CBR runs at most at the micro-kernel's rate (its inner loop *is* the
micro-kernel); the gap between the peak and the kernels is what the register block loses to
loads, broadcasts and the call.

Usage: ``python benchmarks/bench_peak.py [--kernels matmul_12x32,matmul_bf16_8x32] [--one-thread]``
"""

from __future__ import annotations

import argparse
import functools
import time

import ml_dtypes
import numba
import numpy as np

import probsched as ps
from probsched.aligned import aligned_copy
from probsched.intrinsics import amx
from probsched.intrinsics.matmul_bf16 import native_available
from probsched.intrinsics.matmul_int8 import MADD
from probsched.intrinsics.simd_int8 import dot_quads_name
from probsched.space.intrin_tiling import register_budget

BF16_KERNELS = "matmul_bf16_4x32,matmul_bf16_8x32,matmul_bf16_12x32,matmul_bf16fma_8x32,matmul_bf16fma_4x64"
INT8_KERNELS = "matmul_int8_8x32,matmul_int8_12x32,matmul_int8_6x64"
#: the kernels of int8r weights, where they have an instruction of their own (no VNNI: ``vpmaddubsw``)
INT8R_KERNELS = "matmul_int8r_4x16,matmul_int8r_8x8,matmul_int8r_4x24"
#: the dot products whose peak loop gives each accumulator an A of its own (:func:`_vnni_peak_loop`)
OWN_A = (MADD, "dot_quads_maddubs")
VECTORS = 16  # independent accumulators of the bf16 dot-product peak
RUNS = 5


def _best_seconds(run, runs: int = RUNS) -> float:
    run()  # warm-up (and compile)
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    return best


def fma_chains(target: ps.Target) -> int:
    """Independent FMA accumulators of the float32 peak: all vector registers but the two
    operands and two spare (12 of AVX2's 16, at most 16 of AVX-512's 32), at least the
    10 that two pipes of 5 cycles latency keep in flight."""
    return min(16, (32 if target.vector_lanes("float32") >= 16 else 16) - 4)


def _vector_peak_loop(op: str, lanes: int, chains: int):
    """A numba loop of ``chains`` independent ``acc = op(acc, a, b)`` per step on each thread."""
    accs = [f"c{i}" for i in range(chains)]
    source = "\n".join(
        ["def loop(xf, xh, reps, threads):", "    for t in numba.prange(threads):"]
        + ["        a, b = (broadcast_pair(xh, 0), load_pairs(xh, 0)) if BF16 else (load(xf, 0), load(xf, 16))"]
        + [f"        {c} = zeros()" for c in accs]
        + ["        for _ in range(reps):"]
        + [f"            {c} = {op}({c}, a, b)" for c in accs]
        + [f"        store(xf, 32 + 16 * ({chains} * t + {i}), {c})" for i, c in enumerate(accs)]  # keep every chain alive
    )
    from probsched.intrinsics import simd

    width = "" if lanes == 16 else "8"
    scope = {
        "numba": numba, "BF16": op != "fma", op: getattr(simd, op), "store": simd.store,
        "load": getattr(simd, "load" + width), "zeros": getattr(simd, "zeros" + width),
        **{f: getattr(simd, f) for f in ("broadcast_pair", "load_pairs")},
    }
    exec(compile(source, f"<{op} peak>", "exec"), scope)
    return scope["loop"]


def _njit(fn, threads: int):
    """``fn`` compiled, its ``prange`` parallel only on more than one thread."""
    return numba.njit(parallel=threads > 1)(fn)


def vector_peak(op: str, threads: int, reps: int = 400_000) -> float:
    """GFLOP/s of register-resident ``fma`` (the target's widest vectors, :func:`fma_chains`
    of them) or ``dot_pairs`` (16 vectors of 16 lanes) on ``threads`` threads, best of 5."""
    target = ps.Target.host()
    lanes, chains = (target.vector_lanes("float32"), fma_chains(target)) if op == "fma" else (16, VECTORS)
    lanes = min(lanes, 16)
    loop = _njit(_vector_peak_loop(op, lanes, chains), threads)
    xf = (np.random.default_rng(0).random(32 + 16 * chains * threads) * 1e-3).astype(np.float32)
    xh = xf[:64].astype(ml_dtypes.bfloat16).view(np.uint16)
    seconds = _best_seconds(lambda: loop(xf, xh, reps, threads))
    flops = lanes * (4 if op == "dot_pairs" else 2)  # per vector op: lanes of 2 products + 2 sums, or of an FMA
    return threads * chains * flops * reps / seconds / 1e9


def _vnni_peak_loop(dot: str, vectors: int = VECTORS):
    """A numba loop of ``vectors`` independent ``acc = dot(acc, a, b)`` per step on each
    thread. B's quads are loaded in the loop at an offset the compiler cannot know (always
    0): with loop-invariant operands LLVM hoists a product made of plain vector operations
    (``vpmaddwd``'s, the emulated one's) and times only the additions; for the same reason
    each accumulator of ``vpmaddwd`` (``vpmaddubsw``) has an A of its own (one product of one
    A and one B would be computed once for all)."""
    madd = dot in OWN_A
    accs = [f"c{i}" for i in range(vectors)]
    source = "\n".join(
        ["def loop(xu, xs, xi, reps, threads, hide):", "    for t in numba.prange(threads):"]
        + [f"        a{i} = broadcast_quad(xu, {4 * i})" for i in range(vectors if madd else 1)]
        + [f"        {c} = zeros()" for c in accs]
        + ["        for r in range(reps):", "            b = load_quads(xs, 64 * (r & hide))"]
        + [f"            {c} = dot({c}, a{i if madd else 0}, b)" for i, c in enumerate(accs)]
        + [f"        store(xi, 16 * ({vectors} * t + {i}), {c})" for i, c in enumerate(accs)]
    )
    from probsched.intrinsics import simd_int8, simd_int8_madd

    module, dot = (simd_int8_madd, "dot") if dot == MADD else (simd_int8, dot)
    scope = {"numba": numba, "dot": getattr(module, dot), **{f: getattr(module, f) for f in ("broadcast_quad", "load_quads", "store", "zeros")}}
    exec(compile(source, "<vpdpbusd peak>", "exec"), scope)
    return scope["loop"]


def int8_peak_vectors(target: ps.Target, dot: str) -> int:
    """Independent accumulators (of 16 lanes) of the int8 peak: :data:`VECTORS`, or
    without VNNI as many as fit beside their own A and one B: 2 on AVX2's 16 registers
    (measured on Zen 3: ``vpmaddwd`` 142 GOP/s, 3 spill: 99), 4 with AVX-512's 32. The
    ``vpmaddwd`` peak includes B's widening to 16 bits (3 operations per 8 columns and
    step, as a kernel's row of B), not A's (per row of a kernel): the instruction alone
    (``vpmaddwd`` and its addition, two each per cycle on Zen 3) would reach about 200,
    what ``vpmaddubsw`` (int8r weights: two multiplies per 32 products too, no widening)
    reaches."""
    if dot not in OWN_A:
        return VECTORS
    return 4 if target.has("avx512f") else 2


def vnni_peak(threads: int, reps: int = 400_000, weights: str = "int8") -> float:
    """GOP/s of register-resident int8 dot products on ``threads`` threads, best of 5:
    ``vpdpbusd`` (on 256 bits with AVX-VNNI only), or without VNNI ``vpmaddwd`` on widened
    bytes (:mod:`probsched.intrinsics.simd_int8_madd`); on ``weights="int8r"`` (reduced
    range), ``vpmaddubsw`` there (:func:`~probsched.intrinsics.simd_int8.dot_quads_maddubs`)."""
    dot = dot_quads_name(weights)
    vectors = int8_peak_vectors(ps.Target.host(), dot)
    loop = _njit(_vnni_peak_loop(dot, vectors), threads)
    rng = np.random.default_rng(0)
    xu, xs = rng.integers(0, 4, 4 * vectors).astype(np.uint8), rng.integers(-2, 2, 64).astype(np.int8)
    xi = np.zeros(16 * vectors * threads, np.int32)
    return threads * vectors * 16 * 8 * reps / _best_seconds(lambda: loop(xu, xs, xi, reps, threads, 0)) / 1e9


def l1_data_bytes() -> int:
    """The L1 data cache of CPU 0 (32 KiB when the OS does not say)."""
    import glob

    for path in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(f"{path}/level") as lv, open(f"{path}/type") as ty, open(f"{path}/size") as sz:
                if lv.read().strip() == "1" and ty.read().strip() == "Data":
                    size = sz.read().strip().upper()
                    return int(size[:-1]) * 1024 if size.endswith("K") else int(size)
        except (OSError, ValueError):
            continue
    return 32 * 1024


def l1_panel(m: int, n: int, itemsize: int = 4, cap: int = 512) -> int:
    """The K of an M x N kernel's call whose A and B panels fill at most 3/4 of L1 (a multiple
    of 16, at most ``cap``): long enough to hide the call, short enough to stay in L1.

    >>> l1_panel(12, 32) <= 512 and l1_panel(12, 32) % 16 == 0
    True
    """
    k = l1_data_bytes() * 3 // 4 // ((m + n) * itemsize)
    return max(16, min(cap, k // 16 * 16))


def kernel_peak(name: str, threads: int, k: int = 0, reps: int = 0) -> float:
    """GFLOP/s (int8: GOP/s) of micro-kernel ``name`` on L1-resident operands (``k``: the
    panel, default :func:`l1_panel`), ``threads`` threads, best of 5."""
    intrin = ps.intrinsics.get(name)
    m, n = int(intrin.meta["M"]), int(intrin.meta["N"])
    bf16 = intrin.meta.get("precision") == "bfloat16"
    int8 = intrin.meta.get("precision") == "int8"
    k = k or l1_panel(m, n, _itemsize(intrin.meta))
    reps = reps or max(10, int(2e8 // (2 * m * n * k)))  # about 0.2 GFLOP per thread and run
    mk = intrin.kernel()
    rng = np.random.default_rng(0)
    C = aligned_copy(np.zeros(threads * m * n, np.float32))
    if int8:
        q = k // 4
        C = aligned_copy(np.zeros(threads * m * n, np.int32))

        def loop(C, A, B, reps):
            for t in numba.prange(threads):
                for _ in range(reps):
                    mk(C, t * m * n, n, 1, A, t * m * k, k, 4, 1, B, t * k * n, 4, 4 * n, 1, q)

        A = rng.integers(0, 256, threads * m * k).astype(np.uint8)
        low = -64 if intrin.meta.get("weights") == "int8r" else -128  # the values its kernels are exact on
        B = rng.integers(low, -low, threads * k * n).astype(np.int8)
    elif bf16:
        p = k // 2

        def loop(C, A, B, reps):
            for t in numba.prange(threads):
                for _ in range(reps):
                    mk(C, t * m * n, n, 1, A, t * m * k, k, 2, 1, B, t * k * n, 2, 2 * n, 1, p)

        A = rng.random(threads * m * k).astype(ml_dtypes.bfloat16).view(np.uint16)
        B = rng.random(threads * k * n).astype(ml_dtypes.bfloat16).view(np.uint16)
    else:

        def loop(C, A, B, reps):
            for t in numba.prange(threads):
                for _ in range(reps):
                    mk(C, t * m * n, n, 1, A, t * m * k, k, 1, B, t * k * n, 1, n, k)

        A = rng.random(threads * m * k, dtype=np.float32)
        B = rng.random(threads * k * n, dtype=np.float32)
    # 64-byte aligned, as the arrays of a tuned kernel are: a vector load never splits a line
    A, B = aligned_copy(A), aligned_copy(B)
    loop = _njit(loop, threads)
    seconds = _best_seconds(lambda: loop(C, A, B, reps))
    return threads * 2 * m * n * k * reps / seconds / 1e9


def _itemsize(meta: dict) -> int:
    """Bytes of one element of a kernel's operands."""
    return {"bfloat16": 2, "int8": 1}.get(meta.get("precision", "float32"), 4)


def float32_kernels(target: ps.Target) -> list:
    """The float32 matmul kernels whose accumulators fit ``target``'s registers (what the
    design space offers there), largest register block first."""
    lanes, budget = target.vector_lanes("float32"), register_budget(target)
    out = []
    for name in ps.intrinsics.list():
        meta = ps.intrinsics.get(name).meta
        if meta.get("kind") == "matmul" and meta.get("precision", "float32") == "float32":
            m, n = int(meta["M"]), int(meta["N"])
            if m * -(-n // lanes) <= budget:
                out.append((-m * n, name))
    return [name for _, name in sorted(out)]


AMX_ACCUMULATORS = 6  # C tiles; one A and one B tile take the other two registers
#: per AMX unit: the tile dot product, its instruction, and the reduction elements of a 64-byte row
AMX_DOTS = {"bf16": (amx.dot_bf16, "tdpbf16ps", 32), "int8": (amx.dot_int8, "tdpbusd", 64)}


@functools.lru_cache(maxsize=None)
def _amx_peak_loop(dot):
    """A numba loop of AMX_ACCUMULATORS independent ``dot`` tile multiplies per step on each
    thread, on tiles of 16 rows of ``row`` elements of ``x`` (64 bytes)."""

    @numba.njit(parallel=True)
    def loop(x, reps, threads, row):
        for t in numba.prange(threads):
            amx.configure((16, 16, 16, 16, 16, 16, 16, 16), (64, 64, 64, 64, 64, 64, 64, 64))  # per thread
            amx.tile_load(0, x, 0, row)  # tile numbers are literals: no loop over them
            amx.tile_load(1, x, 0, row)
            amx.tile_load(2, x, 0, row)
            amx.tile_load(3, x, 0, row)
            amx.tile_load(4, x, 0, row)
            amx.tile_load(5, x, 0, row)
            amx.tile_load(6, x, 0, row)
            amx.tile_load(7, x, 0, row)
            for _ in range(reps):
                dot(0, 6, 7)
                dot(1, 6, 7)
                dot(2, 6, 7)
                dot(3, 6, 7)
                dot(4, 6, 7)
                dot(5, 6, 7)
            tile = 16 * row
            out = tile * (1 + AMX_ACCUMULATORS * t)  # every chain stored: none is dead code
            amx.tile_store(0, x, out, row)
            amx.tile_store(1, x, out + tile, row)
            amx.tile_store(2, x, out + 2 * tile, row)
            amx.tile_store(3, x, out + 3 * tile, row)
            amx.tile_store(4, x, out + 4 * tile, row)
            amx.tile_store(5, x, out + 5 * tile, row)

    return loop


def amx_peak(threads: int, reps: int = 100_000, unit: str = "bf16") -> float:
    """GFLOP/s of register-resident ``tdpbf16ps`` (``unit="int8"``: GOP/s of ``tdpbusd``) on
    ``threads`` threads (best of 5)."""
    dot, _, row = AMX_DOTS[unit]  # a 64-byte row of x: a tile row of A, as many elements as the reduction step
    size = 16 * row * (1 + AMX_ACCUMULATORS * threads)
    rng = np.random.default_rng(0)
    if unit == "int8":
        x = rng.integers(0, 4, size).astype(np.uint8)
    else:
        x = (rng.random(size) * 1e-3).astype(ml_dtypes.bfloat16).view(np.uint16)
    loop = _amx_peak_loop(dot)
    seconds = _best_seconds(lambda: loop(x, reps, threads, row))
    return threads * AMX_ACCUMULATORS * 16 * 16 * row * 2 * reps / seconds / 1e9


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", help=f"comma-separated micro-kernels (default: the float32 ones that fit, {BF16_KERNELS} "
                                      f"and {INT8_KERNELS})")
    ap.add_argument("--one-thread", action="store_true", help="single-thread figures only")
    args = ap.parse_args(argv)
    target = ps.Target.host()
    names = args.kernels.split(",") if args.kernels else float32_kernels(target) + BF16_KERNELS.split(",") + INT8_KERNELS.split(",")
    counts = [1] if args.one_thread else [1, numba.config.NUMBA_NUM_THREADS]
    print(f"{target}")
    print()
    print("| kernel | " + " | ".join(f"GFLOP/s, {t} thread{'s' if t > 1 else ''}" for t in counts) + " | of the peak |")
    print("|---|" + "---:|" * (len(counts) + 1))

    def row(label: str, values, note: str = "") -> None:
        print(f"| {label} | " + " | ".join(f"{v:.1f}" for v in values) + f" | {note} |")

    lanes = min(16, target.vector_lanes("float32"))
    fma = [vector_peak("fma", t) for t in counts]
    row(f"fma ({fma_chains(target)} x {lanes}-lane vectors)", fma)
    bf16 = None
    if native_available():
        bf16 = [vector_peak("dot_pairs", t) for t in counts]
        row(f"vdpbf16ps, {VECTORS} vectors", bf16, ", ".join(f"{b / f:.0%}" for b, f in zip(bf16, fma)) + " of fma")
    int8 = [vnni_peak(t) for t in counts]
    int8_label = "vpmaddwd" if dot_quads_name() == MADD else "vpdpbusd"  # the instruction the int8 kernels run here
    row(f"{int8_label} ({dot_quads_name()}), {int8_peak_vectors(target, dot_quads_name())} vectors (GOP/s)", int8)
    reduced = dot_quads_name("int8r")
    int8r, int8r_label = int8, int8_label  # int8r weights: the int8 kernels' instruction, unless they have their own
    if reduced != dot_quads_name():
        int8r, int8r_label = [vnni_peak(t, weights="int8r") for t in counts], "vpmaddubsw"
        row(f"vpmaddubsw ({reduced}, int8r weights), {int8_peak_vectors(target, reduced)} vectors (GOP/s)", int8r,
            ", ".join(f"{r / i:.2f}x" for r, i in zip(int8r, int8)) + f" {int8_label}")
        if not args.kernels:
            names += INT8R_KERNELS.split(",")
    tiles = {}  # AMX unit -> its peaks
    for unit, (_, instruction, _) in AMX_DOTS.items():
        if amx.usable(unit):
            tiles[unit] = [amx_peak(t, unit=unit) for t in counts]
            base, base_label = (int8, int8_label) if unit == "int8" else (fma, "fma")
            row(f"{instruction}, {AMX_ACCUMULATORS} tiles{' (GOP/s)' if unit == 'int8' else ''}", tiles[unit],
                ", ".join(f"{t / f:.1f}x" for t, f in zip(tiles[unit], base)) + f" {base_label}")
            if not args.kernels:
                names += [f"matmul_{unit}amx_32x32", f"matmul_{unit}amx_32x16"]
    for name in names:
        meta = ps.intrinsics.get(name).meta
        is_bf16 = meta.get("precision") == "bfloat16"
        k = l1_panel(int(meta["M"]), int(meta["N"]), _itemsize(meta))
        values = [kernel_peak(name, t, k) for t in counts]
        peak, label = (bf16, "vdpbf16ps") if is_bf16 and bf16 else (fma, "fma")
        if meta.get("precision") == "int8":
            peak, label = (int8r, int8r_label) if meta.get("weights") == "int8r" else (int8, int8_label)
        if meta.get("unit") == "amx":
            peak, label = tiles["int8" if meta.get("precision") == "int8" else "bf16"], meta["dot"]
        emulated = is_bf16 and (meta.get("dot") == "fma" or not bf16)
        row(f"{name}{' (FMAs)' if emulated else ''} (L1, K={k})", values, ", ".join(f"{v / p:.0%}" for v, p in zip(values, peak)) + f" of {label}")


if __name__ == "__main__":
    main()
