"""Trace and Site: mapping API, summaries, printing, exact JSON round trips."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers import (Bernoulli, Categorical, Distribution, DuplicateSiteError, Site, Trace,
                      UniformInt, decode_value, encode_value, exact_equal, register_distribution,
                      sample, seed, trace)


def program():
    a = sample("a", Categorical([1, 2, 4, 8]))
    b = sample("b", Bernoulli(0.25), obs=True)
    c = sample("c", UniformInt(0, 10))
    return a, b, c


@pytest.fixture
def tr():
    return trace(seed(program, 0)).get_trace()


def test_mapping_api(tr):
    assert list(tr) == ["a", "b", "c"]
    assert len(tr) == 3 and "a" in tr and "zz" not in tr
    assert [name for name, _ in tr.items()] == ["a", "b", "c"]
    assert all(isinstance(s, Site) for s in tr.values())
    assert tr["b"].value is True and tr["b"].observed
    with pytest.raises(KeyError):
        tr["zz"]


def test_log_prob_is_sum_and_can_be_minus_inf(tr):
    expected = math.log(0.25) + math.log(0.25) + -math.log(10)
    assert tr.log_prob() == pytest.approx(expected)
    bad = Trace([Site("a", 3, Categorical([1, 2]))])
    assert bad.log_prob() == -math.inf
    assert Trace().log_prob() == 0.0


def test_choices_all_and_unobserved(tr):
    assert tr.choices() == {"a": tr["a"].value, "b": True, "c": tr["c"].value}
    assert tr.choices(observed=False) == {"a": tr["a"].value, "c": tr["c"].value}


def test_equality_is_exact():
    base = Trace([Site("a", 1, Categorical([1, True]))])
    assert base == Trace([Site("a", 1, Categorical([1, True]))])
    assert base != Trace([Site("a", True, Categorical([1, True]))])
    assert base != Trace([Site("a", 1, Categorical([1, True]), observed=True)])
    assert base != Trace([Site("a", 1, Categorical([1, True], probs=[1, 2]))])
    assert base != Trace([Site("b", 1, Categorical([1, True]))])
    assert Trace([Site("x", 0.0)]) != Trace([Site("x", -0.0)])
    assert Trace([Site("x", (1,))]) != Trace([Site("x", [1])])
    two = Trace([Site("a", 1), Site("b", 2)])
    assert two != Trace([Site("b", 2), Site("a", 1)])  # order matters
    assert (base == 5) is False


def test_duplicate_site_in_trace_constructor():
    with pytest.raises(DuplicateSiteError, match="'a'"):
        Trace([Site("a", 1), Site("a", 2)])


def test_site_computes_log_prob_when_not_given():
    assert Site("a", 2, Categorical([1, 2])).log_prob == math.log(0.5)
    assert Site("a", 2).log_prob == 0.0


def test_str_is_an_aligned_table(tr):
    text = str(tr)
    lines = text.splitlines()
    assert lines[0].split() == ["name", "distribution", "value", "log_prob"]
    assert len(lines) == 5 and lines[-1].startswith("total")
    # Columns align: each value starts at the same offset as the header's.
    col = lines[0].index("value")
    assert [ln[col:].split()[0] for ln in lines[1:4]] == [
        repr(tr["a"].value), "True", repr(tr["c"].value)]
    assert "observed" in lines[2]
    assert f"{tr.log_prob():.4f}" in lines[-1]
    assert repr(tr) == f"<Trace: 3 sites, log_prob={tr.log_prob():.4f}>"
    assert str(Trace()) == "Trace (no sites)"


def test_str_marks_repaired_and_shows_minus_inf():
    t = Trace([Site("a", 3, Categorical([1, 2]), repaired=True, log_q_ratio=-0.5)])
    text = str(t)
    assert "repaired" in text and "log_q_ratio=-0.5" in text and "-inf" in text


def test_repaired_lists_sites():
    t = Trace([Site("a", 1, repaired=True), Site("b", 2), Site("c", 3, repaired=True)])
    assert t.repaired == ("a", "c")


# -- JSON --------------------------------------------------------------------------------

def _strict_loads(text):
    def refuse(const):
        raise ValueError(f"non-standard JSON constant {const}")
    return json.loads(text, parse_constant=refuse)


def test_json_round_trip_of_a_real_trace(tr):
    text = tr.to_json()
    _strict_loads(text)
    back = Trace.from_json(text)
    assert back == tr
    for name in tr:
        assert back[name].log_prob == tr[name].log_prob
        assert back[name].infer == tr[name].infer


def test_json_keeps_infer_log_q_ratio_and_repaired():
    t = Trace([Site("a", 1, Categorical([1, 2]), infer={"mutated": True, "k": (1, 2)},
                    log_q_ratio=-math.inf, repaired=True)])
    back = Trace.from_json(t.to_json(indent=2))
    site = back["a"]
    assert site.infer == {"mutated": True, "k": (1, 2)}
    assert site.log_q_ratio == -math.inf and site.repaired
    assert back.repaired == ("a",)


class Opaque(Distribution):
    def sample(self, rng):
        return 0

    def log_prob(self, value):
        return 0.0

    def params(self):
        return ()


def test_unregistered_distribution_serialises_as_repr_and_loads_as_none():
    t = Trace([Site("a", 0, Opaque())])
    data = json.loads(t.to_json())
    assert data["sites"][0]["dist"] == {"type": None, "repr": "Opaque()"}
    back = Trace.from_json(t.to_json())
    assert back["a"].dist is None and back["a"].value == 0
    assert back != t  # documented: the distribution is lost


def test_registered_custom_distribution_round_trips():
    @register_distribution(name="tests.Shifted")
    class Shifted(Distribution):
        def __init__(self, base, shift):
            self.base, self.shift = base, shift

        def sample(self, rng):
            return self.base.sample(rng) + self.shift

        def log_prob(self, value):
            return self.base.log_prob(value - self.shift)

        def params(self):
            return (self.base, self.shift)

        def to_json_dict(self):
            return {"candidates": list(self.base.candidates), "shift": self.shift}

        @classmethod
        def from_json_dict(cls, data):
            return cls(Categorical(data["candidates"]), data["shift"])

    d = Shifted(Categorical([1, 2]), 10)
    t = Trace([Site("a", 11, d)])
    back = Trace.from_json(t.to_json())
    assert type(back["a"].dist) is Shifted and back == t
    with pytest.raises(ValueError, match="already used"):
        register_distribution(Categorical, name="tests.Shifted")
    with pytest.raises(TypeError, match="to_json_dict"):
        register_distribution(Opaque)


def test_unencodable_value_raises_naming_site():
    t = Trace([Site("weird", object())])
    with pytest.raises(TypeError, match="site 'weird'"):
        t.to_json()


def test_from_json_rejects_other_documents():
    with pytest.raises(ValueError, match="not a serialised Trace"):
        Trace.from_json('{"sites": []}')


# -- exact value encoding with hypothesis ------------------------------------------------

def _f32_from_bits(b):
    return np.array(b, dtype=np.uint32).view(np.float32)[()]


def _f64_from_bits(b):
    return struct.unpack("<d", struct.pack("<Q", b))[0]


numpy_scalars = st.one_of(
    st.integers(-128, 127).map(np.int8),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.integers(0, 2**64 - 1).map(np.uint64),
    st.integers(0, 2**32 - 1).map(_f32_from_bits),  # every float32 bit pattern, NaNs included
    st.floats(width=16).map(np.float16),
    st.floats().map(np.float64),
    st.booleans().map(np.bool_),
    st.complex_numbers().map(np.complex128),
    st.text(max_size=5).map(np.str_),
    st.binary(max_size=5).map(np.bytes_),
)
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(),
    st.integers(0, 2**64 - 1).map(_f64_from_bits),  # every float64 bit pattern
    st.binary(max_size=8), numpy_scalars,
)
keys = st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.none(),
                 st.tuples(st.integers(), st.text(max_size=3)))
values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
                            st.dictionaries(keys, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_json_round_trip_is_exact_for_any_value(value):
    t = Trace([Site("v", value, infer={"copy": value})])
    text = t.to_json()
    _strict_loads(text)
    back = Trace.from_json(text)
    assert back == t
    assert exact_equal(back["v"].value, value)
    assert exact_equal(back["v"].infer["copy"], value)
    assert exact_equal(decode_value(json.loads(json.dumps(encode_value(value)))), value)


hashable_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.floats(width=32, allow_nan=False).map(np.float32),
)
candidates = st.lists(
    st.one_of(hashable_leaves, st.tuples(hashable_leaves, hashable_leaves)),
    min_size=1, max_size=6,
    unique_by=lambda c: (isinstance(c, (bool, np.bool_)), c),
)


@settings(max_examples=200, deadline=None)
@given(candidates, st.data())
def test_categorical_over_any_candidates_round_trips(cands, data):
    probs = data.draw(st.lists(st.floats(0.01, 100), min_size=len(cands), max_size=len(cands)))
    dist = Categorical(cands, probs=probs)
    value = cands[data.draw(st.integers(0, len(cands) - 1))]
    t = Trace([Site("c", value, dist)])
    back = Trace.from_json(t.to_json())
    assert back == t and back["c"].dist == dist
    assert back["c"].log_prob == t["c"].log_prob
    assert dist.contains(back["c"].value)


def test_exact_equal_distinguishes_types_and_bits():
    assert not exact_equal(1, True)
    assert not exact_equal(np.float32(1.0), 1.0)
    assert not exact_equal({1: "a"}, {True: "a"})
    assert exact_equal({1: (2,)}, {1: (2,)})
    nan1, nan2 = _f64_from_bits(0x7FF8000000000000), _f64_from_bits(0x7FF8000000000001)
    assert exact_equal(nan1, float("nan")) and not exact_equal(nan1, nan2)


def test_numpy_strings_keep_trailing_nuls():
    for value in (np.str_("a\x00"), np.str_(""), np.bytes_(b"\x00"), np.bytes_(b"")):
        back = Trace.from_json(Trace([Site("s", value)]).to_json())["s"].value
        assert type(back) is type(value) and back[:] == value[:]
    assert not exact_equal(np.str_("a\x00"), np.str_("a"))


def test_encode_refuses_unsupported_values():
    with pytest.raises(TypeError, match="cannot encode"):
        encode_value({1, 2})
    with pytest.raises(TypeError):
        encode_value(np.array([1, 2]))


def test_redefined_class_replaces_registration():
    def define(offset):
        @register_distribution(name="tests.Redefined")
        class Redefined(Distribution):
            def sample(self, rng):
                return offset

            def log_prob(self, value):
                return 0.0

            def params(self):
                return ()

            def to_json_dict(self):
                return {}

            @classmethod
            def from_json_dict(cls, data):
                return cls()

        return Redefined

    first, second = define(1), define(2)
    back = Trace.from_json(Trace([Site("r", 0, second())]).to_json())
    assert type(back["r"].dist) is second
    # The replaced definition is no longer registered.
    assert Trace.from_json(Trace([Site("r", 0, first())]).to_json())["r"].dist is None
