"""Where the time of one inference goes, layer category by layer category, in each engine.

``python benchmarks/bench_layers.py --onnx-dir DIR --db-dir D [--models resnet50,mobilenet_v2,bert_base]
[--precision float32|bf16|int8] [--repeat 20] [--out FILE]``

For each canonical ONNX export (``DIR/<model>.onnx``, ``benchmarks/export_onnx_models.py
--full``), in one process: probsched compiled from ``D/<model>.db`` (without ``--db-dir``:
untuned), ONNX Runtime (all graph optimizations, intra-op threads = cores) and OpenVINO
(LATENCY hint; the f32 precision hint in float32, its default precision with ``--precision
bf16``, where ONNX Runtime, which has no bf16 kernels, is left out), run as
``benchmarks/engines.py`` runs them and each checked against the reference output first.
With ``--precision int8`` every engine runs the QDQ file ``bench_int8.py`` made
(``D/<model>.qdq.onnx``; probsched from ``D/<model>_int8.db``, OpenVINO in its default
precision, int8 where the model is quantized), each within 5% of the float32 reference.
Per engine, per layer, the median over ``--repeat`` inferences of:

- probsched: each kernel call of the network timed alone in run order
  (``CompiledModel.profile_calls``), categorised by its fused task's JAX primitives;
- ONNX Runtime: its profiler's per-node kernel times (``enable_profiling``);
- OpenVINO: its per-layer counters (``PERF_COUNT``, ``get_profiling_info``); a layer it
  fused (an activation, a bias) runs inside the one it fused into and counts there;

mapped to common rows (``benchmarks/layer_categories.py``): stem conv, 3x3 conv, 1x1 conv,
depthwise conv, pooling, dense, other for a CNN; dense matmul, attention, layer norm,
elementwise, embedding, other for a transformer. Then "total of layers" and "measured
inference", the engine's latency timed without its profiler (the difference is what a call
costs besides its layers); for probsched also "its tasks' records", the sum over its calls of
each task's time when it was tuned (timed alone, weights hot), and a column of the same calls
each run again at once (weights and inputs hot): the difference from the network column is
what running in network order (weights arriving from memory) costs, the rest is the kernels';
and a column of the same calls run again with only their weights flushed from the caches
first (``profile_calls(hot=True, cold_weights=True)``): the part of that cost the weights
explain.
Engines are interleaved round by round, each profiled or timed after a pause of
:data:`SETTLE_S` and one untimed inference of its own, as ``bench_models.py`` and
``bench_int8.py`` time them (``time_interleaved``): the pause lets the previous engine's
spinning threads stop, the untimed inference wakes this engine's threads and warms its
caches. Run back to back, or timed on the first inference after a pause, every engine's
inference took 1.5-2x its steady time on 2 cores. Printed per network: the Markdown table,
and the
layers where probsched loses most to the best peer, aligned by the ONNX node each layer grew
from (``3x3 conv #7`` is the 7th 3x3 convolution of the ONNX graph in every engine).
``--out FILE`` writes every layer's figures as JSON.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # engines.py, layer_categories.py

import numpy as np  # noqa: E402

import layer_categories as lc  # noqa: E402


@dataclass
class Layer:
    """One timed layer of one engine: the engine's ``name`` and operator type ``op``, its
    row, the ONNX node it aligns to (None when nothing maps back), median milliseconds;
    for probsched, where its task's schedule came from (``database``, ``predicted``, ...),
    the record's own time (the task timed alone when it was tuned), if any, and the call's
    time when run again at once (``hot_ms``: weights and inputs in cache)."""

    name: str
    op: str
    category: str
    anchor: Optional[str]
    ms: float
    source: str = ""
    record_ms: Optional[float] = None
    hot_ms: Optional[float] = None
    cold_weights_ms: Optional[float] = None


#: seconds of quiet before each engine's untimed and then profiled or timed inference (the module docstring)
SETTLE_S = 0.2
#: OpenVINO's column on a QDQ model (--precision int8)
OPENVINO_INT8 = "openvino int8 (QDQ)"


def category_totals(layers: Sequence[Layer]) -> Dict[str, float]:
    """Milliseconds per row.

    >>> category_totals([Layer("a", "Conv", "1x1 conv", None, 1.5), Layer("b", "Conv", "1x1 conv", None, 0.5),
    ...                  Layer("c", "Add", "other", None, 0.25)])
    {'1x1 conv': 2.0, 'other': 0.25}
    """
    out: Dict[str, float] = {}
    for layer in layers:
        out[layer.category] = out.get(layer.category, 0.0) + layer.ms
    return out


def medians(samples: Dict[str, List[float]], skip: int) -> Dict[str, float]:
    """Median of each key's samples after the first ``skip`` (the warm-up inferences)."""
    return {k: float(np.median(v[skip:] if len(v) > skip else v)) for k, v in samples.items()}


