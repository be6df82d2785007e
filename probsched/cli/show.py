"""``probsched show WORKLOAD --db tuning.db [--top K] [--source]``: the best schedules found.

For each of the ``K`` fastest distinct candidates measured on this machine (the best first,
as the last re-timing named it: see :mod:`probsched.tuning.selection`): its median time and
GFLOP/s (re-timed and as the search measured it), which strategy and space found it, the schedule as Python (its instruction log)
that replays it, the scheduled loop nest, and with ``--source`` the Python source numba
compiles for it.
"""

from __future__ import annotations

import argparse
import datetime
import statistics

from ..errors import ProbschedError
from ..workloads import as_workload
from .common import add_reader_arguments, format_speed, positive_int, read_records, workload_name


def add_parser(sub) -> None:
    p = sub.add_parser(
        "show",
        help="print the best schedule of a workload: instruction log as Python, loop nest, generated source",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    add_reader_arguments(p)
    p.add_argument("--top", type=positive_int, default=1, metavar="K", help="show the K best distinct candidates (default 1)")
    p.add_argument("--source", action="store_true", help="also print the generated numba source (compiles the kernel)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..codegen import build
    workload, db_path, records, best, retimed = read_records(args, top=args.top)
    func = as_workload(workload).func
    flops = getattr(workload, "flops", None)
    ok = sum(r.ok for r in records)
    print(f"{workload_name(workload)}: {len(records)} records in {db_path} ({ok} ok); best {len(best)} shown")
    for rank, rec in enumerate(best, 1):
        when = datetime.datetime.fromtimestamp(rec.timestamp).strftime("%Y-%m-%d %H:%M:%S")
        print()
        runs = retimed.get(rec.candidate_hash)
        if runs:
            again = f"{format_speed(statistics.median(runs), flops)} re-timed with the {len(retimed)} best"
            print(f"## #{rank}: {again} (search: {format_speed(rec.median, flops)})")
        else:
            print(f"## #{rank}: {format_speed(rec.median, flops)}")
        print(
            f"strategy {rec.strategy or '?'}, space {rec.space or '?'}, compile {rec.compile_seconds:.2f} s, "
            f"measured {when}, candidate {rec.candidate_hash[:16]}"
        )
        print()
        print("# schedule (Python; replays onto ps.Schedule(func))")
        print(rec.instruction_log())
        try:
            sch = rec.schedule(func)
        except ProbschedError as exc:  # a record of an older space/primitive version
            print(f"# cannot replay this record onto the current function: {exc}")
            continue
        print()
        print("# loop nest")
        print(sch.mod)
        if args.source:
            print()
            print("# generated source (numba)")
            print(build(sch).source)
    return 0
