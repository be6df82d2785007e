"""Task schedulers: their arithmetic and the sequences of tasks they pick."""

import math

import numpy as np
import pytest

from probsched.tuning.task_scheduler import GradientBased, RoundRobin, TaskState, get


def state(i, weight=1, trials=0, rounds=(), best=None, alive=True):
    rounds = list(rounds)
    best = best if best is not None else (rounds[-1] if rounds else math.inf)
    return TaskState(i, f"t{i}", weight, 1e6, trials, best, rounds, alive)


def test_gradient_gain_is_the_documented_formula():
    g = GradientBased(alpha=0.2, window=3)
    t = state(0, weight=2, trials=40, rounds=[10e-3, 8e-3, 7e-3, 6e-3, 5e-3])
    backward = (8e-3 - 5e-3) / 3  # the best four rounds ago minus now, per round
    forward = 5e-3 / 40
    assert g.gain(t) == pytest.approx(2 * (0.2 * backward + 0.8 * forward))
    short = state(1, weight=1, trials=8, rounds=[4e-3, 3e-3])  # fewer rounds than the window: no slope
    assert g.gain(short) == pytest.approx(0.8 * 3e-3 / 8)
    assert g.gain(state(2, trials=8, rounds=[math.inf])) == math.inf  # nothing ran yet


def test_gradient_gives_every_task_a_round_first_in_order():
    g, rng = GradientBased(), np.random.default_rng(0)
    tasks = [state(0, rounds=[1e-3], trials=8), state(1), state(2)]
    assert g.next_task(tasks, rng) == 1
    tasks[1] = state(1, rounds=[1e-3], trials=8)
    assert g.next_task(tasks, rng) == 2


def test_a_resumed_run_gives_its_first_rounds_to_tasks_the_database_does_not_time():
    """A run on a database timing tasks 0-2 (their best times known, no round yet in this
    run) reaches task 3, which has no record, first; then the largest share of the latency."""
    g, rng = GradientBased(), np.random.default_rng(0)
    tasks = [state(0, best=1e-3), state(1, weight=3, best=1e-3), state(2, best=2e-3), state(3)]
    picks = []
    for _ in range(4):
        i = g.next_task(tasks, rng)
        picks.append(i)
        tasks[i].round_bests.append(tasks[i].best_seconds if math.isfinite(tasks[i].best_seconds) else 5e-4)
    assert picks == [3, 1, 2, 0]


def test_a_resumed_run_goes_on_with_the_tasks_earlier_runs_gave_least():
    """Tasks an earlier run measured (their trials counted in the forward gain) get no first
    round each again: the round goes to the largest gain, a task with 8 earlier trials
    before one of the same time with 128; a task with no record still goes first."""
    g, rng = GradientBased(), np.random.default_rng(0)
    tasks = [state(0, best=1e-3), state(1, best=1e-3), state(2, best=2e-3)]
    tasks[0].past_trials, tasks[1].past_trials, tasks[2].past_trials = 128, 8, 128
    assert g.gain(tasks[1]) == pytest.approx(0.8 * 1e-3 / 8)
    assert [g.next_task(tasks, rng) for _ in range(3)] == [1, 1, 1]  # no round this run, yet not fresh
    tasks.append(state(3))
    assert g.next_task(tasks, rng) == 3


def test_gradient_follows_the_gains_on_a_scripted_run():
    """Three tasks whose best times drop as scripted: the picks follow weight x gain."""
    g, rng = GradientBased(alpha=0.2, window=1), np.random.default_rng(0)
    curves = {0: [4e-3, 4e-3, 4e-3, 4e-3], 1: [2e-3, 1e-3, 0.5e-3, 0.4e-3], 2: [1e-3, 1e-3, 1e-3, 1e-3]}
    weights = {0: 1, 1: 1, 2: 10}
    tasks = [state(i, weight=weights[i]) for i in range(3)]
    picks = []
    for _ in range(9):
        i = g.next_task(tasks, rng)
        picks.append(i)
        t = tasks[i]
        t.round_bests.append(curves[i][min(len(t.round_bests), 3)])
        t.best_seconds = min(t.round_bests)
        t.trials += 8
    assert picks[:3] == [0, 1, 2]
    # task 2 weighs 10x: its forward gain 10 * 0.8 * 1e-3 / trials beats the others throughout
    assert picks[3:].count(2) >= 4
    assert all(tasks[i].trials == 8 * picks.count(i) for i in range(3))


def test_gradient_breaks_ties_at_random_but_reproducibly():
    tasks = [state(i, trials=8, rounds=[1e-3]) for i in range(4)]
    a = [GradientBased().next_task(tasks, np.random.default_rng(s)) for s in range(12)]
    b = [GradientBased().next_task(tasks, np.random.default_rng(s)) for s in range(12)]
    assert a == b and len(set(a)) > 1


def test_dead_tasks_are_never_picked():
    tasks = [state(0, alive=False), state(1, trials=8, rounds=[1e-3]), state(2, alive=False)]
    assert GradientBased().next_task(tasks, np.random.default_rng(0)) == 1
    rr = RoundRobin()
    assert [rr.next_task(tasks, np.random.default_rng(0)) for _ in range(3)] == [1, 1, 1]
    assert GradientBased().next_task([state(0, alive=False)], np.random.default_rng(0)) is None


def test_round_robin_cycles():
    rr = RoundRobin()
    tasks = [state(i) for i in range(3)]
    assert [rr.next_task(tasks, None) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_get_by_name_and_bad_input():
    assert isinstance(get("gradient"), GradientBased) and isinstance(get("round-robin"), RoundRobin)
    with pytest.raises(ValueError, match="unknown task scheduler 'greedy'; known: gradient, round-robin"):
        get("greedy")
    with pytest.raises(TypeError, match="next_task"):
        get(object())
    with pytest.raises(ValueError, match="alpha"):
        GradientBased(alpha=2.0)
