"""bf16 networks with values between tasks stored in bfloat16 (the default) against float32.

``python benchmarks/bench_narrow.py --onnx-dir DIR --db-dir D [--models resnet50,bert_base] [--rounds 60]``

For each canonical ONNX export (``DIR/<model>.onnx``) compiled in bf16 from ``D/<model>.db``
twice, ``ps.compile(..., narrow=True)`` (bfloat16 where every reader rounds a value anyway,
:func:`probsched.graph.precision.narrow_between_tasks`) and ``narrow=False`` (float32
between every task): how many values are stored in bfloat16, each arena's size, whether the
outputs are equal (they must be: the same rounding, once at the writer), and the median
latency of ``--rounds`` inferences, the two timed alternately in one process.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import probsched as ps  # noqa: E402


def _inputs(graph) -> list:
    rng = np.random.default_rng(0)
    out = []
    for v in graph.inputs:
        t = graph.types[v]
        out.append(rng.standard_normal(t.shape).astype(np.float32) if t.dtype == "float32" else np.zeros(t.shape, t.dtype))
    return out


def _flat(out) -> list:
    if isinstance(out, dict):
        return [np.asarray(x) for x in out.values()]
    return [np.asarray(x) for x in out] if isinstance(out, (tuple, list)) else [np.asarray(out)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onnx-dir", required=True)
    ap.add_argument("--db-dir", required=True)
    ap.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    ap.add_argument("--rounds", type=int, default=60)
    args = ap.parse_args(argv)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    print(f"{cpu}, {os.cpu_count()} cores, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
          f"bf16, medians of {args.rounds} inferences, interleaved\n")
    print("| model | values in bf16 | arena MB (bf16 / f32 between) | outputs equal | bf16 between ms | f32 between ms | ratio |")
    print("|---|---:|---:|:-:|---:|---:|---:|")
    for name in args.models.split(","):
        graph = ps.from_onnx(os.path.join(args.onnx_dir, f"{name}.onnx"))
        db = os.path.join(args.db_dir, f"{name}.db")
        models = {narrow: ps.compile(graph, database=db, precision="bf16", narrow=narrow, progress=None)
                  for narrow in (True, False)}
        x = _inputs(graph)
        equal = all(np.array_equal(a, b) for a, b in zip(_flat(models[True](*x)), _flat(models[False](*x))))
        times = {k: [] for k in models}
        for _ in range(args.rounds):
            for k, m in models.items():
                start = time.perf_counter()
                m(*x)
                times[k].append(time.perf_counter() - start)
        narrowed = sum(t.dtype == "bfloat16" for t in models[True].interface.types.values())
        on, off = (float(np.median(times[k])) * 1e3 for k in (True, False))
        print(f"| {name} | {narrowed} | {models[True].peak_bytes / 1e6:.2f} / {models[False].peak_bytes / 1e6:.2f} | "
              f"{'yes' if equal else 'NO'} | {on:.2f} | {off:.2f} | {off / on:.3f} |", flush=True)


if __name__ == "__main__":
    main()
