"""Distributions: Categorical, Bernoulli, UniformInt and the Distribution base."""

from __future__ import annotations

import copy
import math
import pickle
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from handlers import Bernoulli, Categorical, Distribution, UniformInt

RNG = np.random.default_rng


# -- Categorical ---------------------------------------------------------------------------

def test_categorical_value_is_the_candidate_itself():
    cands = [(1, 2), "s", None, False, 3.5]
    d = Categorical(cands)
    drawn = {d.sample(RNG(i)) for i in range(200)}
    assert drawn == set(cands)
    assert all(any(x is c or (x == c and type(x) is type(c)) for c in cands) for x in drawn)


def test_categorical_probs_normalised_and_logprob_exact():
    d = Categorical(["a", "b", "c"], probs=[1, 2, 1])
    assert d.probs == (0.25, 0.5, 0.25)
    assert d.log_prob("b") == math.log(0.5)
    assert d.log_prob("zzz") == -math.inf
    assert d.log_prob([1]) == -math.inf  # unhashable: not a candidate, no error


def test_categorical_sampling_frequencies_follow_probs():
    d = Categorical([0, 1, 2], probs=[0.2, 0.0, 0.8])
    rng = RNG(0)
    counts = Counter(d.sample(rng) for _ in range(20000))
    assert counts[1] == 0
    assert abs(counts[0] / 20000 - 0.2) < 0.02


def test_zero_probability_candidates_are_outside_support():
    d = Categorical([1, 2, 3], probs=[0, 1, 0])
    assert d.support() == [2]
    assert not d.contains(1) and not d.contains(3)
    assert {d.sample(RNG(i)) for i in range(50)} == {2}


def test_bools_and_numbers_are_distinct_candidates():
    ints = Categorical([0, 1, 2])
    assert not ints.contains(True) and ints.log_prob(False) == -math.inf
    assert ints.contains(np.int64(1))
    bools = Categorical([True, False])
    assert not bools.contains(1) and bools.contains(np.True_)
    mixed = Categorical([1, True])
    assert mixed.log_prob(1) == mixed.log_prob(True) == math.log(0.5)


def test_categorical_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        Categorical([])
    with pytest.raises(ValueError, match="duplicate"):
        Categorical([1, 1.0])
    with pytest.raises(TypeError, match="hashable"):
        Categorical([[1], [2]])
    with pytest.raises(ValueError, match="2 candidates but 3"):
        Categorical([1, 2], probs=[1, 1, 1])
    with pytest.raises(ValueError, match=">= 0"):
        Categorical([1, 2], probs=[1, -1])
    with pytest.raises(ValueError, match="sum to 0"):
        Categorical([1, 2], probs=[0, 0])


def test_categorical_propose_moves_to_another_candidate_symmetric():
    d = Categorical([1, 2, 4, 8], probs=[1, 1, 0, 1])
    rng = RNG(0)
    seen = Counter()
    for _ in range(3000):
        new, ratio = d.propose(2, rng)
        assert new != 2 and d.contains(new) and ratio == 0.0
        seen[new] += 1
    assert set(seen) == {1, 8}
    assert abs(seen[1] / 3000 - 0.5) < 0.05


def test_categorical_propose_edge_cases():
    single = Categorical(["only", "zero"], probs=[1, 0])
    assert single.propose("only", RNG(0)) == ("only", 0.0)
    new, ratio = Categorical([1, 2]).propose(99, RNG(0))  # from outside the support
    assert new in (1, 2) and ratio == -math.inf


def test_categorical_equality_hash_repr_immutability():
    a = Categorical([1, (2, 3)], probs=[1, 3])
    b = Categorical([1, (2, 3)], probs=[0.25, 0.75])
    assert a == b and hash(a) == hash(b)
    assert Categorical([1, 2]) != Categorical([True, 2])
    assert Categorical([1, 2]) != Categorical([1.0, 2])
    assert Categorical([1, 2]) != Categorical([2, 1])
    assert repr(a) == "Categorical([1, (2, 3)], probs=[0.25, 0.75])"
    assert repr(Categorical("ab")) == "Categorical(['a', 'b'])"
    assert eval(repr(a)) == a
    with pytest.raises(AttributeError, match="immutable"):
        a.candidates = (5,)
    with pytest.raises(AttributeError, match="immutable"):
        del a.probs
    assert len({a, b, Categorical([1])}) == 2