def ort_layers(events: Sequence[dict], index: "lc.OnnxIndex", skip: int, stride: int = 1) -> List[Layer]:
    """ONNX Runtime's profile (the ``end_profiling()`` JSON's events) as layers, in run
    order: each node's ``*_kernel_time`` events, one per inference, of which the last of
    every ``stride`` (the others: untimed warm-up inferences), the first ``skip`` left out.

    >>> ev = [{"cat": "Node", "name": "n_kernel_time", "dur": d, "args": {"op_name": "Relu"}} for d in (9, 2, 4)]
    >>> [(l.name, l.op, l.ms) for l in ort_layers(ev, None, skip=1)]
    [('n', 'Relu', 0.003)]
    >>> [l.ms for l in ort_layers(ev + ev[:1], None, skip=0, stride=2)]   # runs 9 (warm), 2, 4 (warm), 9
    [0.0055]
    """
    samples: Dict[str, List[float]] = {}
    ops: Dict[str, str] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            samples.setdefault(name, []).append(e["dur"] / 1e3)
            ops[name] = e.get("args", {}).get("op_name", "")
    samples = {k: v[stride - 1 :: stride] for k, v in samples.items()}
    return _layers(medians(samples, skip), ops, index)


def _layers(ms: Dict[str, float], ops: Dict[str, str], index: Optional["lc.OnnxIndex"]) -> List[Layer]:
    out = []
    for name, t in ms.items():
        cat, anchor = index.layer(ops[name], name) if index is not None else ("other", None)
        out.append(Layer(name, ops[name], cat, anchor, t))
    return align_unnamed(out, index) if index is not None else out


def align_unnamed(layers: List[Layer], index: "lc.OnnxIndex") -> List[Layer]:
    """Give the layers no ONNX name maps back to (``SkipLayerNormalization_token_4``,
    ``MVN_53``) the anchor of the layer they are part of: the next layer in run order when
    it is of the same category and named (OpenVINO runs a layer norm as an unnamed MVN, then
    a named part); else, where the engine names no layer of that category, the category's
    ONNX nodes one by one, in graph order. Layers of the "other" row stay unaligned.

    >>> import onnx
    >>> from onnx import helper
    >>> ln = [helper.make_node("LayerNormalization", [f"x{k}", "s", "b"], [f"x{k + 1}"], name=f"ln{k}") for k in range(2)]
    >>> idx = lc.OnnxIndex(helper.make_model(helper.make_graph(ln, "g", [], [])))
    >>> unnamed = [Layer(f"SkipLN_{k}", "SkipLayerNormalization", "layer norm", None, 1.0) for k in range(2)]
    >>> [l.anchor for l in align_unnamed(unnamed, idx)]
    ['ln0', 'ln1']
    >>> mixed = [Layer("MVN_1", "MVN", "layer norm", None, 1.0), Layer("ln1", "Subgraph", "layer norm", "ln1", 0.5),
    ...          Layer("MVN_2", "MVN", "layer norm", None, 1.0), Layer("Reshape_3", "Reshape", "other", None, 0.1)]
    >>> [l.anchor for l in align_unnamed(mixed, idx)]
    ['ln1', 'ln1', None, None]
    """
    named = {layer.category for layer in layers if layer.anchor is not None}
    nth: Dict[str, int] = {}
    for k, layer in enumerate(layers):
        cat = layer.category
        if layer.anchor is not None or cat == "other":
            continue
        nxt = layers[k + 1] if k + 1 < len(layers) else None
        if nxt is not None and nxt.category == cat and nxt.anchor is not None:
            layer.anchor = nxt.anchor
        elif cat not in named:
            members = index.members.get(cat, [])
            if nth.get(cat, 0) < len(members):
                layer.anchor = members[nth.get(cat, 0)]
            nth[cat] = nth.get(cat, 0) + 1
    return layers


