"""int8 on VNNI (issue #64): kernels against the machine's int8 peak, and quantized networks
beside ONNX Runtime's and OpenVINO's int8 on the same QDQ model.

**Kernels** (always): GMM:2 and C2D:2 in int8 (uint8 x int8 -> int32) are tuned (``--trials``
more trials each, resuming what ``--db`` holds; ``--trials 0`` only times the stored bests),
then timed interleaved in one process beside the ``vpdpbusd`` peak on all threads
(:func:`bench_peak.vnni_peak`: 16 register-resident vectors; on a CPU without VNNI the
``vpmaddwd`` one its kernels are built on, and for workloads of int8r weights such as
``GMM:2:int8r`` the ``vpmaddubsw`` one), each checked against its
reference first. Prints µs, GOP/s and the fraction of the peak; the target is 80%. Where
AMX int8 is usable the design space samples its tile kernels beside the VNNI ones (the
fraction of the ``tdpbusd`` peak is printed too); ``--unit amx`` or ``--unit vector`` fixes
the unit while tuning (a database of its own each, to compare them). Their
second operand is a constant, as a quantized network's weight is: the design space may lay
it out once, in the 4-interleaved order the kernel reads, outside the timed call (name the
workloads with ``--weights-as-inputs`` to time them packing B on every call instead).

**Networks** (``--models``, with ``--onnx-dir``): each float32 ONNX model of the directory
(the canonical torchvision exports: ``python benchmarks/export_onnx_models.py --full --out
DIR``) is quantized by ONNX Runtime (``quant_pre_process``, then ``quantize_static``: QDQ,
per-channel int8 weights, uint8 activations, min/max ranges of ``--calibration`` random
inputs: images, or for a language model such as BERT-base token ids and a mask of ones,
:func:`sample_feeds`; on a CPU without VNNI 7-bit weights, ``reduce_range``, as ONNX
Runtime's documentation asks there: :func:`probsched.graph.quantization.reduce_range_default`). On that one QDQ file: probsched (``ps.from_onnx``, tuned with ``--net-trials``
into ``--db-dir``, or compiled from it with ``--from-db``), ONNX Runtime (all graph
optimizations) and OpenVINO (CPU, its default precision: int8 where the model is
quantized); ONNX Runtime float32 on the float model beside them. With ``--ps-quantize``, also
the float model quantized by ``ps.quantize`` on the same calibration inputs (the other way
in: no ONNX Runtime tools), tuned into the same database. Every engine is timed
interleaved after a 0.2 s pause, and its accuracy is measured against ONNX Runtime float32
on ``--test`` inputs disjoint from the calibration set (relative error, cosine similarity,
and for a classifier arg-max agreement).

Usage::

    python benchmarks/bench_int8.py --trials 256 --db int8.db                         # kernels: tune, time
    python benchmarks/bench_int8.py --trials 16 --unit vector --db vnni.db            # without the AMX tiles
    python benchmarks/bench_int8.py --trials 0 --db int8.db --models resnet50,mobilenet_v2 \\
        --onnx-dir DIR --net-trials 2000 --db-dir D                                  # + networks
    python benchmarks/bench_int8.py --trials 0 --db int8.db --models resnet50,mobilenet_v2 \\
        --onnx-dir DIR --from-db --db-dir D --json out.json                            # time again, quiet
    python benchmarks/bench_int8.py --trials 2 --db /tmp/i.db --models resnet50_torchscript \\
        --onnx-dir tests/data/onnx --db-dir /tmp/nets --rounds 2 --test 4 --calibration 4  # does it run?
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable, Dict, List

import numba
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import probsched as ps  # noqa: E402
from probsched.measure.timer import time_interleaved  # noqa: E402
from probsched.graph.quantization import reduce_range_default  # noqa: E402

from bench_bf16 import constant_weight, tuned_kernels  # noqa: E402
from bench_peak import amx_peak, vnni_peak  # noqa: E402
from probsched.intrinsics.matmul_int8 import MADD  # noqa: E402
from probsched.intrinsics.simd_int8 import dot_quads_name  # noqa: E402
from probsched.intrinsics import amx  # noqa: E402

TARGET = 0.80
#: a model's inputs by their graph names, and what an engine makes of them
Feeds = Dict[str, np.ndarray]
Predict = Callable[[Feeds], np.ndarray]


def bench_kernels(args: argparse.Namespace) -> dict:
    """The kernel table (module docstring)."""
    workloads = {n: ps.workloads.get(n) for n in args.workloads.split(",")}
    if not args.weights_as_inputs:
        workloads = {n: constant_weight(w) for n, w in workloads.items()}
    threads = numba.config.NUMBA_NUM_THREADS
    space = unit_space(args.unit)
    for w in workloads.values() if args.trials else ():
        ps.tune(w, trials=args.trials, database=args.db, seed=args.seed, space=space)
    kernels = tuned_kernels(workloads, 0, args.db, args.seed)
    if not kernels:
        raise SystemExit(f"bench_int8: no records of {', '.join(workloads)} in {args.db}: tune with --trials N")
    timed = time_interleaved(kernels, rounds=args.rounds)
    kinds = {n: weights_of(w) for n, w in workloads.items()}
    peaks = {k: vnni_peak(threads, weights=k) for k in sorted(set(kinds.values()))}
    tiles = amx_peak(threads, unit="int8") if amx.usable("int8") else None
    print(", ".join(f"{instruction(k)} peak on {threads} threads: {p:.1f} GOP/s" for k, p in peaks.items())
          + (f", tdpbusd {tiles:.1f} GOP/s" if tiles else ""))
    print()
    print("| workload | µs | GOP/s | of its instruction's peak |" + (" of the tdpbusd peak |" if tiles else ""))
    print("|---|---:|---:|---:|" + ("---:|" if tiles else ""))
    rows = {}
    for n, t in timed.items():
        gops, peak = workloads[n].flops / t.median / 1e9, peaks[kinds[n]]
        rows[n] = {"us": t.median * 1e6, "gops": gops, "of_peak": gops / peak, "peak": instruction(kinds[n])}
        mark = " (target met)" if gops / peak >= TARGET else ""
        extra = ""
        if tiles:
            rows[n]["of_amx_peak"] = gops / tiles
            extra = f" {gops / tiles:.0%} |"
        print(f"| {n} | {t.median * 1e6:.1f} | {gops:.1f} | {gops / peak:.0%} of {instruction(kinds[n])}{mark} |{extra}")
    return {"threads": threads, "unit": args.unit, "vnni_peak_gops": peaks.get("int8"), "amx_peak_gops": tiles,
            "peaks_gops": {instruction(k): p for k, p in peaks.items()}, "rows": rows}


def weights_of(w: ps.Workload) -> str:
    """``"int8r"`` for a workload whose weights are of reduced range (``GMM:2:int8r``), else ``"int8"``."""
    return "int8r" if any(b.dtype == "int8r" for b in w.func.input_buffers()) else "int8"


def instruction(weights: str) -> str:
    """The dot-product instruction the kernels of ``weights`` run on here."""
    dot = dot_quads_name(weights)
    return {MADD: "vpmaddwd", "dot_quads_maddubs": "vpmaddubsw"}.get(dot, "vpdpbusd")


def unit_space(unit: str):
    """The default space, with every micro-kernel's arithmetic unit fixed to ``unit``
    (``"amx"``, ``"vector"``) unless it is ``"any"`` (where AMX int8 is usable the rule
    samples it beside VNNI, elsewhere there is no choice)."""
    if unit == "any":
        return None
    return ps.space.fixing(ps.space.default(), lambda site: unit if site.endswith("/unit") else None, name=f"default+{unit}")


# ----------------------------------------------------------------------------- networks


#: token ids drawn for a language model's integer inputs (below every vocabulary's size)
TOKENS = 1000


def sample_feeds(inputs, n: int, seed: int) -> List[Feeds]:
    """``n`` inputs of a model whose graph inputs are ``inputs`` (ONNX ``ValueInfo``): an
    image is standard normal; an integer input is token ids in ``[0, TOKENS)``, an attention
    mask all ones."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        feeds = {}
        for info in inputs:
            shape = tuple(d.dim_value for d in info.type.tensor_type.shape.dim)
            if info.type.tensor_type.elem_type == 1:  # float
                feeds[info.name] = rng.standard_normal(shape).astype(np.float32)
            elif "mask" in info.name:
                feeds[info.name] = np.ones(shape, np.int64)
            else:
                feeds[info.name] = rng.integers(0, TOKENS, shape).astype(np.int64)
        out.append(feeds)
    return out


