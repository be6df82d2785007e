"""``ps.compile``: choose a schedule for each task of a network, build it, hand the kernels
to the runtime (:class:`probsched.runtime.CompiledModel`).

For each task (:mod:`probsched.graph.task`) the schedule is the first of these that builds
and computes the task's reference:

1. ``"database"``: the task's records in the tuning database for this machine (without a
   database, or for a task the database has no record of: ``"shipped"``, the records the
   package ships for this CPU family, :mod:`.shipped`), the best
   first as :func:`~.selection.best_schedule` names it, then the next fastest (a record
   that no longer replays, e.g. written by another version of the design space or edited
   by hand, is skipped with a warning naming the task, the record and the database);
2. ``"predicted"``: ``candidates`` programs drawn from the design space and ranked by the
   shipped transfer cost model (:mod:`probsched.cost_model.transfer`). Nothing is
   measured. TVM builds the unscheduled loop nest in this case; a predicted schedule is
   usually several times faster.

Every kernel is checked once against its task's reference before the model is returned
(``check=True``), so a compiled model computes what the function it was imported from
computes.

>>> import numpy as np, jax
>>> import probsched as ps
>>> w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
>>> fn = lambda x: jax.nn.relu(x @ w)
>>> x = np.ones((2, 8), np.float32)
>>> model = ps.compile(fn, x, candidates=4)
>>> bool(np.allclose(model(x), jax.jit(fn)(x), rtol=1e-5, atol=1e-5))
True
>>> [c.source for c in model.choices]
['predicted']
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..database import Database, TuningRecord
from ..errors import BuildError, ProbschedError
from ..graph import Graph, Task
from ..graph.precision import narrow_between_tasks
from ..ir.dtypes import BF16
from ..precision import NARROW_MODES, canonical
from ..runtime import CompiledModel, KernelStep, ModelInterface
from ..schedule import InstructionLog, Schedule
from . import compile_cache, network_cache
from .selection import best_schedule
from .shipped import shipped_database
from .similar_tasks import stored_function, twin_records

log = logging.getLogger("probsched.compile")

#: Programs drawn from the design space for a task without records (drawing and
#: featurising them is the cost; ranking is cheap).
DEFAULT_CANDIDATES = 128
#: Records of a task tried, fastest first, before falling back to a predicted schedule.
MAX_RECORDS_TRIED = 8


class TaskChoice:
    """The schedule a compiled model uses for one task, and where it came from: ``source``
    ``"database"``, ``"shipped"`` or ``"predicted"``; ``seconds`` its measured median (from
    the records). A model loaded from the compile cache (:mod:`.network_cache`) knows the
    schedule by its instruction log and replays it when it is first asked for."""

    def __init__(self, task: Task, schedule: Optional[Schedule], source: str, seconds: Optional[float] = None,
                 instructions: Optional[str] = None) -> None:
        if schedule is None and instructions is None:
            raise ValueError(f"TaskChoice of task {task.name}: give the schedule or its instruction log")
        self.task, self._schedule, self.source, self.seconds = task, schedule, source, seconds
        self._instructions = instructions

    @property
    def schedule(self) -> Schedule:
        if self._schedule is None:
            self._schedule = InstructionLog.from_json(self._instructions).apply(Schedule(self.task.func))
        return self._schedule

    @property
    def instructions(self) -> str:
        """The chosen schedule's instruction log (JSON)."""
        if self._instructions is None:
            self._instructions = self._schedule.instructions.to_json()
        return self._instructions

    def __repr__(self) -> str:
        return f"TaskChoice({self.task.name!r}, source={self.source!r}, seconds={self.seconds!r})"


@functools.lru_cache(maxsize=4)
def _transfer_model(seed: int):
    """An MLP trained on the shipped transfer records (None when they are unavailable);
    trained once per process and seed, only ever asked to predict."""
    from ..cost_model import MLPModel
    from ..cost_model.transfer import load_transfer

    records = load_transfer()
    if records is None or not len(records):
        return None
    model = MLPModel(seed=seed)
    model.set_transfer(records.features, records.seconds, records.groups, train=True)
    return model


