"""Where a tuning run's wall time goes, per trial: the table of issue #53.

``python benchmarks/bench_throughput.py run --workloads GMM:2 C2D:2 C3D:1 DEP:0 --trials 64
--seed 0 --out OUT.json`` runs ``ps.tune`` (the defaults: evolutionary search, the
transfer-trained MLP, 2 workers, the final re-timing of the 8 best) on each workload in a
fresh process, and splits the run's wall time into parts that add up to it:

- **search**: the strategy's ``generate`` (drawing, replaying and mutating traces, hashing
  them), without the two next rows;
- **features** (cost-model features of the candidates) and **cost model** (MLP training and
  prediction), both in the tuner process;
- **compile**, **check**, **timing**, **start-up**, **idle**: the measurer's wall time while
  it measures a batch (:class:`~probsched.measure.stats.MeasureStats.wall`): "check" and
  "timing" are the time a kernel holds the cores (split in the ratio the worker reports),
  "compile" the time no kernel runs and a worker compiles, "start-up" a worker starting and
  nothing else going on, "idle" nothing at all (the end of a batch);
- **database**: the tuner recording each result as it arrives (the measurer waits for it);
- **re-timing**: the final ``measure_together`` of the best candidates (its compiles, its
  checks and its interleaved rounds), and **other**: the rest (set-up: the workload's
  reference and the transfer model's first training; the end of the run).

Every row is divided by the trials asked (re-timing included, as issue #53 counts it). The
worker-side columns (``slot use``) say how busy the two worker processes were. Each run gets
its own disk cache of compiled programs (:mod:`probsched.codegen.program_cache`; the
micro-kernels and trained models are shared): a run compiles its candidates itself.

``--arm NAME=TREE`` (repeatable) runs each workload once per arm, each arm from its own
source tree (``PYTHONPATH``; e.g. a ``git worktree`` of the code before), alternating the
order of the arms from workload to workload so that the machine's drift does not favour one;
``--set NAME:KEY=VALUE`` gives an arm a setting (``LocalMeasurer`` keyword, ``ps.tune``
keyword when KEY starts with ``tune.``, or an environment variable when KEY is upper case). ``--compare`` then times each workload's best
kernels of all arms together in one worker, interleaved (the kernel-quality check: same
seed, same run). ``table IN.json`` prints the tables again. Each table gives the CPU model,
the date and the load average before and after.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = ("search", "features", "cost model", "compile", "check", "timing", "start-up", "idle", "database", "re-timing", "other")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``) and its vector width."""
    name = platform.processor() or "unknown CPU"
    flags = ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name") and name in ("unknown CPU", platform.processor()):
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = line
                    break
    except OSError:
        pass
    width = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "SSE"
    return f"{name} ({os.cpu_count()} cores, {width})"


# ----------------------------------------------------------------------------- one run


class _Clock:
    """Seconds spent in wrapped functions, by name (re-entrant calls counted once); a call
    made inside another wrapped one is also counted under ``"inner@outer"``.

    >>> c = _Clock()
    >>> outer = c.wrap("outer", lambda: inner())
    >>> inner = c.wrap("inner", lambda: time.sleep(0.01))
    >>> outer()
    >>> c.seconds["outer"] >= c.seconds["inner"] == c.seconds["inner@outer"] > 0
    True
    """

    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {}
        self.calls: Dict[str, int] = {}
        self._active: List[str] = []

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            if name in self._active:  # re-entrant: the outer call counts
                return fn(*args, **kwargs)
            outer = list(self._active)
            self._active.append(name)
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t
                self._active.remove(name)
                self.seconds[name] = self.seconds.get(name, 0.0) + dt
                self.calls[name] = self.calls.get(name, 0) + 1
                for o in outer:
                    key = f"{name}@{o}"
                    self.seconds[key] = self.seconds.get(key, 0.0) + dt

        return timed


