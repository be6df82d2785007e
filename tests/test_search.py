"""Search strategies and ps.tune: protocol, mutators, de-duplication, resume."""

import collections

import numpy as np
import pytest
from scripts import ROOT, load_script

import probsched as ps
from handlers.trace_struct import Site, Trace
from probsched.cost_model import RidgeModel
from probsched.database import Database
from probsched.measure import LocalMeasurer
from probsched.schedule.distributions import PerfectTile
from probsched.search import AnnealedMCMC, EvolutionarySearch, ReplayTrace, SearchContext, best_then_prior, choose_site, new_candidates
from probsched.search.mutators import algorithm_family, structural_family
from probsched.tuning.selection import DEFAULT_RETIME_ROUNDS
from probsched.space import AutoInline, MultiLevelTiling, ParallelVectorizeUnroll, RewriteReductionBlock, Space
from handlers import Categorical



def small_space():
    # the default rules with short unrolls: candidates compile in well under a second
    return Space(
        [AutoInline(), MultiLevelTiling()],
        [RewriteReductionBlock(), ParallelVectorizeUnroll(unroll_max_steps=(0, 16))],
        name="small",
    )


def context(seed=0, model=None):
    return SearchContext(ps.workloads.small("GMM"), small_space(), model=model, seed=seed)


def inner_tile(c):
    """The innermost j tile of a candidate (what the synthetic model below rewards)."""
    return c.decisions["Z/j/tile"].value[-1]


def trained_ridge(ctx, n=48):
    # a model that learned "a larger innermost j tile is faster"
    cands = [c for c in (ctx.draw() for _ in range(n)) if c is not None]
    times = [1.0 / inner_tile(c) for c in cands]
    return RidgeModel().fit([c.schedule for c in cands], times)


def test_replay_trace_gives_distinct_unmeasured_candidates():
    ctx = context()
    first = ReplayTrace().generate(ctx, 5)
    assert len({c.hash for c in first}) == 5
    ctx.measured |= {c.hash for c in first}
    again = ReplayTrace().generate(context(seed=0).__class__(ctx.workload, ctx.space, seed=0, measured=ctx.measured), 5)
    assert not {c.hash for c in again} & ctx.measured


def test_mutators_are_drawn_by_weight():
    tr = Trace(
        [
            Site("C/i/tile", (2, 4), PerfectTile(8, 2)),
            Site("C/unroll", 16, Categorical([0, 16, 64])),
        ]
    )
    rng = np.random.default_rng(0)
    counts = collections.Counter(choose_site(tr, rng) for _ in range(4000))
    # tile 0.90 against unroll 0.03: about 30 to 1 once renormalised over these two
    assert counts["C/i/tile"] / 4000 == pytest.approx(0.90 / 0.93, abs=0.02)


def test_mutation_changes_only_the_chosen_site():
    ctx = context()
    parent = ctx.draw()
    child = ctx.mutate(parent, ["Z/j/tile"])
    changed = {n for n in parent.decisions if n in child.decisions and child.decisions[n].value != parent.decisions[n].value}
    assert changed <= {"Z/j/tile"}


@pytest.mark.parametrize("strategy", [EvolutionarySearch(population=48, genetic_iters=3), AnnealedMCMC(chains=12, steps=6)])
def test_model_guided_strategies_follow_the_model(strategy):
    ctx = context(seed=1)
    ctx.model = trained_ridge(context(seed=2))
    prior = [c for c in (ctx.draw() for _ in range(40)) if c is not None]
    batch = strategy.generate(ctx, 8)
    assert len({c.hash for c in batch}) == len(batch) == 8
    assert np.mean([inner_tile(c) for c in batch]) > np.mean([inner_tile(c) for c in prior])


def test_a_family_cap_spreads_the_batch_over_structural_families():
    ctx = SearchContext(ps.workloads.small("GMM"), ps.space.default(), seed=0)
    pool = [c for c in (ctx.draw() for _ in range(60)) if c is not None]
    families = collections.Counter(structural_family(c.decisions) for c in pool)
    assert len(families) >= 4, families  # the write cache and the micro-kernel vary
    top = families.most_common(1)[0][0]
    # a ranking that puts every candidate of one family first
    ranked = sorted(pool, key=lambda c: structural_family(c.decisions) != top)
    plain = best_then_prior(ctx, ranked, 8, 0.0)
    assert all(structural_family(c.decisions) == top for c in plain[: families[top]])
    capped = best_then_prior(ctx, ranked, 8, 0.0, family=lambda c: structural_family(c.decisions), max_family_share=0.25)
    counts = collections.Counter(structural_family(c.decisions) for c in capped)
    # every family is capped at 2 of 8, and four families can fill the batch
    assert len(capped) == 8 and counts[top] == 2 and max(counts.values()) == 2
    fresh = [c.key for c in new_candidates(ctx, ranked, len(ranked))]
    assert [c.key for c in capped] == sorted((c.key for c in capped), key=fresh.index)  # in rank order
    # one family only: the cap cannot be kept, and the batch is still full, in rank order
    one = [c for c in ranked if structural_family(c.decisions) == top]
    alone = best_then_prior(ctx, one, 4, 0.0, family=lambda c: structural_family(c.decisions), max_family_share=0.25)
    assert [c.key for c in alone] == [c.key for c in one[:4]]
    with pytest.raises(ValueError, match="max_family_share"):
        EvolutionarySearch(max_family_share=0)


