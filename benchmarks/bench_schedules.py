"""Hand-written schedules of GMM and C2D against numpy and jax.jit (issues #4 and #5).

Run:  python benchmarks/bench_schedules.py [--repeat 5] [--workloads GMM:2,C2D:2] [--json out.json]
           [--threads 1]   (a per-core comparison: ours, OpenBLAS and XLA on one thread)

Two schedules per workload, each a plain function of a :class:`probsched.Schedule` using
only public primitives:

- ``*_primitives`` (issue #4): loop primitives and caching only, no tensorize: a register
  tile whose local accumulator (``cache_write`` "local") is unrolled into scalars by
  ``pragma_auto_unroll_max_step`` (LLVM's SLP vectorizer turns its rows into vector FMAs),
  the B operand packed per column block (``cache_read`` "local", compacted by lowering), the
  outer loop parallel;
- ``*_tensorized`` (issue #5): the tile computed by a register-blocked ``matmul_{M}x{N}``
  micro-kernel over a packed K panel; for the convolution M is the output ``w`` axis
  (A = the padded input, row stride ``stride * ci``), K the input channels ``rc`` and N the
  output channels, the ``rh``/``rw`` loops outside the tile.

Tile sizes are parameters with defaults for the benchmark shapes, adapted to the extents
(``tests/test_hand_schedules.py`` runs the same functions on reduced shapes).

For every workload and schedule one Markdown row: build seconds (first build of that
function in this process, numba's one-time initialisation excluded and printed apart, the
micro-kernel disk cache as found), GFLOP/s of ours, numpy (``np.matmul``; im2col +
``np.matmul`` for the convolution) and ``jax.jit`` (``jnp.matmul``;
``lax.conv_general_dilated`` NHWC/HWIO), and the ratios. Timings are interleaved: each of
``--repeat`` rounds times every contender once (``time_callable``, 3 repeats of >= 200 ms)
and the table shows the median of the rounds, so that noise from other tenants of the
machine hits every contender alike. Every kernel (and the jax result) is checked against the
workload's reference first. A subprocess with an empty ``PROBSCHED_CACHE_DIR`` measures the
micro-kernels' cold-cache compile time. The share of the CPUs other processes used while
each contender was timed is printed too: the machine is shared, and one busy core makes a
2-thread OpenBLAS collapse (it spin-waits for its descheduled partner thread) far more
than it slows ours or XLA.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import probsched as ps  # noqa: E402
from probsched.measure.timer import time_callable  # noqa: E402

# ----------------------------------------------------------------------------- helpers

# Register blocks in order of preference (measured single-thread on this Zen 3 with data
# in L1: 3x32 ~80 GFLOP/s, 4x16 ~70, 8x8 ~55, 4x8 ~45; 6x16 and the 24/32-column shapes
# with 4+ rows spill or vectorise badly, 20-40).
KERNEL_PREFERENCE = ((3, 32), (4, 16), (8, 8), (4, 8))


def _extent(sch: ps.Schedule, loop) -> int:
    return sch.get(loop).extent


def _divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of ``n`` that is at most ``cap`` (at least 1)."""
    for d in range(max(1, min(n, cap)), 0, -1):
        if n % d == 0:
            return d
    return 1


def _pick_kernel(n_cols: int, m: int, n: int) -> Tuple[int, int]:
    """(M, N) of a micro-kernel whose N divides ``n_cols`` (only M may have partial tiles)."""
    for mm, nn in ((m, n),) + KERNEL_PREFERENCE:
        if n_cols % nn == 0 and f"matmul_{mm}x{nn}" in ps.intrinsics.list():
            return mm, nn
    raise ps.ScheduleError(f"no matmul micro-kernel has N dividing {n_cols}")


def _threads(threads: Optional[int]) -> int:
    return threads if threads else ps.Target.host().threads


