"""Compile time and speed of unscheduled kernels, and the two parallel forms.

Run:  python benchmarks/bench_compile.py [--quick]

Prints Markdown tables:

1. GMM 512^3 and C2D (1,14,14,256,256,3,1,1, pad 1), unscheduled: probsched compile
   seconds, probsched GFLOP/s, numpy GFLOP/s (np.matmul; im2col + matmul for the conv),
   jax.jit GFLOP/s. Every probsched kernel is checked against the numpy reference first.
2. A matmul with a parallel outer loop (i parallel, k serial, j vectorized), built with
   ``parallel="threads"`` (nogil kernel over chunks on a thread pool) and
   ``parallel="prange"`` (thin prange loop calling a nogil body): compile seconds and
   GFLOP/s at 512^3 and 128^3 (where per-call overhead shows).

3. With ``--records DB [DB ...]``, instead: where tuned candidates' compile time goes.
   ``--per-db K`` successful records of each database (drawn with a fixed seed) are
   rebuilt without the build cache, and numba's own pipeline times are summed per role of
   the generated function: the entry function and the bodies of parallel loops. The
   ``prange`` launchers that run those bodies are compiled once per argument signature
   per machine kind (:mod:`probsched.codegen.launch`, loaded from the program cache
   after); their one-time cost is printed apart.

       python benchmarks/bench_compile.py --records D/ours_SFM:2.db D/ours_C2D:2.db --per-db 6

GFLOP/s is the median over ``repeat`` runs of the mean time of repeated calls lasting at
least ``min_repeat_ms``, after a warm-up call.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import probsched as ps  # noqa: E402
from probsched.codegen.compile import warm_up  # noqa: E402
from probsched.ir.expr import Var  # noqa: E402
from probsched.ir.stmt import Block, Buffer, IterVar, Loop, PrimFunc, Store  # noqa: E402


def timeit(fn, min_repeat_ms: float = 200.0, repeat: int = 5) -> float:
    """Median over ``repeat`` of the mean seconds per call of ``fn``."""
    fn()
    means = []
    for _ in range(repeat):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt * 1e3 >= min_repeat_ms:
                break
        means.append(dt / n)
    return float(np.median(means))


# ----------------------------------------------------------------------------- workloads


def gmm_workload():
    try:
        import probsched.workloads as wl

        w = wl.get("GMM", 2)
        return w.func, w.flops, w.random_inputs(0), w.reference
    except Exception:  # the workloads module is missing: the same program, written here
        A = ps.placeholder((512, 512), name="A")
        B = ps.placeholder((512, 512), name="B")
        k = ps.reduce_axis(512, name="k")
        C = ps.compute((512, 512), lambda i, j: ps.sum(A[i, k] * B[k, j], axis=k), name="C")
        rng = np.random.default_rng(0)
        ins = tuple(rng.uniform(0.5, 1.0, (512, 512)).astype(np.float32) for _ in range(2))
        return ps.create_func([A, B, C], name="GMM"), 2 * 512**3, ins, lambda a, b: (a.astype(np.float64) @ b,)


def c2d_workload():
    try:
        import probsched.workloads as wl

        w = wl.get("C2D", 2)
        return w.func, w.flops, w.random_inputs(0), w.reference
    except Exception:
        n, h, w_, ci, co, kk, s, p = 1, 14, 14, 256, 256, 3, 1, 1
        X = ps.placeholder((n, h, w_, ci), name="inputs")
        W = ps.placeholder((kk, kk, ci, co), name="weight")
        P = ps.compute(
            (n, h + 2 * p, w_ + 2 * p, ci),
            lambda b, y, x, c: ps.if_then_else(
                ps.all_of(y >= p, y < h + p, x >= p, x < w_ + p), X[b, y - p, x - p, c], 0.0
            ),
            name="padded",
        )
        rh, rw, rc = ps.reduce_axis(kk, "rh"), ps.reduce_axis(kk, "rw"), ps.reduce_axis(ci, "rc")
        Y = ps.compute(
            (n, h, w_, co),
            lambda b, y, x, f: ps.sum(P[b, y * s + rh, x * s + rw, rc] * W[rh, rw, rc, f], axis=[rh, rw, rc]),
            name="conv2d",
        )
        rng = np.random.default_rng(0)
        ins = (
            rng.uniform(0.5, 1.0, (n, h, w_, ci)).astype(np.float32),
            rng.uniform(0.5, 1.0, (kk, kk, ci, co)).astype(np.float32),
        )
        flops = 2 * n * h * w_ * co * kk * kk * ci
        return ps.create_func([X, W, Y], name="C2D"), flops, ins, lambda x, w: (im2col_conv(x, w),)


def im2col_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """NHWC conv, stride 1, pad 1, as one matmul over im2col patches."""
    kh, kw, ci, co = w.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    n, hp, wp, _ = xp.shape
    oh, ow = hp - kh + 1, wp - kw + 1
    patches = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(1, 2))  # n, oh, ow, ci, kh, kw
    cols = np.ascontiguousarray(patches.transpose(0, 1, 2, 4, 5, 3)).reshape(n * oh * ow, kh * kw * ci)
    return (cols @ w.reshape(kh * kw * ci, co)).reshape(n, oh, ow, co)


def check(name: str, got, want, n_red: int) -> None:
    tol = 1e-4 * max(1.0, np.sqrt(n_red))
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol, err_msg=f"{name}: kernel differs from the reference")


def bench_unscheduled(args) -> list:
    import jax
    import jax.numpy as jnp

    rows = []
    for name, make, n_red in (("GMM 512x512x512", gmm_workload, 512), ("C2D 1,14,14,256,256,3,1,1", c2d_workload, 2304)):
        func, flops, ins, ref = make()
        kern = ps.build(func)
        outs = kern.run(*ins)
        check(name, outs, ref(*ins), n_red)
        args_all = list(ins) + list(outs)
        t_ps = timeit(lambda: kern(*args_all), args.min_ms, args.repeat)
        if name.startswith("GMM"):
            a, b = (x.reshape(512, 512) for x in ins)
            t_np = timeit(lambda: np.matmul(a, b), args.min_ms, args.repeat)
            ja, jb = jnp.asarray(a), jnp.asarray(b)
            jf = jax.jit(jnp.matmul)
            t_jax = timeit(lambda: jf(ja, jb).block_until_ready(), args.min_ms, args.repeat)
        else:
            x, w = ins
            t_np = timeit(lambda: im2col_conv(x, w), args.min_ms, args.repeat)
            jx, jw = jnp.asarray(x), jnp.asarray(w)
            jf = jax.jit(
                lambda x, w: jax.lax.conv_general_dilated(
                    x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC")
                )
            )
            got = np.asarray(jf(jx, jw))
            check(name + " (jax)", (got,), ref(*ins), n_red)
            t_jax = timeit(lambda: jf(jx, jw).block_until_ready(), args.min_ms, args.repeat)
        rows.append((name, kern.compile_seconds, flops / t_ps / 1e9, flops / t_np / 1e9, flops / t_jax / 1e9))
    return rows


# ----------------------------------------------------------------------------- parallel forms


def parallel_matmul(n: int) -> PrimFunc:
    A, B, C = Buffer("A", (n, n)), Buffer("B", (n, n)), Buffer("C", (n, n))
    vi, vj, vk = IterVar(Var("v_i"), n, "S"), IterVar(Var("v_j"), n, "S"), IterVar(Var("v_k"), n, "R")
    i, k, j = Var("i"), Var("k"), Var("j")
    blk = Block(
        "C", (vi, vj, vk), (i, j, k),
        Store(C, (vi.var, vj.var), C[vi.var, vj.var] + A[vi.var, vk.var] * B[vk.var, vj.var]),
        init=Store(C, (vi.var, vj.var), 0.0),
    )
    return PrimFunc(
        "pmm", (A, B, C),
        (Loop(i, n, "parallel", body=(Loop(k, n, body=(Loop(j, n, "vectorized", body=(blk,)),)),)),),
    )


def bench_parallel(args) -> list:
    rows = []
    rng = np.random.default_rng(1)
    for n in (512, 128):
        func = parallel_matmul(n)
        a = rng.uniform(0.5, 1.0, (n, n)).astype(np.float32)
        b = rng.uniform(0.5, 1.0, (n, n)).astype(np.float32)
        c = np.empty((n, n), np.float32)
        flops = 2 * n**3
        auto = ps.codegen.emit.choose_form(func)
        for form in ("threads", "prange"):
            kern = ps.build(func, parallel=form)
            kern(a, b, c)
            check(f"parallel {form}", (c,), (a.astype(np.float64) @ b,), n)
            t2 = timeit(lambda: kern(a, b, c), args.min_ms, args.repeat)
            k1 = ps.build(func, "cpu -threads=1", parallel=form) if n == 512 else None
            t1 = timeit(lambda: k1(a, b, c), args.min_ms, args.repeat) if k1 is not None else float("nan")
            label = form + (" (auto)" if form == auto else "")
            rows.append((f"matmul {n}^3, i parallel", label, kern.compile_seconds, flops / t1 / 1e9, flops / t2 / 1e9, kern.target.threads))
    return rows


ROLES = ("entry", "body")


def pipeline_seconds(kernel) -> dict:
    """numba's pipeline seconds of each function of a built kernel, summed per role."""
    seconds = dict.fromkeys(ROLES, 0.0)
    count = dict.fromkeys(ROLES, 0)
    for disp in kernel.dispatchers.values():
        role = "entry" if disp is kernel.entry else "body"
        for overload in disp.overloads.values():
            times = overload.metadata.get("pipeline_times", {})
            seconds[role] += sum(t.run for passes in times.values() for t in passes.values())
            count[role] += 1
    return {"seconds": seconds, "count": count}


