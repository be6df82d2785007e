"""What the ``probsched`` subcommands share: naming a workload, opening a database, numbers.

A *workload spec* on the command line is one of

- a suite entry: ``GMM:2`` (operator and configuration index) or ``GMM:small``, in bfloat16
  with a precision suffix: ``GMM:2:bf16`` (:mod:`probsched.precision`);
- ``path/to/file.py:function`` or ``package.module:function``: a function of no arguments
  returning a ``ps.PrimFunc`` or a :class:`~probsched.workloads.Workload` (a module-level
  PrimFunc or Workload works too).

Every mistake a user can make here raises :class:`CLIError`, which ``probsched`` prints as
one line on stderr with exit code 2 (never a traceback).

>>> resolve_workload("GMM:small").name
'GMM:small'
>>> resolve_workload("NOPE:1")
Traceback (most recent call last):
...
probsched.cli.common.CLIError: unknown workload 'NOPE'; the suite has ...
>>> format_speed(2e-3, 4e6)
'2000.0 µs, 2.0 GFLOP/s'
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import importlib.util
import json
import math
import os
import sys
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from ..database import Database, TuningRecord
from ..database.errors import DatabaseError
from ..ir.stmt import PrimFunc
from ..precision import NAMES as PRECISION_NAMES
from ..precision import NARROW_MODES
from ..tuning.selection import best_schedule
from ..workloads import Workload, as_workload
from ..workloads import get as suite_get
from ..workloads import names as suite_names
from ..workloads import small as suite_small

if TYPE_CHECKING:
    from ..measure import Measurer
    from ..space import Space

WORKLOAD_HELP = (
    "a suite entry (GMM:2, GMM:small; see `probsched workloads`), or path/to/file.py:function "
    "or module:function naming a function that returns a ps.PrimFunc (or a Workload)"
)

DB_HELP = "SQLite database of tuning records (default $PROBSCHED_DB or ./probsched.db)"


class CLIError(Exception):
    """A mistake in what the user asked for; ``main`` prints it and exits with code 2."""


# ------------------------------------------------------------------------------ arguments


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (seconds, minutes: ``inf`` is no budget, leave
    the option out).

    >>> positive_float("1.5")
    1.5
    """
    return _float_where(text, lambda v: 0 < v < math.inf, "a finite number > 0")


def budget(args: argparse.Namespace) -> Tuple[Optional[int], Optional[float]]:
    """``(trials, minutes)`` of a command with a time budget: ``--trials`` as given, its
    default when neither is given, no trial limit with ``--minutes`` alone."""
    minutes = getattr(args, "minutes", None)
    if args.trials is None and minutes is None:
        return args.default_trials, None
    return args.trials, minutes


def budget_label(trials: Optional[int], minutes: Optional[float]) -> str:
    """``"128 trials"``, ``"5 minutes"``, ``"128 trials or 5 minutes"``.

    >>> budget_label(128, None), budget_label(None, 5.0), budget_label(64, 0.5)
    ('128 trials', '5 minutes', '64 trials or 0.5 minutes')
    """
    parts = ([f"{trials} trials"] if trials is not None else []) + ([f"{minutes:g} minutes"] if minutes is not None else [])
    return " or ".join(parts)


def share(text: str) -> float:
    """argparse type: a fraction in (0, 1].

    >>> share("0.5")
    0.5
    """
    return _float_where(text, lambda v: 0 < v <= 1, "in (0, 1]")


def _float_where(text: str, ok, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{value} is not {what}")
    return value


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} is not >= {low}")
    return value


def add_reader_arguments(p: argparse.ArgumentParser) -> None:
    """WORKLOAD and --db of the commands that read a database (``show``, ``plot``)."""
    p.add_argument("workload", help=WORKLOAD_HELP + "; or the name a tuned function is stored under")
    p.add_argument("--db", default=None, help=DB_HELP)


# ------------------------------------------------------------------------------ workloads


