"""What a parallel loop's launch costs: one tiny kernel with no, one and two parallel loops.

Each kernel adds 1 (and then doubles) ``--n`` float32 values, so the work is negligible
and the difference between the rows is the shared launcher's cost (:mod:`probsched.codegen.launch`:
one chunk per thread, on the spinning workers of :mod:`probsched.codegen.spin_pool` unless
``PROBSCHED_LAUNCH=prange``). Kernels are bound and timed interleaved in this process
(:func:`probsched.measure.timer.time_interleaved`)::

    python benchmarks/bench_launch.py --rounds 9
    PROBSCHED_LAUNCH=prange python benchmarks/bench_launch.py --rounds 9

With ``--ab``, the same kernels are also timed with launchers compiled as they were before
launchers could be stored (:func:`constant_launcher`: the spin pool's slot address and the
trampoline's address compiled in as constants of this process), interleaved with the
stored kind, so both are measured in one run::

    python benchmarks/bench_launch.py --ab --rounds 15

The fastest repeat of each kernel is printed beside the median: on a machine other work
keeps busy, medians measure preemption, the fastest repeat still the launch.

With ``--db``, the best record of each workload in a tuning database is built twice, once
with each launcher (spin pool and ``prange``), and the pairs are timed interleaved::

    python benchmarks/bench_launch.py --db tuning.db --workloads C1D:0,NRM:2 --rounds 15

A loaded machine: ``--busy N`` keeps N other processes spinning on a core each while the
kernels are timed (as other tenants, a compile or another library's thread pool do), and
``--spin-only`` makes the pool's waits spin with ``pause`` and never yield the core (the
pool before its waits yielded, for an A/B in alternating processes)::

    python benchmarks/bench_launch.py --db tuning.db --busy 1 --rounds 9
    python benchmarks/bench_launch.py --db tuning.db --busy 1 --rounds 9 --spin-only
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time

import numpy as np

import probsched as ps
from probsched.measure.timer import time_interleaved


def kernels(n: int) -> dict:
    A = ps.placeholder((n,), name="A")
    B = ps.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = ps.compute((n,), lambda i: B[i] * 2.0, name="C")
    one, two = ps.create_func([A, B], name="one"), ps.create_func([A, C], name="two")
    serial, s1, s2 = ps.Schedule(one), ps.Schedule(one), ps.Schedule(two)
    s1.parallel(s1.get_loops(s1.get_block("B"))[0])
    for blk in ("B", "C"):
        s2.parallel(s2.get_loops(s2.get_block(blk))[0])
    a, out = np.ones(n, np.float32), np.empty(n, np.float32)
    return {
        "serial": ps.build(serial).bind(a, out),
        "1 parallel loop": ps.build(s1).bind(a, out),
        "2 parallel loops": ps.build(s2).bind(a, out),
    }


def constant_launcher(kinds: tuple):
    """A launcher for ``kinds`` compiled as launchers were before they could be stored: the
    spin pool's slot address and the trampoline's address are constants of this process
    (everything else as :func:`probsched.codegen.launch.compile_launcher` compiles it)."""
    from types import SimpleNamespace
    from unittest import mock

    from numba.core import types
    from numba.extending import intrinsic

    from probsched.codegen import launch, spin_pool

    def constant(value):
        @intrinsic
        def read(typingctx):
            return types.int64(), lambda context, builder, sig, args: context.get_constant(types.int64, value)

        return read

    atomics = SimpleNamespace(**{**vars(spin_pool.atomics()), "pool_base": constant(spin_pool.spin_pool().base)})
    with mock.patch.object(spin_pool, "atomics", lambda: atomics), \
            mock.patch.object(launch, "address_of", lambda tramp: constant(launch.function_address(tramp))):
        return launch.compile_launcher(tuple(kinds))


def with_launchers(bound, launchers: dict):
    """``bound`` (a bound kernel) calling ``launchers`` (kinds -> launcher) instead of its own:
    the launchers' addresses are the last arguments of its entry."""
    from probsched.codegen.kernel import BoundKernel
    from probsched.codegen.launch import function_address

    kernel = bound.kernel
    addresses = [function_address(launchers[key]) if kind == "launcher" else addr
                 for (kind, key), addr in zip(kernel.module.address_args, kernel.compiled.addresses)]
    return BoundKernel(kernel, bound._flat[: len(bound._flat) - len(addresses)] + addresses)