class ProbschedProfile:
    """probsched's compiled network: each kernel call timed alone per inference."""

    def __init__(self, model, args: Sequence[np.ndarray], label: str) -> None:
        self.model, self.args, self.label = model, list(args), label
        self.graph = model.graph
        model(*self.args)  # sets the inputs the kernel calls read
        self.samples: List[List[float]] = [[] for _ in model.steps]
        self.hot: List[List[float]] = [[] for _ in model.steps]
        self.cold: List[List[float]] = [[] for _ in model.steps]

    def warm(self) -> None:
        """One untimed inference."""
        self.model(*self.args)

    def round(self) -> None:
        """One inference, each call timed alone in network order; then one with each call
        run twice in a row, the second timed: its weights and inputs hot, as when its task was tuned."""
        for k, seconds in enumerate(self.model.profile_calls(repeat=1)):
            self.samples[k].append(seconds * 1e3)
        for k, seconds in enumerate(self.model.profile_calls(repeat=1, hot=True)):
            self.hot[k].append(seconds * 1e3)
        for k, seconds in enumerate(self.model.profile_calls(repeat=1, hot=True, cold_weights=True)):
            self.cold[k].append(seconds * 1e3)

    def layers(self, skip: int) -> List[Layer]:
        cats = lc.probsched_layers(self.graph, self.model.steps)
        choices = {c.task.key: c for c in self.model.choices}
        out = []
        for k, (s, (cat, anchor), t) in enumerate(zip(self.model.steps, cats, self.samples)):
            c = choices.get(s.key)
            record = c.seconds * 1e3 if c is not None and c.seconds is not None else None
            hot, cold = self.hot[k], self.cold[k]
            out.append(Layer(f"{k:03d} {s.name}", s.name.split("/")[-1], cat, anchor, float(np.median(t[skip:] or t)),
                             c.source if c is not None else "", record, float(np.median(hot[skip:] or hot)),
                             float(np.median(cold[skip:] or cold))))
        return out


class OrtProfile:
    """ONNX Runtime with its profiler on: the node times are read at the end."""

    def __init__(self, path: str, feeds: Dict[str, np.ndarray], index: "lc.OnnxIndex") -> None:
        import engines

        self.dir = tempfile.mkdtemp(prefix="bench_layers_ort_")
        self.sess = engines.ort_session(path, profile_prefix=os.path.join(self.dir, "profile"))
        self.feeds, self.index, self.label = feeds, index, "onnxruntime"
        self.runs_per_round = 1  # inferences per round its profiler records (2 once warm() runs before round())

    def warm(self) -> None:
        """One untimed inference (its profiler records it too: :meth:`layers` leaves it out)."""
        self.sess.run(None, self.feeds)
        self.runs_per_round = 2

    def round(self) -> None:
        self.sess.run(None, self.feeds)

    def layers(self, skip: int) -> List[Layer]:
        path = self.sess.end_profiling()
        with open(path) as fh:
            events = json.load(fh)
        for f in glob.glob(os.path.join(self.dir, "*")):
            os.remove(f)
        os.rmdir(self.dir)
        return ort_layers(events, self.index, skip, self.runs_per_round)


