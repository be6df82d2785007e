"""Package-level guarantees: no heavy imports, documented public API."""

from __future__ import annotations

import inspect
import subprocess
import sys

import handlers


def test_handlers_imports_neither_probsched_numba_nor_jax():
    code = ("import sys, handlers; "
            "print(sorted(m for m in ('probsched', 'numba', 'jax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def _public_members():
    for name in handlers.__all__:
        obj = getattr(handlers, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield name, obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    # Hook overrides are documented once, on Messenger.
                    if attr.startswith("_") or (issubclass(obj, handlers.Messenger)
                                                and obj is not handlers.Messenger
                                                and hasattr(handlers.Messenger, attr)):
                        continue
                    func = member.__func__ if isinstance(member, (classmethod, staticmethod)) \
                        else member
                    if inspect.isfunction(func) and func.__module__.startswith("handlers"):
                        yield f"{name}.{attr}", func


def test_every_public_class_and_function_has_a_docstring_example():
    missing = [name for name, obj in _public_members() if ">>>" not in (obj.__doc__ or "")]
    assert missing == []


def test_public_functions_have_type_hints():
    unhinted = []
    for name, obj in _public_members():
        if inspect.isfunction(obj) and "return" not in obj.__annotations__:
            unhinted.append(name)
    assert unhinted == []


def test_all_names_exist():
    assert all(hasattr(handlers, name) for name in handlers.__all__)