def test_categorical_pickle_and_copy_round_trip_exactly():
    d = Categorical([0.1, 0.2, 0.3], probs=[0.1, 0.3, 0.6])
    for other in (pickle.loads(pickle.dumps(d)), copy.deepcopy(d), copy.copy(d)):
        assert other == d and other.probs == d.probs


@given(st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=1, max_size=8))
def test_categorical_json_dict_round_trip_is_bit_exact(raw):
    d = Categorical(range(len(raw)), probs=raw)
    assert Categorical.from_json_dict(d.to_json_dict()).probs == d.probs


# -- Bernoulli -------------------------------------------------------------------------------

def test_bernoulli_values_and_log_prob():
    b = Bernoulli(0.3)
    values = {b.sample(RNG(i)) for i in range(100)}
    assert values == {True, False} and all(type(v) is bool for v in values)
    assert b.log_prob(True) == math.log(0.3)
    assert b.log_prob(False) == math.log(1 - 0.3)
    assert not b.contains(1) and not b.contains(0)


def test_bernoulli_propose_flips_unless_other_impossible():
    assert Bernoulli(0.3).propose(True, RNG(0)) == (False, 0.0)
    assert Bernoulli(1.0).propose(True, RNG(0)) == (True, 0.0)
    assert Bernoulli(1.0).support() == [True]


def test_bernoulli_eq_repr_and_validation():
    assert Bernoulli(0.5) == Bernoulli(0.5) and Bernoulli(0.5) != Categorical([True, False])
    assert repr(Bernoulli(0.25)) == "Bernoulli(0.25)"
    assert pickle.loads(pickle.dumps(Bernoulli(0.1))) == Bernoulli(0.1)
    with pytest.raises(ValueError):
        Bernoulli(1.5)


# -- UniformInt ------------------------------------------------------------------------------

def test_uniform_int_low_inclusive_high_exclusive():
    u = UniformInt(2, 5)
    values = {u.sample(RNG(i)) for i in range(200)}
    assert values == {2, 3, 4} and all(type(v) is int for v in values)
    assert u.contains(2) and not u.contains(5) and not u.contains(1)
    assert not u.contains(True) and not u.contains(3.0)
    assert u.log_prob(3) == -math.log(3) and u.log_prob(5) == -math.inf
    assert list(u.support()) == [2, 3, 4]


def test_uniform_int_validation_eq_pickle():
    with pytest.raises(ValueError, match="empty"):
        UniformInt(3, 3)
    with pytest.raises(TypeError):
        UniformInt(0.0, 3)
    assert UniformInt(np.int64(0), 3) == UniformInt(0, 3)
    assert pickle.loads(pickle.dumps(UniformInt(0, 3))) == UniformInt(0, 3)
    assert UniformInt(0, 2**40).support()[-1] == 2**40 - 1  # a range, not a huge list


# -- the base class --------------------------------------------------------------------------

class Geometric(Distribution):
    """p(k) = 2^-(k+1) on k >= 0: an infinite support, default proposal."""

    def sample(self, rng):
        return int(rng.geometric(0.5)) - 1

    def log_prob(self, value):
        return -(value + 1) * math.log(2) if isinstance(value, int) and value >= 0 else -math.inf

    def params(self):
        return ()


def test_default_propose_is_prior_resample_with_exact_ratio():
    g = Geometric()
    rng = RNG(3)
    for old in (0, 5):
        new, ratio = g.propose(old, rng)
        assert ratio == pytest.approx(g.log_prob(old) - g.log_prob(new))
    assert g.support() is None
    assert g.contains(4) is True and g.contains(-1) is False


def test_base_without_params_uses_identity_equality():
    class Anon(Distribution):
        def sample(self, rng):
            return 0

        def log_prob(self, value):
            return 0.0

    a, b = Anon(), Anon()
    assert a == a and a != b
    assert "Anon object" in repr(a)
