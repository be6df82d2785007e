"""The README's "Compiled programs are cached on disk: compiling the same network again does
not recompile them": a second ``ps.compile`` of a model, as in a new process (nothing
compiled in this one), loads every kernel from the disk cache and computes the same."""

import numpy as np

import probsched as ps
from probsched.codegen.build import clear_cache


def test_compiling_a_network_again_loads_every_kernel_from_disk(monkeypatch):
    monkeypatch.delenv("PROBSCHED_PROGRAM_CACHE", raising=False)  # the cache on, as users have it
    w = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    fn = lambda x: np.float32(2.0) * (x @ w) + 1.0  # noqa: E731
    x = np.ones((4, 6), np.float32)
    first = ps.compile(fn, x, candidates=2)  # compiled, or loaded if an earlier run compiled it
    clear_cache()  # as in another process
    again = ps.compile(fn, x, candidates=2)
    assert again.kernels and all(k.from_cache for k in again.kernels.values())
    np.testing.assert_array_equal(again(x), first(x))
