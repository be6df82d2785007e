"""Whole networks: import, compile, tune, and end-to-end latency beside jax.jit (and ONNX Runtime).

``python benchmarks/bench_models.py [--models resnet50,mobilenet_v2,bert_base] [--trials N --db-dir DIR]``

For each model, in one process:

1. import (``ps.from_jax``) and fusion: seconds, operators, tasks;
2. the untuned compile (``ps.compile`` without records: transfer-model-predicted schedules):
   seconds and the arena's peak bytes;
3. with ``--trials N``: ``ps.tune_model`` with that budget (database ``DIR/<model>.db``,
   resumed when it exists): wall time, seconds per trial and where they went; with
   ``--from-db`` instead, the network compiled from that database's records (to time a
   tuning done before, on a quieter machine);
4. end-to-end latency of the untuned and (with ``--trials``) tuned networks beside
   ``jax.jit`` of the same function, and ONNX Runtime when ``--onnx`` is given and the
   ``onnx`` extra is installed (the function exported with jax2onnx), all on the same
   inputs, interleaved round by round (:func:`probsched.measure.timer.time_interleaved`):
   medians of ``--rounds`` rounds.

Prints a Markdown table (and ``--json FILE`` writes the figures) with the CPU model and date;
with ``--engines``, under it, each peer's time over probsched's within each round (median
and range over the rounds: :func:`paired_ratios`), which the host's slower minutes move
less than they move the medians.

**Every engine on the same graph** (``--engines``): the canonical ONNX exports of the
torchvision / Hugging Face models (``python benchmarks/export_onnx_models.py --full --out
DIR``) are imported by probsched with ``ps.from_onnx``, tuned (``--trials``) or compiled from
a database (``--from-db``), and timed interleaved in one process beside ONNX Runtime (all
graph optimizations; BERT also after ORT's transformer optimizer), OpenVINO (f32 hint, and
its default precision, named in the column) and PyTorch eager, each after a 0.2 s pause,
every engine's output checked against the reference first (ONNX Runtime without graph
optimizations; OpenVINO's reduced default precision within 5e-2)::

    python benchmarks/bench_models.py --engines --onnx-dir DIR --trials 800 --db-dir D   # tune, then time
    python benchmarks/bench_models.py --engines --onnx-dir DIR --from-db --db-dir D      # time again, quiet
    python benchmarks/bench_models.py --engines --onnx-dir DIR --precisions float32,bf16 ...  # a bf16 column too
    python benchmarks/bench_models.py --engines ... --precisions bf16 --narrow exact,all        # bf16 twice: ps.compile(narrow=)
    python benchmarks/bench_models.py --engines --tiny --onnx-dir tests/data/onnx \
        --models resnet50_torchscript --rounds 3 --min-repeat-ms 20                       # does it run?
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import probsched as ps  # noqa: E402
from probsched.measure.timer import time_interleaved  # noqa: E402


def cpu_model() -> str:
    """The CPU's model name (``lscpu``'s), for the record."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _fix_pooling(model) -> None:
    """jax2onnx (0.17) exports an NHWC ``reduce_window`` max as a 4-d MaxPool over
    Unsqueezed 6-d data, which ONNX Runtime refuses ("Unsupported pooling size"): replace
    each such Unsqueeze-Unsqueeze-MaxPool-Squeeze chain by Transpose-MaxPool-Transpose."""
    from onnx import helper

    g = model.graph
    by_output = {o: n for n in g.node for o in n.output}
    readers = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    for pool in [n for n in g.node if n.op_type == "MaxPool"]:
        attrs = {a.name: list(a.ints) for a in pool.attribute}
        kernel = attrs.get("kernel_shape", [])
        if len(kernel) != 4 or kernel[0] != 1 or kernel[3] != 1:
            continue
        u2 = by_output.get(pool.input[0])
        u1 = by_output.get(u2.input[0]) if u2 is not None else None
        (sq,) = readers.get(pool.output[0], [None])
        if not (u1 and u2 and sq and u1.op_type == u2.op_type == "Unsqueeze" and sq.op_type == "Squeeze"):
            continue
        strides, pads = attrs.get("strides", [1] * 4), attrs.get("pads", [0] * 8)
        x, y, tag = u1.input[0], sq.output[0], pool.name
        new = [
            helper.make_node("Transpose", [x], [f"{tag}_nchw"], perm=[0, 3, 1, 2]),
            helper.make_node("MaxPool", [f"{tag}_nchw"], [f"{tag}_pooled"], kernel_shape=kernel[1:3],
                             strides=strides[1:3], pads=[pads[1], pads[2], pads[5], pads[6]]),
            helper.make_node("Transpose", [f"{tag}_pooled"], [y], perm=[0, 2, 3, 1]),
        ]
        at = list(g.node).index(u1)
        for old in (u1, u2, pool, sq):
            g.node.remove(old)
        for k, n in enumerate(new):
            g.node.insert(at + k, n)


