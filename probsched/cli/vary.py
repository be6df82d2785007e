"""``probsched vary WORKLOAD --db tuning.db --set 'site=value;...' [--set ...]``: what-if timing.

Takes the best record's decisions, changes the sites each ``--set`` names (one variant per
``--set``), replays the design space under ``condition`` with them, checks every variant
against the reference and times the best schedule and the variants in this process,
interleaved (so that the machine's drift hits them alike). ``--list`` prints the best
record's decision sites with their values and their choices instead.

A value is JSON (``[3, 57]``, ``true``, ``64``, ``"h1_0"``) or a bare word taken as a string
(``h1_0``); lists become tuples, as tile sizes are. Sites the changed decisions no longer
reach are dropped, sites they newly reach, or whose recorded value they make impossible (a
tile of a loop whose extent changed), are sampled (``--seed``); the table says which. A
variant that does not schedule, compile or compute the reference's output is a failed row,
and the exit code is then 1.

>>> parse_assignments('Z/i_0/tile=[3, 57]; Z/pack=false;padded/compute_at=h1_0')
{'Z/i_0/tile': (3, 57), 'Z/pack': False, 'padded/compute_at': 'h1_0'}
>>> parse_assignments('Z/pack')
Traceback (most recent call last):
...
probsched.cli.common.CLIError: --set 'Z/pack': expected SITE=VALUE (e.g. Z/k/tile=[4,128]), separated by ';'
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..errors import ProbschedError
from ..workloads import as_workload
from .common import CLIError, add_reader_arguments, positive_int, read_records, resolve_space, workload_name


def add_parser(sub) -> None:
    p = sub.add_parser(
        "vary",
        help="time the best schedule beside variants with some decisions changed (what-if)",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    add_reader_arguments(p)
    p.add_argument(
        "--set",
        dest="variants",
        action="append",
        default=[],
        metavar="SITE=VALUE[;SITE=VALUE...]",
        help="one variant: decision sites to change, e.g. 'Z/i_0/tile=[3,57];Z/pack=false' (repeatable)",
    )
    p.add_argument("--list", action="store_true", help="print the best record's decision sites and their choices, then exit")
    p.add_argument("--space", default=None, help="design space the record came from (default: the record's own, if 'default')")
    p.add_argument("--rounds", type=positive_int, default=7, help="interleaved timing rounds (default 7)")
    p.add_argument("--seed", type=int, default=0, help="seed for sites a variant reaches that the record has not (default 0)")
    p.set_defaults(run=run)


def _value(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        value = text  # a bare word: a loop name, an intrinsic name
    return tuple(value) if isinstance(value, list) else value


def parse_assignments(text: str) -> Dict[str, Any]:
    """``'site=value;site=value'`` -> ``{site: value}`` (values as in the module docstring)."""
    out: Dict[str, Any] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        site, sep, value = part.partition("=")
        if not sep or not site.strip() or not value.strip():
            raise CLIError(f"--set {part!r}: expected SITE=VALUE (e.g. Z/k/tile=[4,128]), separated by ';'")
        out[site.strip()] = _value(value.strip())
    if not out:
        raise CLIError(f"--set {text!r}: no SITE=VALUE in it")
    return out


@dataclass
class Variant:
    """One schedule to time: its label, the sites it changed, and what building it gave."""

    label: str
    changed: Dict[str, Any]
    notes: str = ""
    error: str = ""


def replay_with(func, space, base: Dict[str, Any], changed: Dict[str, Any], seed: int):
    """The schedule ``space`` makes from ``base``'s decisions with ``changed`` applied, its
    decision trace, and the recorded sites whose value the changes made impossible (sampled
    afresh); a CLIError when a changed site is not reached or its value is not a choice."""
    from handlers import condition, trace
    from handlers import seed as seeded
    from handlers.errors import HandlerError, SupportError

    from ..schedule import Schedule

    data = {**base, **changed}
    resampled: List[str] = []
    while True:
        sch = Schedule(func)
        try:
            tr = trace(seeded(condition(space, lambda name: data.get(name)), seed)).get_trace(sch)
            break
        except SupportError as exc:
            # a recorded decision the changed ones made impossible (a tile of a loop whose
            # extent changed): sample it afresh, as mutation would
            if exc.site in changed or exc.site not in data:
                raise CLIError(f"--set: {exc}") from None
            del data[exc.site]
            resampled.append(exc.site)
        except HandlerError as exc:
            raise CLIError(f"--set: {exc}") from None
    missing = [s for s in changed if s not in tr]
    if missing:
        raise CLIError(
            f"--set: site(s) {', '.join(missing)} not sampled by this variant; its sites are: {', '.join(tr)}"
        )
    return sch, tr, resampled


def _reference(workload):
    """Inputs and expected outputs: the numpy reference of a suite workload, else the
    unscheduled program's outputs."""
    from ..measure.reference import from_func, from_workload

    w = as_workload(workload)
    return from_workload(w) if w.has_reference else from_func(w.func)


