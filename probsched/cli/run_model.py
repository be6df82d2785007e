"""``probsched run model.psm --input x.npy [--output y.npy] [--bench] [--profile]``: run a saved model.

The model file is loaded without the tuner (``ps.load``); each ``--input`` is one ``.npy``
array, in the model's input order (``probsched run model.psm`` alone lists the inputs).
``--output`` saves the outputs (one ``.npy``, or ``.npz`` for several); ``--bench`` times
calls and prints the median latency and the throughput; ``--profile`` where one inference's
time goes: each task's kernel calls timed one by one (:meth:`~probsched.runtime.CompiledModel.profile`),
slowest task first, with its share of their sum.
"""

from __future__ import annotations

import argparse
import sys
import time

from .common import CLIError, check_writable

#: inferences each kernel call's median is taken over by ``--profile``
PROFILE_REPEAT = 11


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run a saved model file on .npy inputs (and time it with --bench)",
                       description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("model", help="a model file written by `probsched compile` or model.save()")
    p.add_argument("--input", "-i", action="append", default=[], metavar="X.npy", help="an input array, in order (repeat)")
    p.add_argument("--output", "-o", metavar="PATH", help="save the outputs (.npy for one, .npz for several)")
    p.add_argument("--bench", action="store_true", help="time the model: median latency and throughput")
    p.add_argument("--seconds", type=float, default=3.0, help="how long --bench times calls (default 3)")
    p.add_argument("--profile", action="store_true",
                   help="time each task's kernel calls one by one: where one inference's time goes, slowest first")
    p.add_argument("--top", type=int, default=20, help="tasks --profile lists (default 20; the rest are summed)")
    p.set_defaults(run=run)


def _describe(model) -> str:
    iface = model.interface
    rows = [f"{name}: {iface.types[v]}" for name, v in zip(iface.input_names, iface.inputs)]
    outs = [f"{name}: {iface.types[v]}" for name, v in zip(iface.output_names, iface.outputs)]
    return f"{iface.name}\n  inputs:  " + ", ".join(rows) + "\n  outputs: " + ", ".join(outs)


def _flat(outs):
    if isinstance(outs, dict):
        return [a for v in outs.values() for a in _flat(v)]
    if isinstance(outs, (list, tuple)):
        return [a for v in outs for a in _flat(v)]
    return [outs]


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..errors import ModelFileError
    from ..runtime import load

    if args.output:
        check_writable(args.output, "--output")
    if args.top < 1:
        raise CLIError(f"--top must be at least 1, got {args.top}")
    t0 = time.perf_counter()
    try:
        model = load(args.model)
    except ModelFileError as exc:
        raise CLIError(str(exc)) from None
    loaded = time.perf_counter() - t0
    if not args.input:
        print(_describe(model))
        print(f"(loaded in {loaded:.2f} s; give --input for each input to run it)")
        return 0
    inputs = []
    for path in args.input:
        try:
            inputs.append(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise CLIError(f"--input {path}: not a .npy array ({exc})") from None
    try:
        t1 = time.perf_counter()
        outs = model(*inputs)
        first = time.perf_counter() - t1
    except (TypeError, ValueError) as exc:  # KernelArgumentError names the input
        raise CLIError(str(exc)) from None
    print(f"{model.name}: loaded in {loaded:.2f} s, first call {first * 1e3:.1f} ms", file=sys.stderr)
    flat = _flat(outs)
    if args.output:
        if len(flat) == 1:
            np.save(args.output, flat[0])
        else:
            np.savez(args.output, **{name: a for name, a in zip(model.interface.output_names, flat)})
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        for name, a in zip(model.interface.output_names, flat):
            print(f"{name}: {a.dtype}{list(a.shape)}, mean {float(np.mean(a)):.6g}")
    if args.bench:
        times = []
        end = time.perf_counter() + args.seconds
        while time.perf_counter() < end or len(times) < 5:
            t = time.perf_counter()
            model(*inputs)
            times.append(time.perf_counter() - t)
        med = float(np.median(times))
        print(f"| model | calls | median ms | throughput /s |\n|---|---:|---:|---:|\n"
              f"| {model.name} | {len(times)} | {med * 1e3:.3f} | {1 / med:.1f} |")
    if args.profile:
        print(profile_table(model.profile(repeat=PROFILE_REPEAT), args.top))
    return 0


def profile_table(rows, top: int = 20) -> str:
    """A Markdown table of :meth:`~probsched.runtime.CompiledModel.profile`'s ``(task, calls,
    µs per inference)`` rows, slowest first: the first ``top`` tasks, the rest summed in one
    row, each with its share of the total.

    >>> print(profile_table([("conv", 3, 300.0), ("dense", 1, 80.0), ("pool", 1, 20.0)], top=2))
    | task | calls | ms per inference | share |
    |---|---:|---:|---:|
    | conv | 3 | 0.300 | 75.0% |
    | dense | 1 | 0.080 | 20.0% |
    | 1 more task | 1 | 0.020 | 5.0% |
    | sum of the calls | 5 | 0.400 | 100.0% |
    """
    total = sum(us for _, _, us in rows) or 1.0
    lines = ["| task | calls | ms per inference | share |", "|---|---:|---:|---:|"]

    def line(name: str, calls: int, us: float) -> str:
        return f"| {name} | {calls} | {us / 1e3:.3f} | {100 * us / total:.1f}% |"

    lines += [line(name, calls, us) for name, calls, us in rows[:top]]
    rest = rows[top:]
    if rest:
        lines.append(line(f"{len(rest)} more task{'s' if len(rest) > 1 else ''}", sum(c for _, c, _ in rest),
                          sum(us for _, _, us in rest)))
    lines.append(line("sum of the calls", sum(c for _, c, _ in rows), sum(us for _, _, us in rows)))
    return "\n".join(lines)
