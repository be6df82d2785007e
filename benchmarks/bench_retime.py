"""Re-timing the best candidates of existing databases (what ``ps.tune`` does before it names a best).

``retime``: run :func:`probsched.tuning.selection.retime` on databases written by ``probsched bench``
or ``probsched tune`` (one per workload, ``DIR/ours_W.db``), so that ``bench_tvm.py
compare`` times the re-timed best; prints each workload's eight, search median -> re-timed
median, fastest re-timed first::

    python benchmarks/bench_retime.py retime --dir D --workloads DEP:0,T2D:0

``protocols``: in this process, time the ``--top`` best of one database interleaved under two
protocols (5 rounds with 0.2 s pauses, 15 rounds without), each twice, and print every
candidate's median: whether the protocols pick the same fastest::

    python benchmarks/bench_retime.py protocols --db D/ours_DEP:0.db --workload DEP:0
"""

from __future__ import annotations

import argparse
import time


def retime_dbs(args: argparse.Namespace) -> None:
    import probsched as ps
    from probsched.database import Database
    from probsched.measure import LocalMeasurer
    from probsched.tuning.selection import retime

    with LocalMeasurer() as m:
        for spec in args.workloads.split(","):
            w = ps.workloads.get(spec)
            with Database(f"{args.dir}/ours_{spec}.db") as db:
                start = time.perf_counter()
                pairs = retime(w, db, m, top=args.top)
                stored = sorted(rec.median for rec, _ in pairs)
                rank = stored.index(pairs[0][0].median)
                times = "  ".join(f"{rec.median * 1e6:.1f}->{res.median * 1e6:.1f}" for rec, res in pairs)
                print(f"{spec}: {time.perf_counter() - start:.0f} s, winner is the search's #{rank}: {times}", flush=True)


def protocols(args: argparse.Namespace) -> None:
    import numpy as np

    import probsched as ps
    from probsched.aligned import aligned_copy, aligned_empty
    from probsched.database import Database
    from probsched.measure.timer import time_interleaved

    w = ps.workloads.get(args.workload)
    with Database(args.db) as db:
        top = db.best(w, k=args.top)
    inputs = [aligned_copy(a) for a in w.random_inputs(np.random.default_rng(0))]
    calls = {}
    for i, rec in enumerate(top):
        kernel = ps.build(rec.schedule(w.func).mod)
        calls[i] = kernel.bind(*inputs, *[aligned_empty(b.shape, b.dtype) for b in kernel.outputs])
    settings = [("5 rounds, 0.2 s pauses", dict(rounds=5, settle_s=0.2, min_repeat_ms=50)),
                ("15 rounds, no pause", dict(rounds=15, settle_s=0.0, min_repeat_ms=50))]
    print(f"{args.workload}: the {len(top)} best, search µs: " + " ".join(f"{r.median * 1e6:.0f}" for r in top))
    for name, kw in settings * 2:
        start = time.perf_counter()
        t = time_interleaved(dict(calls), **kw)
        med = [t[i].median * 1e6 for i in range(len(top))]
        print(f"  {name}: {time.perf_counter() - start:.0f} s, fastest #{int(np.argmin(med))}: "
              + " ".join(f"{m:.0f}" for m in med), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("retime", help="re-time the best of DIR/ours_W.db for each workload")
    r.add_argument("--dir", required=True)
    r.add_argument("--workloads", default="GMM:2,GMM:3,C1D:0,C2D:2,DEP:0,T2D:0,CBR:1,SFM:2,NRM:2")
    r.add_argument("--top", type=int, default=8)
    r.set_defaults(run=retime_dbs)
    q = sub.add_parser("protocols", help="two interleaved protocols on one database's best, twice each")
    q.add_argument("--db", required=True)
    q.add_argument("--workload", required=True)
    q.add_argument("--top", type=int, default=8)
    q.set_defaults(run=protocols)
    args = p.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
