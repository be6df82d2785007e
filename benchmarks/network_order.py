"""What network order costs a compiled network, call by call: each kernel call timed alone
in network order four ways, interleaved over inferences (medians per call, summed):

- ``plain``: as an inference runs it;
- ``touched``: its outputs first written (zeros) by the calling thread, untimed;
- ``read``: its outputs first read by the calling thread, untimed;
- ``hot``: the call run once more just before (everything it touches in the caches of the
  cores that use it).

Run it with ``NUMBA_NUM_THREADS=1`` too: what two threads lose beyond one says how much of
network order is data sitting in the other core's cache.

    python benchmarks/network_order.py --onnx D/resnet50.onnx --db T/resnet50.db --precision bf16
    NUMBA_NUM_THREADS=1 python benchmarks/network_order.py --onnx D/resnet50.onnx --db T/resnet50.db --precision bf16
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import probsched as ps

MODES = ("plain", "touched", "read", "hot")


def network_order(model: "ps.CompiledModel", inputs, inferences: int = 25) -> tuple:
    """Milliseconds per inference of ``model``'s calls timed alone, per mode of :data:`MODES`,
    and the spin pool's launch counters per mode (:func:`~probsched.codegen.spin_pool.launch_counts`)."""
    from probsched.codegen.spin_pool import launch_counts

    model(*inputs)
    ctx = model._context()
    outs = [[ctx.arrays[v] for v in s.outputs if v in ctx.arrays] for s in model.steps]
    times = {m: [[] for _ in ctx.runs] for m in MODES}
    counts = {m: {} for m in MODES}
    sink = 0.0
    for it in range(inferences):
        for mode in MODES if it % 2 == 0 else MODES[::-1]:
            model._set_inputs(ctx, ctx.last_args)
            launch_counts(reset=True)
            for k, run in enumerate(ctx.runs):
                if mode == "touched":
                    for a in outs[k]:
                        a.fill(0)
                elif mode == "read":
                    for a in outs[k]:
                        sink += float(a.ravel()[::16].sum())
                elif mode == "hot":
                    run()
                t0 = time.perf_counter()
                run()
                times[mode][k].append(time.perf_counter() - t0)
            for key, n in launch_counts().items():
                counts[mode][key] = counts[mode].get(key, 0) + n
    return {m: 1e3 * sum(float(np.median(t)) for t in times[m]) for m in MODES}, counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--onnx", required=True, help="the model file")
    p.add_argument("--db", default=None, help="tuning database (default: the shipped records)")
    p.add_argument("--precision", default="float32")
    p.add_argument("--narrow", default="exact")
    p.add_argument("--inferences", type=int, default=25)
    args = p.parse_args()
    name = os.path.splitext(os.path.basename(args.onnx))[0]
    model = ps.compile(ps.from_onnx(args.onnx, name=name), database=args.db, precision=args.precision,
                       narrow=args.narrow, progress=None)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(model.interface.types[v].shape).astype(np.float32) for v in model.interface.inputs]
    threads = ps.codegen.compile.configure_numba().config.NUMBA_NUM_THREADS
    result, counts = network_order(model, inputs, args.inferences)
    print(f"{name} {args.precision} narrow={args.narrow}, {threads} thread(s): "
          + ", ".join(f"{m} {ms:.2f} ms" for m, ms in result.items()))
    for m in MODES:  # the hot mode launches twice per call
        print(f"  {m}: " + ", ".join(f"{k} {n}" for k, n in counts[m].items() if n))


if __name__ == "__main__":
    main()
