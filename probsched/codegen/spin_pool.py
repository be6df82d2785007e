"""Worker threads that spin between parallel loops, so that a launch costs a fraction of a ``prange``.

numba's ``prange`` (libgomp) costs microseconds per launch, a visible share of a kernel
that runs for tens of microseconds such as C1D:0 or NRM:2 (``python
benchmarks/bench_launch.py`` measures both launches).
TVM's CPU runtime avoids that with a pool of its own whose workers spin on a flag for a
while after each job; this is the same idea, written with numba and LLVM atomics:

- one worker thread per extra core (``NUMBA_NUM_THREADS - 1``), each owning a *slot*: one
  64-byte cache line of int64 words (a state, and the job: trampoline address, body
  address, address of the arguments, ``lo``, ``hi``, a failure flag);
- a worker runs :func:`serve` (a nogil numba loop) while it is awake: it waits for
  ``POSTED``, runs the job, sets ``DONE``; after :data:`IDLE_TICKS` time-stamp-counter ticks
  (about a millisecond) with neither a job nor a call of :meth:`SpinPool.wake` (made before
  each kernel; it bumps a *kick* word the worker reads when its idle time is up) it goes to
  ``SLEEPING`` and back to Python, where it blocks on an event until ``wake`` sets it;
- a launcher claims a spinning worker with a compare-and-swap (``SPINNING -> CLAIMED``),
  writes the job, publishes it with a release store (``POSTED``), runs its own chunk, and
  spins until the worker's ``DONE`` before it sets the slot back to ``SPINNING``. A worker
  it cannot claim (busy for another thread's launch) does no chunk: the launcher splits the
  loop among the workers it got and itself. A worker being woken is waited for; when every
  worker sleeps (a kernel called without :func:`wake`), the launcher uses ``prange``;
- a worker starts a job with a compare-and-swap (``POSTED -> RUNNING``), and a launcher that
  is done with its own chunk while the worker has not started its job takes the job back
  (``POSTED -> TAKEN``) and runs it itself. A worker descheduled by another process's
  threads (a numpy or JAX call just before, whose workers still spin on the cores) then
  costs the kernel its share of the work, never the operating system's time slice.

The worker calls a *trampoline* compiled per argument signature (:mod:`.launch`): it loads
the launcher's argument tuple, which the launcher stashed on its own stack (it stays alive
until the launcher has collected every chunk), and calls the body by address.

Compiled pool code holds no address of the process: launchers read the slots' address at
run time from the symbol :data:`BASE_SYMBOL` and yield through :data:`YIELD_SYMBOL`, both
registered with LLVM in every process (:func:`register_symbols`), so the launchers and the
worker loop are compiled once per machine kind and loaded elsewhere (:mod:`.shared`).

A worker woken from its sleep places itself on a core the waking thread is not on (its
affinity set to one such core, :meth:`SpinPool.core_for`; Linux only, and only where the
waking thread may run on more than one core). Linux wakes a thread on the waker's core
when that core is cache-hot, and moves it only at the next load balance, 10-15 ms later:
until then the worker and the launcher share one core, the launcher takes back most of the
worker's jobs and runs them itself, and the first inferences after an idle pause ran at
half speed (``benchmarks/bench_int8.py`` pauses before each timed inference). TVM's thread
pool and OpenMP's ``OMP_PROC_BIND`` pin their workers for the same reason; the caller's
thread, which is the user's, is never pinned. The worker moves only after it says it spins
and without the GIL (in ``serve``, through :data:`PLACE_SYMBOL`): the other core may be busy
with another process, and a launcher then takes back the jobs the worker has not started
instead of waiting for it, and the caller's Python never waits for the move.

Spinning costs a core while it lasts; that is the price of the fast launch, and it is paid
only for about a millisecond after a parallel loop (libgomp's threads spin too). Every wait
(a worker's for a job or for its chunk to be collected, a launcher's for a chunk or for a
worker being woken) spins with ``pause`` for :data:`SPIN_TICKS` only and then yields the
core to the OS between checks, as TVM's pool does: on a loaded machine the thread waited
for may be queued on the waiter's own core, and a waiter that only pauses holds that core
until the scheduler preempts it, a slice of milliseconds per parallel loop. The
pool runs on x86-64 only (``pause``, ``rdtsc``); elsewhere, or with
``PROBSCHED_LAUNCH=prange`` in the environment, launchers use numba's ``prange``. After
``fork()`` a child has no workers: its slots read ``ABSENT`` and launchers fall back.
Launchers count what happened (:func:`launch_counts`): a diagnosis of slow timings.

>>> pool = spin_pool()
>>> pool is None or pool.workers == max(0, configure_numba().config.NUMBA_NUM_THREADS - 1)
True
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import os
import platform
import threading
from types import SimpleNamespace
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..aligned import aligned_empty
from .compile import compile_options, configure_numba, numba_type

SLOT_WORDS = 8
"""int64 words per worker slot: one cache line, so that slots never share one."""
STATE, TRAMPOLINE, BODY, ARGS, LO, HI, FAILED = range(7)
"""Word offsets within a slot."""
COUNTERS = ("launches", "short", "fallbacks", "wake_waits", "slow_collects", "naps", "taken_back")
"""The launch counters, one word each in a cache line after the slots, which launchers
update (not atomically: two threads launching at once may lose a count; they are for
diagnosis): launches that got a worker; of those, launches that got fewer workers than
chunks (a worker busy for another thread's launch); launches that fell back to ``prange``
(every worker asleep); launches that waited for a worker being woken; launches whose
wait for the workers' chunks outlasted :data:`SPIN_TICKS` and yielded the core; the
times a worker went to sleep (which the workers count); and the jobs a launcher took back
from a worker that had not started them."""
LAUNCHES, SHORT, FALLBACKS, WAKE_WAITS, SLOW_COLLECTS, NAPS, TAKEN_BACK = range(len(COUNTERS))
"""Word offsets of the counters within their line."""
ABSENT, SLEEPING, WAKING, SPINNING, CLAIMED, POSTED, DONE, STOPPING, RUNNING, TAKEN = range(10)
"""Slot states. Transitions: the worker SLEEPING -> (wake) WAKING -> SPINNING; a launcher
SPINNING -> CLAIMED -> POSTED; the worker POSTED -> RUNNING -> DONE, or the launcher
POSTED -> TAKEN (it runs the job itself); the launcher DONE or TAKEN -> SPINNING; the
worker SPINNING -> SLEEPING when idle; the pool -> STOPPING at exit, ABSENT after fork."""

IDLE_TICKS = 3_000_000
"""Time-stamp-counter ticks a worker spins without a job before it sleeps (a millisecond at 3 GHz)."""
SPIN_TICKS = 30_000
"""Time-stamp-counter ticks (10 us at 3 GHz) a wait spins with ``pause`` before it yields
the core between checks: a wait on an unloaded machine ends well within it, and a yield is
a cheap system call that returns at once when no other thread waits for the core."""
WAKE_WAIT_TICKS = 30_000_000
"""How long a launcher waits for a worker that is being woken (10 ms at 3 GHz) before it goes on
without it: a woken worker needs the GIL once, which the caller releases in the kernel."""
BASE_SYMBOL = "probsched_spin_pool_base"
"""The symbol of an int64 holding the slots' address (0 before the pool starts)."""
YIELD_SYMBOL = "probsched_os_yield"
"""The symbol of the OS call that yields the core (:func:`_os_yield`)."""
PLACE_SYMBOL = "probsched_set_affinity"
"""The symbol of the OS call that sets the calling thread's cores (:func:`_set_affinity`)."""
CPU_SET_BYTES = 128
"""The size of Linux's ``cpu_set_t`` (1024 cores): a woken worker's placement mask."""


def timing() -> str:
    """The timing constants compiled into pool code (a benchmark may change them before it
    compiles): part of the names under which the code is stored (:mod:`.shared`)."""
    return f"idle={IDLE_TICKS},spin={SPIN_TICKS},wake={WAKE_WAIT_TICKS}"


def enabled() -> bool:
    """Whether launchers use the spinning pool: x86-64 and not ``PROBSCHED_LAUNCH=prange``."""
    if os.environ.get("PROBSCHED_LAUNCH", "pool").strip().lower() == "prange":
        return False
    return platform.machine().lower() in ("x86_64", "amd64")


def _current_cpu() -> Optional[Callable[[], int]]:
    """A ctypes function returning the core the calling thread runs on (``sched_getcpu``),
    or None where the C library has none (not Linux)."""
    import ctypes

    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (AttributeError, OSError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


def _os_yield():
    """A ctypes function numba can call that yields the calling thread's core:
    ``sched_yield`` (POSIX) or ``SwitchToThread`` (Windows)."""
    import ctypes

    if os.name == "nt":
        fn = ctypes.windll.kernel32.SwitchToThread  # type: ignore[attr-defined]
    else:
        fn = ctypes.CDLL(None).sched_yield
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


def _set_affinity():
    """A ctypes function numba can call as ``f(0, CPU_SET_BYTES, mask_address)`` that sets
    the calling thread's cores: Linux's ``sched_setaffinity``. Elsewhere the yield function
    stands in for the symbol: the pool never places a worker there (no mask is made)."""
    import ctypes

    try:
        fn = ctypes.CDLL(None).sched_setaffinity
    except (AttributeError, OSError):
        return _os_yield()
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    return fn


_registered: list = []  # what the symbols point at


@functools.lru_cache(maxsize=None)
def register_symbols():
    """Register :data:`BASE_SYMBOL`, :data:`YIELD_SYMBOL` and :data:`PLACE_SYMBOL` with LLVM (llvmlite's
    ``add_symbol``, as numba registers its runtime's functions) once per process; returns the
    ctypes int64 behind :data:`BASE_SYMBOL`. Compiled pool code refers to them by name and the
    JIT linker resolves them, so the code holds no address of the process that compiled it:
    called before such code is compiled or loaded.

    >>> register_symbols().value in (0, getattr(spin_pool(), "base", 0))
    True
    """
    import ctypes

    from llvmlite import binding as ll

    base = ctypes.c_int64(0)
    yield_fn, place_fn = _os_yield(), _set_affinity()
    _registered.extend([base, yield_fn, place_fn])  # alive as long as the process
    ll.add_symbol(BASE_SYMBOL, ctypes.addressof(base))
    ll.add_symbol(YIELD_SYMBOL, ctypes.cast(yield_fn, ctypes.c_void_p).value)
    ll.add_symbol(PLACE_SYMBOL, ctypes.cast(place_fn, ctypes.c_void_p).value)
    return base


@functools.lru_cache(maxsize=None)
def atomics():
    """numba intrinsics on raw int64 addresses: ``load_acquire(addr)``,
    ``store_release(addr, v)``, ``store_relaxed(addr, v)``, ``load_relaxed(addr)``,
    ``compare_exchange(addr, expected, new) -> 1 or 0``, ``cpu_relax()`` (``pause``),
    ``ticks()`` (``rdtsc``), ``os_yield()`` (give the core to another runnable thread, see
    :func:`_os_yield`), ``set_affinity(mask_address)`` (the calling thread's cores, a
    ``cpu_set_t`` at that address, see :func:`_set_affinity`), ``pool_base()`` (the slots'
    address, :data:`BASE_SYMBOL`) and
    ``stash(tuple) -> address`` (the tuple copied into the caller's stack frame, valid
    until the caller returns)."""
    configure_numba()
    register_symbols()
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    i64 = ir.IntType(64)

    def word(builder, addr):
        return builder.inttoptr(addr, i64.as_pointer())

    def _load(ordering):
        @intrinsic
        def load(typingctx, addr):
            if not isinstance(addr, types.Integer):
                return None

            def codegen(context, builder, sig, args):
                return builder.load_atomic(word(builder, args[0]), ordering, 8)

            return types.int64(addr), codegen

        return load

    def _store(ordering):
        @intrinsic
        def store(typingctx, addr, value):
            if not isinstance(addr, types.Integer) or not isinstance(value, types.Integer):
                return None

            def codegen(context, builder, sig, args):
                value = context.cast(builder, args[1], sig.args[1], types.int64)
                builder.store_atomic(value, word(builder, args[0]), ordering, 8)
                return context.get_dummy_value()

            return types.none(addr, value), codegen

        return store

    @intrinsic
    def compare_exchange(typingctx, addr, expected, new):
        if not all(isinstance(t, types.Integer) for t in (addr, expected, new)):
            return None

        def codegen(context, builder, sig, args):
            exp = context.cast(builder, args[1], sig.args[1], types.int64)
            new = context.cast(builder, args[2], sig.args[2], types.int64)
            pair = builder.cmpxchg(word(builder, args[0]), exp, new, "acq_rel", "acquire")
            return builder.zext(builder.extract_value(pair, 1), i64)

        return types.int64(addr, expected, new), codegen

    def _calling(symbol, returns):
        """An intrinsic that calls the function ``symbol`` (no arguments) for its effect."""

        @intrinsic
        def call(typingctx):
            def codegen(context, builder, sig, args):
                fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(returns, []), symbol)
                builder.call(fn, [])
                return context.get_dummy_value()

            return types.none(), codegen

        return call

    @intrinsic
    def set_affinity(typingctx, mask):
        if not isinstance(mask, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(i32, [i32, i64, i64])  # (thread 0: the caller, size, mask)
            fn = cgutils.get_or_insert_function(builder.module, fnty, PLACE_SYMBOL)
            mask = context.cast(builder, args[0], sig.args[0], types.int64)
            builder.call(fn, [i32(0), i64(CPU_SET_BYTES), mask])
            return context.get_dummy_value()

        return types.none(mask), codegen

    @intrinsic
    def ticks(typingctx):
        def codegen(context, builder, sig, args):
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, []), "llvm.readcyclecounter")
            return builder.call(fn, [])

        return types.int64(), codegen

    @intrinsic
    def pool_base(typingctx):
        def codegen(context, builder, sig, args):
            gv = builder.module.globals.get(BASE_SYMBOL)
            if gv is None:  # a declaration: the JIT linker resolves it to this process's word
                gv = ir.GlobalVariable(builder.module, i64, BASE_SYMBOL)
            return builder.load_atomic(gv, "monotonic", 8)

        return types.int64(), codegen

    @intrinsic
    def stash(typingctx, values):
        if not isinstance(values, types.BaseTuple):
            return None

        def codegen(context, builder, sig, args):
            slot = cgutils.alloca_once(builder, args[0].type)
            builder.store(args[0], slot)
            return builder.ptrtoint(slot, i64)

        return types.int64(values), codegen

    return SimpleNamespace(
        os_yield=_calling(YIELD_SYMBOL, ir.IntType(32)),
        set_affinity=set_affinity,
        pool_base=pool_base,
        load_acquire=_load("acquire"),
        load_relaxed=_load("monotonic"),
        store_release=_store("release"),
        store_relaxed=_store("monotonic"),
        compare_exchange=compare_exchange,
        # an LLVM intrinsic, not inline asm: numba's JIT has no assembly parser
        cpu_relax=_calling("llvm.x86.sse2.pause", ir.VoidType()),
        ticks=ticks,
        stash=stash,
    )