def predicted_schedules(task: Task, model, space, candidates: int, seed: int) -> List[Schedule]:
    """Distinct programs drawn from ``space`` for ``task``, best predicted first."""
    from ..search import SearchContext

    ctx = SearchContext(task.workload, space, model, seed=seed)
    seen, drawn = set(), []
    for _ in range(max(1, candidates)):
        c = ctx.draw()
        if c is not None and c.hash not in seen:
            seen.add(c.hash)
            drawn.append(c)
    if not drawn:
        return [Schedule(task.func)]
    scores = ctx.score(drawn)
    order = np.argsort(-scores, kind="stable")
    return [drawn[i].schedule for i in order]


def check_kernel(task: Task, kernel) -> Optional[str]:
    """None if ``kernel`` computes the task's reference, else why not."""
    w = task.workload
    inputs = w.random_inputs(np.random.default_rng(1))
    try:
        outs = kernel.run(*inputs)
        w.check(outs, w.reference(*inputs), scheduled=kernel.func)
    except Exception as exc:  # a failed check (AssertionError) or a crash of the run
        return f"{type(exc).__name__}: {exc}"
    return None


def as_graph(model: Union[Graph, Callable], example_args: Sequence[Any]) -> Graph:
    """``model`` as a :class:`~probsched.graph.Graph`: a graph as it is, a JAX function traced
    with ``example_args`` (a function of no arguments is traced as it is)."""
    if isinstance(model, Graph):
        return model
    if not callable(model):
        raise TypeError(f"compile: expected a ps.Graph or a JAX function, got {type(model).__name__}")
    from ..graph.from_jax import from_jax

    return from_jax(model, *example_args)


def _stored(task: Task, db: Optional[Database]) -> List[Tuple[TuningRecord, float]]:
    """The task's records to try, in order, each with the time it reports: the best as
    :func:`~.selection.best_schedule` names it, then the next fastest."""
    if db is None:
        return []
    best = best_schedule(db, task.func, task.flops)  # by the function: no reference computed
    if best is None:
        return []
    others = [(r, r.median) for r in db.best(task.func, k=MAX_RECORDS_TRIED) if r.candidate_hash != best.record.candidate_hash]
    return ([(best.record, best.seconds)] + others)[:MAX_RECORDS_TRIED]


def _database_candidates(task: Task, db: Database, stored: List[Tuple[TuningRecord, float]],
                         skipped: List[str]) -> Iterator[Tuple[Schedule, float]]:
    """The schedules of ``stored`` (:func:`_stored`, records of ``db``) that replay; a record
    that does not replay is skipped with a warning, and its hash added to ``skipped``."""
    for rec, seconds in stored:
        sch = _replayed(task, db, rec)
        if sch is None:
            skipped.append(rec.candidate_hash)
            continue
        yield sch, seconds


def _replayed(task: Task, db: Database, rec: TuningRecord) -> Optional[Schedule]:
    """``rec``'s schedule of ``task``, or None (logged) when it does not replay to the program
    the record names."""
    base = task.func if task.base is None else task.base.func
    # a record names its own program: the task's (a narrowed task tuned as itself), or, for a
    # task storing some values in bfloat16, its base's (the same blocks and loops), or a
    # twin's (:func:`_twins_stored`: the twin's function)
    if rec.workload_hash == task.func.structural_hash():
        base = task.func
    twin = None if rec.workload_hash == base.structural_hash() else stored_function(db, rec.workload_hash)
    try:
        sch = rec.schedule(base if twin is None else twin)
    except Exception as exc:  # an unknown instruction, a decision outside its support, bad JSON...
        log.warning(
            "compile: task %s: record %s in %s does not replay (%s: %s); trying the next", task.name,
            rec.candidate_hash[:12], db.path, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "",
        )
        return None
    if sch.mod.structural_hash() != rec.candidate_hash:
        log.warning("compile: task %s: record %s in %s replays to another program; trying the next", task.name,
                    rec.candidate_hash[:12], db.path)
        return None
    if base is task.func and twin is None:
        return sch
    try:
        return rec.schedule(task.func)
    except Exception as exc:  # noqa: BLE001 - e.g. a micro-kernel that wants float32 where it now reads bfloat16
        log.info("compile: task %s: record %s does not replay with values stored in bfloat16 (%s); trying the next",
                 task.name, rec.candidate_hash[:12], exc)
        return None


