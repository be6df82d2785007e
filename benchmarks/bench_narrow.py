"""bf16 networks by what they store in bfloat16 between tasks: every value, only those every reader rounds, none.

``python benchmarks/bench_narrow.py --onnx-dir DIR --db-dir D [--models resnet50,bert_base] [--rounds 60] [--inputs 8]``

For each canonical ONNX export (``DIR/<model>.onnx``) compiled in bf16 from ``D/<model>.db``
three times, ``ps.compile(..., narrow=M)`` for ``M`` = ``"all"`` (every value a task can
round as it writes it), ``"exact"`` (where every reader rounds it anyway: the results of
``"none"``, float32 between every task; :func:`probsched.graph.precision.narrow_between_tasks`)
and ``"none"``: how many values are stored in bfloat16, each arena's size, the relative
error of the outputs against the network compiled in float32 on ``--inputs`` random inputs
(median; "exact" must equal "none"), and the median latency of ``--rounds`` inferences, the
three timed alternately in one process.
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


def _inputs(graph, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for v in graph.inputs:
        t = graph.types[v]
        out.append(rng.standard_normal(t.shape).astype(np.float32) if t.dtype == "float32" else np.zeros(t.shape, t.dtype))
    return out


def _flat(out) -> list:
    if isinstance(out, dict):
        return [np.asarray(x) for x in out.values()]
    return [np.asarray(x) for x in out] if isinstance(out, (tuple, list)) else [np.asarray(out)]


def _error(got: list, want: list) -> float:
    """The largest difference over the output's largest magnitude, the worst output."""
    return max(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)) for g, w in zip(got, want))


MODES = ("all", "exact", "none")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--onnx-dir", required=True)
    ap.add_argument("--db-dir", required=True)
    ap.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--inputs", type=int, default=8, help="random inputs the error is the median over")
    args = ap.parse_args(argv)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    print(f"{cpu}, {os.cpu_count()} cores, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
          f"bf16, medians of {args.rounds} inferences, interleaved; error against float32, median of {args.inputs} inputs\n")
    print("| model | narrow | values in bf16 | arena MB | relative error | ms | against none |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        graph = ps.from_onnx(os.path.join(args.onnx_dir, f"{name}.onnx"))
        db = os.path.join(args.db_dir, f"{name}.db")
        models = {mode: ps.compile(graph, database=db, precision="bf16", narrow=mode, progress=None) for mode in MODES}
        reference = ps.compile(graph, database=db, progress=None)
        errors = {mode: [] for mode in MODES}
        for seed in range(args.inputs):
            x = _inputs(graph, seed)
            want = _flat(reference(*x))
            for mode, m in models.items():
                errors[mode].append(_error(_flat(m(*x)), want))
        if errors["exact"] != errors["none"]:
            print(f"{name}: narrow='exact' changed the results ({errors['exact']} against {errors['none']})", file=sys.stderr)
        x = _inputs(graph)
        times = {k: [] for k in models}
        for _ in range(args.rounds):
            for k, m in models.items():
                start = time.perf_counter()
                m(*x)
                times[k].append(time.perf_counter() - start)
        ms = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        for mode, m in models.items():
            narrowed = sum(t.dtype == "bfloat16" for t in m.interface.types.values())
            print(f"| {name} | {mode} | {narrowed} | {m.peak_bytes / 1e6:.2f} | {np.median(errors[mode]):.2e} | "
                  f"{ms[mode]:.2f} | {ms['none'] / ms[mode]:.3f}x |", flush=True)


if __name__ == "__main__":
    main()