class OpenvinoProfile:
    """OpenVINO with its per-layer counters on, read after each inference."""

    def __init__(self, path: str, feeds: Dict[str, np.ndarray], f32: bool, index: "lc.OnnxIndex") -> None:
        import engines

        self.label, compiled = engines.openvino_compiled(path, f32, perf_count=True)
        self.request = compiled.create_infer_request()
        self.args = [feeds[p.get_any_name()] for p in compiled.inputs]
        self.index = index
        self.samples: Dict[str, List[float]] = {}
        self.ops: Dict[str, str] = {}

    def warm(self) -> None:
        """One untimed inference (the counters read after :meth:`round` are its own inference's)."""
        self.request.infer(self.args)

    def round(self) -> None:
        self.request.infer(self.args)
        for info in self.request.get_profiling_info():
            if str(info.status).endswith("EXECUTED") and not str(info.status).endswith("NOT_EXECUTED"):
                self.samples.setdefault(info.node_name, []).append(info.real_time.total_seconds() * 1e3)
                self.ops[info.node_name] = info.node_type

    def layers(self, skip: int) -> List[Layer]:
        return _layers(medians(self.samples, skip), self.ops, self.index)


def losses(ours: Sequence[Layer], peers: Dict[str, Sequence[Layer]], index: "lc.OnnxIndex", top: int = 10) -> List[dict]:
    """The ``top`` ONNX nodes where probsched's layers take longest beyond the fastest
    peer's layers aligned to the same node, largest loss first.

    >>> import onnx
    >>> from onnx import helper
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [], [])
    >>> idx = lc.OnnxIndex(helper.make_model(g))
    >>> losses([Layer("k", "max", "elementwise", "r", 3.0)], {"ort": [Layer("r", "Relu", "elementwise", "r", 1.0)]}, idx)
    [{'layer': 'elementwise #1', 'anchor': 'r', 'probsched_ms': 3.0, 'peer': 'ort', 'peer_ms': 1.0, 'loss_ms': 2.0, 'sources': []}]
    """
    def by_anchor(layers):
        out: Dict[str, float] = {}
        for layer in layers:
            if layer.anchor is not None:
                out[layer.anchor] = out.get(layer.anchor, 0.0) + layer.ms
        return out

    mine = by_anchor(ours)
    sources: Dict[str, List[str]] = {}
    for layer in ours:
        if layer.anchor is not None and layer.source and layer.source not in sources.setdefault(layer.anchor, []):
            sources[layer.anchor].append(layer.source)
    theirs = {label: by_anchor(layers) for label, layers in peers.items()}
    rows = []
    for anchor, ms in mine.items():
        times = {label: t[anchor] for label, t in theirs.items() if anchor in t}
        if not times:
            continue
        peer = min(times, key=times.get)
        cat, k = index.ordinal(anchor)
        rows.append({"layer": f"{cat} #{k}", "anchor": anchor, "probsched_ms": ms, "peer": peer,
                     "peer_ms": times[peer], "loss_ms": ms - times[peer], "sources": sources.get(anchor, [])})
    rows.sort(key=lambda r: -r["loss_ms"])
    return [r for r in rows if r["loss_ms"] > 0][:top]


def table(result: dict) -> str:
    """One network's Markdown table: rows = categories, a column per engine (ms and share),
    and beside probsched's the same calls each run again at once (its weights hot)."""
    columns = []  # (header, ms per category, total, measured, records)
    for label, e in result["engines"].items():
        records = sum(layer.record_ms or 0.0 for layer in e["layers"])
        columns.append((f"{label} ms (share)", e["categories"], e["total_ms"], e["measured_ms"], records))
        if e.get("hot_categories"):
            hot = e["hot_categories"]
            columns.append((f"{label}, each call again (weights hot)", hot, sum(hot.values()), None, 0.0))
        if e.get("cold_weights_categories"):
            cold = e["cold_weights_categories"]
            columns.append((f"{label}, each call again, weights flushed", cold, sum(cold.values()), None, 0.0))
    seen = {c for _, cats, _, _, _ in columns for c in cats}
    rows = [r for r in lc.row_order(result["kind"], seen) if r in seen]  # a row no engine has is left out
    lines = ["| category | " + " | ".join(c[0] for c in columns) + " |", "|---" + "|---:" * len(columns) + "|"]
    for row in rows:
        cells = [f"{cats[row]:.2f} ({100 * cats[row] / total:.0f}%)" if row in cats and total else "-"
                 for _, cats, total, _, _ in columns]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")

    def line(name, values):
        lines.append(f"| {name} | " + " | ".join(f"{v:.2f}" if v else "-" for v in values) + " |")

    line("total of layers", [c[2] for c in columns])
    line("measured inference", [c[3] for c in columns])
    if any(c[4] for c in columns):  # what the calls would take at the speed their tasks were tuned at
        line("its tasks' records", [c[4] for c in columns])
    return "\n".join(lines)