@functools.lru_cache(maxsize=None)
def pool_functions():
    """The compiled pool operations: ``serve(base, workers, slot, place)`` (a worker's loop,
    first moved to the cores of the ``cpu_set_t`` at address ``place`` unless it is 0: returns
    the state it left with, SLEEPING or STOPPING), ``claim(base, workers, wanted) -> mask`` (a
    bit per worker claimed; -1 when no worker is awake, the launcher's cue to use ``prange``),
    ``post(base, slot, trampoline, body, args, lo, hi)`` and ``collect(base, workers, mask)
    -> failed chunks``. Launchers call the last three; they are small and LLVM inlines them.
    ``claim`` and ``collect`` update the :data:`COUNTERS`."""
    numba = configure_numba()
    from .launch import call_by_address

    a = atomics()
    call = call_by_address()
    load_acquire, load_relaxed = a.load_acquire, a.load_relaxed
    store_release, store_relaxed = a.store_release, a.store_relaxed
    cas, relax, ticks, os_yield = a.compare_exchange, a.cpu_relax, a.ticks, a.os_yield
    set_affinity = a.set_affinity
    opts = compile_options()
    i64 = numba_type("int64")

    @numba.njit(numba.types.none(i64, i64), **opts)
    def backoff_at(now, since):
        """One step of a wait that began at tick ``since``, at tick ``now``: ``pause``, or a
        yield once the wait is older than SPIN_TICKS."""
        if now - since > SPIN_TICKS:
            os_yield()
        else:
            relax()

    @numba.njit(numba.types.none(i64), **opts)
    def backoff(since):
        """One step of a wait that began at tick ``since``."""
        backoff_at(ticks(), since)

    @numba.njit(numba.types.none(i64, i64, i64), **opts)
    def count(base, workers, counter):
        c = base + (workers * SLOT_WORDS + counter) * 8
        store_relaxed(c, load_relaxed(c) + 1)

    @numba.njit(i64(i64, i64, i64, i64), **opts)
    def serve(base, workers, slot, place):
        s = base + slot * SLOT_WORDS * 8
        kick = base + (workers + 1) * SLOT_WORDS * 8
        cas(s, WAKING, SPINNING)
        if place != 0:  # after SPINNING: a launcher takes back what a migrating worker has not started
            set_affinity(place)
        idle_since = ticks()
        kicks_seen = load_relaxed(kick)
        while True:
            state = load_acquire(s)
            if state == POSTED:
                if cas(s, POSTED, RUNNING):  # else the launcher took its job back
                    failed = call(load_relaxed(s + 8 * TRAMPOLINE), (load_relaxed(s + 8 * BODY), load_relaxed(s + 8 * ARGS), load_relaxed(s + 8 * LO), load_relaxed(s + 8 * HI)))
                    store_relaxed(s + 8 * FAILED, failed)
                    store_release(s, DONE)
                idle_since = ticks()
            elif state == SPINNING:
                now = ticks()
                if now - idle_since > IDLE_TICKS:
                    # a wake() since the last look means a kernel is about to launch: a
                    # worker that slept now would leave it to prange (or this worker was
                    # descheduled past its idle time while the caller went on)
                    kicks = load_relaxed(kick)
                    if kicks != kicks_seen:
                        kicks_seen = kicks
                        idle_since = now
                    elif cas(s, SPINNING, SLEEPING):
                        count(base, workers, NAPS)
                        return SLEEPING
                backoff_at(now, idle_since)
            elif state == STOPPING or state == ABSENT or state == SLEEPING:
                return state
            else:  # CLAIMED (the job is being written), DONE or TAKEN (not yet collected)
                backoff(idle_since)

    @numba.njit(i64(i64, i64, i64), **opts)
    def claim(base, workers, wanted):
        mask = 0
        got = 0
        awake = False
        for k in range(workers):
            if got == wanted:
                break
            s = base + k * SLOT_WORDS * 8
            state = load_acquire(s)
            if state == WAKING:
                count(base, workers, WAKE_WAITS)
                start = ticks()
                while state == WAKING and ticks() - start < WAKE_WAIT_TICKS:
                    backoff(start)  # the worker needs a core (and the GIL once) to wake
                    state = load_acquire(s)
            if state == SPINNING and cas(s, SPINNING, CLAIMED):
                mask |= 1 << k
                got += 1
            elif state != SLEEPING and state != ABSENT:
                awake = True  # busy with another thread's launch
        if mask == 0 and not awake:
            count(base, workers, FALLBACKS)
            return -1
        count(base, workers, LAUNCHES)
        if got < wanted:
            count(base, workers, SHORT)
        return mask

    @numba.njit(numba.types.none(i64, i64, i64, i64, i64, i64, i64), **opts)
    def post(base, slot, trampoline, body, args, lo, hi):
        s = base + slot * SLOT_WORDS * 8
        store_relaxed(s + 8 * TRAMPOLINE, trampoline)
        store_relaxed(s + 8 * BODY, body)
        store_relaxed(s + 8 * ARGS, args)
        store_relaxed(s + 8 * LO, lo)
        store_relaxed(s + 8 * HI, hi)
        store_release(s, POSTED)

    @numba.njit(i64(i64, i64, i64), **opts)
    def collect(base, workers, mask):
        failed = 0
        k = 0
        start = ticks()
        while mask >> k:
            if mask >> k & 1:
                s = base + k * SLOT_WORDS * 8
                if cas(s, POSTED, TAKEN):  # the worker has not started it: run it here
                    count(base, workers, TAKEN_BACK)
                    failed += call(load_relaxed(s + 8 * TRAMPOLINE), (load_relaxed(s + 8 * BODY), load_relaxed(s + 8 * ARGS), load_relaxed(s + 8 * LO), load_relaxed(s + 8 * HI)))
                else:
                    while load_acquire(s) != DONE:
                        backoff(start)
                    failed += load_relaxed(s + 8 * FAILED)
                store_release(s, SPINNING)
            k += 1
        if ticks() - start > SPIN_TICKS:
            count(base, workers, SLOW_COLLECTS)
        return failed

    return SimpleNamespace(serve=serve, claim=claim, post=post, collect=collect)