def launcher_seconds() -> float:
    """Wall seconds of compiling one parallel launcher (three float32 arrays): what a
    machine pays once per argument signature of its parallel loops."""
    from probsched.codegen.launch import compile_launcher

    t0 = time.perf_counter()
    compile_launcher(("array:float32",) * 3)
    return time.perf_counter() - t0


def compile_breakdown(path: str, k: int, seed: int = 0) -> dict:
    """Rebuild ``k`` successful records of the database at ``path`` (no build cache) and sum
    numba's pipeline seconds per function role; also the wall seconds of the builds."""
    from probsched.database import Database

    with Database(path) as db:
        (stored,) = db.workloads()
        records = [r for r in db.records(stored.hash) if r.ok]
        func = stored.func
    picked = np.random.default_rng(seed).choice(len(records), size=min(k, len(records)), replace=False)
    seconds = dict.fromkeys(ROLES, 0.0)
    count = dict.fromkeys(ROLES, 0)
    wall = 0.0
    for i in picked:
        sch = records[i].schedule(func)
        t0 = time.perf_counter()
        kernel = ps.build(sch, cache=False)
        wall += time.perf_counter() - t0
        parts = pipeline_seconds(kernel)
        for role in ROLES:
            seconds[role] += parts["seconds"][role]
            count[role] += parts["count"][role]
    return {"workload": stored.name, "records": len(picked), "wall": wall, "seconds": seconds, "count": count}