def best_kernels_both_ways(db_path: str, names: list) -> dict:
    """``{"W prange": bound, "W pool": bound}`` for each workload ``W``: its best record in
    the database, built with each launcher (outputs checked equal)."""
    from probsched.aligned import aligned_empty
    from probsched.database import Database
    from probsched.workloads.suite import get, small

    db = Database(db_path)
    fns = {}
    saved = os.environ.get("PROBSCHED_LAUNCH")
    try:
        for name in names:
            op, _, idx = name.partition(":")
            w = small(op) if idx == "small" else get(name)
            best = db.best(w, 1, target=None)
            if not best:
                raise SystemExit(f"no successful record of {name} in {db_path}")
            sch = best[0].schedule(w.func)
            inputs = w.random_inputs(np.random.default_rng(0))
            outs = {}
            for mode in ("prange", "pool"):
                os.environ["PROBSCHED_LAUNCH"] = mode
                outs[mode] = [aligned_empty(b.shape, b.dtype) for b in w.outputs]
                fns[f"{name} {mode}"] = ps.build(sch, cache=False).bind(*inputs, *outs[mode])
                fns[f"{name} {mode}"]()
            for a, b in zip(outs["prange"], outs["pool"]):
                np.testing.assert_array_equal(a, b, err_msg=name)
    finally:
        if saved is None:
            os.environ.pop("PROBSCHED_LAUNCH", None)
        else:
            os.environ["PROBSCHED_LAUNCH"] = saved
    return fns


@contextlib.contextmanager
def busy_processes(n: int):
    """``n`` processes that each keep a core busy until the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.2 if n else 0.0)  # running before the first timing
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--db", help="A/B the best records of this tuning database (see above)")
    ap.add_argument("--workloads", default="C1D:0,DEP:0,NRM:2,SFM:2", help="with --db: comma-separated")
    ap.add_argument("--busy", type=int, default=0, help="processes keeping a core busy each while timing")
    ap.add_argument("--spin-only", action="store_true", help="the pool's waits never yield the core (A/B)")
    ap.add_argument("--ab", action="store_true", help="also time launchers with constant addresses (as before)")
    args = ap.parse_args(argv)
    if args.spin_only:
        from probsched.codegen import spin_pool

        spin_pool.SPIN_TICKS = 1 << 62  # read when the pool's functions compile, below
    load = f", {args.busy} busy processes" if args.busy else ""
    load += ", waits spin only" if args.spin_only else ""
    if args.db:
        names = [w.strip() for w in args.workloads.split(",") if w.strip()]
        fns = best_kernels_both_ways(args.db, names)
        with busy_processes(args.busy):
            timed = time_interleaved(fns, rounds=args.rounds)
        print(f"best records of {args.db}, {args.rounds} interleaved rounds{load}\n")
        print("| workload | prange µs | spin pool µs | prange / spin pool |\n|---|---:|---:|---:|")
        ratios = []
        for name in names:
            a, b = timed[f"{name} prange"].median * 1e6, timed[f"{name} pool"].median * 1e6
            ratios.append(a / b)
            print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.3f} |")
        print(f"| geomean | | | {float(np.exp(np.mean(np.log(ratios)))):.3f} |")
        return
    fns = kernels(args.n)
    if args.ab:
        made: dict = {}
        for name in [n for n in fns if n != "serial"]:
            kinds = [ls.kinds for ls in fns[name].kernel.launches]
            made.update({k: made.get(k) or constant_launcher(k) for k in kinds})
            fns[f"{name}, constant addresses"] = ab = with_launchers(fns[name], made)
            a, out = ab.array(0), ab.array(1)
            out[:] = 0
            ab()
            assert np.array_equal(out, (a + 1) * (2 if name.startswith("2") else 1)), name
        load += ", launchers with constant addresses A/B"
    with busy_processes(args.busy):
        timed = time_interleaved(fns, rounds=args.rounds)
    base = timed["serial"].median
    fastest = min(timed["serial"].means)
    print(f"n = {args.n}, {args.rounds} interleaved rounds{load}\n")
    print("| kernel | µs per call | above serial | fastest repeat µs | above serial's |")
    print("|---|---:|---:|---:|---:|")
    for name, t in timed.items():
        print(f"| {name} | {t.median * 1e6:.2f} | {(t.median - base) * 1e6:.2f} | {min(t.means) * 1e6:.2f} | "
              f"{(min(t.means) - fastest) * 1e6:.2f} |")


if __name__ == "__main__":
    main()