def test_the_evolutionary_search_caps_the_family_it_is_given():
    def run(**kw):
        ctx = context(seed=1)
        ctx.model = trained_ridge(context(seed=2))  # rewards a large innermost j tile
        batch = EvolutionarySearch(population=48, genetic_iters=2, eps_greedy=0.0, **kw).generate(ctx, 8)
        return collections.Counter(inner_tile(c) for c in batch)

    plain = run()
    assert max(plain.values()) > 2  # the model's favourite tile fills most of the batch
    capped = run(max_family_share=0.25, family=lambda tr: tr["Z/j/tile"].value[-1])
    assert sum(capped.values()) == 8 and max(capped.values()) <= 2, capped
    assert EvolutionarySearch().family is algorithm_family  # the default key: write cache and rfactor


def test_untrained_strategies_sample_the_prior():
    ctx = context()
    assert len(EvolutionarySearch().generate(ctx, 3)) == 3
    assert len(AnnealedMCMC().generate(ctx, 3)) == 3


@pytest.fixture(scope="module")
def measurer():
    with LocalMeasurer(workers=1, repeat=2, min_repeat_ms=1) as m:
        yield m


@pytest.mark.parametrize(
    "strategy",
    [ReplayTrace(), EvolutionarySearch(population=24, genetic_iters=2), AnnealedMCMC(chains=6, steps=3)],
    ids=["replay", "evolutionary", "mcmc"],
)
def test_short_tune_ends_with_a_correct_kernel_and_records(strategy, measurer, tmp_path):
    w = ps.workloads.small("GMM")
    db_path = str(tmp_path / "t.db")
    result = ps.tune(w, trials=4, space=small_space(), strategy=strategy, cost_model="ridge", database=db_path,
                     measurer=measurer, seed=0, batch_size=2)
    assert len(result.history) == 4 and result.best is not None
    x = w.random_inputs(np.random.default_rng(1))
    out = w.empty_outputs()
    result.kernel(*x, *out)
    w.check(out, w.reference(*x))
    with Database(db_path) as db:
        recs = db.records(w)
        assert len(recs) == 4 and {r.strategy for r in recs} == {result.strategy}
        # the four were re-timed together and the best named by that session, not by the search
        session = db.latest_retiming(w)
        assert {r.candidate_hash for r in session} == {r.candidate_hash for r in recs if r.ok}
        assert all(len(r.run_seconds) == DEFAULT_RETIME_ROUNDS for r in session)
        assert result.best.record.candidate_hash == session[0].candidate_hash
        assert result.best.seconds == session[0].median and result.best.retimed == session[0].run_seconds
        assert result.best.search_seconds == db.best(w, candidate_hash=session[0].candidate_hash)[0].median
    assert result.history[-1].best_seconds == min(t.seconds for t in result.history)


def test_resume_never_measures_a_candidate_twice(measurer, tmp_path):
    w = ps.workloads.small("GMM")
    db_path = str(tmp_path / "r.db")
    first = ps.tune(w, trials=3, space=small_space(), strategy="replay", database=db_path, measurer=measurer, seed=0,
                    retime_top=0)
    assert first.best.retimed == () and first.best.seconds == min(t.seconds for t in first.history)
    second = ps.tune(w, trials=3, space=small_space(), strategy="replay", database=db_path, measurer=measurer, seed=0,
                     retime_top=4)
    with Database(db_path) as db:
        recs = db.records(w)
        session = db.latest_retiming(w)
    assert len(recs) == 6
    assert len({r.candidate_hash for r in recs}) == 6  # the same seed would redraw the first three
    # the re-timing covers the 4 fastest of both runs, and names the best
    assert len(session) == 4 and {r.candidate_hash for r in session} == {r.candidate_hash for r in sorted(recs, key=lambda r: r.median)[:4] if r.ok}
    assert second.best.record.candidate_hash == session[0].candidate_hash
    again = ps.tune(w, trials=0, space=small_space(), database=db_path, measurer=measurer, seed=0)
    assert again.best.retimed == second.best.retimed  # nothing new measured: no re-timing, the naming stands