def compile(  # noqa: A001 - the library's verb, as ps.build
    model: Union[Graph, Callable],
    *example_args: Any,
    database: Union[str, Database, None] = None,
    space: Optional[Callable] = None,
    candidates: int = DEFAULT_CANDIDATES,
    check: bool = True,
    seed: int = 0,
    progress: Union[str, Callable[[str], None], None] = "auto",
    precision: str = "float32",
    narrow: Union[bool, str] = True,
) -> CompiledModel:
    """Compile a network (a :class:`~probsched.graph.Graph`, or a JAX function with example
    arguments); see the module docstring. ``database``: a path or
    :class:`~probsched.database.Database` whose records to use. ``space``: the design space
    (default ``ps.space.default()``) the programs of a task without a usable record are drawn
    from (``candidates`` of them); a task's records are used whatever space made them (a
    record replays its own instructions), so to compile without a module, give a database
    tuned without it. ``progress``: ``"auto"`` (a progress bar on stderr when it is a terminal),
    None, or ``progress(message)`` called as each task is built. ``precision``:
    ``"bf16"`` compiles the tasks with their products in bfloat16 (tasks and records of their
    own: :mod:`probsched.graph.precision`), except those whose float32 record is faster or
    the only one measured; the network's inputs and outputs stay float32. ``narrow``: in
    bfloat16, which values between tasks are stored in bfloat16
    (:func:`~probsched.graph.precision.narrow_between_tasks`): ``"exact"`` (or True) those
    that every reader rounds anyway (half the traffic, the results of float32 between
    tasks); ``"all"`` every one a task can round as it writes it, a residual connection's
    too, as other engines' bfloat16 does (less traffic, one more rounding of those values);
    ``"none"`` (or False) none; ``"auto"`` the faster of ``"exact"`` and ``"all"`` for this
    network, both compiled and timed here (:mod:`.narrow_choice`; the choice is kept on
    disk, so a second compile returns the same model).

    What was chosen and checked is kept on disk (:mod:`.compile_cache`), and so is the
    compiled network (:mod:`.network_cache`): compiling the same network with the same
    records again loads it."""
    graph = as_graph(model, example_args)
    mode = narrow_mode(narrow)
    options = dict(database=database, space=space, candidates=candidates, check=check, seed=seed, progress=progress,
                   precision=precision)
    if mode == "auto":
        if canonical(precision) != BF16:
            return _compile(graph, narrow="exact", **options)[0]
        from . import narrow_choice

        built = {m: _compile(graph, narrow=m, **options) for m in ("exact", "all")}
        chosen, _ = narrow_choice.choose({m: b[0] for m, b in built.items()}, (built["exact"][1], built["all"][1]))
        return built[chosen][0]
    return _compile(graph, narrow=mode, **options)[0]


def _compile(graph: Graph, database: Union[str, Database, None], space: Optional[Callable], candidates: int, check: bool,
             seed: int, progress: Union[str, Callable[[str], None], None], precision: str,
             narrow: str) -> Tuple[CompiledModel, Optional[str]]:
    """:func:`compile` with one ``narrow`` mode (not ``"auto"``); the compiled network and its
    cache key (None: not cacheable)."""
    from .. import space as space_mod

    space = space or space_mod.default()
    own_db = database is not None and not isinstance(database, Database)
    db = Database(database) if own_db else database
    try:
        shipped = shipped_database()
        tasks, stored, values = network_tasks(graph, db, precision, narrow, shipped)
        interface = ModelInterface.of_graph(graph)
        if values:
            interface = interface.with_types({v: BF16 for v in values})
        calls = sorted(((c.index, t, c.inputs, c.outputs) for t in tasks for c in t.calls), key=lambda c: c[0])
        calls = [c[1:] for c in calls]  # in run order
        key = _network_key(interface, calls, tasks, stored, space, candidates, seed, check, precision)
        cached = network_cache.load(key, interface) if key is not None else None
        if cached is not None:
            _, steps, saved = cached
            choices = [TaskChoice(t, None, c.source, c.seconds, c.instructions) for t, c in zip(tasks, saved)]
            report, close = _progress(progress, graph.name, 1)
            report(f"[1/1] {graph.name}: compiled before ({len(tasks)} tasks)")
            close()
            return CompiledModel(interface, steps, choices, graph=graph), key
        kernels, choices, clean = _build_tasks(graph.name, tasks, stored, db, space, candidates, check, seed, shipped,
                                               progress)
    finally:
        if own_db:
            db.close()
    steps = [KernelStep(task.name, kernels[task.key], tuple(ins), tuple(outs), task.key) for task, ins, outs in calls]
    compiled = CompiledModel(interface, steps, choices, graph=graph)
    if key is not None and clean:
        network_cache.store(key, compiled)
    return compiled, key