def _list_sites(decisions) -> None:
    for name in decisions:
        site = decisions[name]
        support = None
        try:
            support = site.dist.support()
        except (AttributeError, NotImplementedError, TypeError):
            pass
        choices = "" if support is None else "  choices: " + json.dumps([_jsonable(v) for v in support])
        print(f"{name} = {json.dumps(_jsonable(site.value))}{choices}")


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def run(args: argparse.Namespace) -> int:
    from handlers.trace_struct import Trace

    from ..codegen import build
    from ..measure.timer import time_interleaved

    workload, db_path, _, best, _ = read_records(args, top=1)
    rec = best[0]
    if not rec.decisions:
        raise CLIError(f"the best record of {workload_name(workload)} in {db_path} has no decision trace to vary")
    decisions = Trace.from_json(rec.decisions)
    if args.list:
        _list_sites(decisions)
        return 0
    if args.space is None and rec.space not in ("", "default"):
        raise CLIError(f"the best record came from space {rec.space!r}: pass it with --space file.py:name or module:name")
    space = resolve_space(args.space or "default")
    func = as_workload(workload).func
    base = decisions.choices()
    variants = [Variant("best", {})] + [Variant(f"variant {i}", parse_assignments(t)) for i, t in enumerate(args.variants, 1)]
    ref = _reference(workload)
    fns = {}
    for v in variants:
        try:
            sch, tr, resampled = replay_with(func, space, base, v.changed, args.seed)
        except ProbschedError as exc:  # a primitive refused the changed decisions
            v.error = "schedule: " + str(exc).splitlines()[0]
            continue
        notes = {
            "dropped": [s for s in base if s not in tr],
            "sampled": [s for s in tr if s not in base and s not in resampled],
            "resampled": [f"{s}={json.dumps(_jsonable(tr[s].value))}" for s in resampled if s in tr],
        }
        v.notes = "; ".join(f"{k} {', '.join(x)}" for k, x in notes.items() if x)
        try:
            kernel = build(sch)
            outs = ref.empty_outputs(kernel)
            arrays = ref.arguments(kernel, outs)
            kernel(*arrays)
            ref.check(kernel.func, outs)
        except (ProbschedError, AssertionError) as exc:
            v.error = str(exc).splitlines()[0]
            continue
        fns[v.label] = kernel.bind(*arrays)
    timings = time_interleaved(fns, rounds=args.rounds) if fns else {}
    flops = getattr(workload, "flops", None)
    print(_table(workload_name(workload), rec, variants, timings, flops))
    return 0 if len(timings) == len(variants) else 1


def _table(name: str, rec, variants: List[Variant], timings, flops: Optional[float]) -> str:
    ours = timings.get("best")
    lines = [
        f"{name}: best record {rec.median * 1e6:.1f} µs as measured while tuning; all rows timed now, interleaved",
        "",
        "| schedule | changed | µs | GFLOP/s | time / best's | notes |",
        "|---|---|---:|---:|---:|---|",
    ]
    for v in variants:
        changed = "; ".join(f"{k}={json.dumps(_jsonable(x))}" for k, x in v.changed.items()) or "-"
        t = timings.get(v.label)
        if t is None:
            lines.append(f"| {v.label} | {changed} | failed | | | {v.error} |")
            continue
        gf = f"{flops / t.median / 1e9:.1f}" if flops else "-"
        ratio = f"{t.median / ours.median:.2f}" if ours is not None else "-"
        lines.append(f"| {v.label} | {changed} | {t.median * 1e6:.1f} | {gf} | {ratio} | {v.notes} |")
    return "\n".join(lines)
