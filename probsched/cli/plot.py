"""``probsched plot WORKLOAD --db tuning.db -o curve.png``: tuning curves per strategy.

The records of the workload measured on this machine, in commit order, are grouped by the
strategy that proposed them (the records' ``strategy`` field; several runs of one strategy
follow each other on one curve). Each curve is the best-so-far GFLOP/s (median µs for a
bare function, which has no FLOP count) against the trial number within its strategy; a
failed trial counts as a trial and improves nothing.
"""

from __future__ import annotations

import argparse
import math
from typing import Dict, List, Optional, Sequence

from .common import CLIError, add_reader_arguments, gflops, num, read_records, workload_name


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="draw best-so-far GFLOP/s against trials for each strategy in the database",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    add_reader_arguments(p)
    p.add_argument("-o", "--output", default="curve.png", help="image file; the extension picks the format (default curve.png)")
    p.set_defaults(run=run)


def best_so_far(records: Sequence, flops: Optional[float]) -> Dict[str, List[float]]:
    """Strategy -> best-so-far value after each of its trials, in first-seen strategy order.

    Values are GFLOP/s (higher is better) when ``flops`` is known, else median µs (lower is
    better); NaN until the strategy's first success.

    >>> from types import SimpleNamespace as R
    >>> recs = [R(strategy="replay", median=2e-6), R(strategy="mcmc", median=math.inf),
    ...         R(strategy="replay", median=4e-6), R(strategy="mcmc", median=1e-6)]
    >>> best_so_far(recs, 4000.0)
    {'replay': [2.0, 2.0], 'mcmc': [nan, 4.0]}
    >>> best_so_far(recs, None)["replay"]
    [2.0, 2.0]
    """
    curves: Dict[str, List[float]] = {}
    best: Dict[str, float] = {}
    for rec in records:
        name = rec.strategy or "unknown"
        fastest = min(best.get(name, math.inf), rec.median)
        best[name] = fastest
        if fastest == math.inf:
            value = math.nan
        elif flops:
            value = gflops(flops, fastest)
        else:
            value = fastest * 1e6
        curves.setdefault(name, []).append(value)
    return curves


def run(args: argparse.Namespace) -> int:
    workload, db_path, records, _, _ = read_records(args)
    flops = getattr(workload, "flops", None)
    curves = best_so_far(records, flops)
    # Figure without pyplot: no GUI backend is chosen or needed (Agg renders the file).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    unit = "GFLOP/s" if flops else "µs"
    summary = []
    for strategy, values in curves.items():
        final = values[-1]
        label = f"{strategy} ({len(values)} trials" + ("" if math.isnan(final) else f", best {num(final)} {unit}") + ")"
        ax.step(range(1, len(values) + 1), values, where="post", label=label)
        summary.append(label)
    ax.set_xlabel("trial")
    ax.set_ylabel(f"best so far ({unit}, {'higher' if flops else 'lower'} is better)")
    ax.set_title(f"{workload_name(workload)}: tuning curves ({db_path})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    try:
        fig.savefig(args.output, dpi=120)
    except (OSError, ValueError) as exc:  # no such folder, unknown image format
        raise CLIError(f"-o {args.output}: {exc}") from None
    print(f"wrote {args.output}: " + "; ".join(summary))
    return 0
