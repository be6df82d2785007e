"""Import a script of the repository (``benchmarks/``, ``examples/``) that is not a package
module, so that tests can call its functions: ``load_script("benchmarks/bench_compile.py")``."""

import importlib.util
import pathlib
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_script(relative_path: str) -> ModuleType:
    """The module of the script at ``relative_path`` (from the repository root), executed."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