def test_a_second_tuner_on_the_same_database_skips_what_the_first_measured(tmp_path):
    # two processes tuning one workload into one database: each proposal leaves out the
    # candidates the other committed since (here two searches, one database file)
    from probsched.measure import MeasureResult
    from probsched.tuning import TaskSearch

    w = ps.workloads.small("GMM")
    path = str(tmp_path / "shared.db")
    with Database(path) as db_a, Database(path) as db_b:
        a = TaskSearch(w, db_a, space=small_space(), strategy="replay", seed=0)
        b = TaskSearch(w, db_b, space=small_space(), strategy="replay", seed=0)  # the same seed: the same draws
        first = a.propose(4)
        for i in range(len(first)):
            a.record(first, i, MeasureResult((1e-6,)))
        second = b.propose(4)
    assert first and second and not {c.hash for c in first} & {c.hash for c in second}


def test_tune_returns_with_no_worker_starting(measurer):
    # the caller times result.kernel next (TuneResult.compare): a worker starting beside it
    # would take a core. With no compiles allowed, every result replaces its worker.
    limit, measurer.max_compiles_per_worker = measurer.max_compiles_per_worker, 0
    try:
        result = ps.tune(ps.workloads.small("GMM"), trials=1, space=small_space(), strategy="replay", measurer=measurer,
                         seed=0, retime_top=0)
    finally:
        measurer.max_compiles_per_worker = limit
    assert result.best is not None and measurer.workers_started >= 2
    assert measurer.workers_starting == 0


class _CountingRidge(RidgeModel):
    """A ridge model that counts the calls handing it data."""

    calls = 0

    def fit_features(self, *args, **kwargs):
        self.calls += 1
        return super().fit_features(*args, **kwargs)

    def update_features(self, *args, **kwargs):
        self.calls += 1
        return super().update_features(*args, **kwargs)


def test_the_model_is_trained_only_when_the_strategy_asks_it(measurer, tmp_path):
    w = ps.workloads.small("GMM")
    db_path = str(tmp_path / "m.db")
    unused = _CountingRidge()
    ps.tune(w, trials=2, space=small_space(), strategy="replay", cost_model=unused, database=db_path,
            measurer=measurer, seed=0, batch_size=1, retime_top=0)
    assert unused.calls == 0  # random search never asks the model
    ps.tune(w, trials=0, space=small_space(), cost_model=unused, database=db_path, measurer=measurer, seed=0)
    assert unused.calls == 0  # nothing to search
    used = _CountingRidge()
    # a small population: the default one (512, four generations) takes ~20 s to evolve here
    ps.tune(w, trials=1, space=small_space(), strategy=EvolutionarySearch(population=24, genetic_iters=2),
            cost_model=used, database=db_path, measurer=measurer, seed=0, batch_size=1, retime_top=0)
    assert used.calls == 2  # on the two records the run resumes from, then on its own trial


def test_tune_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown strategy"):
        ps.tune("GMM:small", trials=1, strategy="nope")
    with pytest.raises(ValueError, match="trials"):
        ps.tune("GMM:small", trials=-1)
    with pytest.raises(ValueError, match="retime_top"):
        ps.tune("GMM:small", trials=1, retime_top=-1)


def test_custom_strategy_example_tunes(measurer):
    mod = load_script("examples/custom_strategy.py")
    assert len((ROOT / "examples" / "custom_strategy.py").read_text().splitlines()) <= 60
    w = ps.workloads.small("GMM")
    strategy = mod.ThompsonEnsemble(models=2, pool=8)
    result = ps.tune(w, trials=5, space=small_space(), strategy=strategy, measurer=measurer, seed=0, batch_size=1)
    assert len(result.history) == 5 and result.strategy == "thompson"
    assert len(strategy.seconds) == 5 and result.best is not None


def test_tune_a_bare_function_summarises_without_baselines(measurer):
    A = ps.placeholder((64, 16), name="A")
    B = ps.compute((64, 16), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    func = ps.create_func([A, B])
    result = ps.tune(func, trials=2, space=small_space(), strategy="replay", cost_model=None, measurer=measurer, seed=0)
    text = result.summary()
    assert "| probsched |" in text and "numpy" not in text
    assert "def " in str(result.best.instructions) or "sch." in str(result.best.instructions)


def test_compare_times_extra_implementations_with_ours(measurer):
    A = ps.placeholder((64, 16), name="A")
    B = ps.compute((64, 16), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    result = ps.tune(ps.create_func([A, B]), trials=1, space=small_space(), strategy="replay", cost_model=None,
                     measurer=measurer, seed=0)
    calls = []
    rows = dict(result.compare(rounds=2, min_repeat_ms=1, extra={"other": lambda: calls.append(1)}))
    assert sorted(rows) == ["other", "probsched"] and calls and all(sec > 0 for sec in rows.values())