def loss_lines(result: dict) -> str:
    """The layers where probsched loses most, one line each (saying so when the schedule
    was not a tuned record's).

    >>> print(loss_lines({"losses": [{"layer": "attention #1", "anchor": "/a/MatMul", "probsched_ms": 3.0,
    ...                               "peer": "ort", "peer_ms": 1.0, "loss_ms": 2.0, "sources": ["predicted"]}]}))
    1. attention #1 (`/a/MatMul`): 3.00 ms vs ort 1.00 ms (+2.00; schedule: predicted)
    """
    def note(r):
        other = [s for s in r.get("sources", []) if s != "database"]
        return f"; schedule: {', '.join(other)}" if other else ""

    return "\n".join(f"{k + 1}. {r['layer']} (`{r['anchor']}`): {r['probsched_ms']:.2f} ms vs {r['peer']} "
                     f"{r['peer_ms']:.2f} ms (+{r['loss_ms']:.2f}{note(r)})" for k, r in enumerate(result["losses"]))


def bench_network(name: str, args: argparse.Namespace) -> dict:
    """Profile one network in every engine (see the module docstring)."""
    import onnx

    import engines
    import probsched as ps
    from bench_models import canonical_export

    path, feeds, expected = canonical_export(args.onnx_dir, name, "bench_layers")
    int8 = args.precision == "int8"
    if int8:  # every engine runs the one QDQ file bench_int8.py made
        path = os.path.join(args.db_dir or "", f"{name}.qdq.onnx")
        if not os.path.exists(path):
            raise SystemExit(f"bench_layers: no {path}; make it with bench_int8.py --models {name} --db-dir DIR")
    index = lc.OnnxIndex(onnx.load(path, load_external_data=False))
    graph = ps.from_onnx(path, name=f"{name}_int8" if int8 else name)
    db = os.path.join(args.db_dir, f"{name}_int8.db" if int8 else f"{name}.db") if args.db_dir else None
    if db is not None and not os.path.exists(db):
        raise SystemExit(f"bench_layers: no database {db} for {name}")
    model = ps.compile(graph, database=db, precision="float32" if int8 else args.precision)
    args_in = [feeds[n] for n in graph.input_names]
    suffix = "" if args.precision == "float32" else f" {args.precision}"
    label = ("probsched tuned" if db else "probsched untuned") + suffix
    f32 = args.precision == "float32"
    profiles: list = [ProbschedProfile(model, args_in, label)]
    plain = [(label, lambda: model(*args_in), model(*args_in))]
    builders: List[Callable] = []
    if f32 or int8:
        builders.append(lambda: (OrtProfile(path, feeds, index), engines.ort_runner(path, feeds)))
    builders.append(lambda: (OpenvinoProfile(path, feeds, f32, index), engines.openvino_runner(path, feeds, f32=f32)))
    for build in builders:
        try:
            prof, runner = build()
        except engines.Unavailable as exc:
            print(f"bench_layers: {exc} is not installed: its column is left out", file=sys.stderr)
            continue
        profiles.append(prof)
        plain.append(runner)
    if int8:  # a QDQ model: OpenVINO runs its quantized layers in int8, whatever precision its hint names
        for prof in profiles:
            prof.label = OPENVINO_INT8 if prof.label.startswith("openvino") else prof.label
        plain = [(OPENVINO_INT8 if lbl.startswith("openvino") else lbl, call, out) for lbl, call, out in plain]
    reduced = 5e-2  # bf16 products, as OpenVINO's default precision is checked in bench_models
    tolerance = {"openvino default": reduced, "probsched": 1e-3 if f32 else reduced}
    if int8:  # each engine's int8 against the float32 reference (bench_int8: 0.019 for all three)
        # without VNNI the peers' u8 x s8 products (vpmaddubsw) saturate in int16: their
        # error is 0.057-0.067 on MobileNet-V2 on Zen 3 (bench_int8's accuracy table), their
        # users' results; probsched's products are exact there too
        peers = reduced if ps.Target.host().runs_natively("int8") else 0.1
        tolerance = {"onnxruntime": peers, "openvino": peers, "probsched": reduced}
    errors = engines.checked(plain, expected, tolerance)
    measured: Dict[str, List[float]] = {lbl: [] for lbl, _, _ in plain}
    for _ in range(args.warmup + args.repeat):
        for prof in profiles:
            time.sleep(SETTLE_S)
            prof.warm()
            prof.round()
        for lbl, call, _ in plain:
            time.sleep(SETTLE_S)
            call()
            t0 = time.perf_counter()
            call()
            measured[lbl].append((time.perf_counter() - t0) * 1e3)
    measured_ms = medians(measured, args.warmup)
    per_engine = {}
    for prof, (lbl, _, _) in zip(profiles, plain):
        layers = prof.layers(args.warmup)
        per_engine[lbl] = {"layers": layers, "categories": category_totals(layers),
                           "total_ms": sum(layer.ms for layer in layers), "measured_ms": measured_ms[lbl],
                           "unaligned_ms": sum(layer.ms for layer in layers if layer.anchor is None)}
        if any(layer.hot_ms is not None for layer in layers):
            per_engine[lbl]["hot_categories"] = category_totals(
                [Layer(x.name, x.op, x.category, x.anchor, x.hot_ms or 0.0) for x in layers])
        if any(layer.cold_weights_ms is not None for layer in layers):
            per_engine[lbl]["cold_weights_categories"] = category_totals(
                [Layer(x.name, x.op, x.category, x.anchor, x.cold_weights_ms or 0.0) for x in layers])
    ours = per_engine[label]["layers"]
    peers = {lbl: e["layers"] for lbl, e in per_engine.items() if lbl != label}
    result = {"model": name, "kind": index.kind, "precision": args.precision, "rel_err": errors,
              "losses": losses(ours, peers, index), "engines": per_engine}
    return result