def narrow_mode(narrow: Union[bool, str]) -> str:
    """``"all"``, ``"exact"``, ``"none"`` or ``"auto"`` for a ``narrow`` argument (True is
    ``"exact"``, False ``"none"``).

    >>> narrow_mode(True), narrow_mode("all"), narrow_mode(False), narrow_mode("auto")
    ('exact', 'all', 'none', 'auto')
    >>> narrow_mode("some")
    Traceback (most recent call last):
    ...
    probsched.errors.ProbschedError: narrow='some': expected 'exact', 'all', 'none' or 'auto' (True is 'exact', False 'none')
    """
    if narrow is True or narrow is False:
        return "exact" if narrow else "none"
    if narrow not in NARROW_MODES:
        raise ProbschedError(f"narrow={narrow!r}: expected 'exact', 'all', 'none' or 'auto' (True is 'exact', False 'none')")
    return narrow


def network_tasks(graph: Graph, db: Optional[Database], precision: str, narrow: str,
                  shipped: Optional[Database] = None) -> Tuple[List[Task], dict, frozenset]:
    """The tasks a compile of ``graph`` runs with the records of ``db`` (and the shipped
    ones): each in ``precision`` or in float32 (:func:`_faster_precision`), then, for bf16
    and a ``narrow`` mode other than ``"none"`` (not ``"auto"``: one mode), with the values
    between them stored in bfloat16 (:func:`_narrowed`); the records each is compiled from
    (by task key); and the values stored in bfloat16. ``ps.tune_model`` tunes the narrowed
    tasks of this list, so they are the ones the compile then runs."""
    tasks, stored = [], {}
    for t in graph.tasks():
        task, records = _faster_precision(t, t.in_precision(precision), db, shipped)
        tasks.append(task)
        stored[task.key] = records
    values: frozenset = frozenset()
    if narrow != "none" and canonical(precision) == BF16:
        tasks, values = _narrowed(tasks, stored, graph.outputs, narrow == "all", db, shipped)
    return tasks, stored, values


def _narrowed(tasks: List[Task], stored: dict, outputs: Sequence[int], every: bool = False,
              db: Optional[Database] = None, shipped: Optional[Database] = None) -> Tuple[List[Task], frozenset]:
    """``tasks`` with the values between them stored in bfloat16 where every reader rounds
    them anyway (``every``: every value a task can round as it writes it;
    :func:`~probsched.graph.precision.narrow_between_tasks`), and those values. A narrowed
    task runs its own records (``ps.tune_model`` tunes it as the network runs it: a schedule
    tuned to write float32 can write bfloat16 slowly), else its base's, replayed; one with
    none of its own whose base's first record does not replay narrowed (a micro-kernel that
    would write its output) is left as it is, and the values planned again without it.
    ``stored`` gains the narrowed tasks' records."""
    exclude: set = set()
    own: dict = {}  # a narrowed task's own records, by key (a task planned again keeps its key)
    while True:
        narrowed, values = narrow_between_tasks(tasks, keep=outputs, exclude=exclude, every=every)
        for t in narrowed:
            if t.base is not None and t.key not in own:
                own[t.key] = _records(t, db, shipped)
        failed = {i for i, t in enumerate(narrowed)
                  if t.base is not None and not any(own[t.key]) and not _replays(t, stored[t.base.key])}
        if not failed:
            break
        exclude |= failed
    for task in narrowed:
        if task.base is not None:
            stored[task.key] = own[task.key] if any(own[task.key]) else stored[task.base.key]
    return narrowed, values


def _replays(task: Task, stored: Tuple[list, list]) -> bool:
    """Whether the first of the records ``stored`` for ``task.base`` replays on ``task``
    (True without records: a predicted schedule is drawn for ``task`` itself)."""
    first = next((records[0][0] for records in stored if records), None)
    if first is None:
        return True
    try:
        first.schedule(task.func)
    except Exception as exc:  # noqa: BLE001 - a tensorized block that would read or write bfloat16 where its micro-kernel wants float32
        log.info("compile: task %s stays float32 at its edges: its record does not replay narrowed (%s)", task.name, exc)
        return False
    return True