def is_suite_workload(workload: Union[Workload, PrimFunc]) -> bool:
    """Whether ``workload`` is a suite entry (those have numpy and jax baselines)."""
    w = as_workload(workload)
    return w.has_reference and w.name.partition(":")[0] in suite_names()  # a bare function is no entry


def workload_name(workload: Union[Workload, PrimFunc]) -> str:
    """The name a workload is shown and stored under (a bare PrimFunc: its function name)."""
    w = as_workload(workload)
    return w.name or w.func.name


def resolve_workload(spec: str) -> Union[Workload, PrimFunc]:
    """The workload a command-line spec names (see the module docstring); raises CLIError."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise CLIError(
            f"workload {spec!r}: expected NAME:INDEX (e.g. GMM:2, GMM:small), path/to/file.py:function "
            "or module:function"
        )
    if attr.lower() in PRECISION_NAMES and where.partition(":")[0].upper() in suite_names():
        return resolve_workload(where).with_precision(attr)  # GMM:2:bf16, GMM:small:bf16
    # A suite entry when the left side is an operator, or the right side cannot be a Python
    # name (GMM:2, NOPE:small): a typo then gets the suite's message, not an import error.
    if where.upper() in suite_names() or attr.isdigit() or attr == "small":
        try:
            return suite_small(where) if attr == "small" else suite_get(spec)
        except ValueError as exc:
            raise CLIError(str(exc)) from None  # the suite names the operator or lists the indices
    obj = load_object(spec, not_found=" (nor a suite workload; see `probsched workloads`)")
    if isinstance(obj, (PrimFunc, Workload)):
        return obj
    if not callable(obj):
        raise CLIError(f"{spec}: is a {type(obj).__name__}, expected a function returning a ps.PrimFunc")
    try:
        result = obj()
    except Exception as exc:  # the user's code: say what failed, without our frames around it
        raise CLIError(f"{spec}: calling {attr}() failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(result, (PrimFunc, Workload)):
        raise CLIError(f"{spec}: {attr}() returned a {type(result).__name__}, expected a ps.PrimFunc or a Workload")
    return result


def load_object(spec: str, not_found: str = "") -> Any:
    """The object ``path/to/file.py:name`` or ``module:name`` (``name`` may be dotted);
    ``not_found`` ends the message when no such module exists.

    Like ``python path/to/file.py`` the file's folder joins ``sys.path`` (so its sibling
    imports work), and like ``python -m`` the current directory does for a module.
    """
    where, _, attr = spec.rpartition(":")
    if where.endswith(".py") or os.sep in where or "/" in where:
        module = _load_file(where)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name and where.startswith(exc.name):  # the module itself, not one it imports
                raise CLIError(f"{spec}: no module named {where!r}{not_found}") from None
            raise CLIError(f"{spec}: importing {where} failed: {exc}") from None
        except Exception as exc:
            raise CLIError(f"{spec}: importing {where} failed: {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CLIError(f"{spec}: {where} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _load_file(path: str):
    if not os.path.isfile(path):
        raise CLIError(f"no such file: {path}")
    name = "probsched_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CLIError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise CLIError(f"{path}: running it failed: {type(exc).__name__}: {exc}") from None
    return module


def resolve_space(spec: str) -> "Space":
    """``default`` or ``file.py:name`` / ``module:name`` naming a Space (or a function returning one)."""
    from .. import space as space_mod

    if spec == "default":
        return space_mod.default()
    if ":" not in spec:
        raise CLIError(f"space {spec!r}: expected 'default', path/to/file.py:name or module:name")
    try:
        obj = load_object(spec)
    except CLIError as exc:
        raise CLIError(f"--space {exc}") from None
    if not isinstance(obj, space_mod.Space) and callable(obj) and not hasattr(obj, "rules"):
        try:
            obj = obj()
        except Exception as exc:
            raise CLIError(f"space {spec}: calling it failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, space_mod.Space):
        raise CLIError(f"space {spec}: expected a ps.space.Space (e.g. from ps.space.compose), got {type(obj).__name__}")
    return obj


# ------------------------------------------------------------------------------ database


def write_json(path: str, data: Any, option: str = "--json") -> None:
    """Write ``data`` as indented JSON to ``path``; a file that cannot be written is a
    :class:`CLIError` naming ``option``."""
    try:
        with open(path, "w") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
    except OSError as exc:
        raise CLIError(f"{option} {path}: {exc.strerror}") from None


def open_database(path: str, must_exist: bool = False) -> Database:
    """Open ``path`` (created unless ``must_exist``); a bad path is a CLIError."""
    if must_exist and path != ":memory:" and not os.path.exists(path):
        raise CLIError(f"no database at {path} (`probsched tune WORKLOAD --db {path}` creates one)")
    try:
        return Database(path)
    except DatabaseError as exc:
        raise CLIError(str(exc)) from None


def stored_workload(db: Database, spec: str) -> Tuple[Union[Workload, PrimFunc], str]:
    """The workload ``spec`` names and its key in ``db``.

    A spec that does not resolve may still be the stored name of a workload in ``db`` (a
    user's function tuned earlier), whose function the database keeps.
    """
    try:
        workload = resolve_workload(spec)
    except CLIError:
        held = db.workloads()
        stored = [w for w in held if w.name == spec]
        if stored:
            return stored[-1].func, stored[-1].hash
        if ":" in spec:  # meant as a suite entry or a file: its own message says what is wrong
            raise
        names = [w.name for w in held]
        close = difflib.get_close_matches(spec, names, n=3, cutoff=0.5)
        if close:
            also = f"; close names: {', '.join(close)}"
        elif names:
            also = f"; it holds {len(names)}: {', '.join(names[:3])}{', ...' if len(names) > 3 else ''}"
        else:
            also = " (it holds no workload)"
        if spec.upper() in suite_names():
            also += f"; a suite entry is NAME:INDEX, e.g. {spec}:2"
        raise CLIError(f"no workload named {spec!r} in this database ({db.path}){also}") from None
    return workload, as_workload(workload).func.structural_hash()


class StoredRecords(NamedTuple):
    """What ``show`` and ``plot`` read: the workload, the database path, the records of
    this machine in commit order, the ``top`` fastest distinct successful ones (the best
    first as :func:`~probsched.tuning.selection.best_schedule` names it, then by the search's
    medians) and ``retimed``: candidate hash -> run seconds of the current re-timing
    session (empty when there is none)."""

    workload: Union[Workload, PrimFunc]
    db_path: str
    records: List[TuningRecord]
    best: List[TuningRecord]
    retimed: Dict[str, Tuple[float, ...]]


def read_records(args: argparse.Namespace, top: int = 1) -> StoredRecords:
    """The records of ``args.workload`` in ``args.db`` (which must exist); a CLIError when
    there are none, or no successful one."""
    from ..database import default_path

    db_path = args.db or default_path()
    db = open_database(db_path, must_exist=True)
    try:
        workload, key = stored_workload(db, args.workload)
        records = host_records(db, workload, key, ok_only=False)
        named = best_schedule(db, key)
        if named is None:
            host_records(db, workload, key)  # raises, saying why there is no successful record
        others = [r for r in db.best(key, k=top) if r.candidate_hash != named.record.candidate_hash]
        best = [named.record] + others[: top - 1]
        retimed = {}
        if named.retimed:
            retimed = {r.candidate_hash: r.run_seconds for r in db.latest_retiming(key) if r.median is not None}
    finally:
        db.close()
    return StoredRecords(workload, db_path, records, best, retimed)


def host_records(db: Database, workload: Union[Workload, PrimFunc], key: str, ok_only: bool = True) -> List[TuningRecord]:
    """Records of ``key`` measured on this machine in commit order; a CLIError saying why there are none."""
    records = db.records(key, include_failed=not ok_only)
    if records:
        return records
    name = workload_name(workload)
    anywhere = db.records(key, target=None)
    if anywhere:
        ok = sum(r.ok for r in anywhere)
        raise CLIError(f"{db.path}: no successful record of {name} measured on this machine ({len(anywhere)} records, {ok} ok, elsewhere or failed)")
    held = ", ".join(f"{w.name} ({len(db.records(w.hash, target=None))} records)" for w in db.workloads()) or "nothing"
    raise CLIError(f"{db.path}: no records of {name} (the database holds: {held})")


def lost_trials(command: str, errors: Sequence[Optional[str]]) -> bool:
    """Say on stderr how many of a run's trials (their error kinds) a cluster lost, if any
    (the command then exits 1: those candidates were never measured). Whether any was.

    >>> lost_trials("tune", [None, "crash"])
    False
    """
    from ..measure.result import LOST

    lost = sum(e == LOST for e in errors)
    if lost:
        print(f"probsched {command}: {lost} of {len(errors)} trials were lost by the cluster, never measured (their "
              "workers or the scheduler were lost for longer than the run waits: see the warnings above); run again "
              "to measure them", file=sys.stderr)
    return lost > 0


# ------------------------------------------------------------------------------ tuning options


def add_precision_option(p: argparse.ArgumentParser, int8: bool = False, narrow: bool = False) -> None:
    """``--precision``: what the products of the tasks read (float32, or bf16 on CPUs with
    ``avx512_bf16``, emulated elsewhere; with ``int8``, also int8: a command that loads a
    model quantizes it, :mod:`.calibration`, whose options it adds); with ``narrow``, the
    ``--narrow`` of a command that compiles the network."""
    choices = ("float32", "bf16", "int8") if int8 else ("float32", "bf16")
    more = (" or int8 (the model quantized: its convolutions and matmuls read uint8 activations and int8 weights, "
            "calibrated by --calibration; a QDQ ONNX model is int8 already)") if int8 else ""
    p.add_argument("--precision", choices=choices, default="float32",
                   help="what the products read: float32 (default), bf16 (weights and the activations a product "
                        f"reads in bfloat16, accumulating in float32; inputs and outputs stay float32){more}")
    if narrow:
        p.add_argument("--narrow", choices=NARROW_MODES, default="exact",
                       help="with --precision bf16, the values between tasks stored in bfloat16: exact (default: where "
                            "every reader rounds them anyway, the results of float32 between tasks), all (every one, "
                            "the residual stream too, as other engines' bf16: less memory traffic, one more rounding), "
                            "none, auto (the faster of exact and all for this network, both compiled and timed)")
    if int8:
        from .calibration import add_int8_options

        add_int8_options(p)


def float_precision(precision: str) -> str:
    """The precision of the float products of a network run in ``precision``: an int8
    network's other tasks compute in float32."""
    return "float32" if precision == "int8" else precision


def add_measure_options(p: argparse.ArgumentParser) -> None:
    """Where candidates are measured: ``--workers`` here, or ``--cluster`` (:func:`make_measurer`)."""
    p.add_argument("--workers", type=positive_int, default=None, help="measuring worker processes on this machine (default 2)")
    p.add_argument("--cluster", metavar="ADDRESS", default=None,
                   help="measure on a Dask cluster instead: its scheduler's address, e.g. tcp://HOST:8786 (needs "
                        "`pip install 'probsched[dask]'` here and on the workers; README: 'Tuning on a cluster')")
    p.add_argument("--cluster-timeout", metavar="SECONDS", type=positive_float, default=None,
                   help="with --cluster: seconds to reach its scheduler (default 30)")
    p.add_argument("--no-worker-timeout", metavar="SECONDS", type=positive_float, default=None,
                   help="with --cluster: seconds to wait for a worker while none can measure (at the start, and when "
                        "all were lost) before the waiting candidates fail as lost (default 120)")


def add_search_options(
    p: argparse.ArgumentParser, trials: int, trials_help: str = "new candidates to measure", minutes: bool = False
) -> None:
    """The options of every tuning command (``tune``, ``tune-model``, ``bench``): how to
    search and measure; their defaults are :class:`~probsched.tuning.TuningOptions`'.
    ``minutes``: the command also takes a time budget (``--minutes``; see :func:`budget`)."""
    from ..cost_model import COST_MODELS, DEFAULT_COST_MODEL
    from ..search import STRATEGIES
    from ..tuning import TuningOptions
    from ..tuning.options import RETIME_TOP_ONE_TASK, RETIME_TOP_PER_TASK

    defaults = TuningOptions()
    if minutes:
        p.add_argument("--trials", type=non_negative_int, default=None,
                       help=f"{trials_help} (default {trials}, or no limit with --minutes)")
        p.add_argument("--minutes", type=positive_float, default=None, metavar="M",
                       help="stop tuning after M minutes with the best so far (with --trials: whichever ends first)")
        p.set_defaults(default_trials=trials)
    else:
        p.add_argument("--trials", type=non_negative_int, default=trials, help=f"{trials_help} (default {trials})")
    p.add_argument("--strategy", choices=list(STRATEGIES), default=defaults.strategy, help=f"search strategy (default {defaults.strategy})")
    p.add_argument("--cost-model", choices=list(COST_MODELS), default=DEFAULT_COST_MODEL,
                   help=f"model ranking candidates (default {DEFAULT_COST_MODEL}: it also trains on the shipped "
                        "records of the other workloads, so it ranks the first batch too; mlp: the workload's own "
                        "records only)")
    p.add_argument("--space", default="default", metavar="SPACE",
                   help="design space: 'default', or file.py:name / module:name of a ps.space.Space "
                        "(or of a function returning one)")
    p.add_argument("--max-family-share", type=share, default=None, metavar="F",
                   help="evolutionary search: once every algorithm family (direct or Winograd convolution, write "
                        "cache and rfactor decisions) has had its fair share of a batch measured, none takes more "
                        "than this fraction of a batch's model-ranked candidates (default 0.5; 1: MetaSchedule's "
                        "plain top-k, no share and no cap)")
    p.add_argument("--seed", type=int, default=defaults.seed, help=f"random seed of the search and the model (default {defaults.seed})")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help="candidates per measured round (default: about three rounds per task, 8 to 32)")
    add_measure_options(p)
    p.add_argument("--retime-top", type=non_negative_int, default=None, metavar="K",
                   help=f"after the search, time the K fastest candidates of each weighty task again together and "
                        f"name the best by that (default {RETIME_TOP_ONE_TASK} for one task, {RETIME_TOP_PER_TASK} per "
                        "task of a network; 0: the search's fastest)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def measure_label(args: argparse.Namespace) -> str:
    """Where candidates are measured, as a run's header says it; a CLIError for options that
    contradict each other or a malformed cluster address (checked before anything is opened)."""
    for option in ("cluster_timeout", "no_worker_timeout"):
        if getattr(args, option) is not None and args.cluster is None:
            raise CLIError(f"--{option.replace('_', '-')} applies with --cluster")
    if args.cluster is not None:  # "" too: an empty address is a mistake, not "no cluster"
        from ..measure.address import cluster_address

        try:
            args.cluster = cluster_address(args.cluster)
        except ValueError as exc:
            raise CLIError(f"--cluster: {exc}") from None
        if args.workers is not None:
            raise CLIError("--workers counts measuring processes on this machine; with --cluster the cluster's Dask "
                           "workers measure (`dask worker ... --nthreads N` sets theirs)")
        return f"Dask cluster {args.cluster}"
    workers = args.workers or 2
    return f"{workers} worker{'s' if workers != 1 else ''}"


def _quiet_dask_logs() -> None:
    """Errors only from distributed's loggers, and none from asyncio's: they log their
    connections' ups and downs with tracebacks (and asyncio an "exception never retrieved"
    of each fetch the measurer gives up on a dead worker), where the measurer's warnings say
    what a run waits for and what it lost. After distributed's import, which sets its
    loggers' levels (without it, DaskMeasurer says how to install it)."""
    import logging

    with contextlib.suppress(ImportError):
        import distributed  # noqa: F401
    for name in [n for n in logging.root.manager.loggerDict if n.split(".")[0] == "distributed"] + ["distributed"]:
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # only distributed runs an event loop here


def make_measurer(args: argparse.Namespace) -> "Measurer":
    """The measurer the options ask for: ``--cluster``'s Dask cluster, else local worker processes."""
    from .. import measure

    if args.cluster is not None:
        _quiet_dask_logs()
        return measure.get("dask", address_or_client=args.cluster, timeout=args.cluster_timeout or 30.0,
                           no_worker_timeout=args.no_worker_timeout or 120.0)
    return measure.get("local", workers=args.workers or 2)


def strategy_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The named strategy's options the command-line asks for (``TuningOptions.strategy_options``)."""
    if args.max_family_share is None:
        return {}
    if args.strategy != "evolutionary":
        raise CLIError(f"--max-family-share applies to --strategy evolutionary, not {args.strategy}")
    return {"max_family_share": args.max_family_share}


def family_share(args: argparse.Namespace) -> Optional[float]:
    """The family cap the search will run with (its default when the option is not given);
    None for a strategy that has none."""
    from ..search import get as get_strategy

    return getattr(get_strategy(args.strategy, **strategy_options(args)), "max_family_share", None)


def search_label(args: argparse.Namespace) -> str:
    """The strategy as a run's header names it (with its family cap, when it has one)."""
    share = family_share(args)
    return args.strategy if share is None else f"{args.strategy} (max family share {share:g})"


def options_from_args(args: argparse.Namespace, space: Optional["Space"] = None):
    """The :class:`~probsched.tuning.TuningOptions` the search options of ``args`` ask for."""
    from ..tuning import TuningOptions

    return TuningOptions(
        space=space, strategy=args.strategy, strategy_options=strategy_options(args), cost_model=args.cost_model,
        seed=args.seed, batch_size=args.batch_size, retime_top=args.retime_top,
    )


def check_writable(path: str, option: str) -> None:
    """Fail before a long run, not after it, when ``path`` cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"{option} {path}: no such directory {folder}")


# ------------------------------------------------------------------------------ numbers


def gflops(flops: Optional[float], seconds: float) -> Optional[float]:
    """GFLOP/s, or None when the FLOP count is unknown or the time is not a finite positive number."""
    if not flops or not (0 < seconds < math.inf):
        return None
    return flops / seconds / 1e9


def num(x: Optional[float]) -> str:
    """A time or a throughput for people: one decimal, or three significant digits below 1
    (tiny test workloads run at 0.01 GFLOP/s, which one decimal would show as 0.0).

    >>> num(2491.04), num(0.01234), num(None)
    ('2491.0', '0.0123', '-')
    """
    if x is None:
        return "-"
    return f"{x:.1f}" if abs(x) >= 1 else f"{x:.3g}"


def format_speed(seconds: float, flops: Optional[float]) -> str:
    """``'123.4 µs, 56.7 GFLOP/s'`` (just µs for a bare function)."""
    gf = gflops(flops, seconds)
    text = f"{num(seconds * 1e6)} µs"
    return text if gf is None else f"{text}, {num(gf)} GFLOP/s"


def comparison(rows: Sequence[Tuple[str, float]], flops: Optional[float]) -> List[Dict[str, Any]]:
    """``(implementation, seconds)`` rows (ours first) as dicts with µs, GFLOP/s and
    ``speedup``: the implementation's time over ours (> 1: ours is faster)."""
    ours = rows[0][1]
    return [
        {"implementation": name, "median_us": sec * 1e6, "gflops": gflops(flops, sec), "speedup": sec / ours}
        for name, sec in rows
    ]


def finite_or_none(x: Optional[float]) -> Optional[float]:
    """JSON has no infinity: failed times become null."""
    return x if x is not None and math.isfinite(x) else None