def print_breakdown(paths: list, k: int) -> None:
    from probsched.codegen.launch import launcher_sources

    print("| workload | records | build s (wall, mean) | entry s | bodies s (n) |")
    print("|---|---:|---:|---:|---:|")
    for path in paths:
        b = compile_breakdown(path, k)
        s, n = b["seconds"], b["count"]
        print(f"| {b['workload']} | {b['records']} | {b['wall'] / b['records']:.2f} | {s['entry']:.1f} | "
              f"{s['body']:.1f} ({n['body']}) |")
    compiled = [k for k, source in launcher_sources().items() if source == "compiled"]
    print(f"\nThe builds used {len(launcher_sources())} parallel launchers (one per argument signature, shared;"
          f" {len(compiled)} compiled here, the others loaded); one compiles in {launcher_seconds():.2f} s here.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    ap.add_argument("--records", nargs="+", metavar="DB", help="split the compile time of tuned records instead")
    ap.add_argument("--per-db", type=int, default=6, metavar="K", help="records rebuilt per database (default 6)")
    args = ap.parse_args(argv)
    if args.records:
        warm_up()
        warm_up(parallel=True)
        print_breakdown(args.records, args.per_db)
        return 0
    args.min_ms, args.repeat = (50.0, 3) if args.quick else (200.0, 5)

    t0 = time.perf_counter()
    warm_up()
    t_warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm_up(parallel=True)
    t_warm_par = time.perf_counter() - t0
    print(f"target: {ps.Target.host()}")
    print(f"numba one-time initialisation (not in compile seconds): {t_warm:.2f} s serial, {t_warm_par:.2f} s parallel back end\n")

    rows = bench_unscheduled(args)
    print("| workload (unscheduled) | compile s | probsched GFLOP/s | numpy GFLOP/s | jax.jit GFLOP/s |")
    print("|---|---:|---:|---:|---:|")
    for name, cs, g_ps, g_np, g_jax in rows:
        print(f"| {name} | {cs:.2f} | {g_ps:.2f} | {g_np:.1f} | {g_jax:.1f} |")
    print()

    prow = bench_parallel(args)
    print("| kernel | parallel form | compile s | GFLOP/s 1 thread | GFLOP/s all threads | threads |")
    print("|---|---|---:|---:|---:|---:|")
    for name, form, cs, g1, g2, nt in prow:
        g1s = f"{g1:.1f}" if g1 == g1 else "-"
        print(f"| {name} | {form} | {cs:.2f} | {g1s} | {g2:.1f} | {nt} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