def _records(task: Task, db: Optional[Database], shipped: Optional[Database]) -> Tuple[list, list]:
    """The task's records to try (:func:`_stored`): the database's, and the shipped ones for a
    task the database has none of."""
    own = _stored(task, db)
    if own:
        return own, []
    theirs = _stored(task, shipped)
    if theirs:
        return own, theirs
    own = _twins_stored(task, db)  # none of its own anywhere: its twins' (same program, other constants)
    return own, [] if own else _twins_stored(task, shipped)


def _twins_stored(task: Task, db: Optional[Database]) -> List[Tuple[TuningRecord, float]]:
    """The best records of the twins of ``task`` in ``db`` (:func:`~.similar_tasks.twin_workloads`:
    the same function but for the constants it computes with, e.g. a quantized layer's scales
    from another calibration), fastest first, each with the time it reports."""
    found = twin_records(db, task.func, task.key, MAX_RECORDS_TRIED)
    if found:
        log.info("compile: task %s has no records; its twins' (%d) replay onto it", task.name, len(found))
    return [(r, r.median) for r in found]


def _faster_precision(base: Task, low: Task, db: Optional[Database], shipped: Optional[Database]) -> Tuple[Task, Tuple[list, list]]:
    """``low`` (the task in the asked precision), or ``base`` (in float32) when only the float32
    task has a stored record or its record is faster, with the chosen task's records
    (:func:`_records`): a depthwise or a stem convolution (short reductions) can run slower
    in bfloat16 than in float32, and float32 is exact where bfloat16 rounds, so the measured
    faster one is used (``TaskChoice.task`` says which). The two compare by their fastest
    records as the tuner timed them: a list's first record may carry the time a cold
    re-timing gave it (:func:`_stored`), which the other task's list need not have."""
    mine = _records(low, db, shipped)
    if low is base:
        return low, mine
    theirs = _records(base, db, shipped)
    for fast, slow in zip(theirs, mine):  # the database's records decide; the shipped ones without any
        if not fast and not slow:
            continue
        if fast and (not slow or min(r.median for r, _ in fast) < min(r.median for r, _ in slow)):
            log.info("compile: task %s runs in float32 (%s than in %s)", base.name,
                     "faster" if slow else "measured, not", low.precision)
            return base, theirs
        return low, mine
    return low, mine


def _network_key(interface: ModelInterface, calls, tasks: List[Task], stored, space, candidates: int, seed: int,
                 check: bool, precision: str) -> Optional[str]:
    """The compile cache's key of this network and what its tasks would choose from
    (:mod:`.network_cache`); None when a task's predicted choice cannot be named."""
    per_task = []
    for n, task in enumerate(tasks):
        predicted = compile_cache.predicted_key(task.key, space, candidates, seed + n)
        if predicted is None:
            return None
        own, shipped = stored[task.key]
        per_task.append([task.key, task.name, [_record_id(r, s) for r, s in own], [_record_id(r, s) for r, s in shipped],
                         predicted])
    types = {str(v): [list(t.shape), t.dtype] for v, t in interface.types.items()}
    tree = interface.output_tree()
    return network_cache.network_key({
        "name": interface.name, "inputs": interface.inputs, "outputs": interface.outputs, "types": types,
        "constants": sorted(interface.constants), "names": [interface.input_names, interface.output_names],
        "tree": tree.to_json() if tree is not None else None,
        "calls": [[task.key, list(ins), list(outs)] for task, ins, outs in calls],
        "tasks": per_task, "check": check, "precision": precision,
    })


def _record_id(record: TuningRecord, seconds: float) -> List[Any]:
    """What a compile takes from a stored record: its program, how to replay it, its time."""
    return [record.candidate_hash, hashlib.sha256(record.instructions.encode()).hexdigest()[:16], seconds]


