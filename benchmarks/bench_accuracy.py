"""Accuracy of the reduced precisions (issues #62 and #64): each engine's bf16 and int8
network against float32, on many inputs, beside OpenVINO's and ONNX Runtime's.

For each canonical ONNX export of ``--onnx-dir`` (``python benchmarks/export_onnx_models.py
--full --out DIR``: torchvision ResNet-50 and MobileNet-V2, Hugging Face BERT-base, random
weights), ``--inputs`` inputs: for an image model, image-like tensors (smooth random pictures
in [0, 1] plus pixel noise, normalised with ImageNet's mean and deviation); for a text model,
token ids and attention masks of random lengths (``[CLS]`` ... ``[SEP]`` then padding). The
float32 reference is ONNX Runtime float32 on the export, graph optimizations off (the ONNX
semantics, as benchmarks/engines.py's reference). Every engine runs the same inputs:

- ``probsched float32`` and ``probsched bf16``: ``ps.compile(ps.from_onnx(export),
  database=DB_DIR/<model>.db, precision=...)`` (records of either precision in the one
  database; without a database, predicted schedules: the row says how many tasks came from
  records);
- ``openvino default (bf16)``: OpenVINO at its default precision, bf16 on a CPU with
  ``avx512_bf16`` (its label names what it reports), and ``openvino f32`` (its f32 hint);
- image models, int8 (unless ``--no-int8``): the export quantized by ONNX Runtime's
  ``quantize_static`` (QDQ, per-channel int8 weights, uint8 activations, min/max ranges of
  ``--calibration`` inputs drawn apart from the test inputs) and that one QDQ file run by
  probsched (compiled without a database unless ``DB_DIR/<model>_int8.db`` exists: the
  schedule barely changes what an int8 task computes, its sums being exact in int32), ONNX
  Runtime (every graph optimization) and OpenVINO (default precision: int8 where the model
  is quantized).

Per engine: the median and largest relative error ``||y - ref|| / ||ref||`` over the
inputs (each output as one vector: BERT's whole last hidden state, padding positions
included), the median and smallest cosine similarity of ``y`` and ``ref``, and for the image
models the fraction of inputs whose arg-max class agrees; and the same of the outputs less
their mean over the inputs (``centered``): the exports' random weights make every input's
output nearly alike (one class for all), so the plain figures mostly measure that common
part, and the note under the table says how large the rest is. An engine that is not
installed or fails to build is left out, its reason printed and kept in the JSON. Prints a
Markdown table with the CPU and date; ``--out FILE`` writes the JSON, keeping the rows of
other models already in FILE (one model per run keeps memory and the machine's load small)::

    python benchmarks/bench_accuracy.py --onnx-dir DIR --db-dir D --models resnet50 --out acc.json
    python benchmarks/bench_accuracy.py --onnx-dir DIR --db-dir D --models bert_base --out acc.json
    python benchmarks/bench_accuracy.py --onnx-dir tests/data/onnx --models resnet50_torchscript \\
        --inputs 4 --calibration 4 --candidates 2                      # does it run?
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

Feeds = Dict[str, np.ndarray]
Predict = Callable[[Feeds], np.ndarray]

#: ImageNet's per-channel mean and deviation, as torchvision's models expect their inputs.
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
CLS, SEP = 101, 102  # BERT's [CLS] and [SEP] token ids
ENGINES = ("probsched-f32", "probsched-bf16", "openvino-default", "openvino-f32",
           "probsched-int8", "onnxruntime-int8", "openvino-int8")


# ----------------------------------------------------------------------------- metrics


def _compare(g: np.ndarray, w: np.ndarray) -> Dict[str, List[float]]:
    """Per row of ``g`` and ``w``: relative error, cosine similarity, arg-max agreement."""
    norms = np.maximum(np.linalg.norm(w, axis=1), 1e-300)
    cos = np.sum(g * w, 1) / np.maximum(np.linalg.norm(g, axis=1) * norms, 1e-300)
    return {"rel": np.linalg.norm(g - w, axis=1) / norms, "cos": cos, "agree": g.argmax(1) == w.argmax(1)}


def metrics(got: Sequence[np.ndarray], want: Sequence[np.ndarray], classes: bool) -> Dict[str, float]:
    """How close outputs ``got`` are to references ``want``, input by input (each output
    flattened to one vector): the median and largest relative error ``||y - ref|| /
    ||ref||``, the median and smallest cosine similarity, and with ``classes`` the fraction
    of inputs whose arg-max agrees.

    The same, ``centered_*``, for what depends on the input: each side's outputs less its
    mean output over the inputs. A network with random weights answers every input nearly
    alike (one class for all), so its plain metrics mostly measure that common part.

    >>> ref = [np.array([1.0, 2.0, 3.0]), np.array([0.0, 4.0, 3.0])]
    >>> m = metrics([ref[0] * 1.01, ref[1] + [0.0, 0.0, 2.0]], ref, classes=True)
    >>> round(m["rel_err_median"], 3), round(m["rel_err_max"], 3), m["cosine_min"] < 1.0, m["argmax_agreement"]
    (0.205, 0.4, True, 0.5)
    >>> m = metrics([r + 5.0 for r in ref], ref, classes=True)  # an offset: no input-dependent error
    >>> m["rel_err_median"] > 1, round(m["centered_rel_err_max"], 12), m["centered_argmax_agreement"]
    (True, 0.0, 1.0)
    """
    if len(got) != len(want) or not want:
        raise ValueError(f"metrics: {len(got)} outputs for {len(want)} references")
    w = np.stack([np.asarray(a, np.float64).reshape(-1) for a in want])
    g = [np.asarray(a, np.float64).reshape(-1) for a in got]
    bad = next((a.size for a in g if a.size != w.shape[1]), None)
    if bad is not None:
        raise ValueError(f"metrics: an output of {bad} values for a reference of {w.shape[1]}")
    g = np.stack(g)
    out: Dict[str, float] = {"inputs": len(want)}
    sides = {"": (g, w), "centered_": (g - g.mean(0), w - w.mean(0))} if len(want) > 1 else {"": (g, w)}
    for prefix, (a, b) in sides.items():
        c = _compare(a, b)
        out.update({prefix + "rel_err_median": float(np.median(c["rel"])), prefix + "rel_err_max": float(np.max(c["rel"])),
                    prefix + "cosine_median": float(np.median(c["cos"])), prefix + "cosine_min": float(np.min(c["cos"]))})
        if classes:
            out[prefix + "argmax_agreement"] = float(np.mean(c["agree"]))
    return out


# ----------------------------------------------------------------------------- inputs


def images(shape: Tuple[int, ...], n: int, seed: int) -> List[np.ndarray]:
    """``n`` image-like NCHW inputs: smooth random pictures in [0, 1] (bilinear over an 8 x 8
    grid of random colours) with pixel noise, normalised as torchvision's models expect.

    >>> x = images((1, 3, 32, 32), 2, seed=0)
    >>> len(x), x[0].shape, x[0].dtype, bool(np.all(np.abs(x[0]) < 3)), bool(np.any(x[0] != x[1]))
    (2, (1, 3, 32, 32), dtype('float32'), True, True)
    """
    rng = np.random.default_rng(seed)
    b, c, h, w = shape
    cells = 8
    y, x = np.linspace(0, cells, h), np.linspace(0, cells, w)
    y0, x0 = np.minimum(y.astype(int), cells - 1), np.minimum(x.astype(int), cells - 1)
    fy, fx = (y - y0)[:, None], (x - x0)[None, :]
    mean = MEAN if c == 3 else np.full(c, 0.5)
    std = STD if c == 3 else np.full(c, 0.25)
    out = []
    for _ in range(n):
        grid = rng.random((b, c, cells + 1, cells + 1))
        top = grid[:, :, y0][..., x0] * (1 - fx) + grid[:, :, y0][..., x0 + 1] * fx
        bottom = grid[:, :, y0 + 1][..., x0] * (1 - fx) + grid[:, :, y0 + 1][..., x0 + 1] * fx
        picture = np.clip(top * (1 - fy) + bottom * fy + 0.05 * rng.standard_normal((b, c, h, w)), 0, 1)
        out.append(((picture - mean[:, None, None]) / std[:, None, None]).astype(np.float32))
    return out


def tokens(shapes: Tuple[Tuple[int, ...], Tuple[int, ...]], vocab: int, n: int, seed: int) -> List[Feeds]:
    """``n`` text inputs: ``[CLS]``, random word ids, ``[SEP]``, then padding (id 0, mask 0),
    of random lengths from a quarter of the sequence to all of it.

    >>> (f,) = tokens(((1, 16), (1, 16)), vocab=30522, n=1, seed=0)
    >>> bool(f["input_ids"][0, 0] == CLS), bool(f["attention_mask"].sum() == f["input_ids"].astype(bool).sum())
    (True, True)
    """
    rng = np.random.default_rng(seed)
    seq = shapes[0][1]
    out = []
    for _ in range(n):
        ids, mask = np.zeros(shapes[0], np.int64), np.zeros(shapes[1], np.int64)
        length = int(rng.integers(max(2, seq // 4), seq + 1))
        low = SEP + 1 if vocab > 1000 else 1  # the word pieces, past the special tokens
        ids[:, :length] = rng.integers(low, vocab, size=(shapes[0][0], length))
        if vocab > SEP:
            ids[:, 0], ids[:, length - 1] = CLS, SEP
        mask[:, :length] = 1
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def model_inputs(path: str) -> Tuple[List[Tuple[str, Tuple[int, ...]]], int]:
    """The ONNX model's inputs (name, shape), and the row count of the table its first input
    indexes (a text model's vocabulary; 0 for an image model)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    inits = {t.name: tuple(t.dims) for t in model.graph.initializer}
    specs = [(i.name, tuple(d.dim_value for d in i.type.tensor_type.shape.dim)) for i in model.graph.input
             if i.name not in inits]
    vocab = next((inits[n.input[0]][0] for n in model.graph.node
                  if n.op_type == "Gather" and n.input[1] == specs[0][0] and n.input[0] in inits), 0)
    return specs, int(vocab)


def network_inputs(path: str, n: int, seed: int) -> Tuple[List[Feeds], bool]:
    """``n`` inputs for the model at ``path``, and whether it is an image model."""
    specs, vocab = model_inputs(path)
    if len(specs) == 1:
        return [{specs[0][0]: x} for x in images(specs[0][1], n, seed)], True
    if [s[0] for s in specs] != ["input_ids", "attention_mask"]:
        raise SystemExit(f"bench_accuracy: {path}: inputs {[s[0] for s in specs]} are neither an image nor (input_ids, attention_mask)")
    return tokens((specs[0][1], specs[1][1]), vocab or 100, n, seed), False


# ----------------------------------------------------------------------------- engines


def probsched_predict(path: str, name: str, db: Optional[str], precision: str, candidates: int) -> Tuple[Predict, dict]:
    """probsched's network of ``path`` in ``precision``, compiled from ``db`` when it exists."""
    import probsched as ps
    from probsched.precision import precision_of

    graph = ps.from_onnx(path, name=name)
    model = ps.compile(graph, database=db if db and os.path.exists(db) else None, candidates=candidates,
                       precision=precision, progress=None)
    names = list(graph.input_names)
    from_db = sum(c.source == "database" for c in model.choices)
    kinds = Counter(precision_of(c.task.func) for c in model.choices)  # a bf16 compile keeps a task float32 where faster
    info = {"tasks": len(model.choices), "tasks_from_database": from_db, "tasks_by_precision": dict(sorted(kinds.items())),
            "database": db if db and os.path.exists(db) else None}
    return (lambda feeds: model(*[feeds[n] for n in names])), info


def quantized(path: str, work_dir: str, name: str, calibration: List[Feeds]) -> str:
    """The QDQ file ONNX Runtime's ``quantize_static`` makes of ``path`` from ``calibration``
    (made once per model, calibration count and seed: kept in ``work_dir``)."""
    from bench_int8 import quantize_with_ort

    out = os.path.join(work_dir, name)
    if not os.path.exists(out):
        quantize_with_ort(path, out, calibration)
    return out


def openvino_int8(engines, path: str) -> Tuple[str, Predict, dict]:
    """OpenVINO at its default precision on a QDQ file, labelled as int8."""
    label, predict = engines.openvino_predict(path, f32=False)
    return label.replace("openvino default", "openvino int8 (QDQ), default"), predict, {}


def run_model(name: str, args: argparse.Namespace) -> dict:
    """One model's rows (module docstring)."""
    import engines

    path = os.path.join(args.onnx_dir, f"{name}.onnx")
    if not os.path.exists(path):
        raise SystemExit(f"bench_accuracy: no {path}; make it with python benchmarks/export_onnx_models.py --full --out {args.onnx_dir}")
    feeds, classes = network_inputs(path, args.inputs, args.seed)
    reference = engines.ort_predict(path, optimize=False)
    want = [reference(f) for f in feeds]
    del reference
    row: dict = {"model": name, "inputs": len(feeds), "image_model": classes,
                 "reference": "onnxruntime float32, graph optimizations off", "engines": {}, "skipped": {}}
    # how much of the output depends on the input: little, with random weights (metrics())
    flat = np.stack([np.asarray(w, np.float64).reshape(-1) for w in want])
    row["input_dependent_share"] = float(np.median(np.linalg.norm(flat - flat.mean(0), axis=1) / np.linalg.norm(flat, axis=1)))
    if classes:  # arg-max agreement means little if every input lands in one class
        row["reference_classes"] = len({int(np.argmax(w)) for w in want})
    db = os.path.join(args.db_dir, f"{name}.db") if args.db_dir else None
    builders: Dict[str, Callable[[], Tuple[str, Predict, dict]]] = {
        "probsched-f32": lambda: ("probsched float32",) + probsched_predict(path, name, db, "float32", args.candidates),
        "probsched-bf16": lambda: ("probsched bf16",) + probsched_predict(path, name, db, "bf16", args.candidates),
        "openvino-default": lambda: engines.openvino_predict(path, f32=False) + ({},),
        "openvino-f32": lambda: engines.openvino_predict(path, f32=True) + ({},),
    }
    if classes and args.int8:
        os.makedirs(args.work_dir, exist_ok=True)
        # a seed of its own: the calibration inputs are never test inputs (checked below)
        calibration, _ = network_inputs(path, args.calibration, args.seed + 1_000_003)
        seen = {f[k].tobytes() for f in calibration for k in f}
        if any(f[k].tobytes() in seen for f in feeds for k in f):
            raise SystemExit("bench_accuracy: a test input is also a calibration input")
        qdq = lambda: quantized(path, args.work_dir, f"{name}.qdq.cal{args.calibration}.seed{args.seed}.onnx", calibration)  # noqa: E731
        int8_db = os.path.join(args.db_dir, f"{name}_int8.db") if args.db_dir else None
        row["calibration_inputs"] = args.calibration
        builders.update({
            "probsched-int8": lambda: ("probsched int8 (QDQ)",) + probsched_predict(qdq(), f"{name}_int8", int8_db, "float32",
                                                                                     args.candidates),
            "onnxruntime-int8": lambda: ("onnxruntime int8 (QDQ)", engines.ort_predict(qdq()), {}),
            "openvino-int8": lambda: openvino_int8(engines, qdq()),
        })
    for key in [k for k in args.engines.split(",") if k in builders]:
        t = time.perf_counter()
        try:
            label, predict, info = builders[key]()
            got = [predict(f) for f in feeds]
        except engines.Unavailable as exc:
            row["skipped"][key] = f"{exc} is not installed"
        except Exception as exc:  # noqa: BLE001 - one engine failing leaves the others' rows
            row["skipped"][key] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        else:
            info = {**info, "build_and_run_s": time.perf_counter() - t}
            row["engines"][label] = {**metrics(got, want, classes), **info}
            print(f"{name}: {label}: {row['engines'][label]}", flush=True)
            continue
        print(f"bench_accuracy: {name}: {key} left out: {row['skipped'][key]}", file=sys.stderr, flush=True)
    return row


# ----------------------------------------------------------------------------- report


COLUMNS = (("rel_err_median", "rel. error median", "{:.2e}"), ("rel_err_max", "rel. error max", "{:.2e}"),
           ("cosine_median", "cosine median", "{:.7f}"), ("cosine_min", "cosine min", "{:.7f}"),
           ("argmax_agreement", "arg-max agreement", "{:.1%}"),
           ("centered_rel_err_median", "centered rel. error median", "{:.2e}"),
           ("centered_cosine_median", "centered cosine median", "{:.5f}"),
           ("centered_argmax_agreement", "centered arg-max agreement", "{:.1%}"))


def table(rows: List[dict]) -> str:
    """The Markdown table of ``rows`` (one line per model and engine, skipped ones named),
    and a note per model on how much its reference outputs depend on the input.

    >>> r = {"model": "m", "skipped": {"openvino-f32": "openvino is not installed"},
    ...      "engines": {"probsched bf16": {"inputs": 2, "rel_err_median": 0.004, "rel_err_max": 0.006, "cosine_median": 0.99999,
    ...                                     "cosine_min": 0.99998, "argmax_agreement": 1.0}}}
    >>> print(table([r]))  # doctest: +NORMALIZE_WHITESPACE
    | model | engine | inputs | rel. error median | rel. error max | cosine median | cosine min | arg-max agreement | centered rel. error median | centered cosine median | centered arg-max agreement |
    |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|
    | m | probsched bf16 | 2 | 4.00e-03 | 6.00e-03 | 0.9999900 | 0.9999800 | 100.0% | - | - | - |
    | m | openvino-f32 | - | left out: openvino is not installed | | | | | | | |
    """
    lines = ["| model | engine | inputs | " + " | ".join(c[1] for c in COLUMNS) + " |", "|---|---|" + "---:|" * (1 + len(COLUMNS))]
    for r in rows:
        for label, m in r["engines"].items():
            cells = [f.format(m[k]) if k in m else "-" for k, _, f in COLUMNS]
            lines.append(f"| {r['model']} | {label} | {m['inputs']} | " + " | ".join(cells) + " |")
        for key, why in r["skipped"].items():
            lines.append(f"| {r['model']} | {key} | - | left out: {why} |" + " |" * (len(COLUMNS) - 1))
    notes = [f"{r['model']}: over its {r['inputs']} inputs the reference's arg-max takes {r['reference_classes']} distinct "
             f"classes, and the part of its output that depends on the input is {r['input_dependent_share']:.1%} of it (median)"
             if "reference_classes" in r else
             f"{r['model']}: the part of the reference's output that depends on the input is {r['input_dependent_share']:.1%} of it (median)"
             for r in rows if "input_dependent_share" in r]
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,mobilenet_v2,bert_base", help="comma-separated <model>.onnx of --onnx-dir")
    ap.add_argument("--onnx-dir", default="onnx_models")
    ap.add_argument("--db-dir", default=None, help="probsched's databases, <model>.db (and <model>_int8.db)")
    ap.add_argument("--inputs", type=int, default=64, help="test inputs per model")
    ap.add_argument("--calibration", type=int, default=32, help="calibration inputs of quantize_static")
    ap.add_argument("--no-int8", dest="int8", action="store_false", help="leave the int8 rows out")
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"a subset of {','.join(ENGINES)}")
    ap.add_argument("--candidates", type=int, default=8, help="programs ranked per task without a record")
    ap.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "bench_accuracy"), help="the QDQ files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the JSON here (keeping other models' rows already in it)")
    args = ap.parse_args(argv)
    unknown = set(args.engines.split(",")) - set(ENGINES)
    if unknown:
        ap.error(f"--engines: unknown {', '.join(sorted(unknown))} (known: {', '.join(ENGINES)})")
    from bench_models import cpu_model
    import probsched as ps

    rows = [run_model(n.strip(), args) for n in args.models.split(",")]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = {"cpu": cpu_model(), "target": str(ps.Target.host()), "date": stamp, "rows": rows}
    if args.out:
        if os.path.exists(args.out):
            with open(args.out) as fh:
                old = json.load(fh)
            mine = {r["model"] for r in rows}
            rows = [r for r in old.get("rows", []) if r["model"] not in mine] + rows
            report["rows"] = rows
            report["earlier_runs"] = old.get("earlier_runs", []) + [{k: old[k] for k in ("cpu", "date") if k in old}]
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1)
    print(f"\n{report['cpu']}, {os.cpu_count()} cores ({report['target']}), {stamp}\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