def onnx_runner(fn, args):
    """A no-argument callable running ``fn`` in ONNX Runtime (exported with jax2onnx), or None."""
    try:
        import onnxruntime as ort
        from jax2onnx import to_onnx
    except ImportError:
        return None
    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "model.onnx")
    model = to_onnx(fn, [a.shape for a in args])
    _fix_pooling(model)
    with open(path, "wb") as fh:
        fh.write(model.SerializeToString())
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feeds = dict(zip(names, args))
    sess.run(None, feeds)
    return lambda: sess.run(None, feeds)


def bench_model(name: str, args: argparse.Namespace) -> dict:
    import jax

    fn, inputs = ps.models.get(name)
    row: dict = {"model": name}
    t = time.perf_counter()
    graph = ps.from_jax(fn, *inputs, name=name)
    tasks = graph.tasks()
    row["import_s"] = time.perf_counter() - t
    row["operators"], row["tasks"] = len(graph.nodes), len(tasks)
    row["gflop"] = sum(tk.flops * tk.weight for tk in tasks) / 1e9
    t = time.perf_counter()
    untuned = ps.compile(graph, candidates=args.candidates)
    row["compile_untuned_s"] = time.perf_counter() - t
    row["peak_mib"] = untuned.peak_bytes / 2**20
    fns = {"untuned": lambda: untuned(*inputs)}
    if args.trials:
        db = os.path.join(args.db_dir, f"{name}.db")
        t = time.perf_counter()
        result = ps.tune_model(graph, trials=args.trials, database=db, seed=args.seed, retime_top=args.retime_top)
        row["tune_s"] = time.perf_counter() - t
        row["trials"] = len(result.history)
        row["s_per_trial"] = result.seconds_per_trial
        row["phases_s"] = result.phase_seconds
        row["estimated_ms"] = result.estimated_seconds * 1e3
        print(result.summary(), flush=True)
        tuned = result.model
        fns = {"tuned": lambda: tuned(*inputs), **fns}
    elif args.from_db:
        db = os.path.join(args.db_dir, f"{name}.db")
        if not os.path.exists(db):
            raise SystemExit(f"bench_models: --from-db: no database {db} for {name}")
        tuned = ps.compile(graph, database=db, candidates=args.candidates)
        fns = {"tuned": lambda: tuned(*inputs), **fns}
    if "tuned" in fns:
        expected = np.asarray(jax.jit(fn)(*inputs))
        row["max_abs_err"] = float(np.max(np.abs(tuned(*inputs) - expected)))
    jitted = jax.jit(fn)
    jitted(*inputs)
    fns["jax.jit"] = lambda: jax.block_until_ready(jitted(*inputs))
    if args.onnx:
        run = onnx_runner(fn, inputs)
        if run is not None:
            fns["onnxruntime"] = run
    timings = time_interleaved(fns, rounds=args.rounds, min_repeat_ms=args.min_repeat_ms)
    row["ms"] = {k: v.median * 1e3 for k, v in timings.items()}
    return row


