"""The evolutionary search measures every algorithm family before the model and the cap
choose (issue #63: direct convolution beside Winograd's F2 and F4), once."""

import collections
import math
import copy
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import probsched as ps
from probsched.search import EvolutionarySearch, SearchContext, best_then_prior
from probsched.search.family_share import fair_share
from probsched.workloads.conv import conv2d_nhwc

WINO = "conv2d/winograd"


class _Trained:
    trained = True  # what SearchContext.model_trained asks; the scores come from the context


class WinogradFirst(SearchContext):
    """A context whose "cost model" ranks F(4x4) over F(2x2) over direct, as the transfer
    model trained without Winograd records did."""

    def score(self, candidates):
        return np.array([float(c.decisions[WINO].value) for c in candidates])


def wino(c):
    return c.decisions[WINO].value


def winograd_first():
    wl = conv2d_nhwc(1, 6, 6, 8, 8, 3, 1, 1)  # 3x3 stride 1: direct, F2 and F4 are all eligible
    return WinogradFirst(wl, ps.space.default(), model=_Trained(), seed=0)


@pytest.fixture
def conv_ctx():
    return winograd_first()


def search(**kw):
    return EvolutionarySearch(population=24, genetic_iters=1, eps_greedy=0.0, **kw)


def measure(ctx, batch):
    ctx.measured |= {c.hash for c in batch}


def test_the_first_batch_measures_direct_though_the_model_ranks_winograd_first(conv_ctx):
    plain = search(max_family_share=1.0).generate(winograd_first(), 6)
    assert {wino(c) for c in plain} == {4}  # the model alone measures F4 only
    s = search()
    first = s.generate(conv_ctx, 6)
    assert collections.Counter(map(wino, first)) == {0: 2, 2: 2, 4: 2}  # a fair share each
    assert [wino(c) for c in first] == sorted(map(wino, first), reverse=True)  # in rank order
    assert s.trials(conv_ctx) == {((WINO, w),): 2 for w in (0, 2, 4)}
    measure(conv_ctx, first)
    # its share measured, direct is left to the model and the cap: it converges on F4 and F2
    second = s.generate(conv_ctx, 6)
    assert collections.Counter(map(wino, second)) == {4: 3, 2: 3}


def test_families_the_records_hold_are_owed_nothing(conv_ctx):
    drawn = [c for c in (conv_ctx.draw() for _ in range(40)) if c is not None and wino(c) == 0][:2]
    conv_ctx.records = [SimpleNamespace(decisions=c.decisions.to_json()) for c in drawn]  # a resumed run's
    measure(conv_ctx, drawn)
    s = search()
    assert s.trials(conv_ctx) == {((WINO, 0),): 2}
    assert 0 not in {wino(c) for c in s.generate(conv_ctx, 6)}


def test_with_one_family_the_batch_is_plain_top_k():
    def batch(**kw):
        ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), model=_Trained(), seed=3)
        ctx.score = lambda cands: np.array([float(c.decisions["Z/j/tile"].value[-1]) for c in cands])
        return [c.key for c in search(**kw).generate(ctx, 6)]

    assert batch(family=lambda tr: 0) == batch(max_family_share=1.0)


def test_a_copy_counts_afresh(conv_ctx):
    s = search()
    s.generate(conv_ctx, 3)
    assert sum(s.trials(conv_ctx).values()) == 3
    for other in (copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert other.trials(conv_ctx) == {} and other.max_family_share == s.max_family_share


def test_fair_share_rejects_a_negative_batch():
    with pytest.raises(ValueError, match="fair_share: n must be >= 0"):
        fair_share(["a"], {}, -1)


class _Ctx:
    """Just what best_then_prior asks of a context, for candidates that are all new."""

    @staticmethod
    def is_new(c):
        return True

    @staticmethod
    def draw():
        return None


@settings(max_examples=200, deadline=None)
@given(
    fams=st.lists(st.integers(0, 3), min_size=1, max_size=24),
    n=st.integers(1, 12),
    share=st.sampled_from([0.25, 0.5, 1.0]),
    past=st.dictionaries(st.integers(0, 3), st.integers(0, 6)),
)
def test_the_batch_shares_its_ranked_part_among_families(fams, n, share, past):
    ranked = [SimpleNamespace(key=str(i), hash=str(i), fam=f) for i, f in enumerate(fams)]
    batch = best_then_prior(_Ctx(), ranked, n, 0.0, family=lambda c: c.fam, max_family_share=share, trials=past)
    idx = [int(c.key) for c in batch]
    assert len(batch) == min(n, len(ranked)) and idx == sorted(set(idx))  # full, distinct, in rank order
    if share == 1.0:
        assert batch == ranked[:n]  # MetaSchedule's top-k: no share, no cap
        return
    got = collections.Counter(c.fam for c in batch)
    members = collections.Counter(fams)
    owed = fair_share(fams, past, n)
    if sum(owed.values()) <= n:
        assert all(got[f] >= min(owed[f], members[f]) for f in members), (got, owed)
    cap = max(1, math.ceil(share * n))
    for f in got:
        if got[f] > max(cap, owed[f]):  # over its cap only when every other family is at its cap or ran out
            assert all(got[g] >= min(cap, members[g]) for g in members if g != f), (f, got, owed)