def _split_parallel(sch: ps.Schedule, loop, threads: int):
    """Split ``loop`` into ``[min(threads, extent) chunks (to run in parallel), rest]``.

    When the chunks do not divide the extent the last one is shorter (a guard outside the
    tile, which tensorize accepts)."""
    parts = max(1, min(_extent(sch, loop), threads))
    return sch.split(loop, [parts, None])


def _gmm_loops(sch: ps.Schedule):
    c = sch.get_block("Z")
    loops = sch.get_loops(c)
    if len(loops) == 4:
        return c, loops
    i, j, k = loops  # batch=None
    return c, [None, i, j, k]


# ----------------------------------------------------------------------------- GMM


def gmm_primitives(sch: ps.Schedule, M: int = 4, N: int = 16, threads: Optional[int] = None) -> None:
    """Loop primitives only: an M x N register tile, full-K local accumulator, packed B block.

    ``i -> [chunks (parallel), i tiles, M]``, ``j -> [j blocks, N]``; per (chunk, j block) the
    ``K x N`` column block of Y is packed (cache_read local, at the j block), then per
    i tile the accumulator ``Z_local`` (cache_write local, written back at the i tile) is
    zeroed, accumulated over all of K and stored. ``pragma_auto_unroll_max_step = M*N``
    on the i tile unrolls the M x N tile (and its init and write-back), so the accumulator
    becomes M*N scalars that LLVM keeps in vector registers.
    """
    c, (b, i, j, k) = _gmm_loops(sch)
    N = _divisor_at_most(_extent(sch, j), N)
    M = _divisor_at_most(_extent(sch, i), M)
    it, i1 = sch.split(i, [None, M])
    ic, i0 = _split_parallel(sch, it, _threads(threads))
    j0, j1 = sch.split(j, [None, N])
    sch.reorder(*([ic, b] if b is not None else [ic]), j0, i0, k, i1, j1)
    wb = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(wb, i0)
    sch.decompose_reduction(c, k)
    pack = sch.cache_read(c, 1, "local")
    sch.compute_at(pack, j0)
    sch.parallel(ic)
    sch.annotate(i0, "pragma_auto_unroll_max_step", M * N)


def gmm_tensorized(
    sch: ps.Schedule,
    M: int = 3,
    N: int = 32,
    kc: int = 512,
    parallel_axis: str = "i",
    threads: Optional[int] = None,
) -> None:
    """``matmul_{M}x{N}`` micro-kernel over a packed ``kc x N`` panel of Y.

    ``i -> [i tiles of M] -> [chunks (parallel), tiles]`` (the last tile may be partial: a
    smaller kernel runs the remaining rows), ``j -> [j blocks, N]``, ``k -> [panels, kc]``;
    loop order ``chunk, b, j block, panel, i tile | kc, M, N`` (the tile is the kernel):
    each packed panel (cache_read local at the panel loop, ``kc*N*4`` bytes: 64 KiB for
    the default kc = K = 512, in L2) is reused by every i tile of the chunk, and C is
    loaded and stored once per tile. Measured on one core: kc 512 ~80 GFLOP/s, 256 ~74,
    128 ~70; 4x16 ~63, 8x8 ~35. ``parallel_axis="j"`` splits the j blocks over the threads
    instead (each thread packs only its own columns of Y; no faster here).
    """
    c, (b, i, j, k) = _gmm_loops(sch)
    M, N = _pick_kernel(_extent(sch, j), M, N)
    kc = _divisor_at_most(_extent(sch, k), kc)
    nthreads = _threads(threads)
    k0, k1 = sch.split(k, [None, kc])
    if parallel_axis == "i":
        it, i1 = sch.split(i, [None, M])
        pc, i0 = _split_parallel(sch, it, nthreads)
        j0, j1 = sch.split(j, [None, N])
    else:
        jt, j1 = sch.split(j, [None, N])
        pc, j0 = _split_parallel(sch, jt, nthreads)
        i0, i1 = sch.split(i, [None, M])
    sch.reorder(*([pc, b] if b is not None else [pc]), j0, k0, i0, k1, i1, j1)
    sch.decompose_reduction(c, k0)
    pack = sch.cache_read(c, 1, "local")
    sch.compute_at(pack, k0)
    sch.parallel(pc)
    sch.tensorize(k1, f"matmul_{M}x{N}")