def to_json(result: dict) -> dict:
    """The result with its layers as plain dicts."""
    out = dict(result)
    out["engines"] = {lbl: {**e, "layers": [asdict(layer) for layer in e["layers"]]} for lbl, e in result["engines"].items()}
    return out


def main(argv=None) -> int:
    from bench_models import cpu_model

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,mobilenet_v2,bert_base")
    p.add_argument("--onnx-dir", required=True, help="where <model>.onnx are (export_onnx_models.py --full)")
    p.add_argument("--db-dir", default=None, help="probsched compiled from <dir>/<model>.db (default: untuned)")
    p.add_argument("--precision", default="float32", choices=("float32", "bf16", "int8"),
                   help="bf16: probsched in bf16 beside OpenVINO's default precision (no ONNX Runtime column); "
                        "int8: every engine on --db-dir's <model>.qdq.onnx, probsched from <model>_int8.db")
    p.add_argument("--repeat", type=int, default=20, help="inferences per engine; medians over them")
    p.add_argument("--warmup", type=int, default=2, help="inferences left out first")
    p.add_argument("--out", default=None, help="write every layer's figures to this JSON file")
    args = p.parse_args(argv)
    results = []
    for name in args.models.split(","):
        results.append(bench_network(name.strip(), args))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"\n{cpu_model()}, {os.cpu_count()} cores, {stamp}; load {os.getloadavg()[0]:.1f}; "
          f"{args.precision}, medians of {args.repeat} inferences\n")
    for r in results:
        print(f"### {r['model']}\n\n{table(r)}\n\nWhere probsched loses most to the best peer:\n\n{loss_lines(r)}\n")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"cpu": cpu_model(), "date": stamp, "precision": args.precision, "repeat": args.repeat,
                       "networks": [to_json(r) for r in results]}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
