"""Target: the precisions a CPU multiplies natively, AMX reported, both through JSON."""

from __future__ import annotations

import json

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


def test_host_precisions_match_cpuinfo():
    t = Target.host()
    with open("/proc/cpuinfo") as fh:
        flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    assert t.precisions[0] == "float32"
    assert ("bfloat16" in t.precisions) == ("avx512_bf16" in flags)
    assert ("int8" in t.precisions) == ("avx512_vnni" in flags or "avx_vnni" in flags)
    assert t.amx == tuple(f for f in ("amx_tile", "amx_bf16", "amx_int8") if f in flags)
    assert "precisions" not in json.loads(t.to_json())  # derived: old records' JSON stays the same