# ----------------------------------------------------------------------------- C2D


def _c2d_loops(sch: ps.Schedule):
    c = sch.get_block("conv2d")
    return c, sch.get_loops(c)  # n, h, w, co, rh, rw, rc


def c2d_primitives(sch: ps.Schedule, M: int = 2, N: int = 32, threads: Optional[int] = None) -> None:
    """Loop primitives only: an M (w) x N (co) register tile accumulated over rh, rw, rc.

    ``co -> [chunks (parallel), co blocks, N]``, ``w -> [w tiles, M]`` (M divides w); per co
    block the ``3 x 3 x ci x N`` slice of the weight is packed (cache_read local), per
    (h, w tile) a local accumulator (cache_write local, written back at the w tile) is
    zeroed, accumulated over ``rh, rw, rc`` and stored; the M x N tile (with its init and
    write-back) is unrolled into scalars by ``pragma_auto_unroll_max_step``. The ``padded``
    stage stays at the root (one pass over the input).
    """
    c, (n, h, w, co, rh, rw, rc) = _c2d_loops(sch)
    M = _divisor_at_most(_extent(sch, w), M)
    N = _divisor_at_most(_extent(sch, co), N)
    w0, w1 = sch.split(w, [None, M])
    cot, co1 = sch.split(co, [None, N])
    pc, co0 = _split_parallel(sch, cot, _threads(threads))
    sch.reorder(pc, n, co0, h, w0, rh, rw, rc, w1, co1)
    wb = sch.cache_write(c, 0, "local")
    sch.reverse_compute_at(wb, w0)
    sch.decompose_reduction(c, rh)
    pack = sch.cache_read(c, 1, "local")
    sch.compute_at(pack, co0)
    sch.parallel(pc)
    sch.annotate(w0, "pragma_auto_unroll_max_step", M * N)


def c2d_tensorized(
    sch: ps.Schedule,
    M: int = 3,
    N: int = 32,
    kc: int = 256,
    threads: Optional[int] = None,
    padded: str = "root",
    order: str = "panel",
) -> None:
    """``matmul_{M}x{N}`` micro-kernel: M output pixels along w, N output channels, K = rc.

    ``co -> [chunks (parallel), co blocks, N]``, ``w -> [w tiles, M]`` (14 = 4 * 3 + 2: the
    last tile runs the 2-row kernel), ``rc -> [panels, kc]``; loop order (``order="panel"``)
    ``chunk, n, co block, rh, rw, panel, h, w tile | kc, M, N``: each packed
    ``kc x N`` weight panel (cache_read local at the panel loop; 32 KiB for kc = ci = 256) is
    reused by all ``h * w`` output pixels before the next one is loaded. The A operand is
    read in place from the padded input (row stride ``stride * ci``). ``order="pixel"``
    packs the whole ``3 x 3 x ci x N`` weight slice per co block and runs ``rh, rw`` inside
    each pixel tile instead (within noise of "panel"; kc 64 vs 256 too, but 256 compiles
    0.3-0.5 s faster). ``padded="root"`` leaves the pad stage as one serial pass before the
    parallel loop (``"chunk"``, computing it in each parallel chunk, duplicates it per
    thread and measured no faster); any other value is a loop to compute it at.
    """
    c, (n, h, w, co, rh, rw, rc) = _c2d_loops(sch)
    M, N = _pick_kernel(_extent(sch, co), M, N)
    kc = _divisor_at_most(_extent(sch, rc), kc)
    w0, w1 = sch.split(w, [None, M])
    cot, co1 = sch.split(co, [None, N])
    pc, co0 = _split_parallel(sch, cot, _threads(threads))
    rc0, rc1 = sch.split(rc, [None, kc])
    if order == "panel":
        sch.reorder(pc, n, co0, rh, rw, rc0, h, w0, rc1, w1, co1)
        sch.decompose_reduction(c, rh)
        pack = sch.cache_read(c, 1, "local")
        sch.compute_at(pack, rc0)
    else:  # "pixel": the whole 3 x 3 x ci x N weight slice packed per co block
        sch.reorder(pc, n, co0, h, w0, rh, rw, rc0, rc1, w1, co1)
        sch.decompose_reduction(c, rh)
        pack = sch.cache_read(c, 1, "local")
        sch.compute_at(pack, co0)
    if padded != "root":
        sch.compute_at(sch.get_block("padded"), {"chunk": pc}.get(padded, padded))
    sch.parallel(pc)
    sch.tensorize(rc1, f"matmul_{M}x{N}")