def _torch_module(name: str, tiny: bool):
    """The PyTorch model an ONNX file of benchmarks/export_onnx_models.py was exported from
    (same construction, same random weights), or None for another file."""
    import export_onnx_models as ex

    base = name
    for suffix in ("_torchscript", "_dynamo"):
        base = base[: -len(suffix)] if base.endswith(suffix) else base
    if base not in ex.MODELS:
        return None
    ex._torch()
    module, _ = ex.MODELS[base](tiny)
    module.eval()
    ex.randomize(module)
    return module


def _feeds(path: str, name: str) -> dict:
    """Inputs for the model's inputs: an image, or token ids and a padded attention mask."""
    import onnx
    import export_onnx_models as ex

    model = onnx.load(path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    shapes = tuple(tuple(d.dim_value for d in i.type.tensor_type.shape.dim) for i in model.graph.input if i.name not in inits)
    return ex.example_inputs(name, shapes)


def canonical_export(onnx_dir: str, name: str, who: str = "bench_models") -> tuple:
    """``(path, feeds, expected)`` of the canonical export ``onnx_dir/<name>.onnx``: its
    inputs (:func:`_feeds`) and the reference output every engine is checked against."""
    import engines

    path = os.path.join(onnx_dir, f"{name}.onnx")
    if not os.path.exists(path):
        raise SystemExit(f"{who}: no {path}; make it with python benchmarks/export_onnx_models.py --full --out {onnx_dir}")
    feeds = _feeds(path, name)
    return path, feeds, engines.reference(path, feeds)


def bench_engines(name: str, args: argparse.Namespace) -> dict:
    """One model of ``--engines`` mode (see the module docstring)."""
    import engines

    path, feeds, expected = canonical_export(args.onnx_dir, name)
    row: dict = {"model": name, "graph": os.path.basename(path)}
    t = time.perf_counter()
    graph = ps.from_onnx(path, name=name)
    tasks = graph.tasks()
    row["import_s"] = time.perf_counter() - t
    row["operators"], row["tasks"] = len(graph.nodes), len(tasks)
    row["gflop"] = sum(tk.flops * tk.weight for tk in tasks) / 1e9
    args_in = [feeds[n] for n in graph.input_names]
    os.makedirs(args.db_dir, exist_ok=True)
    db = os.path.join(args.db_dir, f"{name}.db")  # one database: records carry their task's precision
    runners = []
    first_narrow = args.narrow.split(",")[0]
    for precision in args.precisions.split(","):
        suffix = "" if precision == "float32" else f" {precision}"
        if args.trials:
            t = time.perf_counter()
            result = ps.tune_model(graph, trials=args.trials, database=db, seed=args.seed, retime_top=args.retime_top,
                                   precision=precision)
            row.setdefault("tune_s", {})[precision] = time.perf_counter() - t
            row.setdefault("trials", {})[precision] = len(result.history)
            print(result.summary(), flush=True)
            model, label = result.model, "probsched tuned" + suffix
        elif args.from_db:
            if not os.path.exists(db):
                raise SystemExit(f"bench_models: --from-db: no database {db} for {name}")
            model = ps.compile(graph, database=db, candidates=args.candidates, precision=precision, narrow=first_narrow)
            label = "probsched tuned" + suffix
        else:
            model = ps.compile(graph, candidates=args.candidates, precision=precision, narrow=first_narrow)
            label = "probsched untuned" + suffix
        if precision != "float32" and first_narrow != "exact":
            label += f" narrow={first_narrow}"
        runners.append((label, lambda m=model: m(*args_in), model(*args_in)))
        for narrow in args.narrow.split(",")[1:] if precision != "float32" else ():
            # the same records, other values stored in bfloat16 between tasks (the first mode is the one above)
            other = ps.compile(graph, database=db if (args.trials or args.from_db) else None, candidates=args.candidates,
                               precision=precision, narrow=narrow)
            runners.append((f"{label} narrow={narrow}", lambda m=other: m(*args_in), other(*args_in)))
    builders = [lambda: engines.ort_runner(path, feeds)]
    if "bert" in name:
        heads, hidden = (2, 32) if args.tiny else (12, 768)
        builders.append(lambda: engines.ort_transformer_runner(path, feeds, heads, hidden))
    builders += [lambda: engines.openvino_runner(path, feeds, f32=True), lambda: engines.openvino_runner(path, feeds, f32=False)]
    module = _torch_module(name, args.tiny)
    if module is not None:
        builders.append(lambda: engines.torch_runner(module, feeds))
    for build in builders:
        try:
            runners.append(build())
        except engines.Unavailable as exc:
            print(f"bench_models: {exc} is not installed: its column is left out", file=sys.stderr)
    # reduced precisions are checked as OpenVINO's default precision is (bf16 on a CPU with it)
    reduced = {f"probsched {kind} {p}": 5e-2 for p in args.precisions.split(",") if p != "float32" for kind in ("tuned", "untuned")}
    # float32: 1e-3, as a network with Winograd convolutions errs more than direct ones (stated in the JSON)
    row["rel_err"] = engines.checked(runners, expected, {"openvino default": 5e-2, **reduced, "probsched": 1e-3})
    timings = time_interleaved({lbl: call for lbl, call, _ in runners}, rounds=args.rounds,
                               min_repeat_ms=args.min_repeat_ms, settle_s=0.2)
    row["ms"] = {k: v.median * 1e3 for k, v in timings.items()}
    row["rounds_ms"] = {k: [m * 1e3 for m in v.means] for k, v in timings.items()}
    return row


def paired_ratios(row: dict) -> dict:
    """For each probsched column and each peer: the peer's time over probsched's, round by
    round (every engine runs once per round, minutes apart at most from the others: the
    ratio within a round cancels the host's slower stretches, which move every engine's
    median), as ``(median, lowest, highest)`` over the rounds; above 1, probsched is faster.

    >>> r = paired_ratios({"rounds_ms": {"probsched tuned": [2.0, 4.0, 2.0], "openvino f32": [3.0, 5.0, 2.0]}})
    >>> r["probsched tuned"]["openvino f32"]
    (1.25, 1.0, 1.5)
    """
    rounds = row.get("rounds_ms", {})
    ours = [k for k in rounds if k.startswith("probsched")]
    out: dict = {}
    for k in ours:
        for peer in (p for p in rounds if not p.startswith("probsched")):
            ratios = [b / a for a, b in zip(rounds[k], rounds[peer])]
            out.setdefault(k, {})[peer] = (float(np.median(ratios)), min(ratios), max(ratios))
    return out


def ratios_lines(rows: list) -> str:
    """:func:`paired_ratios` of every model as lines under the table."""
    lines = []
    for r in rows:
        for k, peers in paired_ratios(r).items():
            cells = ", ".join(f"{peer} {m:.2f}x ({lo:.2f}-{hi:.2f})" for peer, (m, lo, hi) in peers.items())
            lines.append(f"- {r['model']}, {k}: each peer's time over its own in the same round, median (range): {cells}")
    return "\n".join(lines)


def engines_table(rows: list) -> str:
    """The every-engine table: one column per engine, probsched's time first."""
    impls = []
    for r in rows:
        impls += [k for k in r["ms"] if k not in impls]
    order = ["probsched", "onnxruntime", "onnxruntime+", "openvino f32", "openvino default", "pytorch"]
    impls.sort(key=lambda k: max(i for i, o in enumerate(order) if k.startswith(o)))
    head = ["model", "GFLOP", "trials (tuning s)"] + [f"{k} ms" for k in impls]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        tuned = ", ".join(f"{n} ({r['tune_s'][p]:.0f})" for p, n in r["trials"].items()) if "trials" in r else "-"
        cells = [r["model"], f"{r['gflop']:.3g}", tuned] + [f"{r['ms'][k]:.2f}" if k in r["ms"] else "-" for k in impls]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(rows: list) -> str:
    impls = []
    for r in rows:
        for k in r["ms"]:
            if k not in impls:
                impls.append(k)
    head = ["model", "GFLOP", "tasks", "import s", "untuned compile s", "arena MiB"]
    head += [f"{k} ms" for k in impls] + ["jax.jit / ours"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ours = r["ms"].get("tuned", r["ms"]["untuned"])
        cells = [r["model"], f"{r['gflop']:.2f}", str(r["tasks"]), f"{r['import_s']:.1f}", f"{r['compile_untuned_s']:.0f}", f"{r['peak_mib']:.1f}"]
        cells += [f"{r['ms'][k]:.1f}" if k in r["ms"] else "-" for k in impls]
        cells.append(f"{r['ms']['jax.jit'] / ours:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    p.add_argument("--trials", type=int, default=0, help="tune each model with this budget (0: untuned only)")
    p.add_argument("--db-dir", default=".", help="where the tuning databases go")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--from-db", action="store_true", help="no tuning: compile the tuned network from DIR/<model>.db")
    p.add_argument("--candidates", type=int, default=128, help="predicted candidates per untuned task")
    p.add_argument("--retime-top", type=int, default=None,
                   help="candidates re-timed per weighty task after tuning (default: ps.tune_model's, which "
                        "re-times them with their weights cold, as the network runs them; 0: none)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--min-repeat-ms", type=float, default=300.0)
    p.add_argument("--onnx", action="store_true", help="also time ONNX Runtime (needs the onnx extra)")
    p.add_argument("--json", default=None, help="write the figures to this file")
    p.add_argument("--engines", action="store_true", help="every engine on the same ONNX graphs (--onnx-dir)")
    p.add_argument("--onnx-dir", default=".", help="--engines: where <model>.onnx are (export_onnx_models.py --full)")
    p.add_argument("--tiny", action="store_true", help="--engines: the files are export_onnx_models.py --tiny's")
    p.add_argument("--precisions", default="float32",
                   help="--engines: probsched's precisions, each tuned and timed (float32,bf16: a bf16 column beside float32)")
    p.add_argument("--narrow", default="exact",
                   help="--engines, reduced precisions: what is stored in bfloat16 between tasks (ps.compile's narrow=), "
                        "comma-separated for a column each (exact,all); the first is the tuned model's")
    args = p.parse_args(argv)
    if args.trials and args.narrow.split(",")[0] != "exact":
        p.error("--narrow: a tuned run's model is compiled with narrow='exact' first; put exact first (--narrow exact,all)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # engines.py, export_onnx_models.py
    if args.engines:
        # PyTorch first: its libtorch asks for libgomp.so.1 by soname, and once numba's OpenMP
        # threading layer (started by probsched's first compile) has loaded the system's
        # libgomp, PyTorch runs on that one instead of its own, 7x slower here (BERT-base
        # 100 -> 700-780 ms). Loaded first, PyTorch's libgomp serves both and neither slows.
        try:
            import torch  # noqa: F401
        except ImportError:
            pass
    rows = []
    for name in args.models.split(","):
        rows.append((bench_engines if args.engines else bench_model)(name.strip(), args))
        print(json.dumps(rows[-1], indent=1), flush=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    print(f"\n{cpu_model()}, {os.cpu_count()} cores, {stamp}; load {os.getloadavg()[0]:.1f}\n")
    print(engines_table(rows) if args.engines else table(rows))
    if args.engines:
        print("\n" + ratios_lines(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cpu": cpu_model(), "date": stamp, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
