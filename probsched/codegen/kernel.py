"""The compiled kernel: argument checks, flat views, intermediates, parallel segments.

``Kernel(*arrays)`` takes every parameter of the function in order (inputs then outputs,
as numpy arrays) and writes the outputs in place. Each call checks the count, shapes,
dtypes and layout and raises one :class:`~probsched.errors.KernelArgumentError` naming the
parameter: outputs must be C-contiguous and writable; inputs that are not C-contiguous
(or read-only) are copied, and so are inputs that share memory with an output (the
compiled code assumes its arrays do not overlap); two outputs must not overlap. Intermediate (``global``) buffers are allocated once per
kernel (cache-line aligned, :mod:`.aligned`), so one kernel must not be called from two
threads at once; a binding with its own intermediates (:meth:`Kernel.bind` with
``scratch=kernel.new_scratch()``) may run beside other bindings of the same kernel.

>>> import numpy as np, probsched as ps
>>> A = ps.placeholder((3,), name="A")
>>> B = ps.compute((3,), lambda i: A[i] * 2.0, name="B")
>>> kern = ps.build(ps.create_func([A, B], name="double"))
>>> kern.run(np.arange(3, dtype="float32"))[0]
array([0., 2., 4.], dtype=float32)
>>> kern(np.zeros(4, dtype="float32"), np.zeros(3, dtype="float32"))
Traceback (most recent call last):
...
probsched.errors.KernelArgumentError: kernel double: parameter A (argument 1, input): expected shape (3,) float32, got shape (4,) float32
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import KernelArgumentError
from ..ir.dtypes import as_storage, numpy_dtype, storage_dtype
from ..ir.stmt import Block, Buffer, Loop, PrimFunc, Store
from ..aligned import aligned_empty
from .compile import CompiledModule
from .emit import ModuleSource
from ..ir.layout import layouts_of, logical_params
from .spin_pool import enabled as spin_pool_enabled
from .spin_pool import wake as wake_spin_pool

class _Workers:
    """Persistent daemon threads, each fed by its own queue: a chunk handoff costs a fraction
    of a ``ThreadPoolExecutor`` round trip, which shows on sub-millisecond kernels."""

    def __init__(self, n: int) -> None:
        self.queues = [queue.SimpleQueue() for _ in range(n)]
        for i, q in enumerate(self.queues):
            threading.Thread(target=self._loop, args=(q,), daemon=True, name=f"probsched-kernel-{i}").start()

    @staticmethod
    def _loop(q) -> None:
        while True:
            fn, args, done = q.get()
            try:
                fn(*args)
                done.put(None)
            except BaseException as exc:  # handed back to the caller
                done.put(exc)


_workers: Dict[int, _Workers] = {}
_workers_lock = threading.Lock()


def _pool(n: int) -> _Workers:
    with _workers_lock:
        w = _workers.get(n)
        if w is None:
            w = _workers[n] = _Workers(n)
        return w


def _forget_workers() -> None:  # threads do not survive fork(): a child starts new ones
    global _workers_lock
    _workers.clear()
    _workers_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def chunks(extent: int, parts: int) -> List[Tuple[int, int]]:
    """``[lo, hi)`` ranges splitting ``range(extent)`` into ``parts`` contiguous pieces.

    >>> chunks(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    parts = max(1, min(parts, extent))
    base, extra = divmod(extent, parts)
    out, lo = [], 0
    for p in range(parts):
        hi = lo + base + (1 if p < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def written_buffers(func: PrimFunc) -> set:
    """Names of buffers that some statement of ``func`` writes.

    Stores (in bodies and inits) count, and any statement with a ``writes()`` method (the
    convention for statements registered with ``register_stmt_emitter``).
    """
    out: set = set()

    def visit(s) -> None:
        if s is None:
            return
        if isinstance(s, (tuple, list)):
            for x in s:
                visit(x)
        elif isinstance(s, Store):
            out.add(s.buffer.name)
        elif isinstance(s, Loop):
            visit(s.body)
        elif isinstance(s, Block):
            visit(s.init)
            visit(s.body)
        else:
            writes = getattr(s, "writes", None)
            if callable(writes):
                for w in writes():
                    b = w[0] if isinstance(w, tuple) else w
                    out.add(b.name if isinstance(b, Buffer) else str(b))
            body = getattr(s, "body", None)
            if body is not None and not isinstance(body, (str, bytes)):
                visit(body)

    visit(func.body)
    return out


def _describe(a) -> str:
    return f"shape {tuple(a.shape)} {a.dtype}"


class Kernel:
    """A compiled :class:`~probsched.ir.stmt.PrimFunc`; call it with every parameter.

    Attributes: ``func`` (the PrimFunc), ``source`` (the Python source numba compiled),
    ``compile_seconds``, ``from_cache`` (the machine code of an equal function built
    before was reused; ``compile_seconds`` is then that build's), ``target``,
    ``parallel_form`` (``"none"``, ``"threads"`` or ``"prange"``), ``inputs`` / ``outputs``
    (parameter buffers), ``dispatchers`` (the numba functions by name), ``entry`` (the
    compiled entry point, taking flat arrays) and ``launches`` (in the prange form, one
    :class:`~.emit.LaunchSpec` per parallel loop run by a shared launcher).
    """

    def __init__(self, module: ModuleSource, compiled: CompiledModule, target, func=None, from_cache: bool = False) -> None:
        func = module.func if func is None else func
        self.func: PrimFunc = func
        self.from_cache = from_cache
        self.module, self.compiled = module, compiled  # what a saved model stores of it
        self.source: str = module.source
        self.compile_seconds: float = compiled.seconds
        self.target = target
        self.parallel_form: str = module.parallel_form
        self.dispatchers = dict(compiled.dispatchers)
        self.entry = compiled.entry
        self.launches = list(module.launches)
        written = written_buffers(func)
        # callers pass every parameter in its own shape; a weight the schedule stores in
        # another layout (probsched.schedule.layout) is laid out here, when the arguments are
        # checked: once per bind(), outside the calls a timing loop makes
        self._layouts = layouts_of(func)
        self.params: Tuple[Buffer, ...] = logical_params(func)
        self.outputs: Tuple[Buffer, ...] = tuple(b for b in self.params if b.name in written)
        self.inputs: Tuple[Buffer, ...] = tuple(b for b in self.params if b.name not in written)
        self._is_output = [b.name in written for b in self.params]
        self._output_positions = [i for i, out in enumerate(self._is_output) if out]
        self._dtypes = [numpy_dtype(b.dtype) for b in self.params]
        # (shape, dtype) of each intermediate; the kernel's own buffers are made when a call
        # or binding first needs them (a network binds its kernels to one shared buffer)
        self._scratch_specs = [((int(b.size),), np.dtype(storage_dtype(b.dtype))) for b in module.wrapper_allocs]
        self._own_scratch: Optional[List[np.ndarray]] = None
        # the launchers' and parallel bodies' addresses in this process (the entry's last arguments)
        self._addresses = list(compiled.addresses)
        self._segments = module.segments
        self.threads = max(1, int(getattr(target, "threads", 1) or 1))
        self._numba_threads = _numba_thread_count(self.threads) if self.parallel_form == "prange" else 1
        # built now, so its launchers are the ones spin_pool.enabled() chose now (build's cache key has it)
        self._uses_spin_pool = bool(self.launches) and spin_pool_enabled()

    # ------------------------------------------------------------------ calling

    def _where(self, pos: int) -> str:
        # built only for an error message: the checks of every call are its overhead
        role = "output" if self._is_output[pos] else "input"
        return f"kernel {self.func.name}: parameter {self.params[pos].name} (argument {pos + 1}, {role})"

    def new_scratch(self) -> List[np.ndarray]:
        """Fresh intermediate buffers for a binding that runs beside the kernel's other
        bindings (:meth:`bind`'s ``scratch``): each thread calling the kernel needs its own."""
        return [aligned_empty(shape, dtype) for shape, dtype in self._scratch_specs]

    @property
    def scratch_specs(self) -> List[Tuple[Tuple[int, ...], np.dtype]]:
        """``(shape, dtype)`` of each intermediate buffer a binding takes (:meth:`bind`'s
        ``scratch``, in order): what a caller that provides the memory itself lays out."""
        return list(self._scratch_specs)

    @property
    def _intermediates(self) -> List[np.ndarray]:
        """The kernel's own intermediate buffers (calls and bindings without ``scratch``)."""
        if self._own_scratch is None:
            self._own_scratch = self.new_scratch()
        return self._own_scratch

    def _flat_args(self, arrays, scratch=None, laid_out=()) -> list:
        name = self.func.name
        if len(arrays) != len(self.params):
            names = ", ".join(b.name for b in self.params)
            raise KernelArgumentError(
                f"kernel {name}: expected {len(self.params)} arrays ({names}), got {len(arrays)}"
            )
        flat = []
        for pos, (b, a, out, dt) in enumerate(zip(self.params, arrays, self._is_output, self._dtypes)):
            if not isinstance(a, np.ndarray):
                raise KernelArgumentError(
                    f"{self._where(pos)}: expected a numpy array of shape {b.shape} {b.dtype}, got {type(a).__name__}"
                )
            if pos in laid_out:  # given in the layout the code reads (a saved model's constants)
                b = self.func.params[pos]
            if a.shape != b.shape or a.dtype != dt:
                raise KernelArgumentError(f"{self._where(pos)}: expected shape {b.shape} {b.dtype}, got {_describe(a)}")
            if out:
                if not a.flags.c_contiguous:
                    raise KernelArgumentError(
                        f"{self._where(pos)}: must be C-contiguous (it is written in place); got strides {a.strides}"
                    )
                if not a.flags.writeable:
                    raise KernelArgumentError(f"{self._where(pos)}: is read-only but the kernel writes it")
            elif b.name in self._layouts and pos not in laid_out:
                a = self._layouts[b.name].apply(a)
            elif not (a.flags.c_contiguous and a.flags.writeable):
                a = np.array(a, order="C", copy=True)
            flat.append(a)
        # The compiled code declares its arrays noalias: no output may overlap another array.
        for pos in self._output_positions:
            out = flat[pos]
            for other_pos, other in enumerate(flat):
                if other_pos == pos or not np.may_share_memory(out, other):
                    continue
                if self._is_output[other_pos]:
                    raise KernelArgumentError(
                        f"kernel {name}: outputs {self.params[pos].name} and {self.params[other_pos].name} "
                        "share memory; pass separate arrays"
                    )
                flat[other_pos] = other.copy()  # an input that is also written: read a snapshot
        flat = [as_storage(a.reshape(-1)) for a in flat]
        flat.extend(self._intermediates if scratch is None else scratch)
        flat.extend(self._addresses)
        return flat

    def __call__(self, *arrays) -> None:
        self._run_flat(self._flat_args(arrays))

    def bind(self, *arrays, scratch: Optional[List[np.ndarray]] = None, laid_out: Sequence[int] = ()) -> "BoundKernel":
        """Check ``arrays`` (every parameter, as for a call) once and return a callable
        without arguments that runs the kernel on them: what a timing loop calls.

        A call checks and flattens its arrays first, a cost that shows on kernels of tens of
        microseconds such as C1D:0's best. Bound, that cost is paid at binding, as
        TVM's ``time_evaluator`` binds its arguments before it times. The arrays must not be
        resized or replaced while bound (their memory is what the kernel writes), and an input
        the checks copy (not C-contiguous, or sharing memory with an output) is read as it was
        at binding.

        >>> import numpy as np, probsched as ps
        >>> A = ps.placeholder((3,), name="A")
        >>> B = ps.compute((3,), lambda i: A[i] + 1.0, name="B")
        >>> kern = ps.build(ps.create_func([A, B], name="inc"))
        >>> a, b = np.arange(3, dtype="float32"), np.zeros(3, dtype="float32")
        >>> run = kern.bind(a, b)
        >>> run(); b.tolist()
        [1.0, 2.0, 3.0]

        ``scratch``: the binding's own intermediate buffers (:meth:`new_scratch`), so that it
        may run while another binding of this kernel runs in another thread. ``laid_out``:
        positions of inputs given already in the layout the code reads (the function's own
        parameter shape, as :meth:`BoundKernel.array` returns them), which binding then does
        not lay out again.
        """
        if scratch is not None and [(a.shape, a.dtype) for a in scratch] != self._scratch_specs:
            raise KernelArgumentError(f"kernel {self.func.name}: scratch buffers do not match the kernel's (use new_scratch())")
        return BoundKernel(self, self._flat_args(arrays, scratch, frozenset(laid_out)))

    def _run_flat(self, flat: list) -> None:
        if self._segments is None:
            if self.parallel_form == "prange":
                # A bound kernel of tens of microseconds is called thousands of times: the
                # check is a fraction of what the general setter costs
                if _get_threads is None or _get_threads() != self._numba_threads:
                    _set_numba_threads(self._numba_threads)
                if self._uses_spin_pool:  # its workers sleep after a millisecond without a loop
                    wake_spin_pool()
            self.entry(*flat)
        else:
            self._run_segments(flat)

    def _run_segments(self, flat: list) -> None:
        entry = self.entry
        for seg in self._segments:
            if seg.extent is None:
                entry(seg.index, 0, 0, *flat)
                continue
            parts = chunks(seg.extent, self.threads)
            if len(parts) == 1:
                entry(seg.index, 0, seg.extent, *flat)
                continue
            workers = _pool(self.threads - 1)
            done = queue.SimpleQueue()
            for q, (lo, hi) in zip(workers.queues, parts[1:]):
                q.put((entry, (seg.index, lo, hi, *flat), done))
            try:
                entry(seg.index, parts[0][0], parts[0][1], *flat)
            finally:  # wait for every chunk before returning or raising
                errors = [e for e in (done.get() for _ in parts[1:]) if e is not None]
            if errors:
                raise errors[0]

    def run(self, *inputs) -> tuple:
        """Call with the inputs only; allocates, fills and returns the outputs (a tuple)."""
        if len(inputs) != len(self.inputs):
            names = ", ".join(b.name for b in self.inputs)
            raise KernelArgumentError(
                f"kernel {self.func.name}: run() expected {len(self.inputs)} input arrays ({names}), got {len(inputs)}"
            )
        it = iter(inputs)
        outs = []
        args = []
        for b, out in zip(self.params, self._is_output):
            if out:
                a = aligned_empty(b.shape, b.dtype)
                outs.append(a)
                args.append(a)
            else:
                args.append(next(it))
        self(*args)
        return tuple(outs)

    # ------------------------------------------------------------------ inspection

    def inspect_asm(self) -> Dict[str, str]:
        """Assembly of every compiled function, by name."""
        return {name: d.inspect_asm(d.signatures[0]) for name, d in self._inspectable().dispatchers.items()}

    def inspect_llvm(self) -> Dict[str, str]:
        """LLVM IR of every compiled function, by name."""
        return {name: d.inspect_llvm(d.signatures[0]) for name, d in self._inspectable().dispatchers.items()}

    def _inspectable(self) -> "Kernel":
        """This kernel, or the same program compiled here when its code was loaded from the
        disk cache (:mod:`.program_cache`: numba keeps no IR or assembly of loaded code)."""
        loaded = any(getattr(o.library, "_disable_inspection", False) for d in self.dispatchers.values() for o in d.overloads.values())
        if not loaded:
            return self
        from .build import build

        return build(self.func, parallel="auto" if self.parallel_form == "none" else self.parallel_form, cache=False)

    def __repr__(self) -> str:
        params = ", ".join(str(b) for b in self.params)
        return (
            f"<Kernel {self.func.name}({params}); compiled in {self.compile_seconds:.2f} s; "
            f"parallel: {self.parallel_form}>"
        )


class BoundKernel:
    """A :class:`Kernel` with its arrays checked and bound (:meth:`Kernel.bind`); call it
    without arguments."""

    __slots__ = ("kernel", "_flat")

    def __init__(self, kernel: Kernel, flat: list) -> None:
        self.kernel = kernel
        self._flat = flat

    def __call__(self) -> None:
        self.kernel._run_flat(self._flat)

    def array(self, pos: int) -> np.ndarray:
        """The array bound at parameter ``pos``, in the shape the code reads it (laid out) and
        its own dtype (bfloat16 is bound as its bits)."""
        param = self.kernel.func.params[pos]
        return self._flat[pos].view(numpy_dtype(param.dtype)).reshape(param.shape)

    def rebound(self, arrays: Dict[int, np.ndarray], scratch: List[np.ndarray]) -> "BoundKernel":
        """This binding with the parameters at the positions of ``arrays`` bound to other
        C-contiguous arrays of the same shape and dtype, and with ``scratch`` as its
        intermediates (:meth:`Kernel.new_scratch`); the other parameters keep the arrays
        checked (and laid out) at binding. What a second thread's copy of a network costs:
        no argument checks, no weight laid out again.

        >>> import numpy as np, probsched as ps
        >>> A = ps.placeholder((3,), name="A")
        >>> B = ps.compute((3,), lambda i: A[i] + 1.0, name="B")
        >>> kern = ps.build(ps.create_func([A, B], name="inc"))
        >>> a, b, b2 = np.arange(3, dtype="float32"), np.zeros(3, "float32"), np.zeros(3, "float32")
        >>> run2 = kern.bind(a, b).rebound({1: b2}, kern.new_scratch())
        >>> run2(); b.tolist(), b2.tolist()
        ([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
        """
        kernel = self.kernel
        flat = list(self._flat)
        n = len(kernel.params)
        for pos, a in arrays.items():
            b = kernel.params[pos]
            if a.shape != b.shape or a.dtype != kernel._dtypes[pos] or not a.flags.c_contiguous:
                raise KernelArgumentError(f"{kernel._where(pos)}: rebound to {_describe(a)}, expected C-contiguous {b.shape} {b.dtype}")
            flat[pos] = as_storage(a).reshape(-1)
        k = len(kernel._scratch_specs)
        if [(a.shape, a.dtype) for a in scratch] != kernel._scratch_specs:
            raise KernelArgumentError(f"kernel {kernel.func.name}: scratch buffers do not match the kernel's (use new_scratch())")
        flat[n : n + k] = scratch
        return BoundKernel(kernel, flat)

    def __repr__(self) -> str:
        return f"<BoundKernel {self.kernel.func.name}>"


def _current_numba_threads():
    """numba's thread count getter: the threading layer's own when this numba has it, else
    the public one (several times slower: it checks that the layer started, every call)."""
    import numba
    from numba.np.ufunc import parallel

    numba.get_num_threads()  # starts the threading layer once
    fast = getattr(parallel, "_get_num_threads", None)
    return fast if callable(fast) else numba.get_num_threads


_get_threads = None


def _numba_thread_count(n: int) -> int:
    """``n`` threads, as many as numba's pool has at most."""
    import numba

    return max(1, min(n, numba.config.NUMBA_NUM_THREADS))


def _set_numba_threads(n: int) -> None:
    global _get_threads
    import numba

    if _get_threads is None:
        _get_threads = _current_numba_threads()
    n = _numba_thread_count(n)
    if _get_threads() != n:
        numba.set_num_threads(n)
