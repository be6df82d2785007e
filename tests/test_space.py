"""The default design space: traces of every workload are correct; handlers work on them."""

import re
import warnings

import numpy as np
import pytest
from scripts import load_script

import probsched as ps
import probsched.workloads as wl
from handlers import condition, mutate, replay, seed, trace
from probsched.ir.interpreter import evaluate
from probsched.schedule.distributions import PerfectTile

NAMES = wl.names()
_DATA: dict = {}


def data(name):
    if name not in _DATA:
        w = wl.small(name)
        x = w.random_inputs(np.random.default_rng(3))
        _DATA[name] = (w, x, w.reference(*x))
    return _DATA[name]


def draw(w, s, space=None):
    sch = ps.Schedule(w.func)
    tr = trace(seed(space or ps.space.default(), s)).get_trace(sch)
    return sch, tr


@pytest.mark.parametrize("name", NAMES)
def test_twenty_traces_per_workload_match_the_reference(name):
    w, x, expected = data(name)
    for s in range(20):
        sch, _ = draw(w, s)
        w.check(evaluate(sch.mod, *x), expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_hundred_compiled_traces_per_workload(name, request):
    # compiled candidates of the full space take 2-25 s each at these small shapes (512-step
    # unrolls): only the slow sweep compiles them; the CI test above checks them interpreted
    w, x, expected = data(name)
    count = 100 if request.config.getoption("--slow") == "all" else 2  # CI samples two
    for s in range(100, 100 + count):
        sch, _ = draw(w, s)
        out = w.empty_outputs()
        ps.build(sch)(*x, *out)
        w.check(out, expected)


def test_sites_are_named_after_blocks_and_loops():
    w = wl.small("C2D")
    _, tr = draw(w, 0)
    names = list(tr.choices())
    assert "conv2d/write_cache" in names and "padded/compute_at" in names
    assert any(n.startswith("conv2d/") and n.endswith("/tile") for n in names)
    assert isinstance(tr[next(n for n in names if n.endswith("/tile"))].dist, PerfectTile)


def test_condition_fixes_a_tile_and_mutate_changes_only_chosen_sites():
    w = wl.small("GMM")
    space = ps.space.default()
    _, tr = draw(w, 0)
    tile = next(n for n in tr.choices() if n.endswith("/tile") and len(tr[n].value) == 4)
    extent = int(np.prod(tr[tile].value))
    fixed = (1, 1, 1, extent) if extent <= 64 else tr[tile].value
    sch = ps.Schedule(w.func)
    tr2 = trace(condition(seed(space, 5), {tile: fixed})).get_trace(sch)
    assert tr2[tile].value == fixed
    sch3 = ps.Schedule(w.func)
    tr3 = trace(mutate(seed(space, 9), tr, sites=[tile])).get_trace(sch3)
    for n in tr.choices():
        if n != tile and n in tr3:
            assert tr3[n].value == tr[n].value or n in tr3.repaired
    x = w.random_inputs(np.random.default_rng(0))
    w.check(evaluate(sch3.mod, *x), w.reference(*x))


def test_replay_of_stored_traces_gives_equal_programs():
    w = wl.small("CBR")
    sch, tr = draw(w, 4)
    from handlers import Trace

    again = ps.Schedule(w.func)
    replay(ps.space.default(), Trace.from_json(tr.to_json()))(again)
    assert again.mod == sch.mod
    instr = ps.InstructionLog.from_json(sch.instructions.to_json()).apply(ps.Schedule(w.func))
    assert instr.mod == sch.mod


def test_replay_repairs_a_decision_invalidated_upstream():
    w = wl.small("C2D")
    space = ps.space.default()
    _, tr = draw(w, 1)
    # change a tile upstream: the recorded compute location may no longer be a valid loop
    tile = "conv2d/w1/tile" if "conv2d/w1/tile" in tr else next(n for n in tr.choices() if n.endswith("/tile"))
    data = dict(tr.choices())
    data[tile] = tuple(reversed(tr[tile].value)) if tr[tile].dist.contains(tuple(reversed(tr[tile].value))) else tr[tile].value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sch = ps.Schedule(w.func)
        new = trace(replay(seed(space, 0), trace_from(tr, data))).get_trace(sch)
    for n in new.repaired:
        assert new[n].dist.contains(new[n].value)
    x = w.random_inputs(np.random.default_rng(0))
    w.check(evaluate(sch.mod, *x), w.reference(*x))


def trace_from(tr, values):
    from handlers import Trace

    out = Trace.from_json(tr.to_json())
    for name, value in values.items():
        out[name].value = value
    return out


@pytest.mark.slow(rotation=3)  # examples/custom_rule.py's rule; a user rule's composition is checked in every run by the docs' rule tutorial
def test_user_rule_composes_with_the_default_space():
    mod = load_script("examples/custom_rule.py")
    w = wl.small("GMM")
    x = w.random_inputs(np.random.default_rng(0))
    compiled = set()
    for s in range(8):
        sch, tr = draw(w, s, mod.space_with_packing())
        assert "Z/pack_weights" in tr
        packed = bool(tr["Z/pack_weights"].value)
        # one compiled check per choice: the compiles (~3 s each) are the test's whole cost
        if packed not in compiled:
            compiled.add(packed)
            out = w.empty_outputs()
            ps.build(sch)(*x, *out)
            w.check(out, w.reference(*x))
    assert compiled == {True, False}


# ----------------------------------------------------------------------------- reductions


def _reduction_space(lanes=8):
    # thresholds for one core and one job per core, so that small shapes take the rules
    rules = [
        ps.space.AutoInline(),
        ps.space.AddRFactor(max_jobs_per_core=1, cores=1),
        ps.space.RFactorLanes(lanes=lanes, max_jobs_per_core=1, cores=1),
        ps.space.RandomComputeLocation(),
    ]
    return ps.space.compose(*rules, postprocs=ps.space.default_postprocs(), name="reductions")


def test_softmax_rows_reduce_in_vector_lanes():
    w = wl.softmax(8, 64)
    x = w.random_inputs(np.random.default_rng(0))
    prog = condition(_reduction_space(), {"T_softmax_maxelem/lanes": 16, "T_softmax_expsum/lanes": 8})
    for s in range(3):
        sch = ps.Schedule(w.func)
        trace(seed(prog, s)).get_trace(sch)
        names = [b.name for b in sch.mod.blocks()]
        assert "T_softmax_maxelem_rf" in names and "T_softmax_expsum_rf" in names, names
        w.check(evaluate(sch.mod, *x), w.reference(*x))


def test_softmax_computes_each_exp_once_in_one_row_loop():
    # exp has two consumers (the row sum and the division): the space samples its location
    # instead of inlining it twice, and the row sum's partials (rf) get one too, lanes kept
    # innermost. Conditioned on the row loop for all, one parallel loop does the whole row.
    w = wl.softmax(8, 64)
    x = w.random_inputs(np.random.default_rng(0))
    rows = {"T_softmax_expsum/lanes": 16, "T_softmax_maxelem/lanes": 8}
    rows.update({f"T_softmax_{b}/compute_at": "i3" for b in ("expsum", "expsum_rf", "exp", "maxelem", "maxelem_rf")})
    sch = ps.Schedule(w.func)
    tr = trace(seed(condition(_reduction_space(), rows), 0)).get_trace(sch)
    assert all(tr[site].value == v for site, v in rows.items()), tr
    top = list(sch.mod.body) if isinstance(sch.mod.body, tuple) else [sch.mod.body]
    assert len(top) == 1 and sch.get(sch.get_loops(sch.get_block("T_softmax_norm"))[0]).kind == "parallel"
    for rf in ("T_softmax_expsum_rf", "T_softmax_maxelem_rf"):
        extents_kinds = [(sch.get(l).extent, sch.get(l).kind) for l in sch.get_loops(sch.get_block(rf))]
        assert extents_kinds[-1] == ({"T_softmax_expsum_rf": 16, "T_softmax_maxelem_rf": 8}[rf], "vectorized"), extents_kinds
    kernel = ps.build(sch)
    assert kernel.source.count("_ps_exp_float32(") == 1 and len(kernel.launches) == 1, kernel.source
    (got,) = kernel.run(*x)
    w.check(got, w.reference(*x))
    # with no decision fixed, exp is still sometimes inlined (the old form stays reachable)
    inlined = 0
    for s in range(12):
        sch, tr = draw(w, s, _reduction_space())
        inlined += tr["T_softmax_exp/compute_at"].value == "inline"
        w.check(evaluate(sch.mod, *x), w.reference(*x))
    assert 0 < inlined < 12


def test_single_consumer_exp_is_still_inlined():
    a = ps.placeholder((4, 8), name="a")
    e = ps.compute((4, 8), lambda i, j: ps.exp(a[i, j]), name="e")
    out = ps.compute((4, 8), lambda i, j: e[i, j] + 1.0, name="out")
    sch = ps.Schedule(ps.create_func([a, out], name="f"))
    ps.space.AutoInline()(sch, sch.get_block("e"))
    assert [b.name for b in sch.mod.blocks()] == ["out"]


def test_norm_rfactors_rows_then_lanes_across_several_reduction_loops():
    w = wl.norm(1, 16, 64)
    x = w.random_inputs(np.random.default_rng(0))
    prog = condition(_reduction_space(), {"sum_sq/rfactor": "outer", "sum_sq_rf/lanes": 16})
    sch = ps.Schedule(w.func)
    tr = trace(seed(prog, 0)).get_trace(sch)
    names = [b.name for b in sch.mod.blocks() if not b.name.endswith("_init")]
    assert names[:3] == ["sum_sq_rf_rf", "sum_sq_rf", "sum_sq"], tr
    w.check(evaluate(sch.mod, *x), w.reference(*x))
    inner = condition(_reduction_space(), {"sum_sq/rfactor": "inner"})
    sch = ps.Schedule(w.func)
    trace(seed(inner, 0)).get_trace(sch)
    assert "sum_sq_rf" in [b.name for b in sch.mod.blocks()]
    w.check(evaluate(sch.mod, *x), w.reference(*x))


def test_norm_sums_a_rows_lanes_in_the_rows_parallel_iteration():
    # AddRFactor's row partials get lanes from RFactorLanes; the rule loop never visits that
    # partials block, so its annotation is taken up when its consumer is placed: the lanes
    # get a location too. At the partials' row loop, the row's lanes and its lane sum run in
    # one parallel iteration (one parallel region instead of two)
    w = wl.norm(1, 16, 64)
    x = w.random_inputs(np.random.default_rng(0))
    rules = _reduction_space().rules
    space = ps.space.compose(
        *rules, postprocs=[ps.space.RewriteReductionBlock(), ps.space.ParallelVectorizeUnroll(cores=1)]
    )
    sites = {"sum_sq/rfactor": "outer", "sum_sq_rf/lanes": 16, "sum_sq_rf_rf/compute_at": "ax1"}
    sites["sum_sq_rf_rf_init/parallel"] = 16  # the first block of the fused nest names it
    sch = ps.Schedule(w.func)
    tr = trace(seed(condition(space, sites), 0)).get_trace(sch)
    assert all(tr[site].value == v for site, v in sites.items()), tr
    rf_rf, rf = (sch.get_loops(sch.get_block(b)) for b in ("sum_sq_rf_rf", "sum_sq_rf"))
    assert rf_rf[0] == rf[0] and sch.get(rf[0]).kind == "parallel" and sch.get(rf[0]).extent == 16
    assert [(sch.get(l).extent, sch.get(l).kind) for l in rf_rf[1:]] == [(4, "serial"), (16, "vectorized")]
    assert sch.get(sch.get_block("sum_sq_rf")).annotation(ps.space.rules.RANDOM_COMPUTE_PRODUCER) is None
    kernel = ps.build(sch)
    assert len(kernel.launches) == 1, kernel.source
    (got,) = kernel.run(*x)
    w.check(got, w.reference(*x))
    # unconditioned, the lanes are placed at the root too (the two-region form stays reachable)
    where = set()
    for s in range(16):
        tr = draw(w, s, _reduction_space())[1]
        if "sum_sq_rf_rf/compute_at" in tr:
            where.add(tr["sum_sq_rf_rf/compute_at"].value)
    assert "root" in where and len(where) > 1, where


def test_compute_locations_skip_loops_that_would_repeat_the_same_work():
    # the row max is read once per row: computing it inside the column loop of the
    # normalisation would redo the whole row's reduction for every element
    sch = ps.Schedule(wl.softmax(4, 8).func)
    sch.compute_inline(sch.get_block("T_softmax_exp"))
    row, col = sch.get_loops(sch.get_block("T_softmax_norm"))
    where = sch.compute_locations(sch.get_block("T_softmax_expsum"))
    assert row.name in where and col.name not in where, where
    # a decision stored before (a measured record) at the skipped loop still replays
    assert sch.sample_compute_location(sch.get_block("T_softmax_expsum"), decision=col.name) == col.name


def test_register_tile_write_level_fixes_the_outer_reduction_tiles():
    # write level 3 caches the innermost spatial tile alone (a register tile on the stack);
    # it is sampled before the tiles and sets the outer reduction tiles to 1, so the tile is
    # final there and the taps are not sampled at all
    w, x, expected = data("DEP")
    site = "depthwise_conv2d/write_cache"
    sch = ps.Schedule(w.func)
    tr = trace(seed(condition(ps.space.default(), {site: 3}), 0)).get_trace(sch)
    assert not [n for n in tr if n.startswith("depthwise_conv2d/r")], list(tr)
    loops = sch.get_loops(sch.get_block("depthwise_conv2d"))
    rh0, rw0 = [l for l in loops if l.name.startswith(("rh", "rw"))][:2]
    assert sch.get(rh0).extent == sch.get(rw0).extent == 1
    inner = loops[-4:]  # n1_3 h1_3 w1_3 c1_3
    tile = int(np.prod([sch.get(l).extent for l in inner]))
    out = [np.full(b.shape, np.nan, b.dtype) for b in w.func.output_buffers()]
    kernel = ps.build(sch)
    # compacted to the register tile, and on the stack
    assert re.search(rf"depthwise_conv2d_local = _ps_stack_empty\({tile}, np.float32\)", kernel.source), kernel.source
    kernel(*x, *out)
    w.check(out, expected)
    # below level 3 the taps are sampled as before
    tr2 = trace(seed(condition(ps.space.default(), {site: 2}), 0)).get_trace(ps.Schedule(w.func))
    assert "depthwise_conv2d/rh/tile" in tr2 and "depthwise_conv2d/rw/tile" in tr2


def test_register_tile_level_needs_reduction_loops_that_fit_one_tile():
    # a 64-long K fits max_innermost_factor=64, a 128-long one does not: level 3 is not offered
    from probsched.space.rules import MultiLevelTiling

    for k, offered in ((64, True), (128, False)):
        w = ps.workloads.matmul(8, 8, k)
        sch = ps.Schedule(w.func)
        tr = trace(seed(lambda s: MultiLevelTiling()(s, s.get_block("Z")), 0)).get_trace(sch)
        assert (3 in tr["Z/write_cache"].dist.support()) == offered


def test_decision_kinds_are_tags_not_names():
    """Unroll, parallel and algorithm sites carry a tag in ``infer``; the mutators and the
    family cap select by it, so a site's name is free for people."""
    from handlers import seed, trace
    from probsched.search.mutators import MUTATORS, algorithm_family

    sch = ps.Schedule(ps.workloads.small("C2D").func)
    tr = trace(seed(ps.space.default(), 0)).get_trace(sch)
    tags = {name: tr[name].infer.get("tag") for name in tr}
    assert {tags[n] for n in tr if n.endswith("/unroll")} == {"unroll"}
    assert {tags[n] for n in tr if n.endswith("/parallel")} == {"parallel"}
    assert tags["conv2d/write_cache"] == "algorithm"
    assert [n for n, _ in algorithm_family(tr)] == [n for n in tr if tags[n] == "algorithm"]
    renamed = ps.Schedule(ps.workloads.small("GMM").func)
    renamed.sample_categorical([0, 16], name="how far to unroll", tag="unroll")
    site = renamed.instructions[-1]
    assert site.attrs["tag"] == "unroll"
    assert MUTATORS["unroll"][1](trace(lambda s: s.sample_categorical([0, 16], name="x", tag="unroll")).get_trace(ps.Schedule(ps.workloads.small("GMM").func))["x"])
