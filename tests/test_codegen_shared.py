"""Functions every kernel shares, compiled once per machine kind (probsched.codegen.shared)."""

import os
import pickle

import pytest

from probsched import cache
from probsched.codegen import program_cache, shared
from probsched.codegen.compile import compile_options, configure_numba, counting_compiles, numba_type


@pytest.fixture()
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBSCHED_CACHE_DIR", str(tmp_path))
    return tmp_path


def _adder(k: int):
    numba = configure_numba()
    return lambda: numba.njit((numba_type("int64"),), **compile_options())(lambda n: n + k)


def test_a_function_is_compiled_once_then_loaded_from_the_program_cache(own_cache):
    name = f"test.add_three {os.getpid()} {id(own_cache)}"
    with counting_compiles() as compiled:
        first = shared.get(name, _adder(3), compile_options())
    assert first(4) == 7 and sum(compiled.values()) == 1 and shared.sources()[name] == "compiled"
    data = program_cache.read(program_cache.shared_key(name))
    assert data is not None and data == shared.export(name)
    # as in another process: forgotten here, then asked for again
    shared._functions.pop(name)
    with counting_compiles() as compiled:
        again = shared.get(name, _adder(100), compile_options())  # would add 100 if compiled
    assert again(4) == 7 and not compiled and shared.sources()[name] == "program cache"


def test_a_damaged_copy_is_passed_over_and_the_function_compiled(own_cache):
    name = f"test.add_five {os.getpid()} {id(own_cache)}"
    damaged = {"name": name, "identity": program_cache.identity(), "code": b"not numba's code"}
    assert shared.offer(pickle.dumps(damaged)) == name  # as from a model file
    cache.write_atomic(os.path.join(cache.folder("programs"), program_cache.shared_key(name) + ".bin"), b"garbage")
    fn = shared.get(name, _adder(5), compile_options())
    assert fn(1) == 6 and shared.sources()[name] == "compiled"


def test_code_holding_an_address_of_the_process_is_not_stored(own_cache):
    import ctypes

    numba = configure_numba()
    getpid = ctypes.CDLL(None).getpid  # a ctypes function: numba compiles its address in
    getpid.restype, getpid.argtypes = ctypes.c_int, []
    name = f"test.getpid {os.getpid()} {id(own_cache)}"
    fn = shared.get(name, lambda: numba.njit((), **compile_options())(lambda: getpid()), compile_options())
    assert fn() == os.getpid()
    assert shared.export(name) is None and program_cache.read(program_cache.shared_key(name)) is None