def _build_tasks(name: str, tasks: List[Task], stored, db, space, candidates: int, check: bool, seed: int, shipped,
                 progress) -> Tuple[dict, List[TaskChoice], bool]:
    """Each task's kernel (by task key) and choice: the first schedule of :func:`_ranked`
    that builds and computes the task's reference; and whether every task took its first
    (no stored record skipped: a compile that warned is not cached, so it warns again)."""
    from ..codegen import build

    choices: List[TaskChoice] = []
    kernels = {}
    clean = True
    report, close = _progress(progress, name, len(tasks))
    try:
        for n, task in enumerate(tasks):
            start = time.perf_counter()
            kernel, choice, failures, tried, skipped = None, None, [], 0, []
            for sch, source, seconds in _ranked(task, db, space, candidates, seed, seed + n, shipped, stored[task.key],
                                                skipped):
                tried += 1
                try:
                    built = build(sch)
                except BuildError as exc:
                    failures.append(f"{source}: build: {exc}")
                    continue
                why = _checked(task, sch, built) if check else None
                if why is None:
                    kernel, choice = built, TaskChoice(task, sch, source, seconds)
                    break
                failures.append(f"{source}: {why}")
                if source == "database":
                    log.warning("compile: task %s: a stored schedule fails the check (%s); trying the next", task.name, why)
            if kernel is None:
                raise BuildError(f"compile: no schedule of task {task.name} builds and computes its reference:\n" + "\n".join(failures[:3]))
            if choice.source == "predicted":
                compile_cache.store_predicted(compile_cache.predicted_key(task.key, space, candidates, seed + n),
                                              choice.schedule.instructions.to_json())
            kernels[task.key] = kernel
            choices.append(choice)
            has_records = any(records for records in stored[task.key])
            # the first record taken: none skipped for not replaying, none failing its check
            clean = clean and not failures and not skipped and (
                not has_records or (tried == 1 and choice.source in ("database", "shipped")))
            msg = f"[{n + 1}/{len(tasks)}] {task.name}: {choice.source} ({time.perf_counter() - start:.1f} s)"
            log.info(msg)
            report(msg)
    finally:
        close()
    return kernels, choices, clean


def _checked(task: Task, sch: Schedule, kernel) -> Optional[str]:
    """:func:`check_kernel`, unless this program was checked before (:mod:`.compile_cache`)."""
    key = compile_cache.checked_key(task.key, sch.mod.structural_hash())
    if compile_cache.was_checked(key):
        return None
    why = check_kernel(task, kernel)
    if why is None:
        compile_cache.note_checked(key)
    return why


def _progress(progress, name: str, total: int):
    """(report(message), close()) for ``compile``'s ``progress`` argument."""
    if progress == "auto":
        import sys

        if not sys.stderr.isatty():
            return (lambda msg: None), (lambda: None)
        from tqdm import tqdm

        bar = tqdm(total=total, desc=f"compiling {name}", unit="task", file=sys.stderr, dynamic_ncols=True)

        def report(msg: str) -> None:
            bar.set_postfix_str(msg.split("] ", 1)[-1][:60], refresh=False)
            bar.update(1)

        return report, bar.close
    if progress is None:
        return (lambda msg: None), (lambda: None)
    return progress, (lambda: None)


def _ranked(
    task: Task, db: Optional[Database], space, candidates: int, model_seed: int, seed: int,
    shipped: Optional[Database], stored: Tuple[list, list], skipped: Optional[List[str]] = None,
) -> Iterator[Tuple[Schedule, str, Optional[float]]]:
    """(schedule, source, measured seconds) to try for ``task``, in order of preference: the
    records of ``stored`` (:func:`_records`: the database's, or the ones shipped for this CPU
    family, :mod:`.shipped`, for a task without records of its own), then the predicted one
    chosen before (:mod:`.compile_cache`), then the predicted ones (drawn only when nothing
    before served). ``skipped`` gains the hashes of the records that did not replay."""
    own, theirs = stored
    skipped = [] if skipped is None else skipped
    for source, records, name in ((db, own, "database"), (shipped, theirs, "shipped")):
        for sch, seconds in _database_candidates(task, source, records, skipped):
            yield sch, name, seconds
    earlier = compile_cache.load_predicted(compile_cache.predicted_key(task.key, space, candidates, seed))
    if earlier is not None:
        try:
            yield InstructionLog.from_json(earlier).apply(Schedule(task.func)), "predicted", None
        except Exception as exc:  # noqa: BLE001 - a stale entry: draw again
            log.debug("compile: task %s: the cached choice does not replay (%s)", task.name, exc)
    for sch in predicted_schedules(task, _transfer_model(model_seed), space, candidates, seed):
        yield sch, "predicted", None


__all__ = ["compile", "TaskChoice", "predicted_schedules", "check_kernel", "as_graph", "DEFAULT_CANDIDATES"]