def serve_function():
    """The workers' loop ``serve`` of :func:`pool_functions`, shared (:mod:`.shared`): loaded
    where it was compiled before."""
    from . import shared

    register_symbols()
    return shared.get(serve_name(), lambda: pool_functions().serve, compile_options())


def serve_name() -> str:
    """The name :func:`serve_function` is shared under."""
    return f"spin_pool.serve {timing()}"


class SpinPool:
    """The process's spinning workers and their slots (see the module docstring)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        # the slots, the counters' cache line, then the kick word's (written by wake(), read
        # by idle workers: apart from the counters, which launchers write)
        self._words = aligned_empty((workers + 2) * SLOT_WORDS, np.int64)
        self._words[:] = 0
        self._states = self._words[: workers * SLOT_WORDS : SLOT_WORDS]  # a view: each slot's state word
        self._states[:] = SLEEPING
        self.base = int(self._words.ctypes.data)
        self._state_words = memoryview(self._states)  # reads a state as a Python int, cheaply
        kick = (workers + 1) * SLOT_WORDS
        self._kick_word = memoryview(self._words[kick : kick + 1])
        self._kicks = itertools.count(1)
        self._events = [threading.Event() for _ in range(workers)]
        # where a woken worker goes (wake() writes each slot's cpu_set_t; serve() applies it)
        self._which_core = _current_cpu() if hasattr(os, "sched_setaffinity") else None
        self._masks = np.zeros((workers, CPU_SET_BYTES), np.uint8)
        self._place_at = [0] * workers  # a slot's mask address, 0: stay where it wakes
        # (core, allowed cores) of the thread that last woke a sleeping worker, for diagnostics:
        # the caller may move between reading its core and the wake, the pool cannot
        self.last_waker: Optional[Tuple[int, List[int]]] = None
        self._stopping = False
        self._lock = threading.Lock()
        self._serve = serve_function()
        register_symbols().value = self.base  # what launchers read: the slots of this process
        self._threads = [
            threading.Thread(target=self._run, args=(k,), daemon=True, name=f"probsched-spin-{k}") for k in range(workers)
        ]
        for t in self._threads:
            t.start()

    def _run(self, slot: int) -> None:
        event = self._events[slot]
        while True:
            event.wait()
            event.clear()
            if self._stopping:
                return
            left = self._serve(self.base, self.workers, slot, self._place_at[slot])
            if left != SLEEPING or self._stopping:
                return

    @staticmethod
    def core_for(slot: int, waker: int, cores: List[int]) -> Optional[int]:
        """The core worker ``slot`` is placed on when the thread waking it runs on core
        ``waker`` and may run on ``cores``: the ``slot``-th of the others (None: there is
        none, as for a process pinned to one core, or the waker's core is unknown).

        >>> [SpinPool.core_for(k, 2, [0, 1, 2, 3]) for k in range(3)], SpinPool.core_for(0, 1, [1])
        ([0, 1, 3], None)
        """
        others = [c for c in cores if c != waker]
        if waker not in cores or not others:
            return None
        return others[slot % len(others)]

    def _aim(self, slot: int, waker: int, cores: List[int]) -> None:
        """Write where worker ``slot``, woken by a thread on core ``waker`` that may run on
        ``cores``, places itself (the module docstring): off the waker's core, or where the
        waker may run when there is no other (a process pinned to one core since the last
        wake keeps its workers there too)."""
        core = self.core_for(slot, waker, cores)
        chosen = [core] if core is not None else cores
        mask = self._masks[slot]
        mask[:] = 0
        if not chosen or max(chosen) >= 8 * CPU_SET_BYTES:
            self._place_at[slot] = 0
            return
        for c in chosen:
            mask[c // 8] |= 1 << (c % 8)
        self._place_at[slot] = int(mask.ctypes.data)

    def wake(self) -> None:
        """Keep the spinning workers awake and wake the sleeping ones (a few loads and a
        store when none sleeps): called before a kernel runs.

        It bumps the kick word first: a spinning worker whose idle time runs out between this
        call and the kernel's first parallel loop sees it and spins on instead of sleeping
        (the loop would otherwise go to ``prange``). Then it reads the slots' states, which a
        worker sets to SLEEPING itself (in ``serve``, without the GIL): a flag the worker set
        in Python afterwards would lag while another thread held the GIL (such as a caller
        timing another library's kernel). A worker woken before it is back in its wait finds
        its event set and does not block."""
        self._kick_word[0] = next(self._kicks)  # only a change is read
        states = self._state_words
        if SLEEPING not in states:  # the common case: no lock, no event
            return
        with self._lock:
            waker = (self._which_core(), sorted(os.sched_getaffinity(0))) if self._which_core else None
            self.last_waker = waker
            for k in range(self.workers):
                if states[k] == SLEEPING:  # left only here (or at stop and fork): no other writer to race
                    if waker is not None:
                        self._aim(k, *waker)
                    self._states[k] = WAKING
                    self._events[k].set()

    def states(self) -> List[int]:
        """Each slot's state (for tests and diagnostics)."""
        return [int(x) for x in self._states]

    def counts(self) -> Dict[str, int]:
        """The launch :data:`COUNTERS` since the pool started or was last :meth:`reset`."""
        line = self.workers * SLOT_WORDS
        return {name: int(self._words[line + k]) for k, name in enumerate(COUNTERS)}

    def reset(self) -> None:
        """Set the launch counters to zero."""
        line = self.workers * SLOT_WORDS
        self._words[line : line + SLOT_WORDS] = 0

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the workers (at exit: none may spin on memory the interpreter frees)."""
        self._stopping = True
        self._states[:] = STOPPING
        for e in self._events:
            e.set()
        for t in self._threads:
            t.join(timeout)

    def forget_after_fork(self) -> None:
        """In a forked child: no worker threads exist, so no launcher may wait for one."""
        self._stopping = True
        self._states[:] = ABSENT


_pool: Optional[SpinPool] = None
_pool_lock = threading.Lock()


def spin_pool() -> Optional[SpinPool]:
    """The process's pool (started on first use), or None where it is not :func:`enabled`."""
    global _pool
    if _pool is not None or not enabled():
        return _pool
    with _pool_lock:
        if _pool is None:
            numba = configure_numba()
            _pool = SpinPool(max(0, numba.config.NUMBA_NUM_THREADS - 1))
            atexit.register(_pool.stop)
    return _pool


def wake() -> None:
    """Wake the pool's sleeping workers, if the pool was started (called before kernels)."""
    if _pool is not None:
        _pool.wake()


def launch_counts(reset: bool = False) -> Dict[str, int]:
    """The pool's launch :data:`COUNTERS` (all zero before the pool starts); with ``reset``,
    set them to zero after reading. Read around a timing, they say how its parallel loops
    ran: e.g. ``fallbacks`` (loops run by ``prange`` because every worker slept) or
    ``slow_collects`` (chunks that kept the caller waiting past a spin).

    >>> sorted(launch_counts())
    ['fallbacks', 'launches', 'naps', 'short', 'slow_collects', 'taken_back', 'wake_waits']
    """
    if _pool is None:
        return dict.fromkeys(COUNTERS, 0)
    counts = _pool.counts()
    if reset:
        _pool.reset()
    return counts


@contextlib.contextmanager
def counting_launches() -> Iterator[Dict[str, int]]:
    """Count the parallel launches of a block: yields a dict that holds the block's
    :data:`COUNTERS` once it ends (the counters are reset when it starts).

    >>> with counting_launches() as counts:
    ...     pass
    >>> counts["launches"], counts["fallbacks"]
    (0, 0)
    """
    launch_counts(reset=True)
    counts: Dict[str, int] = {}
    try:
        yield counts
    finally:
        counts.update(launch_counts())


def _after_fork_in_child() -> None:
    if _pool is not None:
        _pool.forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
