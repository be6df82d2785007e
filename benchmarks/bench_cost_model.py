"""Cost-model benchmark: feature/prediction/training speed, and ranking quality on records.

Usage::

    python benchmarks/bench_cost_model.py speed                 # (a) speed on GMM:2 candidates
    python benchmarks/bench_cost_model.py collect --n 40 --out benchmarks/data/records.jsonl
    python benchmarks/bench_cost_model.py quality benchmarks/data/records.jsonl [more.jsonl ...] [--skip-sessions 0]
    python benchmarks/bench_cost_model.py transfer              # the shipped transfer records, one workload left out
    python benchmarks/bench_cost_model.py transfer --later 32,64,96   # ... once the run has N records of its own

``transfer`` asks what the shipped transfer records (:mod:`probsched.cost_model.transfer`) are
worth on a workload they do not hold: for each workload of the file, an MLP trained on the other
workloads' records ranks that workload's records; the report compares the true run times of
its top 32 with 32 drawn at random (several model and draw seeds), as a tuning run's first
batch would be chosen. The held-out workload's records are a tuning run's (its first 32
prior draws, then the search's picks), so random picks here are already better than prior
draws: the ratios understate the gain over a blind first batch. ``transfer --later N,...``
asks the same of the later rounds: the held-out workload's first N records train ``mlp``
alone and ``mlp-transfer`` (those records beside the other workloads'), and both rank the
workload's remaining records (:func:`transfer_later`).

``collect`` draws candidates per workload (GMM:2, C2D:2, DEP:0, SFM:2 by default) from
``ps.space.default()``, builds each with ``ps.build``, checks it against the numpy reference
and times it in-process (``time_callable``, repeat=3, min_repeat_ms=20). It appends one JSON
line per candidate as soon as it is measured, so an interrupted run keeps its data and a rerun
resumes (seeds already in the file are skipped). Record fields follow the tuning database's
TuningRecord: ``workload_hash``, ``candidate_hash``, ``decisions``, ``instructions`` (the
``InstructionLog`` JSON), ``run_seconds`` (null on error), ``error_kind`` (null when fine), plus
``workload`` (suite name) and ``seed``.

``benchmarks/data/records.jsonl.gz`` holds 1372 such records, 324-334 usable per workload,
from three measurement sessions: seeds 0-103 of the default space (``collect --n 120
--compile-timeout 20`` on a shared 2-core machine), seeds 5000-5115 (``collect --n 220 --seed0
5000``, after the space gained its parallel decision and faster compiles), and the
random-search records of a later ``probsched bench`` run.

``quality`` reads any such JSONL files (``.gz`` too) (tolerant: unknown fields ignored, broken lines and
records whose trace does not replay skipped and counted), rebuilds each schedule from its
instructions and reports, for MLP vs Ridge vs Random: pairwise ranking accuracy and recall of
the true top-10 within the predicted top-50, (i) on a held-out 30% split of each workload
(trained on the other 70% of every workload) and (ii) per held-out workload (trained on the
other workloads only).

The headline is accuracy over all same-workload pairs. Beside it: the *noise ceiling* (one
repeat's order against the median of the other repeats: the labels' agreement with
themselves, which bounds any model), accuracy on pairs more than 10% apart (closer pairs are
within the repeats' noise), and accuracy within one measurement *session* (records more than
30 min apart in ``timestamp`` start a new one; ``--per-session`` trains on pairs of one
workload and session only). The shipped records' first session (seeds 0-103) was measured
before code generation and measurement changes (bounded unroll copies, paused compiles while
timing, the parallel decision); its times are much slower (median GMM:2 16 ms against 5.5
ms), more than the programs' features explain (a session flag alone, as a diagnostic
feature, lifts the MLP's all-pairs accuracy from 0.75 to 0.86).

The report also gives each model's accuracy per workload, and how well a session agrees
with itself: programs timed more than once in one session (same ``candidate_hash``) and the
median slowest/fastest ratio of their times. ``--skip-sessions 0`` leaves the first session
out of training and testing (the shipped records' first session: the same program timed
again in it differs by 1.55x at the median, against 1.06x in the second session; and
training on it, even on within-session pairs only, lowers the accuracy on the later
sessions). Report the figures with and without it.

What limits the accuracy (an analysis of the shipped records without the first session, not
part of this script): the labels agree with themselves (noise ceiling 0.96, and residuals of
records timed minutes apart do not correlate: no drift of the machine's speed), and more data
helps little (half the training records: 0.834 against 0.846). DEP:0 is the weak workload:
its records' nearest neighbours in feature space differ 1.6x in run time at the median
(GMM:2: 1.2x), and the MLP ranks only 0.89 of its own *training* pairs of DEP:0 right, so the
features do not pin down what makes a depthwise convolution fast; longer training overfits
(0.841-0.844 with 120-240 epochs). The traffic features (``traffic.*``) came out of its
worst-ranked pairs: rows 14 KiB apart walked by the innermost spatial loop (a TLB miss per
iteration), accumulator tiles that outgrow L1 re-streamed once per tap.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from collections import defaultdict
from typing import Dict, List, Optional, Tuple

import numpy as np

DEFAULT_WORKLOADS = ("GMM:2", "C2D:2", "DEP:0", "SFM:2")


# ----------------------------------------------------------------------------- collection


def _jsonable(v):
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _seen_seeds(path: str) -> Dict[str, set]:
    seen: Dict[str, set] = defaultdict(set)
    if os.path.exists(path):
        for rec in load_records(path)[0]:
            if "seed" in rec and "workload" in rec:
                seen[rec["workload"]].add(rec["seed"])
    return seen


def collect(workloads, n: int, out: str, seed0: int = 0, batch: int = 4, compile_timeout: float = 30.0, log=print) -> None:
    """Measure ``n`` default-space candidates per workload, appending records to ``out``.

    Candidates are measured by :class:`~probsched.measure.LocalMeasurer` (one worker: the
    machine is shared) so a compile that runs away is cut at ``compile_timeout`` seconds and
    recorded as a timeout instead of stalling the run.
    """
    import probsched as ps
    from handlers import seed, trace
    from probsched.database import TuningRecord
    from probsched.measure import LocalMeasurer

    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    seen = _seen_seeds(out)
    space = ps.space.default()
    suite = {name: ps.workloads.get(name) for name in workloads}
    with LocalMeasurer(workers=1, compile_timeout=compile_timeout, run_timeout=20.0, repeat=3, min_repeat_ms=20) as m:
        # seed batches outer, workloads inner: an interrupted run still covers every workload
        for lo in range(seed0, seed0 + n, batch):
            for name, w in suite.items():
                seeds = [i for i in range(lo, min(lo + batch, seed0 + n)) if i not in seen[name]]
                schs, extra, traces = [], [], []
                for i in seeds:
                    sch = ps.Schedule(w.func)
                    tr = trace(seed(space, i)).get_trace(sch)
                    schs.append(sch)
                    traces.append(tr)
                    extra.append({"workload": name, "seed": i})
                if not schs:
                    continue
                t0 = time.perf_counter()

                def write(k: int, result, w=w, schs=schs, extra=extra, traces=traces, name=name) -> None:
                    rec = TuningRecord.from_result(w, schs[k], result, traces[k], space="default", strategy="random")
                    rec = json.loads(rec.to_json())
                    rec.update(extra[k])
                    with open(out, "a") as f:
                        f.write(json.dumps(rec) + "\n")
                    log(f"{name} seed={extra[k]['seed']} compile={result.compile_seconds:.2f}s "
                        f"run={result.median if result.ok else None} err={result.error_kind}")

                m.measure(w, schs, on_result=write)
                log(f"{name}: {len(schs)} candidates in {time.perf_counter() - t0:.1f}s")


# ----------------------------------------------------------------------------- loading


def load_records(*paths: str) -> Tuple[List[dict], int]:
    """Records of JSONL files (bad lines skipped), and how many lines were skipped."""
    out, bad = [], 0
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    bad += 1
                    continue
                if isinstance(rec, dict):
                    out.append(rec)
                else:
                    bad += 1
    return out, bad


def _median_seconds(rec: dict) -> Optional[float]:
    """A record's run time: the median of its repeats; ``inf`` when the kernel was too slow
    to finish (a run timeout); None when its speed is unknown (compile failure or timeout,
    crash, wrong result): such records are left out of training and evaluation."""
    kind = rec.get("error_kind")
    if kind:
        msg = str(rec.get("error_message") or rec.get("error_msg") or "")
        return float("inf") if kind == "timeout" and msg.startswith("run") else None
    t = rec.get("run_seconds")
    if isinstance(t, (list, tuple)):
        t = [x for x in t if isinstance(x, (int, float))]
        t = float(np.median(t)) if t else None
    return float(t) if isinstance(t, (int, float)) and t > 0 else None


def rebuild(records: List[dict], log=print, kept: Optional[List[dict]] = None):
    """(schedules, seconds, workload names) of the records whose trace replays; the records
    used are appended to ``kept`` when given (for their repeats and timestamps)."""
    import probsched as ps

    funcs: Dict[str, Tuple[str, object]] = {}
    for name in DEFAULT_WORKLOADS:
        f = ps.workloads.get(name).func
        funcs[f.structural_hash()] = (name, f)
    schs, secs, names, skipped, unknown = [], [], [], 0, 0
    for rec in records:
        sec = _median_seconds(rec)
        if sec is None:
            unknown += 1
            continue
        h = rec.get("workload_hash")
        if h not in funcs and rec.get("workload"):
            try:
                f = ps.workloads.get(rec["workload"]).func
                funcs[f.structural_hash()] = (rec["workload"], f)
            except Exception:
                pass
        if h not in funcs or not isinstance(rec.get("instructions"), str):
            skipped += 1
            continue
        name, func = funcs[h]
        try:
            sch = ps.InstructionLog.from_json(rec["instructions"]).apply(ps.Schedule(func))
        except Exception:
            skipped += 1
            continue
        schs.append(sch)
        secs.append(sec)
        names.append(name)
        if kept is not None:
            kept.append(rec)
    if skipped or unknown:
        log(f"left out {unknown} records of unknown speed (compile failure or timeout, crash, wrong result) and "
            f"{skipped} of an unknown workload or whose trace does not replay")
    return schs, secs, names


def sessions(records: List[dict], gap_s: float = 1800.0) -> List[int]:
    """Measurement session of each record: records sorted by ``timestamp`` start a new
    session after a pause of more than ``gap_s`` seconds (a collection run never pauses that
    long: compile and run timeouts are seconds). Records without a timestamp share session -1.

    Times from different sessions need not be comparable: code generation, the measurement
    pipeline or the machine's load may have changed in between.

    >>> sessions([{"timestamp": 0}, {"timestamp": 7200}, {}, {"timestamp": 60}])
    [0, 1, -1, 0]
    """
    stamps = [r.get("timestamp") for r in records]
    order = sorted((t, i) for i, t in enumerate(stamps) if isinstance(t, (int, float)))
    out = [-1] * len(records)
    session, last = 0, None
    for t, i in order:
        if last is not None and t - last > gap_s:
            session += 1
        out[i], last = session, t
    return out


def repeat_ceiling(records: List[dict], names: List[str], min_gap: float = 0.0) -> float:
    """Pairwise accuracy of one repeat's times against the median of the other repeats
    (mean over which repeat is held out): how well the labels agree with themselves, which
    bounds any model. Run timeouts count as slowest in both; records with fewer than two
    timed repeats are left out."""
    from probsched import cost_model as cm

    reps, keep = [], []
    for rec, name in zip(records, names):
        sec = _median_seconds(rec)
        t = rec.get("run_seconds") if sec is not None and np.isfinite(sec) else None
        t = [float(x) for x in t if isinstance(x, (int, float)) and x > 0] if isinstance(t, (list, tuple)) else []
        if len(t) >= 2 or (sec is not None and not np.isfinite(sec)):
            reps.append(t)
            keep.append(name)
    k_max = max((len(t) for t in reps), default=0)
    accs = []
    for k in range(k_max):
        one = [-t[k % len(t)] if t else -np.inf for t in reps]
        rest = [float(np.median(t[: k % len(t)] + t[k % len(t) + 1 :])) if t else np.inf for t in reps]
        accs.append(cm.pairwise_accuracy(np.array(one), rest, keep, min_gap=min_gap))
    return float(np.mean(accs)) if accs else float("nan")


# ----------------------------------------------------------------------------- speed


def _median_time(fn, rounds: int, cpu: Optional[list] = None) -> float:
    """Median wall seconds of ``fn()``; appends each round's process CPU seconds to ``cpu``
    (on a shared machine wall time also counts other tenants' time slices)."""
    ts = []
    for _ in range(rounds):
        t, c = time.perf_counter(), time.process_time()
        fn()
        ts.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(time.process_time() - c)
    return float(np.median(ts))


def speed(n: int = 512, rounds: int = 5, log=print) -> dict:
    """Feature extraction, prediction and training times on ``n`` GMM:2 default-space candidates."""
    import probsched as ps
    from handlers import seed
    from probsched import cost_model as cm

    w = ps.workloads.get("GMM:2")
    space = ps.space.default()
    t = time.perf_counter()
    schs = []
    for i in range(n):
        sch = ps.Schedule(w.func)
        seed(space, i)(sch)
        schs.append(sch)
    out = {"draw_s": time.perf_counter() - t}
    feats = cm.extract_batch(schs)
    cpu: list = []
    out["features_s"] = _median_time(lambda: cm.extract_batch(schs), rounds, cpu)
    out["features_min_s"], out["features_cpu_s"] = min(cpu), float(np.median(cpu))
    out["load"] = os.getloadavg()[0]
    out["stores_per_program"] = float(np.mean([len(x) for x in feats]))
    rng = np.random.default_rng(0)
    secs = list(rng.uniform(0.01, 0.1, size=n))  # training time does not depend on the targets
    model = cm.MLPModel(seed=0)
    t = time.perf_counter()
    model.fit_features(feats, secs, ["gmm"] * n)
    out["train_first_s"] = time.perf_counter() - t  # includes compiling the training step
    out["train_s"] = _median_time(lambda: cm.MLPModel(seed=0).fit_features(feats, secs, ["gmm"] * n), 1)
    model.predict_features(feats)  # warm-up: compiles the 512-program bucket
    out["predict_s"] = _median_time(lambda: model.predict_features(feats), max(rounds, 20))
    out["ridge_train_s"] = _median_time(lambda: cm.RidgeModel().fit_features(feats, secs, ["gmm"] * n), rounds)
    log(
        f"GMM:2, {n} default-space candidates ({out['stores_per_program']:.1f} stores each; drawing them took "
        f"{out['draw_s']:.2f} s)\n"
        f"  features          {out['features_s'] * 1e3:8.1f} ms  ({out['features_s'] / n * 1e6:.0f} us/candidate, median of {rounds}; "
        f"CPU {out['features_cpu_s'] * 1e3:.0f} ms, fastest round {out['features_min_s'] * 1e3:.0f} ms CPU; load average {out['load']:.1f})\n"
        f"  MLP predict {n}   {out['predict_s'] * 1e3:8.1f} ms  (after warm-up, median)\n"
        f"  MLP train         {out['train_s']:8.2f} s   ({model.epochs} epochs; first fit with compile {out['train_first_s']:.2f} s)\n"
        f"  Ridge train       {out['ridge_train_s'] * 1e3:8.1f} ms"
    )
    return out


# ----------------------------------------------------------------------------- quality


def _models(seed: int):
    from probsched import cost_model as cm

    return {"MLP": cm.MLPModel(seed=seed), "Ridge": cm.RidgeModel(alpha=1.0), "Random": cm.RandomModel(seed)}


#: Pairs closer than this fraction are reported apart: within the repeats' noise.
CLEAR_GAP = 0.1
METRICS = ("all pairs", f"pairs >{CLEAR_GAP:.0%} apart", "within session", "top-10 recall")


def _evaluate(train, test, seed: int, per_session: bool = False, per_workload: Optional[dict] = None) -> Dict[str, Tuple[float, ...]]:
    """{model: metrics of :data:`METRICS`} on ``test`` after training on ``train``; with a
    ``per_workload`` dict, also fills it with {(model, workload): all-pairs accuracy}.

    Each part is (features, seconds, workload names, sessions). Models train on pairs of
    the same workload, or with ``per_session`` of the same workload *and* session (times of
    different sessions need not be comparable); accuracy is over all same-workload pairs of
    the test part, and also over the pairs of one session."""
    from probsched import cost_model as cm

    (xtr, ttr, gtr, str_), (xte, tte, gte, ste) = train, test
    train_groups = [f"{g}@{k}" for g, k in zip(gtr, str_)] if per_session else list(gtr)
    test_sessions = [f"{g}@{k}" for g, k in zip(gte, ste)]
    out, per = {}, {}
    gte_arr = np.asarray(gte)
    for name, model in _models(seed).items():
        model.fit_features(xtr, ttr, train_groups)
        s = model.predict_features(xte)
        out[name] = (
            cm.pairwise_accuracy(s, tte, gte),
            cm.pairwise_accuracy(s, tte, gte, min_gap=CLEAR_GAP),
            cm.pairwise_accuracy(s, tte, test_sessions),
            cm.top_k_recall(s, tte, 10, 50, gte),
        )
        if per_workload is not None:
            for w in sorted(set(gte)):
                ix = np.flatnonzero(gte_arr == w)
                per[(name, w)] = cm.pairwise_accuracy(s[ix], [tte[i] for i in ix])
    if per_workload is not None:
        per_workload.update(per)
    return out


def _row(res: Tuple[float, ...], sessions: bool) -> str:
    acc, clear, within, rec = res
    out = f"pairwise accuracy {acc:.3f}   ({METRICS[1]}: {clear:.3f}"
    out += f"; {METRICS[2]}: {within:.3f})" if sessions else ")"
    return out + f"   top-10 recall in top-50 {rec:.2f}"


def duplicate_spread(records: List[dict], secs: List[float], sess: List[int]) -> Dict[int, Tuple[int, float]]:
    """{session: (programs measured more than once in it, median of their slowest / fastest
    time)}: the same program (``candidate_hash``) timed again in one session should agree
    within the noise; a large spread means the session's labels say little about programs.

    >>> duplicate_spread([{"candidate_hash": "a"}] * 2 + [{"candidate_hash": "b"}], [1.0, 2.0, 1.0], [0, 0, 0])
    {0: (1, 2.0)}
    """
    by: Dict[Tuple[int, str], List[float]] = defaultdict(list)
    for rec, t, k in zip(records, secs, sess):
        if rec.get("candidate_hash") and np.isfinite(t):
            by[(k, rec["candidate_hash"])].append(t)
    out = {}
    for k in sorted(set(sess)):
        spread = [max(v) / min(v) for (kk, _), v in by.items() if kk == k and len(v) > 1]
        if spread:
            out[k] = (len(spread), float(np.median(spread)))
    return out


def quality(paths: List[str], seed: int = 0, test_fraction: float = 0.3, splits: int = 5, per_session: bool = False,
            skip_sessions: Tuple[int, ...] = (), log=print) -> dict:
    """Ranking quality of MLP / Ridge / Random on the records of ``paths`` (see module doc).

    ``skip_sessions``: measurement sessions (numbered as printed, 0 = oldest) left out of
    training *and* testing, e.g. sessions measured on older code than the features see."""
    from probsched import cost_model as cm

    records, bad = load_records(*paths)
    if bad:
        log(f"skipped {bad} unreadable lines")
    kept: List[dict] = []
    schs, secs, names = rebuild(records, log, kept)
    sess = sessions(kept)
    dup = duplicate_spread(kept, secs, sess)
    if dup:
        log("same program timed more than once in a session (median slowest/fastest): "
            + ", ".join(f"session {k}: {r:.2f}x over {n} programs" for k, (n, r) in dup.items()))
    if skip_sessions:
        keep = [i for i, k in enumerate(sess) if k not in set(skip_sessions)]
        log(f"left out sessions {', '.join(map(str, skip_sessions))} (--skip-sessions): {len(sess) - len(keep)} records")
        schs, secs, names = [schs[i] for i in keep], [secs[i] for i in keep], [names[i] for i in keep]
        kept, sess = [kept[i] for i in keep], [sess[i] for i in keep]
    feats = cm.extract_batch(schs)
    workloads = sorted(set(names))
    ok = sum(np.isfinite(secs))
    n_sessions = len(set(sess))
    log(f"{len(schs)} records ({ok} timed, {len(schs) - ok} run timeouts counted as slowest) of {', '.join(f'{w}: {names.count(w)}' for w in workloads)}; "
        f"{n_sessions} measurement session(s) (pauses > 30 min)")
    results = {"noise ceiling": (repeat_ceiling(kept, names), repeat_ceiling(kept, names, CLEAR_GAP))}
    log(f"noise ceiling (one repeat's order against the median of the other repeats, same-workload pairs): "
        f"{results['noise ceiling'][0]:.3f}   ({METRICS[1]}: {results['noise ceiling'][1]:.3f})")
    if n_sessions > 1:
        for w in workloads:
            per = [float(np.median([t for t, n, k in zip(secs, names, sess) if n == w and k == j and np.isfinite(t)] or [np.nan]))
                   for j in sorted(set(sess))]
            log(f"    {w}: median run time per session " + ", ".join(f"{x * 1e3:.2f} ms" for x in per))
    arr = np.array(names)

    def part(mask):
        ix = np.flatnonzero(mask)
        return [feats[i] for i in ix], [secs[i] for i in ix], [names[i] for i in ix], [sess[i] for i in ix]

    runs, per_workload = [], []
    for k in range(splits):  # several random splits: with tens of records per workload one is noise
        rng = np.random.default_rng(seed + k)
        is_test = np.zeros(len(schs), bool)
        for w in workloads:
            idx = np.flatnonzero(arr == w)
            is_test[rng.permutation(idx)[: int(round(test_fraction * len(idx)))]] = True
        per_workload.append({})
        runs.append(_evaluate(part(~is_test), part(is_test), seed, per_session, per_workload[-1]))
    res = {m: tuple(float(np.mean([r[m][i] for r in runs])) for i in range(len(METRICS))) for m in runs[0]}
    results["same-workload split"] = res
    results["same-workload split, per workload"] = {
        key: float(np.mean([p[key] for p in per_workload])) for key in per_workload[0]
    }
    log(
        f"(i) held-out {test_fraction:.0%} of every workload (n_test={int(is_test.sum())}), trained on the rest; "
        f"mean of {splits} random splits"
    )
    if is_test.sum() <= 50 * len(workloads):
        log("    (recall of the top-10 within the predicted top-50 is trivially 1 for test sets of <= 50 records)")
    for m, r in res.items():
        spread = np.std([x[m][0] for x in runs])
        log(f"    {m:7s} {_row(r, n_sessions > 1)}  [std of all-pairs accuracy {spread:.3f}]")
    log("    per workload (all pairs): " + "   ".join(
        f"{w} " + "/".join(f"{results['same-workload split, per workload'][(m, w)]:.3f}" for m in res) for w in workloads
    ) + f"  ({'/'.join(res)})")
    if len(workloads) > 1:
        log("(ii) held-out workload, trained on the others")
        for w in workloads:
            held = arr == w
            res = _evaluate(part(~held), part(held), seed, per_session)
            results[f"held-out {w}"] = res
            row = "   ".join(f"{m} {r[0]:.3f}/{r[2]:.3f}/{r[3]:.2f}" for m, r in res.items())
            log(f"    {w:6s} (n={int(held.sum())})  accuracy all pairs/within session/top-10 recall: {row}")
    return results


def _transfer_records(records=None):
    """``records`` itself (a ``TransferRecords``), or the transfer file at that path (default:
    the shipped one); exits when the file is missing or stale."""
    from probsched.cost_model.transfer import load_transfer

    if records is None or isinstance(records, str):
        records = load_transfer(records)
    if records is None:
        raise SystemExit("no usable transfer records (see the warning above)")
    return records


def transfer(path: Optional[str] = None, k: int = 32, seeds: int = 3, log=print) -> dict:
    """Leave-one-workload-out value of the transfer records at ``path`` (see the module docstring):
    per workload, the median and best true time of the model's top ``k`` and of ``k``
    random picks, as ratios to the workload's best record (medians over ``seeds``)."""
    from probsched import cost_model as cm

    records = _transfer_records(path)
    secs = np.asarray(records.seconds)
    out = {}
    log(f"| workload | records | top {k} by the model: median / best | {k} at random: median / best | random / model (medians) |")
    log("|---|---:|---|---|---:|")
    for g, name in records.names.items():
        held = np.array([x == g for x in records.groups])
        idx = np.nonzero(held & np.isfinite(secs))[0]
        train = np.nonzero(~held)[0]
        t = secs[idx] / secs[idx].min()
        rows = []
        for s in range(seeds):
            m = cm.MLPModel(seed=s).fit_features([records.features[i] for i in train], secs[train], [records.groups[i] for i in train])
            top = np.argsort(-m.predict_features([records.features[i] for i in idx]))[:k]
            rnd = np.random.default_rng(s).choice(len(idx), min(k, len(idx)), replace=False)
            rows.append((np.median(t[top]), t[top].min(), np.median(t[rnd]), t[rnd].min()))
        mm, mb, rm, rb = np.median(np.array(rows), axis=0)
        out[name] = {"model_median": mm, "model_best": mb, "random_median": rm, "random_best": rb}
        log(f"| {name} | {len(idx)} | {mm:.2f} / {mb:.2f} | {rm:.2f} / {rb:.2f} | {rm / mm:.2f} |")
    gm = float(np.exp(np.mean([np.log(v["random_median"] / v["model_median"]) for v in out.values()])))
    log(f"geomean random / model (medians of the picks): {gm:.2f}")
    return out


def transfer_later(records=None, own: Tuple[int, ...] = (32, 64, 96), k: int = 16, seeds: int = 2,
                   log=print) -> Dict[Tuple[int, str], Tuple[float, float]]:
    """What transfer is worth once a run has records of its own (the later rounds): per
    workload of the transfer file and per ``n`` in ``own``, the workload's first ``n`` records
    (measurement order) train ``mlp`` (own records only) and ``mlp-transfer`` (the other
    workloads' records beside them, as ``ps.tune`` trains it); both rank the workload's
    remaining records. Reports the mean pairwise accuracy on pairs more than 10% apart and
    the geomean over workloads of the median true time of each model's top ``k`` (ratio to
    the workload's best record). ``records``: a ``TransferRecords`` or the path of a transfer
    file (default: the shipped one). Returns (n, model) -> (accuracy, top-k median ratio)."""
    from probsched import cost_model as cm

    records = _transfer_records(records)
    secs = np.asarray(records.seconds)
    labels = ("mlp", "mlp-transfer")
    res: Dict[Tuple[str, int, str], List[Tuple[float, float]]] = defaultdict(list)

    def mean(key) -> np.ndarray:
        """(accuracy, top-k median ratio) of one workload, own-record count and model, over seeds."""
        return np.mean(np.array(res[key]), axis=0)

    for g, name in records.names.items():
        idx = np.array([i for i, x in enumerate(records.groups) if x == g])
        others = [i for i, x in enumerate(records.groups) if x != g]
        tx, tt, tg = [records.features[i] for i in others], secs[others], [records.groups[i] for i in others]
        for n in own:
            fit, rest = idx[:n], idx[n:]
            ox, ot = [records.features[i] for i in fit], secs[fit]
            rx, rt = [records.features[i] for i in rest], secs[rest]
            rel = rt / secs[idx].min()
            for s in range(seeds):
                models = {"mlp": cm.MLPModel(seed=s),
                          "mlp-transfer": cm.MLPModel(seed=s).set_transfer(tx, tt, tg, train=False)}
                for label, m in models.items():
                    scores = m.fit_features(ox, ot, [g] * len(ox)).predict_features(rx)
                    top = np.argsort(-scores)[:k]
                    res[(name, n, label)].append((cm.pairwise_accuracy(scores, rt, min_gap=0.1), float(np.median(rel[top]))))
        log(f"{name}: " + "; ".join(f"{n} own: " + ", ".join(
            "{} {:.2f} / {:.2f}".format(label, *mean((name, n, label))) for label in labels) for n in own))
    out = {}
    names = list(records.names.values())
    log(f"| own records | model | pairwise accuracy (mean) | top {k}: median time / best (geomean) |")
    log("|---:|---|---:|---:|")
    for n in own:
        for label in labels:
            per_workload = np.array([mean((w, n, label)) for w in names])
            acc, med = float(per_workload[:, 0].mean()), float(np.exp(np.log(per_workload[:, 1]).mean()))
            out[(n, label)] = (acc, med)
            log(f"| {n} | {label} | {acc:.3f} | {med:.3f} |")
    return out


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="measure default-space candidates and write JSONL records")
    c.add_argument("--n", type=int, default=20, help="candidates per workload")
    c.add_argument("--out", default="benchmarks/data/records.jsonl")
    c.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    c.add_argument("--seed0", type=int, default=0)
    c.add_argument("--compile-timeout", type=float, default=30.0)
    c.add_argument("--batch", type=int, default=4, help="candidates per workload per round")
    sp = sub.add_parser("speed", help="feature/prediction/training speed on GMM:2 candidates")
    sp.add_argument("--n", type=int, default=512)
    sp.add_argument("--rounds", type=int, default=5)
    q = sub.add_parser("quality", help="ranking quality on JSONL tuning records")
    q.add_argument("paths", nargs="+")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--splits", type=int, default=5, help="random same-workload splits to average")
    q.add_argument("--per-session", action="store_true", help="train only on pairs of the same workload and measurement session")
    q.add_argument("--skip-sessions", default="", help="comma-separated measurement sessions (0 = oldest, as printed) to leave out of training and testing")
    t = sub.add_parser("transfer", help="leave-one-workload-out value of the shipped transfer records")
    t.add_argument("--records", default=None, help="transfer records .npz (default: the shipped one)")
    t.add_argument("--k", type=int, default=32, help="picks per workload (a first batch)")
    t.add_argument("--seeds", type=int, default=3)
    t.add_argument("--later", default="", help="comma-separated own-record counts: rank the later records instead "
                   "(mlp on the first N own records against mlp-transfer on them plus the other workloads')")
    args = p.parse_args(argv)
    if args.cmd == "transfer" and args.later:
        transfer_later(args.records, tuple(int(x) for x in args.later.split(",")), seeds=args.seeds)
    elif args.cmd == "transfer":
        transfer(args.records, args.k, args.seeds)
    if args.cmd == "speed":
        speed(args.n, args.rounds)
    if args.cmd == "quality":
        skip = tuple(int(x) for x in args.skip_sessions.split(",") if x.strip())
        quality(args.paths, args.seed, splits=args.splits, per_session=args.per_session, skip_sessions=skip)
    if args.cmd == "collect":
        collect(args.workloads.split(","), args.n, args.out, args.seed0, batch=args.batch, compile_timeout=args.compile_timeout, log=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
