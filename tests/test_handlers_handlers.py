"""Semantics of trace, replay, condition, substitute, seed, block, scope and their
composition."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from handlers import (Bernoulli, Categorical, DuplicateSiteError, MissingMethodError,
                      ReplayError, Site, SupportError, Trace, UnmatchedKeyError,
                      UnmatchedKeyWarning, block, condition, replay, sample, scope, seed,
                      set_default_rng, substitute, trace)

BIG = Categorical(list(range(10_000)))


def program():
    a = sample("a", Categorical([1, 2, 4, 8]))
    b = sample("b", Categorical([0, 16, 64]))
    return a * b


def branching():
    """Which sites exist depends on "coin"; "k"'s support depends on "n"."""
    n = sample("n", Categorical([2, 3, 5]))
    k = sample("k", Categorical(list(range(n))))
    if sample("coin", Bernoulli(0.5)):
        sample("extra", BIG)
    return n, k


def many(n=20):
    return [sample(f"x{i}", BIG) for i in range(n)]


# -- trace -----------------------------------------------------------------------------

def test_trace_records_every_site_in_order_with_dist_and_log_prob():
    tr = trace(seed(program, 0)).get_trace()
    assert list(tr) == ["a", "b"]
    assert tr["a"].dist == Categorical([1, 2, 4, 8])
    assert tr["a"].log_prob == math.log(0.25) and tr["b"].log_prob == math.log(1 / 3)
    assert not tr["a"].observed and tr["a"].log_q_ratio == 0.0 and not tr["a"].repaired


def test_trace_returns_program_result_and_fresh_trace_per_call():
    h = trace(seed(many, 0))
    first = h.get_trace(3)
    assert len(first) == 3
    second = h.get_trace(5)
    assert len(second) == 5 and len(first) == 3  # the first trace is not mutated
    assert h(2) == [h.trace[f"x{i}"].value for i in range(2)]


def test_trace_of_traced_program_records_same_sites():
    inner = trace(seed(program, 0))
    outer_tr = trace(inner).get_trace()
    assert outer_tr == inner.trace
    assert outer_tr["a"] is not inner.trace["a"]  # each trace keeps its own record


def test_duplicate_site_raises_at_second_sample_naming_it():
    calls = []

    def dup():
        sample("same", Categorical([1]))
        calls.append("between")
        sample("same", Categorical([1]))
        calls.append("after")

    for make in (lambda f: trace(f), lambda f: replay(f, Trace()),
                 lambda f: condition(f, {}), lambda f: substitute(f, {})):
        calls.clear()
        with pytest.raises(DuplicateSiteError, match="site 'same'") as info:
            make(dup)()
        assert info.value.site == "same" and calls == ["between"]


def test_trace_missing_log_prob_names_site():
    class NoLogProb:
        def sample(self, rng):
            return 1

    with pytest.raises(MissingMethodError, match="site 'q'.*NoLogProb has no method "
                                                 "log_prob required by trace"):
        trace(lambda: sample("q", NoLogProb())).get_trace()


# -- replay ------------------------------------------------------------------------------

def test_replay_reuses_recorded_values():
    tr = trace(seed(many, 0)).get_trace()
    again = trace(seed(replay(many, tr), 99)).get_trace()
    assert again == tr
    assert replay(many, tr)() == [s.value for s in tr.values()]


def test_replay_samples_sites_missing_from_trace():
    partial = Trace([Site("x0", 7, BIG)])
    tr = trace(seed(replay(many, partial), 0)).get_trace(3)
    assert tr["x0"].value == 7
    free = trace(seed(many, 0)).get_trace(3)
    # Only drawn sites consume the seed's generator: x1 gets the draw x0 got freely.
    assert tr["x1"].value == free["x0"].value
    assert tr["x2"].value == free["x1"].value


def test_replay_nonstrict_repairs_out_of_support_and_reports():
    old = Trace([Site("n", 5, Categorical([2, 3, 5])), Site("k", 4, Categorical(range(5))),
                 Site("coin", False, Bernoulli(0.5))])
    # "n" changed upstream via substitute: k=4 is no longer in range(2).
    tr = trace(seed(substitute(replay(branching, old), {"n": 2}), 0)).get_trace()
    assert tr["n"].value == 2 and tr["k"].value in (0, 1)
    assert tr.repaired == ("k",)
    assert tr["k"].repaired and not tr["n"].repaired
    assert tr["coin"].value is False


def test_replay_strict_raises_on_out_of_support_value():
    old = Trace([Site("a", 3, Categorical([1, 3]))])
    with pytest.raises(ReplayError, match="site 'a': recorded value 3 is outside the support"):
        replay(program, old, strict=True)()