SCHEDULES: Dict[str, List[Tuple[str, Callable]]] = {
    "GMM": [("primitives (#4)", gmm_primitives), ("tensorized (#5)", gmm_tensorized)],
    "C2D": [("primitives (#4)", c2d_primitives), ("tensorized (#5)", c2d_tensorized)],
}


def used_intrinsics(sch: ps.Schedule) -> List[str]:
    """Names of the micro-kernels a scheduled function calls."""
    names = []
    for blk in sch.mod.blocks():
        name = blk.annotation("tensorize")
        if name and name not in names:
            names.append(name)
    return names


# ----------------------------------------------------------------------------- references


def im2col_conv(x: np.ndarray, w: np.ndarray, stride: int = 1, pad: int = 1) -> np.ndarray:
    """NHWC conv as one matmul over im2col patches (the numpy baseline)."""
    kh, kw, ci, co = w.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    patches = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(1, 2))[:, ::stride, ::stride]
    n, oh, ow = patches.shape[:3]
    cols = np.ascontiguousarray(patches.transpose(0, 1, 2, 4, 5, 3)).reshape(n * oh * ow, kh * kw * ci)
    return (cols @ w.reshape(kh * kw * ci, co)).reshape(n, oh, ow, co)


def baselines(kind: str, w, ins) -> Dict[str, Callable]:
    """numpy and jax.jit callables computing the workload (checked against the reference)."""
    import jax
    import jax.numpy as jnp

    if kind == "GMM":
        x, y = ins
        jf = jax.jit(jnp.matmul)
        jx, jy = jnp.asarray(x), jnp.asarray(y)
        fns = {"numpy": lambda: np.matmul(x, y), "jax": lambda: jf(jx, jy).block_until_ready()}
    else:
        x, wt = ins
        s, p = w.params[6], w.params[7]  # (n, h, w, ci, co, kernel, stride, pad)
        jf = jax.jit(
            lambda a, b: jax.lax.conv_general_dilated(
                a, b, (s, s), ((p, p), (p, p)), dimension_numbers=("NHWC", "HWIO", "NHWC")
            )
        )
        jx, jw = jnp.asarray(x), jnp.asarray(wt)
        fns = {"numpy": lambda: im2col_conv(x, wt, s, p), "jax": lambda: jf(jx, jw).block_until_ready()}
    expected = w.reference(*ins)
    for name, fn in fns.items():
        try:
            w.check((np.asarray(fn()),), expected)
        except AssertionError as exc:
            raise AssertionError(f"{w.name}: the {name} baseline differs from the reference") from exc
    return fns


# ----------------------------------------------------------------------------- cold cache probe


def cold_probe(specs: Sequence[str]) -> Dict[str, float]:
    """In a process with an empty disk cache: seconds to compile each micro-kernel the
    tensorized schedules use (``get(name).kernel()``), then seconds of their first build
    (which also compiles the smaller kernel of a partial tile)."""
    from probsched.codegen.compile import warm_up

    warm_up()
    out: Dict[str, float] = {}
    for spec in specs:
        kind, _, index = spec.partition(":")
        w = ps.workloads.get(kind, int(index) if index.isdigit() else index)
        for label, fn in SCHEDULES[kind]:
            sch = ps.Schedule(w.func)
            fn(sch)
            names = used_intrinsics(sch)
            if not names:
                continue
            for name in names:
                if name not in out:
                    t0 = time.perf_counter()
                    ps.intrinsics.get(name).kernel()
                    out[name] = time.perf_counter() - t0
            t0 = time.perf_counter()
            ps.build(sch)
            out[f"build {spec} {label.split()[0]}"] = time.perf_counter() - t0
    return out