def quantize_with_ort(path: str, out: str, calibration: List[Feeds], reduce_range: bool = False) -> None:
    """ONNX Runtime's static quantization of ``path`` into ``out`` (QDQ, per channel), its
    activation ranges those the model takes on ``calibration``; ``reduce_range``: 7-bit
    weights (:func:`reduce_range_default`)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = out + ".prepared.onnx"
    quant_pre_process(path, prepared, skip_symbolic_shape=True)  # static shapes: ONNX's own inference does
    samples = iter(calibration)

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(samples, None)

    large = os.path.getsize(path) > 2**31 - 2**26  # protobuf's 2 GB: weights beside the model
    quantize_static(prepared, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=reduce_range,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, use_external_data_format=large)


def ort_predict(path: str) -> Predict:
    import engines
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = engines.cores()
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)[0]


def openvino_predict(path: str) -> Predict:
    import engines

    try:
        import openvino as ov
    except ImportError:
        raise engines.Unavailable("openvino") from None
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU",
                                  {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": engines.cores()})
    request = compiled.create_infer_request()
    names = [p.get_any_name() for p in compiled.inputs]
    out = compiled.outputs[0]
    return lambda feeds: np.asarray(request.infer([feeds[n] for n in names])[out])


def accuracy(got: List[np.ndarray], want: List[np.ndarray]) -> Dict[str, float]:
    """Relative error, mean cosine similarity and, for a classifier's logits (one row per
    input), arg-max agreement."""
    g = np.stack([np.asarray(a, np.float64).reshape(-1) for a in got])
    w = np.stack([np.asarray(a, np.float64).reshape(-1) for a in want])
    cos = np.sum(g * w, 1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1))
    out = {"rel_err": float(np.linalg.norm(g - w) / np.linalg.norm(w)), "cosine": float(cos.mean())}
    if all(np.asarray(a).ndim == 2 and np.asarray(a).shape[0] == 1 for a in want):
        out["argmax"] = float(np.mean(g.argmax(1) == w.argmax(1)))
    return out


def bench_network(name: str, args: argparse.Namespace) -> dict:
    """One model of ``--models`` (module docstring)."""
    import engines
    import onnx

    path = os.path.join(args.onnx_dir, f"{name}.onnx")
    if not os.path.exists(path):
        raise SystemExit(f"bench_int8: no {path}; make it with python benchmarks/export_onnx_models.py --full --out {args.onnx_dir}")
    inputs = onnx.load(path, load_external_data=False).graph.input
    os.makedirs(args.db_dir, exist_ok=True)
    qdq = os.path.join(args.db_dir, f"{name}.qdq.onnx")
    reduce_range = {"on": True, "off": False}.get(args.reduce_range, reduce_range_default(ps.Target.host()))
    if not os.path.exists(qdq):
        quantize_with_ort(path, qdq, sample_feeds(inputs, args.calibration, seed=0), reduce_range)
    row: dict = {"model": name, "qdq": qdq, "reduce_range": reduce_range}
    t = time.perf_counter()
    graph = ps.from_onnx(qdq, name=f"{name}_int8")
    row["import_s"], row["tasks"] = time.perf_counter() - t, len(graph.tasks())
    db = os.path.join(args.db_dir, f"{name}_int8.db")
    if args.net_trials:
        t = time.perf_counter()
        result = ps.tune_model(graph, trials=args.net_trials, database=db, seed=args.seed)
        row["tune_s"], row["trials"] = time.perf_counter() - t, len(result.history)
        model = result.model
    else:
        if args.from_db and not os.path.exists(db):
            raise SystemExit(f"bench_int8: --from-db: no database {db}")
        model = ps.compile(graph, database=db if args.from_db else None, candidates=args.candidates, progress=None)
    predicts: Dict[str, Predict] = {"probsched int8": lambda feeds: model(*[feeds[n] for n in graph.input_names])}
    if args.ps_quantize:
        predicts["probsched ps.quantize"] = ps_quantized(name, path, inputs, reduce_range, db, args)
    predicts["onnxruntime int8"] = ort_predict(qdq)
    try:
        predicts["openvino int8"] = openvino_predict(qdq)
    except engines.Unavailable as exc:
        print(f"bench_int8: {exc} is not installed: its column is left out", file=sys.stderr)
    reference = ort_predict(path)
    test = sample_feeds(inputs, args.test, seed=1)  # disjoint from the calibration inputs (seed 0)
    want = [reference(x) for x in test]
    row["accuracy"] = {k: accuracy([p(x) for x in test], want) for k, p in predicts.items()}
    x = test[0]
    calls = {k: (lambda p=p: p(x)) for k, p in predicts.items()}
    calls["onnxruntime float32"] = lambda: reference(x)
    timings = time_interleaved(calls, rounds=args.rounds, min_repeat_ms=args.min_repeat_ms, settle_s=0.2)
    row["ms"] = {k: v.median * 1e3 for k, v in timings.items()}
    return row


def ps_quantized(name: str, path: str, inputs, reduce_range: bool, db: str, args: argparse.Namespace) -> Predict:
    """The float model quantized by ``ps.quantize`` on the calibration inputs ONNX Runtime
    had (``--ps-quantize``), tuned into the QDQ model's database (the tasks the two share are
    tuned once: :mod:`probsched.graph.quant_plan`) or compiled from it."""
    graph = ps.from_onnx(path, name=name)
    cal = [tuple(f[n] for n in graph.input_names) for f in sample_feeds(inputs, args.calibration, seed=0)]
    q = ps.quantize(graph, cal, reduce_range=reduce_range, name=f"{name}_ps_int8")
    if args.net_trials:
        model = ps.tune_model(q, trials=args.net_trials, database=db, seed=args.seed).model
    else:
        model = ps.compile(q, database=db if args.from_db else None, candidates=args.candidates, progress=None)
    return lambda feeds: model(*[feeds[n] for n in q.input_names])


def network_tables(rows: List[dict]) -> str:
    engines_ = list(dict.fromkeys(k for r in rows for k in r["ms"]))
    lines = ["| model | tasks | " + " | ".join(f"{k} ms" for k in engines_) + " |", "|" + "---|" * (2 + len(engines_))]
    for r in rows:
        lines.append(f"| {r['model']} | {r['tasks']} | " + " | ".join(f"{r['ms'][k]:.2f}" if k in r["ms"] else "-" for k in engines_) + " |")
    lines += ["", "| model | engine | rel. error | cosine | arg-max agreement |", "|---|---|---:|---:|---:|"]
    for r in rows:
        for k, a in r["accuracy"].items():
            agree = f"{a['argmax']:.0%}" if "argmax" in a else "-"
            lines.append(f"| {r['model']} | {k} | {a['rel_err']:.4f} | {a['cosine']:.5f} | {agree} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="GMM:2:int8,C2D:2:int8", help="kernel workloads timed against the peaks ('': none)")
    ap.add_argument("--trials", type=int, default=256, help="more trials per kernel workload (0: time the stored bests)")
    ap.add_argument("--db", required=True, help="the kernels' database")
    ap.add_argument("--unit", choices=("any", "amx", "vector"), default="any",
                    help="the kernels' unit while tuning: AMX int8 tiles, VNNI vectors, or sampled (one --db per unit to compare)")
    ap.add_argument("--weights-as-inputs", action="store_true", help="B an input, packed on every call (module docstring)")
    ap.add_argument("--models", default="", help="comma-separated ONNX models of --onnx-dir (without .onnx)")
    ap.add_argument("--onnx-dir", default="onnx_models")
    ap.add_argument("--db-dir", default="int8_dbs", help="QDQ files and the networks' databases")
    ap.add_argument("--net-trials", type=int, default=0, help="tune each network this long (0: compile)")
    ap.add_argument("--from-db", action="store_true", help="compile the networks from their databases")
    ap.add_argument("--candidates", type=int, default=32, help="programs ranked per task without records")
    ap.add_argument("--calibration", type=int, default=32, help="calibration inputs of quantize_static")
    ap.add_argument("--reduce-range", choices=("auto", "on", "off"), default="auto",
                    help="quantize_static's 7-bit weights: auto = on where the CPU has no VNNI, as ONNX Runtime's "
                         "documentation asks with per-channel weights (its products saturate otherwise); a QDQ file "
                         "already in --db-dir is used as it is")
    ap.add_argument("--ps-quantize", action="store_true",
                    help="also the float model quantized by ps.quantize on the same calibration inputs (tuned with "
                         "--net-trials more trials into the same database)")
    ap.add_argument("--test", type=int, default=64, help="test inputs of the accuracy table")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-repeat-ms", type=float, default=30.0)
    ap.add_argument("--json", help="write the numbers here too")
    args = ap.parse_args(argv)
    print(ps.Target.host())
    print()
    out = {"target": str(ps.Target.host()), "kernels": bench_kernels(args) if args.workloads else []}
    if args.models:
        rows = [bench_network(n, args) for n in args.models.split(",")]
        print()
        print(network_tables(rows))
        out["networks"] = rows
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