def test_replay_strict_raises_on_site_not_reached():
    old = trace(seed(program, 0)).get_trace()
    old.add_site(Site("ghost", 1, Categorical([1])))
    with pytest.raises(ReplayError, match="ghost") as info:
        replay(program, old, strict=True)()
    assert info.value.site == "ghost"
    replay(program, old)()  # not strict: fine


def test_replay_strict_passes_on_faithful_trace():
    tr = trace(seed(branching, 4)).get_trace()
    assert trace(replay(branching, tr, strict=True)).get_trace() == tr


def test_replay_leaves_observed_sites_alone():
    def obs_program():
        return sample("o", Categorical([1, 2]), obs=2)

    old = Trace([Site("o", 1, Categorical([1, 2]))])
    assert replay(obs_program, old)() == 2


def test_replay_requires_a_trace_and_contains():
    with pytest.raises(TypeError, match="Trace"):
        replay(program, {"a": 1})

    class NoContains:
        def sample(self, rng):
            return 1

        def log_prob(self, v):
            return 0.0

    with pytest.raises(MissingMethodError, match="site 'nc'.*contains required by replay"):
        replay(lambda: sample("nc", NoContains()), Trace([Site("nc", 1)]))()


# -- condition / substitute ----------------------------------------------------------------

def test_condition_fixes_and_observes_substitute_fixes_only():
    c = trace(condition(program, {"a": 4})).get_trace()
    s = trace(substitute(program, {"a": 4})).get_trace()
    assert c["a"].value == s["a"].value == 4
    assert c["a"].observed and not s["a"].observed
    assert not c["b"].observed
    assert c.choices(observed=False).keys() == {"b"}


@pytest.mark.parametrize("handler", [condition, substitute])
def test_value_outside_support_raises_naming_site_and_value(handler):
    with pytest.raises(SupportError, match=r"site 'b': value 17 is outside the support of "
                                           r"Categorical\(\[0, 16, 64\]\)") as info:
        handler(program, {"b": 17})()
    assert info.value.site == "b"
    with pytest.raises(SupportError):
        handler(program, {"a": True})()  # True is not the candidate 1


