"""A compiled model as one file: :func:`save` writes it, :func:`load` runs it without the tuner.

The file is a zip archive (``.psm`` by convention) holding everything the runtime needs:

- ``probsched-model.json``, first: the format name and version, the probsched version, the
  target the kernels were compiled for (LLVM's triple, CPU name and feature string, the
  numba and llvmlite versions), the interface (inputs and outputs: value ids, names,
  shapes, dtypes; how the outputs nest), the kernel calls in order (each naming its kernel,
  its values and the constants it reads) and per task what the compiler chose;
- ``kernels/<n>/func.json``: each kernel's scheduled function (the IR's JSON), from which
  the kernel can always be compiled again;
- ``kernels/<n>/module.pkl`` and ``kernels/<n>/code.bin``: its generated module and the
  machine code numba compiled (numba's own serialised form, as the program cache keeps it):
  loading them costs milliseconds where compiling costs seconds;
- ``modules/<name>.py``: the generated micro-kernel modules the code calls (imported from
  probsched's disk cache, written there first if this machine has not made them yet);
- ``shared/<n>.bin``: the parallel launchers the kernels call and the spin pool's worker
  loop (:mod:`probsched.codegen.shared`), offered to the loading process, which uses them
  when they were made for its machine kind and pool (else it finds or compiles its own):
  a model loads without compiling anything;
- ``constants/<n>.npy``: every weight, already in the layout its kernel reads.

:func:`load` needs numpy, numba and llvmlite: it imports the IR, the code generator and this
runtime, never JAX, the design space, the cost model, the search or the database. On a
machine whose CPU lacks a feature the code was compiled for, or with other numba or llvmlite
versions, it compiles the kernels again from their functions (a warning names the features;
the schedules are kept, so the model stays right, though a kernel tuned for another CPU may
run slower than one tuned here). A file that is not a model, is truncated, or was written by
a newer format raises one :class:`~probsched.errors.ModelFileError` saying which. Like a
pickle, a model file runs code when loaded: load only files you trust.

>>> import os, tempfile, numpy as np, probsched as ps
>>> A = ps.placeholder((4,), name="x0")
>>> B = ps.compute((4,), lambda i: A[i] * 2.0, name="y")
>>> spec = ps.runtime.TensorSpec((4,), "float32")
>>> iface = ps.runtime.ModelInterface("twice", (0,), (1,), {0: spec, 1: spec}, {}, ("x",), ("y",))
>>> model = ps.CompiledModel(iface, [ps.runtime.KernelStep("double", ps.build(ps.create_func([A, B])), (0,), (1,))])
>>> path = os.path.join(tempfile.mkdtemp(), "twice.psm")
>>> model.save(path)
>>> again = ps.load(path)
>>> again(np.arange(4, dtype=np.float32)).tolist(), again.interface.input_names
([0.0, 2.0, 4.0, 6.0], ('x',))
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import zipfile
from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from ..aligned import aligned_copy
from ..errors import ModelFileError
from ..ir.dtypes import BF16, numpy_dtype
from ..ir.layout import layouts_of
from .interface import ModelInterface, OutputTree, TensorSpec

if TYPE_CHECKING:
    from .model import CompiledModel, KernelStep

log = logging.getLogger("probsched.runtime")

FORMAT = "probsched-model"
#: The newest format version this code writes and reads.
VERSION = 1
MANIFEST = "probsched-model.json"
#: Names of the generated micro-kernel modules (:mod:`probsched.intrinsics.disk_cache`).
GENERATED_PREFIX = "probsched_kernel_"


def host_codegen() -> Dict[str, Any]:
    """What this machine's compiled code depends on: LLVM's triple, CPU name and feature
    string (as numba compiles for the host), and the numba and llvmlite versions."""
    import llvmlite
    import numba
    from numba.core.registry import cpu_target

    triple, cpu, features = cpu_target.target_context.codegen().magic_tuple()
    return {"triple": triple, "cpu": cpu, "features": features, "numba": numba.__version__, "llvmlite": llvmlite.__version__}


def missing_features(saved: Dict[str, Any], host: Dict[str, Any]) -> List[str]:
    """The CPU features the saved code was compiled with that this machine lacks.

    >>> missing_features({"features": "+avx2,+avx512f,-xop"}, {"features": "+avx2,-avx512f,+xop"})
    ['avx512f']
    """
    have = {f[1:] for f in host.get("features", "").split(",") if f.startswith("+")}
    return sorted(f[1:] for f in saved.get("features", "").split(",") if f.startswith("+") and f[1:] not in have)


# ---------------------------------------------------------------------------------- save


def save(model: "CompiledModel", path: str, constants: bool = True) -> None:
    """Write ``model`` to ``path`` as one file (see the module docstring); written to a
    temporary file first and renamed, so a reader never sees half a model.

    ``constants=False`` leaves the weights out (the compile cache's entries: the compiling
    process has them in its graph and lays them out when it binds); :func:`load` refuses
    such a file, :func:`read` takes the interface that holds them."""
    iface = model.interface
    kernels: Dict[str, int] = {}
    entries: List[Tuple[str, bytes]] = []
    modules: Dict[str, str] = {}
    arrays: List[Tuple[str, np.ndarray]] = []
    constant_member: Dict[Tuple[int, str], str] = {}  # (value, the layout a kernel reads it in) -> member
    steps = []
    first = model._first.runs
    for step, run in zip(model.steps, first):
        key = step.key or step.name
        if key not in kernels:
            kernels[key] = len(kernels)
            entries += _kernel_entries(kernels[key], step.kernel)
            modules.update(_generated_modules(step.kernel))
        laid = {}
        values = step.inputs + step.outputs
        for pos, v in enumerate(values):
            if constants and (pos in step.laid_out or v in iface.constants):
                physical = run.array(pos)
                layout = layouts_of(step.kernel.func).get(step.kernel.func.params[pos].name)
                ident = (v, layout.to_json() if layout is not None else "")
                if ident not in constant_member:
                    constant_member[ident] = f"constants/{len(constant_member)}.npy"
                    arrays.append((constant_member[ident], physical))
                laid[str(pos)] = constant_member[ident]
        steps.append({"name": step.name, "key": key, "kernel": kernels[key], "inputs": list(step.inputs),
                      "outputs": list(step.outputs), "laid_out": laid})
    # constants a call hands back as they are (an output that is a weight) stay logical
    plain = {}
    for v in iface.outputs:
        if constants and v in iface.constants and str(v) not in plain:
            plain[str(v)] = f"constants/out{v}.npy"
            arrays.append((plain[str(v)], np.asarray(iface.constants[v])))
    from ..codegen.launch import exported

    shared_code = exported(ls.kinds for step in model.steps for ls in step.kernel.launches)
    entries += [(f"shared/{n}.bin", data) for n, data in enumerate(shared_code)]
    tree = iface.output_tree()
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "probsched": _version(),
        "constants": constants,
        "name": iface.name,
        "target": {**host_codegen(), "threads": max(int(getattr(s.kernel.target, "threads", 1) or 1) for s in model.steps)},
        "interface": {
            "inputs": list(iface.inputs), "outputs": list(iface.outputs),
            "input_names": list(iface.input_names), "output_names": list(iface.output_names),
            "types": {str(v): [list(t.shape), str(t.dtype)] for v, t in iface.types.items()},
            "tree": tree.to_json() if tree is not None else None,
            "constants": plain,
        },
        "kernels": {str(n): key for key, n in kernels.items()},
        "dtypes": {name: BF16 for name, arr in arrays if arr.dtype == numpy_dtype(BF16)},
        "modules": sorted(modules),
        "shared": [f"shared/{n}.bin" for n in range(len(shared_code))],
        "steps": steps,
        "choices": [
            {"task": c.task.name, "weight": c.task.weight, "flops": c.task.flops, "source": c.source, "seconds": c.seconds,
             "instructions": getattr(c, "instructions", None)}
            for c in model.choices
        ],
    }
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=1), compress_type=zipfile.ZIP_DEFLATED)
            for name, data in entries:
                zf.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)
            for name, source in sorted(modules.items()):
                zf.writestr(f"modules/{name}.py", source, compress_type=zipfile.ZIP_DEFLATED)
            for name, arr in arrays:
                with zf.open(name, "w", force_zip64=arr.nbytes > 2**30) as fh:
                    np.lib.format.write_array(fh, np.ascontiguousarray(_portable(arr)), allow_pickle=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _kernel_entries(n: int, kernel: Any) -> List[Tuple[str, bytes]]:
    """The members of kernel ``n``: its function, generated module and machine code."""
    from ..codegen import program_cache

    out = [(f"kernels/{n}/func.json", kernel.func.to_json().encode())]
    module = replace(kernel.module, extra_globals={})  # numba functions of this process: relinked as code
    # which generated functions they were: a loaded kernel names them again (saved again, its
    # modules go with it)
    out.append((f"kernels/{n}/globals.json", json.dumps(_generated_globals(kernel)).encode()))
    out.append((f"kernels/{n}/module.pkl", pickle.dumps(module, protocol=pickle.HIGHEST_PROTOCOL)))
    try:
        code = program_cache.dumps(kernel.module, kernel.compiled)
    except Exception as exc:  # noqa: BLE001 - the function is enough to compile it again
        log.debug("save: kernel %s: machine code not stored (%s)", kernel.func.name, exc)
        code = None
    if code is not None:
        out.append((f"kernels/{n}/code.bin", code))
    return out


def _portable(arr: np.ndarray) -> np.ndarray:
    """``arr`` as .npy stores it: bfloat16 (ml_dtypes) as its uint16 bits."""
    return arr.view(np.uint16) if arr.dtype == numpy_dtype(BF16) else arr


def _generated_globals(kernel: Any) -> Dict[str, List[str]]:
    """Global name -> (generated module, function name) of the micro-kernels ``kernel``'s
    code calls."""
    out = {}
    for name, obj in kernel.module.extra_globals.items():
        func = getattr(obj, "py_func", None) or obj
        owner = getattr(func, "__module__", None) or ""
        if owner.startswith(GENERATED_PREFIX):
            out[name] = [owner, getattr(func, "__name__", name)]
    return out


def _generated_modules(kernel: Any) -> Dict[str, str]:
    """Name -> source of the generated modules (micro-kernels) ``kernel``'s code calls: the
    compiled code refers to their functions by module name."""
    import sys

    out = {}
    for owner, _ in _generated_globals(kernel).values():
        module = sys.modules.get(owner)
        if owner not in out and module is not None and getattr(module, "__file__", None):
            with open(module.__file__) as fh:
                out[owner] = fh.read()
    return out


def _version() -> str:
    from ..version import __version__

    return __version__


# ---------------------------------------------------------------------------------- load


def load(path: str) -> "CompiledModel":
    """The model saved at ``path`` (see the module docstring)."""
    from .model import CompiledModel

    interface, steps, choices = read(path)
    return CompiledModel(interface, steps, choices)


def read(path: str, interface: Optional[ModelInterface] = None) -> Tuple[ModelInterface, List["KernelStep"], List[Any]]:
    """What :func:`load` makes a model of: the interface, the kernel calls in order and the
    choices (each with ``task.name``, ``task.weight``, ``task.flops``, ``source``,
    ``seconds`` and ``instructions``, the chosen instruction log's JSON or None).

    ``interface``: the network's own (with its constants), for a file saved without
    constants; its values and types must be the file's."""
    from .model import KernelStep

    with _open(path) as zf:
        manifest = _manifest(zf, path)
        if interface is None and not manifest.get("constants", True):
            raise ModelFileError(f"{path}: a compile-cache entry without the model's weights, not a saved model "
                                 "(model.save writes one that loads)")
        target = manifest.get("target", {})
        host = host_codegen()
        rebuild = _must_rebuild(path, target, host)
        if not rebuild:
            rebuild = not _import_modules(zf, path, manifest.get("modules", []))
        _offer_shared(zf, path, manifest.get("shared", []))
        kernels = {}
        for n, key in manifest["kernels"].items():
            kernels[int(n)] = _load_kernel(zf, path, int(n), key, rebuild)
        constants: Dict[str, np.ndarray] = {}

        dtypes = manifest.get("dtypes", {})

        def constant(member: str) -> np.ndarray:
            if member not in constants:
                with zf.open(member) as fh:
                    arr = np.lib.format.read_array(fh, allow_pickle=False)
                if member in dtypes:  # stored as its bits (.npy has no bfloat16)
                    arr = arr.view(numpy_dtype(dtypes[member]))
                constants[member] = aligned_copy(arr)
            return constants[member]

        spec = manifest["interface"]
        types = {int(v): TensorSpec(tuple(shape), dtype) for v, (shape, dtype) in spec["types"].items()}
        if interface is None:
            interface = ModelInterface(
                manifest["name"], tuple(spec["inputs"]), tuple(spec["outputs"]), types,
                {int(v): constant(m) for v, m in spec["constants"].items()},
                tuple(spec["input_names"]), tuple(spec["output_names"]),
                OutputTree.from_json(spec["tree"]) if spec.get("tree") is not None else None,
            )
        elif (interface.types, interface.inputs, interface.outputs) != (types, tuple(spec["inputs"]), tuple(spec["outputs"])):
            raise ModelFileError(f"{path}: saved for another network than {interface.name!r} (its values or types differ)")
        steps = [
            KernelStep(s["name"], kernels[s["kernel"]], tuple(s["inputs"]), tuple(s["outputs"]), s["key"],
                       {int(pos): constant(m) for pos, m in s["laid_out"].items()})
            for s in manifest["steps"]
        ]
    choices = [SimpleNamespace(task=SimpleNamespace(name=c["task"], weight=c["weight"], flops=c["flops"]),
                               source=c["source"], seconds=c["seconds"], instructions=c.get("instructions"))
               for c in manifest.get("choices", [])]
    return interface, steps, choices


def _open(path: str) -> zipfile.ZipFile:
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if head != b"PK\x03\x04":
        raise ModelFileError(f"{path}: not a probsched model file (model.save writes a zip archive; this is not one)")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ModelFileError(f"{path}: truncated or damaged: the archive does not end as written ({exc})") from None


def _manifest(zf: zipfile.ZipFile, path: str) -> dict:
    try:
        data = json.loads(zf.read(MANIFEST))
    except KeyError:
        raise ModelFileError(f"{path}: a zip archive but not a probsched model (no {MANIFEST} in it)") from None
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ModelFileError(f"{path}: truncated or damaged ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ModelFileError(f"{path}: not a probsched model ({MANIFEST} names format {data.get('format')!r})")
    version = data.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise ModelFileError(
            f"{path}: a probsched model of format version {version}, written by probsched {data.get('probsched')}; "
            f"this probsched ({_version()}) reads versions up to {VERSION}: upgrade probsched to load it"
        )
    return data


def _must_rebuild(path: str, saved: Dict[str, Any], host: Dict[str, Any]) -> bool:
    """Whether the saved machine code cannot run here (and why, as a warning)."""
    lacking = missing_features(saved, host)
    if lacking:
        log.warning("%s: compiled for a CPU with %s, which this one (%s) lacks: compiling the kernels again here",
                    path, ", ".join(lacking), host["cpu"])
        return True
    if (saved.get("triple"), saved.get("numba"), saved.get("llvmlite")) != (host["triple"], host["numba"], host["llvmlite"]):
        log.warning("%s: compiled by numba %s / llvmlite %s for %s; this is numba %s / llvmlite %s for %s: compiling "
                    "the kernels again here", path, saved.get("numba"), saved.get("llvmlite"), saved.get("triple"),
                    host["numba"], host["llvmlite"], host["triple"])
        return True
    return False


def _import_modules(zf: zipfile.ZipFile, path: str, names: List[str]) -> bool:
    """Import the generated modules the saved code calls; False (and a warning) when one
    cannot be imported here, so the kernels are compiled again."""
    from .. import cache

    for name in names:
        try:
            cache.import_source(name, zf.read(f"modules/{name}.py").decode(), lazy=True)  # linked into the code
        except Exception as exc:  # noqa: BLE001 - compiling the kernels again does without them
            log.warning("%s: generated module %s does not import here (%s: %s): compiling the kernels again", path,
                        name, type(exc).__name__, exc)
            return False
    return True


def _offer_shared(zf: zipfile.ZipFile, path: str, members: List[str]) -> None:
    """Offer the file's launchers to this process (used if made for its machine and pool)."""
    from ..codegen import shared

    for member in members:
        try:
            shared.offer(zf.read(member))
        except (KeyError, zipfile.BadZipFile, OSError) as exc:  # compiled instead when needed
            log.warning("%s: %s does not read (%s): its launcher is compiled if needed", path, member, exc)


def _imported_globals(zf: zipfile.ZipFile, n: int) -> Dict[str, Any]:
    """The generated functions kernel ``n`` was compiled with (:func:`_generated_globals`),
    from the modules imported already; {} for a file written before they were named."""
    import sys

    try:
        names = json.loads(zf.read(f"kernels/{n}/globals.json"))
    except KeyError:
        return {}
    return {g: getattr(sys.modules[m], f) for g, (m, f) in names.items() if m in sys.modules}


def _load_kernel(zf: zipfile.ZipFile, path: str, n: int, key: str, rebuild: bool):
    from ..codegen import Kernel, build, program_cache
    from ..ir.stmt import PrimFunc
    from ..target import Target

    try:
        func = PrimFunc.from_json(zf.read(f"kernels/{n}/func.json").decode())
    except KeyError:
        raise ModelFileError(f"{path}: kernel {n} ({key}) has no function in the file") from None
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ModelFileError(f"{path}: kernel {n} ({key}) is damaged ({exc})") from None
    if not rebuild:
        try:
            module = pickle.loads(zf.read(f"kernels/{n}/module.pkl"))
            compiled = program_cache.loads(module, zf.read(f"kernels/{n}/code.bin"))
            module = replace(module, extra_globals=_imported_globals(zf, n))
            return Kernel(module, compiled, Target.host(), func=func, from_cache=True)
        except KeyError:
            pass  # no machine code stored: compiled below
        except Exception as exc:  # noqa: BLE001 - another probsched or numba wrote it: compile instead
            log.warning("%s: kernel %s (%s): its machine code does not load here (%s: %s); compiling it again", path, n,
                        func.name, type(exc).__name__, exc)
    try:
        return build(func)
    except Exception as exc:
        raise ModelFileError(f"{path}: kernel {n} ({func.name}) cannot be compiled on this machine: {exc}") from None


__all__ = ["save", "load", "read", "host_codegen", "missing_features", "FORMAT", "VERSION"]