def fresh_program_cache() -> str:
    """Point ``$PROBSCHED_CACHE_DIR`` at a new directory that shares the usual one's
    micro-kernels and trained models but starts with no compiled program: a run measures
    compiling its candidates, not loading those of an earlier run of the same seed."""
    shared = os.environ.get("PROBSCHED_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "probsched")
    root = tempfile.mkdtemp(prefix="bench-throughput-cache-")
    for kind in ("kernels", "models"):
        os.makedirs(os.path.join(shared, kind), exist_ok=True)
        os.symlink(os.path.join(shared, kind), os.path.join(root, kind))
    os.environ["PROBSCHED_CACHE_DIR"] = root
    return root


def _strategy_as_tune_makes_it(name: str, batch_size: int):
    """The strategy ``ps.tune(strategy=name)`` would search with (wrapped here to time it):
    the named evolutionary search sized to the round where this tree has ``for_batch``."""
    import probsched as ps

    evo = ps.search.EvolutionarySearch
    if name == "evolutionary" and hasattr(evo, "for_batch"):
        return evo.for_batch(batch_size)
    return ps.search.get(name)


def one(args) -> dict:
    """Tune one workload here, instrumented; the breakdown as a dict."""
    cache_root = fresh_program_cache()
    import probsched as ps
    import probsched.cost_model as cm
    from probsched.cost_model.base import CostModel
    from probsched.database import Database
    from probsched.measure import LocalMeasurer

    clock = _Clock()
    # the tuner's own work, wrapped where it is defined (nothing in probsched changes)
    CostModel.fit_features = clock.wrap("train", CostModel.fit_features)
    CostModel.update_features = clock.wrap("train", CostModel.update_features)
    cm.MLPModel.predict_features = clock.wrap("predict", cm.MLPModel.predict_features)
    cm.extract = clock.wrap("features", cm.extract)

    class TimedStrategy:
        def __init__(self, inner) -> None:
            self.inner, self.name = inner, inner.name
            self.uses_cost_model = getattr(inner, "uses_cost_model", True)
            self.generate = clock.wrap("generate", inner.generate)
            self.observe = clock.wrap("observe", inner.observe)

    class TimedDatabase(Database):
        pass

    for name in ("commit_record", "commit_retiming", "records", "best", "latest_retiming", "commit_workload"):
        setattr(TimedDatabase, name, clock.wrap("database", getattr(Database, name)))

    settings = dict(args.setting or {})
    env = {k: v for k, v in settings.items() if k.isupper()}
    os.environ.update({k: str(v) for k, v in env.items()})  # before the workers are spawned
    measurer_kw = {k: v for k, v in settings.items() if not k.isupper() and not k.startswith("tune.")}
    tune_kw = {k[5:]: v for k, v in settings.items() if k.startswith("tune.")}

    class TimedMeasurer(LocalMeasurer):
        retime_stats = None

        def measure(self, workload, schedules, on_result=None, **kw):
            return super().measure(workload, schedules, clock.wrap("callback", on_result) if on_result else None, **kw)

        def measure_together(self, workload, schedules, rounds=15, **kw):
            before, t = self.stats.copy(), time.perf_counter()
            out = super().measure_together(workload, schedules, rounds, **kw)
            self.retime_stats = self.stats.minus(before)
            self.retime_wall = time.perf_counter() - t
            return out

    def cached_models() -> int:  # trained-model cache entries (probsched.cost_model.trained_cache)
        try:
            from probsched import cache

            return len(os.listdir(cache.folder("models")))
        except Exception:  # code without that cache
            return 0

    models_before = cached_models()
    workload = ps.workloads.get(args.workload)
    db_path = args.db or os.path.join(tempfile.mkdtemp(prefix="bench-throughput-"), "t.db")
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    m = TimedMeasurer(**measurer_kw)
    db = TimedDatabase(db_path)
    try:
        strategy = TimedStrategy(_strategy_as_tune_makes_it(args.strategy, tune_kw.get("batch_size", 32)))
        result = ps.tune(workload, trials=args.trials, strategy=strategy, database=db, measurer=m, seed=args.seed, **tune_kw)
    finally:
        m.close()
        db.close()
    wall = time.perf_counter() - t0
    n = args.trials
    stats = m.stats
    rs = m.retime_stats or stats.minus(stats)
    search_stats = stats.minus(rs)
    retime_wall = getattr(m, "retime_wall", 0.0)
    run = search_stats.wall["run"]
    share = search_stats.check_seconds / max(1e-9, search_stats.check_seconds + search_stats.timing_seconds)
    c = dict(clock.seconds)
    for k in list(c):
        c.setdefault(k, 0.0)
    g = lambda k: c.get(k, 0.0)  # noqa: E731
    parts = {
        # generate's own work: what it spends predicting and extracting features has rows of its own
        "search": g("generate") + g("observe") - g("predict@generate") - g("features@generate"),
        "features": g("features") - g("features@train"),
        "cost model": g("train") + g("predict") - g("predict@train"),
        "compile": search_stats.wall["compile"],
        "check": run * share,
        "timing": run * (1 - share),
        "start-up": search_stats.wall["start"],
        "idle": search_stats.wall["idle"],
        # the callback records a result (TuningRecord, SQLite commit) while the measurer waits
        "database": search_stats.wall["caller"] + g("database") - g("database@callback"),
        "re-timing": retime_wall,
    }
    parts["other"] = wall - sum(parts.values())
    hist = result.history
    best = result.best
    return {
        "workload": args.workload,
        "arm": args.arm_name,
        "settings": settings,
        "trials": n,
        "seed": args.seed,
        "wall_s": wall,
        "s_per_trial": wall / n,
        "parts_s": parts,
        "calls": clock.calls,
        "failures": sum(1 for t in hist if t.error),
        "best_us": best.seconds * 1e6 if best else None,
        "best_search_us": best.search_seconds * 1e6 if best else None,
        "best_hash": best.record.candidate_hash if best else None,
        "best_trace": best.record.instructions if best else None,
        "best_curve_us": [t.best_seconds * 1e6 for t in hist],
        "search_stats": {k: v for k, v in search_stats.__dict__.items() if not k.startswith("_") and k != "memory"},
        "retime_stats": {k: v for k, v in rs.__dict__.items() if not k.startswith("_") and k != "memory"},
        "worker_starts": stats.worker_starts,
        "stopped_early": getattr(stats, "stopped_early", 0),
        "model_cache_stored": cached_models() - models_before,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "db": db_path,
        "cache_root": cache_root,
        "date": datetime.datetime.now().isoformat(timespec="minutes"),
        "cpu": cpu_model(),
    }


# ----------------------------------------------------------------------------- many runs


def parse_settings(items: List[str]) -> Dict[str, dict]:
    """``["new:early_stop=1.5", "new:FOO=bar"]`` -> ``{"new": {"early_stop": 1.5, "FOO": "bar"}}``."""
    out: Dict[str, dict] = {}
    for item in items or []:
        arm, _, kv = item.partition(":")
        key, _, value = kv.partition("=")
        try:
            v = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            v = value
        out.setdefault(arm, {})[key] = v
    return out


def run_arm(tree: str, workload: str, arm: str, settings: dict, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "one", "--workload", workload, "--trials", str(args.trials),
           "--seed", str(args.seed), "--arm-name", arm, "--strategy", args.strategy, "--json"]
    if settings:
        cmd += ["--setting-json", json.dumps(settings)]
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run(cmd, env=env, cwd=os.path.abspath(tree), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{arm} on {workload} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(tree: str, workload: str, runs: List[dict], rounds: int) -> Dict[str, float]:
    """Time the best kernels of ``runs`` together in one worker (code of ``tree``): arm -> µs."""
    script = (
        "import json, sys, probsched as ps\n"
        "from probsched.measure import LocalMeasurer\n"
        "d = json.load(sys.stdin)\n"
        "w = ps.workloads.get(d['workload'])\n"
        "with LocalMeasurer(workers=1) as m:\n"
        "    rs = m.measure_together(w, d['traces'], rounds=d['rounds'])\n"
        "print(json.dumps([r.median * 1e6 if r.ok else None for r in rs]))\n"
    )
    arms = [r["arm"] for r in runs if r.get("best_trace")]
    traces = [r["best_trace"] for r in runs if r.get("best_trace")]
    payload = json.dumps({"workload": workload, "traces": traces, "rounds": rounds})
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    out = subprocess.run([sys.executable, "-c", script], input=payload, env=env, cwd=os.path.abspath(tree),
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"compare on {workload} failed:\n{out.stderr[-4000:]}")
    return dict(zip(arms, json.loads(out.stdout.strip().splitlines()[-1])))


def many(args) -> dict:
    arms = [a.partition("=")[::2] for a in (args.arm or ["current=" + os.path.join(HERE, "..")])]
    settings = parse_settings(args.set)
    data = {"runs": [], "compare": {}, "cpu": cpu_model(), "started": datetime.datetime.now().isoformat(timespec="minutes"),
            "command": " ".join(sys.argv)}
    if args.out and os.path.exists(args.out) and args.resume:
        with open(args.out) as fh:
            data = json.load(fh)
    order = 0
    for rep in range(args.repeats):
        for workload in args.workloads:
            rotated = arms[order % len(arms):] + arms[: order % len(arms)]
            order += 1
            for name, tree in rotated:
                if any(r["workload"] == workload and r["arm"] == name and r.get("rep", 0) == rep for r in data["runs"]):
                    continue
                print(f"[{datetime.datetime.now():%H:%M:%S}] {workload} {name} (rep {rep}) load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
                r = run_arm(tree, workload, name, settings.get(name, {}), args)
                r["rep"] = rep
                data["runs"].append(r)
                print(f"    {r['s_per_trial']:.2f} s/trial, best {r['best_us']:.1f} µs", file=sys.stderr, flush=True)
                _save(data, args.out)
            if args.compare:
                runs = [r for r in data["runs"] if r["workload"] == workload and r.get("rep", 0) == rep]
                key = f"{workload}#{rep}"
                data["compare"][key] = compare(arms[-1][1], workload, runs, args.compare_rounds)
                print(f"    same-run compare: {data['compare'][key]}", file=sys.stderr, flush=True)
                _save(data, args.out)
    data["finished"] = datetime.datetime.now().isoformat(timespec="minutes")
    _save(data, args.out)
    return data


def _save(data: dict, path: Optional[str]) -> None:
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, path)


# ----------------------------------------------------------------------------- tables


def table(data: dict) -> str:
    """Markdown: one column per (workload, arm), rows in s/trial; medians over repeats."""
    runs = data["runs"]
    keys = list(dict.fromkeys((r["workload"], r["arm"]) for r in runs))
    arms = list(dict.fromkeys(r["arm"] for r in runs))

    def med(rs, f):
        vals = [f(r) for r in rs if f(r) is not None]
        return statistics.median(vals) if vals else None

    groups = {k: [r for r in runs if (r["workload"], r["arm"]) == k] for k in keys}
    loads = [r["load_before"] for r in runs] + [r["load_after"] for r in runs]
    head = (f"{data.get('cpu', '')}; {data.get('started', '')} to {data.get('finished', '')}; "
            f"load average (1 min) {min(loads):.1f}-{max(loads):.1f} at the runs' starts and ends; "
            f"{runs[0]['trials']} trials, seed {runs[0]['seed']}, repeats {max(r.get('rep', 0) for r in runs) + 1} (medians)\n\n")
    cols = [f"{w} {a}" if len(arms) > 1 else w for w, a in keys]
    lines = ["| s / trial | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for row in ROWS:
        lines.append(f"| {row} | " + " | ".join(_num(med(groups[k], lambda r: r["parts_s"][row] / r["trials"])) for k in keys) + " |")
    lines.append("| **total** | " + " | ".join(f"**{_num(med(groups[k], lambda r: r['s_per_trial']))}**" for k in keys) + " |")
    lines.append("| slot use (compile + run) / (2 x measuring wall) | " + " | ".join(_num(med(groups[k], _slot_use)) for k in keys) + " |")
    lines.append("| failures | " + " | ".join(str(med(groups[k], lambda r: r["failures"])) for k in keys) + " |")
    lines.append("| best µs (re-timed) | " + " | ".join(_num(med(groups[k], lambda r: r["best_us"]), 1) for k in keys) + " |")
    out = head + "\n".join(lines)
    # averages over workloads, per arm
    avg = []
    for a in arms:
        per = [med(groups[k], lambda r: r["s_per_trial"]) for k in keys if k[1] == a]
        avg.append(f"{a}: {statistics.mean(per):.2f} s/trial averaged over {len(per)} workloads")
    out += "\n\n" + "; ".join(avg)
    if data.get("compare"):
        out += "\n\nSame-run comparison of the best kernels (µs, one worker, interleaved):\n\n"
        out += "| workload#repeat | " + " | ".join(arms) + " |\n|---|" + "---:|" * len(arms) + "\n"
        for key, vals in data["compare"].items():
            out += f"| {key} | " + " | ".join(_num(vals.get(a), 1) for a in arms) + " |\n"
    return out


def _slot_use(r: dict) -> Optional[float]:
    s = r["search_stats"]
    wall = sum(s["wall"].values())
    return (s["compile_seconds"] + s["run_seconds"]) / (2 * wall) if wall else None


def _num(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("one", help="tune one workload in this process (what run calls)")
    o.add_argument("--workload", required=True)
    o.add_argument("--arm-name", default="current")
    o.add_argument("--setting-json", default="{}")
    o.add_argument("--db", default=None)
    r = sub.add_parser("run", help="tune each workload in a fresh process per arm; print the table")
    r.add_argument("--workloads", nargs="+", default=["GMM:2", "C2D:2", "C3D:1", "DEP:0"])
    r.add_argument("--arm", action="append", help="NAME=TREE: run this arm from that source tree")
    r.add_argument("--set", action="append", help="ARM:KEY=VALUE: a setting of that arm")
    r.add_argument("--repeats", type=int, default=1)
    r.add_argument("--compare", action="store_true", help="time the arms' best kernels together per workload")
    r.add_argument("--compare-rounds", type=int, default=31)
    r.add_argument("--out", default=None)
    r.add_argument("--resume", action="store_true", help="skip the runs already in --out")
    for q in (o, r):
        q.add_argument("--trials", type=int, default=64)
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--strategy", default="evolutionary")
        q.add_argument("--json", action="store_true")
    t = sub.add_parser("table", help="print the tables of a --out file")
    t.add_argument("path")
    args = p.parse_args(argv)
    if args.cmd == "one":
        args.setting = json.loads(args.setting_json)
        d = one(args)
        print(json.dumps(d))
    elif args.cmd == "run":
        print(table(many(args)))
    else:
        with open(args.path) as fh:
            print(table(json.load(fh)))


if __name__ == "__main__":
    main()
