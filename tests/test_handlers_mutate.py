"""mutate: site selection (names, predicate, k), log-ratios, new paths, repairs."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers import (Bernoulli, Categorical, Distribution, DuplicateSiteError,
                      MissingMethodError, Site, Trace, condition, mutate, sample, seed, trace)

NAMES = [f"s{i}" for i in range(12)]


def wide():
    """12 sites whose proposals always change the value, plus one observed and one
    single-valued site that can never change."""
    out = [sample(n, Categorical(list(range(50)))) for n in NAMES]
    out.append(sample("obs", Categorical([1, 2]), obs=2))
    out.append(sample("fixed", Categorical(["only"])))
    return out


@pytest.fixture
def old():
    return trace(seed(wide, 0)).get_trace()


def changed(old, new):
    return {n for n in old if n in new and new[n].value != old[n].value}


def test_sites_as_names_changes_exactly_those(old):
    new = trace(mutate(wide, old, sites=["s3", "s7"], rng_seed=1)).get_trace()
    assert changed(old, new) == {"s3", "s7"}
    assert new["s3"].infer.get("mutated") and "mutated" not in new["s4"].infer
    assert new["s3"].log_q_ratio == 0.0  # Categorical's kernel is symmetric
    assert new["obs"].value == 2 and new["obs"].observed


def test_sites_as_single_name(old):
    new = trace(mutate(wide, old, sites="s0", rng_seed=1)).get_trace()
    assert changed(old, new) == {"s0"}


def test_sites_as_predicate(old):
    even = {f"s{i}" for i in range(0, 12, 2)}
    m = mutate(wide, old, sites=lambda site: site.name in even, rng_seed=2)
    new = trace(m).get_trace()
    assert changed(old, new) == even == m.selected


@given(st.integers(0, 20), st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_sites_as_int_picks_k_changeable_sites(k, rng_seed):
    old = trace(seed(wide, 0)).get_trace()
    m = mutate(wide, old, sites=k, rng_seed=rng_seed)
    new = trace(m).get_trace()
    assert len(m.selected) == min(k, 12)
    assert m.selected <= set(NAMES)  # never "obs" (observed) nor "fixed" (one value)
    assert changed(old, new) == m.selected
    assert new["fixed"].value == "only"


def test_int_selection_is_uniform_over_eligible_sites(old):
    counts = Counter()
    for s in range(1200):
        m = mutate(wide, old, sites=1, rng_seed=s)
        m()
        counts.update(m.selected)
    assert set(counts) == set(NAMES) and sum(counts.values()) == 1200
    assert all(60 < c < 140 for c in counts.values())  # expected 100 each


def test_default_sites_is_one(old):
    m = mutate(wide, old, rng_seed=0)
    new = trace(m).get_trace()
    assert len(m.selected) == 1 and changed(old, new) == m.selected


def test_reproducible_with_rng_seed(old):
    a = trace(mutate(wide, old, sites=3, rng_seed=5)).get_trace()
    b = trace(mutate(wide, old, sites=3, rng_seed=5)).get_trace()
    c = trace(mutate(wide, old, sites=3, rng_seed=6)).get_trace()
    assert a == b and a != c


def test_bad_selectors(old):
    with pytest.raises(ValueError, match="not in the trace"):
        mutate(wide, old, sites=["nope"])
    with pytest.raises(ValueError):
        mutate(wide, old, sites=-1)
    with pytest.raises(TypeError, match="bool"):
        mutate(wide, old, sites=True)
    with pytest.raises(TypeError, match="Trace"):
        mutate(wide, {"s0": 1})


class Walk(Distribution):
    """Integers 0..9; the proposal steps +1 w.p. 3/4 and -1 w.p. 1/4 (reflecting
    nowhere: a step off the end is impossible, so tests start in the middle)."""

    UP, DOWN = 0.75, 0.25

    def sample(self, rng):
        return int(rng.integers(0, 10))

    def log_prob(self, value):
        return -math.log(10) if value in range(10) else -math.inf

    def support(self):
        return range(10)

    def propose(self, value, rng):
        if rng.random() < self.UP:
            return value + 1, math.log(self.DOWN) - math.log(self.UP)
        return value - 1, math.log(self.UP) - math.log(self.DOWN)

    def params(self):
        return ()


def test_log_q_ratio_of_asymmetric_kernel_is_recorded():
    def walker():
        return sample("w", Walk()), sample("other", Walk())

    old = Trace([Site("w", 5, Walk()), Site("other", 5, Walk())])
    ups = downs = 0
    for s in range(200):
        new = trace(mutate(walker, old, sites=["w"], rng_seed=s)).get_trace()
        assert new["other"].value == 5 and new["other"].log_q_ratio == 0.0
        if new["w"].value == 6:
            ups += 1
            # log q(old | new) - log q(new | old) = log(1/4) - log(3/4)
            assert new["w"].log_q_ratio == pytest.approx(-math.log(3))
        else:
            downs += 1
            assert new["w"].value == 4
            assert new["w"].log_q_ratio == pytest.approx(math.log(3))
    assert ups > downs > 0


def test_new_control_flow_sites_come_from_prior_and_are_seeded():
    def branchy():
        if sample("coin", Bernoulli(0.5)):
            return sample("heads_only", Categorical(list(range(100))))
        return sample("tails_only", Categorical(list(range(100))))

    old = Trace([Site("coin", False, Bernoulli(0.5)),
                 Site("tails_only", 3, Categorical(list(range(100))))])
    m = mutate(branchy, old, sites=["coin"], rng_seed=4)
    new = trace(m).get_trace()
    assert new["coin"].value is True and "heads_only" in new and "tails_only" not in new
    assert new == trace(mutate(branchy, old, sites=["coin"], rng_seed=4)).get_trace()
    assert not new["heads_only"].repaired and new["heads_only"].log_q_ratio == 0.0


def test_out_of_support_values_are_repaired():
    def dependent():
        n = sample("n", Categorical([2, 8]))
        return sample("k", Categorical(list(range(n))))

    old = Trace([Site("n", 8, Categorical([2, 8])), Site("k", 6, Categorical(list(range(8))))])
    new = trace(mutate(dependent, old, sites=["n"], rng_seed=0)).get_trace()
    assert new["n"].value == 2
    assert new["k"].value in (0, 1) and new.repaired == ("k",)


def test_inner_seed_decides_prior_draws_outer_mutate_decides_proposals(old):
    a = trace(mutate(seed(wide, 1), old, sites=["s0"], rng_seed=9)).get_trace()
    b = trace(mutate(seed(wide, 2), old, sites=["s0"], rng_seed=9)).get_trace()
    assert a["s0"].value == b["s0"].value  # proposal from mutate's generator


def test_observed_sites_are_untouched_even_if_selected():
    def prog():
        return sample("a", Categorical([1, 2, 3]))

    old = trace(condition(prog, {"a": 2})).get_trace()
    new = trace(condition(mutate(prog, old, sites=["a"], rng_seed=0), {"a": 2})).get_trace()
    assert new["a"].value == 2 and new["a"].log_q_ratio == 0.0


def test_missing_propose_names_site():
    class NoPropose:
        def sample(self, rng):
            return 1

        def log_prob(self, v):
            return 0.0

        def contains(self, v):
            return v == 1

    def prog():
        return sample("b", NoPropose())

    old = Trace([Site("b", 1)])
    with pytest.raises(MissingMethodError,
                       match="site 'b': distribution NoPropose has no method propose "
                             "required by mutate"):
        mutate(prog, old, sites=["b"], rng_seed=0)()
    assert mutate(prog, old, sites=[], rng_seed=0)() == 1  # unselected: replay only


def test_duplicate_sites_detected_by_mutate():
    def dup():
        sample("d", Categorical([1]))
        sample("d", Categorical([1]))

    with pytest.raises(DuplicateSiteError, match="'d'"):
        mutate(dup, Trace(), sites=0)()


def test_without_rng_seed_uses_default_generator(old):
    from handlers import set_default_rng
    set_default_rng(11)
    a = trace(mutate(wide, old, sites=2)).get_trace()
    set_default_rng(11)
    b = trace(mutate(wide, old, sites=2)).get_trace()
    assert a == b and len(changed(old, a)) == 2
    assert np.isfinite(a.log_prob())