def measure_cold(specs: Sequence[str]) -> Dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="probsched-cold-") as tmp:
        env = dict(os.environ, PROBSCHED_CACHE_DIR=tmp)
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--cold-probe", ",".join(specs)],
            env=env, capture_output=True, text=True, check=True,
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- main


class _OtherLoad:
    """CPU seconds used by *other* processes between start() and stop() (from /proc/stat,
    minus this process's own user+system time), as a fraction of all CPUs' wall time: the
    machine is shared, and a busy core hurts a 2-thread BLAS more than anything else."""

    def __init__(self) -> None:
        self.other = 0.0
        self.wall = 0.0

    @staticmethod
    def _sample() -> Tuple[float, float, float]:
        import resource

        try:
            with open("/proc/stat") as fh:
                f = [int(x) for x in fh.readline().split()[1:]]
            busy = (sum(f[:8]) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            busy = float("nan")
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return busy, ru.ru_utime + ru.ru_stime, time.perf_counter()

    def __enter__(self):
        self._start = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        b1, s1, t1 = self._sample()
        b0, s0, t0 = self._start
        self.other += max(0.0, (b1 - b0) - (s1 - s0))
        self.wall += t1 - t0

    @property
    def fraction(self) -> float:
        return self.other / (self.wall * (os.cpu_count() or 1)) if self.wall else float("nan")


def _gflops(flops: float, seconds: Sequence[float]) -> Tuple[float, float, float]:
    g = [flops / s / 1e9 for s in seconds]
    return statistics.median(g), min(g), max(g)


def bench_workload(spec: str, args) -> List[dict]:
    kind, _, index = spec.partition(":")
    w = ps.workloads.get(kind, int(index) if index.isdigit() else index)
    ins = w.random_inputs(0)
    expected = w.reference(*ins)
    contenders: Dict[str, Callable] = {}
    info: Dict[str, dict] = {}
    for label, fn in SCHEDULES[kind]:
        sch = ps.Schedule(w.func)
        fn(sch, threads=args.threads)
        names = used_intrinsics(sch)
        t0 = time.perf_counter()
        for name in names:  # warm disk cache: a file load; cold: a compile
            ps.intrinsics.get(name).kernel()
        t_mk = time.perf_counter() - t0
        t0 = time.perf_counter()
        kern = ps.build(sch, None if args.threads is None else f"cpu -threads={args.threads}")
        t_build = time.perf_counter() - t0
        outs = kern.run(*ins)
        w.check(outs, expected)
        call_args = list(ins) + list(outs)
        contenders[label] = (lambda k=kern, a=call_args: k(*a))
        info[label] = dict(build_s=t_build + t_mk, mk_load_s=t_mk, intrinsics=names, form=kern.parallel_form,
                           instructions=str(sch.instructions))
    contenders.update(baselines(kind, w, ins))
    times: Dict[str, List[float]] = {name: [] for name in contenders}
    load = {name: _OtherLoad() for name in contenders}
    for _ in range(args.repeat):
        for name, fn in contenders.items():
            with load[name]:
                times[name].append(time_callable(fn, repeat=3, min_repeat_ms=args.min_ms).median)
    g = {name: _gflops(w.flops, ts) for name, ts in times.items()}
    rows = []
    for label, _ in SCHEDULES[kind]:
        med, lo, hi = g[label]
        rows.append(dict(
            workload=spec, schedule=label, build_s=info[label]["build_s"], mk_load_s=info[label]["mk_load_s"],
            intrinsics=info[label]["intrinsics"], parallel_form=info[label]["form"],
            gflops=med, gflops_range=[lo, hi], numpy_gflops=g["numpy"][0], jax_gflops=g["jax"][0],
            numpy_range=list(g["numpy"][1:]), jax_range=list(g["jax"][1:]),
            vs_numpy=med / g["numpy"][0], vs_jax=med / g["jax"][0], instructions=info[label]["instructions"],
            other_cpu_load={name: l.fraction for name, l in load.items()},
        ))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="interleaved timing rounds (median reported)")
    ap.add_argument("--workloads", default="GMM:2,C2D:2", help="comma-separated NAME:INDEX of ps.workloads.get")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--min-ms", type=float, default=200.0, help="minimum milliseconds of one timing repeat")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-cache micro-kernel compile probe")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of ours, OpenBLAS and XLA (default: every core; 1 = a per-core comparison, "
                         "re-run in a subprocess with OPENBLAS_NUM_THREADS / XLA_FLAGS set)")
    ap.add_argument("--cold-probe", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cold_probe is not None:
        print(json.dumps(cold_probe(args.cold_probe.split(","))))
        return 0
    if args.threads is not None and os.environ.get("PROBSCHED_BENCH_THREADS") != str(args.threads):
        # the BLAS and XLA read their thread counts when loaded: set them in a fresh process
        n = str(args.threads)
        env = dict(os.environ, PROBSCHED_BENCH_THREADS=n, OPENBLAS_NUM_THREADS=n, OMP_NUM_THREADS=n, MKL_NUM_THREADS=n)
        if args.threads == 1:
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                                " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
        cmd = [sys.executable, os.path.abspath(__file__)] + list(sys.argv[1:] if argv is None else argv)
        return subprocess.call(cmd, env=env)

    from probsched.codegen.compile import warm_up

    target = ps.Target.host()
    t0 = time.perf_counter()
    warm_up()
    t_numba = time.perf_counter() - t0
    print(f"machine: {target}")
    if args.threads is not None:
        print(f"threads: {args.threads} (ours: target cpu -threads={args.threads} and as many parallel chunks; "
              f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r})")
    print(f"numba one-time initialisation (not in build s): {t_numba:.2f} s; "
          f"micro-kernel disk cache: {ps.intrinsics.disk_cache.cache_dir() if hasattr(ps.intrinsics, 'disk_cache') else ''}")
    specs = [s.strip() for s in args.workloads.split(",") if s.strip()]
    rows = []
    for spec in specs:
        rows += bench_workload(spec, args)
    cold = {} if args.no_cold else measure_cold(specs)

    print()
    print("| workload | schedule | build s | ours GFLOP/s (min-max) | numpy GFLOP/s | jax.jit GFLOP/s | ours/numpy | ours/jax |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lo, hi = r["gflops_range"]
        print(f"| {r['workload']} | {r['schedule']} | {r['build_s']:.2f} | {r['gflops']:.1f} ({lo:.0f}-{hi:.0f}) | "
              f"{r['numpy_gflops']:.1f} | {r['jax_gflops']:.1f} | {r['vs_numpy']:.2f} | {r['vs_jax']:.2f} |")
    print()
    for spec in specs:
        r = next(r for r in rows if r["workload"] == spec)
        print(f"{spec}: CPU used by other processes while timing (share of all cores): "
              + ", ".join(f"{k.split()[0]} {v:.0%}" for k, v in r["other_cpu_load"].items()))
    print(f"GFLOP/s: median of {args.repeat} interleaved rounds (each the median of 3 repeats >= {args.min_ms:.0f} ms); "
          "numpy C2D = im2col + np.matmul; build s = first ps.build of the schedule in this process "
          "(+ micro-kernel load from the disk cache), numba initialisation excluded.")
    if cold:
        print("cold micro-kernel cache (empty PROBSCHED_CACHE_DIR, fresh subprocess): "
              + ", ".join(f"{k} {v:.2f} s" for k, v in cold.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(machine=str(target), threads=args.threads, numba_init_s=t_numba, cold_mk_compile_s=cold, rows=rows,
                           repeat=args.repeat, min_repeat_ms=args.min_ms), fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
