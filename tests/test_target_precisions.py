"""Target: the precisions a CPU multiplies natively, AMX reported, both through JSON."""

from __future__ import annotations

import json
import os

import pytest

from probsched.target import Target

ZEN3 = ("avx", "avx2", "fma", "sse4_2")
ZEN4 = ZEN3 + ("avx512_bf16", "avx512_vnni", "avx512bw", "avx512f")
SAPPHIRE_RAPIDS = ZEN4 + ("amx_bf16", "amx_int8", "amx_tile", "avx_vnni")


@pytest.mark.parametrize(
    "isa, precisions, amx",
    [
        (ZEN3, ("float32",), ()),
        (ZEN4, ("float32", "bfloat16", "int8"), ()),
        (SAPPHIRE_RAPIDS, ("float32", "bfloat16", "int8"), ("amx_tile", "amx_bf16", "amx_int8")),
        (ZEN3 + ("avx_vnni",), ("float32", "int8"), ()),  # Alder Lake: VNNI without AVX-512
    ],
)
def test_precisions_follow_the_isa_flags(isa, precisions, amx):
    t = Target("cpu", "test cpu", "", 2, tuple(sorted(isa)), 2)
    assert t.precisions == precisions
    assert t.amx == amx
    assert all(t.runs_natively(p) for p in precisions)
    assert not t.runs_natively("float16")
    assert t.has("fma") and not t.has("avx10")
    text = str(t)
    assert ("bfloat16" in text) == ("bfloat16" in precisions)
    assert ("AMX" in text) == bool(amx)
    # precisions come back from the JSON a tuning record stores
    again = Target.from_json(t.to_json())
    assert again == t and again.precisions == precisions and again.amx == amx


def test_features_numba_compiles_without_are_not_the_targets(monkeypatch):
    # an AVX2 machine simulated on an AVX-512 one: the design space must see AVX2's registers
    host = Target.host()
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2,+fma,-avx512f,-avx512bw, -avx512bf16,-amx-tile")
    t = Target.host.__wrapped__()
    assert not any(f in t.isa for f in ("avx512f", "avx512bw", "avx512_bf16", "amx_tile"))
    assert t.vector_lanes("float32") <= 8 and "bfloat16" not in t.precisions
    assert t.has("avx2") == host.has("avx2")  # what it turns on is not read: the host has it or not


@pytest.mark.skipif(bool(os.environ.get("NUMBA_CPU_FEATURES")), reason="simulating another CPU")
def test_host_precisions_match_cpuinfo():
    t = Target.host()
    with open("/proc/cpuinfo") as fh:
        flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    assert t.precisions[0] == "float32"
    assert ("bfloat16" in t.precisions) == ("avx512_bf16" in flags)
    assert ("int8" in t.precisions) == ("avx512_vnni" in flags or "avx_vnni" in flags)
    assert t.amx == tuple(f for f in ("amx_tile", "amx_bf16", "amx_int8") if f in flags)
    assert "precisions" not in json.loads(t.to_json())  # derived: old records' JSON stays the same