@pytest.mark.parametrize("handler", [condition, substitute])
def test_unmatched_key_warns_by_default_and_errors_when_strict(handler):
    with pytest.warns(UnmatchedKeyWarning, match=r"keys \['typo'\] matched no sample site"):
        assert handler(program, {"a": 2, "b": 0, "typo": 1})() == 0
    with pytest.raises(UnmatchedKeyError) as info:
        handler(program, {"a": 2, "typo": 1, "other": 2}, strict=True)()
    assert set(info.value.keys) == {"typo", "other"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        handler(program, {"a": 2})()  # every key matched: silent


def test_unmatched_key_reported_at_end_of_with_block():
    with pytest.warns(UnmatchedKeyWarning, match="zz"):
        with condition(data={"zz": 1}):
            program()


def test_callable_data_returns_none_to_skip():
    seen = []

    def data(name):
        seen.append(name)
        return 64 if name == "b" else None

    tr = trace(seed(condition(program, data), 0)).get_trace()
    assert seen == ["a", "b"] and tr["b"].value == 64 and tr["b"].observed
    assert not tr["a"].observed


def test_condition_data_must_be_mapping_or_callable():
    with pytest.raises(TypeError, match="mapping or a callable"):
        condition(program, 5)


# -- seed ------------------------------------------------------------------------------

def test_seed_is_reproducible_and_recreated_per_call():
    h = trace(seed(many, 0))
    assert h.get_trace() == h.get_trace()
    assert trace(seed(many, 0)).get_trace() != trace(seed(many, 1)).get_trace()
    with trace() as t1, seed(rng_seed=0):
        many()
    assert t1 == h.trace


def test_seed_does_not_depend_on_default_rng():
    set_default_rng(1)
    first = seed(many, 3)()
    set_default_rng(2)
    sample("burn", BIG)
    assert seed(many, 3)() == first


def test_seed_with_generator_keeps_state_across_calls():
    gen = np.random.default_rng(0)
    h = seed(many, gen)
    assert h(5) != h(5)
    assert h(5) != seed(many, 0)(5)


def test_seed_requires_a_seed():
    with pytest.raises(TypeError, match="rng_seed"):
        seed(many)


def test_innermost_seed_wins():
    assert seed(seed(many, 1), 2)() == seed(many, 1)()
    with seed(rng_seed=2):
        inner = seed(many, 1)()
    assert inner == seed(many, 1)()


# -- block -------------------------------------------------------------------------------

def test_block_hide_expose_hide_fn_and_all():
    def abc():
        return [sample(n, BIG) for n in "abc"]

    assert list(trace(block(abc, hide=["a", "c"])).get_trace()) == ["b"]
    assert list(trace(block(abc, hide="a")).get_trace()) == ["b", "c"]
    assert list(trace(block(abc, expose=["a"])).get_trace()) == ["a"]
    assert list(trace(block(abc, hide_fn=lambda m: m.name > "a")).get_trace()) == ["a"]
    assert list(trace(block(abc)).get_trace()) == []
    with pytest.raises(ValueError, match="at most one"):
        block(abc, hide=["a"], expose=["b"])


def test_block_under_trace_versus_trace_under_block():
    outer = trace(block(program, hide=["a"])).get_trace()
    assert list(outer) == ["b"]
    inner = trace(program)
    trace(block(inner)).get_trace()
    assert list(inner.trace) == ["a", "b"]  # a trace inside the block sees everything


def test_block_hides_from_outer_condition_and_seed():
    # condition outside block cannot reach the hidden site: its key goes unmatched.
    with pytest.warns(UnmatchedKeyWarning, match="'a'"):
        value = trace(condition(block(program, hide=["a"]), {"a": 8, "b": 16})).get_trace()
    assert value["b"].value == 16 and "a" not in value
    # seed outside block: the hidden site is drawn by the default generator, and the
    # seed's generator goes to the next visible site.
    set_default_rng(0)
    hidden = seed(block(many, hide=["x0"]), 5)(2)
    assert hidden == [BIG.sample(np.random.default_rng(0)), seed(many, 5)(1)[0]]
    # seed inside block: everything comes from the seed.
    assert block(seed(many, 5), hide=["x0"])(2) == seed(many, 5)(2)


# -- scope -------------------------------------------------------------------------------

def test_scope_prefixes_and_nests():
    tr = trace(scope(scope(program, "inner"), "outer")).get_trace()
    assert list(tr) == ["outer/inner/a", "outer/inner/b"]
    tr = trace(scope(program, "s", divider="::")).get_trace()
    assert list(tr) == ["s::a", "s::b"]


def test_scope_lets_a_subprogram_run_twice():
    def twice():
        return scope(program, "left")() + scope(program, "right")()

    tr = trace(seed(twice, 0)).get_trace()
    assert list(tr) == ["left/a", "left/b", "right/a", "right/b"]
    with pytest.raises(DuplicateSiteError, match="'a'"):
        trace(lambda: (program(), program())).get_trace()


def test_handlers_inside_scope_see_plain_names_outside_see_prefixed():
    inside = trace(scope(condition(program, {"a": 2}, strict=True), "s")).get_trace()
    assert inside["s/a"].value == 2
    outside = trace(condition(scope(program, "s"), {"s/a": 8}, strict=True)).get_trace()
    assert outside["s/a"].value == 8
    with pytest.raises(UnmatchedKeyError):
        condition(scope(program, "s"), {"a": 8}, strict=True)()


def test_scope_requires_string_prefix():
    with pytest.raises(TypeError, match="prefix"):
        scope(program)


# -- composition orders ----------------------------------------------------------------

def test_seed_outside_or_inside_replay_gives_same_trace():
    old = trace(seed(branching, 1)).get_trace()
    partial = Trace([old["n"]])
    a = trace(seed(replay(branching, partial), 7)).get_trace()
    b = trace(replay(seed(branching, 7), partial)).get_trace()
    assert a == b and a["n"].value == old["n"].value


def test_substitute_outside_replay_wins_inside_loses():
    old = Trace([Site("a", 1, None), Site("b", 0, None)])
    outside = trace(substitute(replay(program, old), {"a": 8})).get_trace()
    inside = trace(replay(substitute(program, {"a": 8}), old)).get_trace()
    assert outside["a"].value == 8
    assert inside["a"].value == 1


def test_condition_inside_replay_is_kept_because_observed():
    old = Trace([Site("a", 1, None), Site("b", 0, None)])
    tr = trace(replay(condition(program, {"a": 8}), old)).get_trace()
    assert tr["a"].value == 8 and tr["a"].observed


def test_trace_inside_or_outside_condition_records_the_observation():
    outer = trace(condition(program, {"a": 2})).get_trace()
    inner = trace(program)
    condition(inner, {"a": 2})()
    # Every process_message runs before any postprocess_message, so even a trace
    # inside condition records the conditioned value as observed.
    assert inner.trace["a"].value == outer["a"].value == 2
    assert inner.trace["a"].observed and outer["a"].observed


def test_unmatched_key_warning_points_at_user_code():
    with pytest.warns(UnmatchedKeyWarning) as record:
        trace(condition(program, {"nope": 1})).get_trace()
    assert record[0].filename == __file__
    with pytest.warns(UnmatchedKeyWarning) as record:
        with substitute(data={"nope": 1}):
            program()
    assert record[0].filename == __file__
