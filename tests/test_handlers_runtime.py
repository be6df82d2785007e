"""The runtime: sample, the handler stack, Messenger's three forms, threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from handlers import (Categorical, HandlerError, Message, Messenger, MissingMethodError,
                      ReplayError, SupportError, UnmatchedKeyError, block, condition,
                      get_default_rng, handler_stack, mutate, replay, sample, scope, seed,
                      set_default_rng, substitute, trace)

BIG = Categorical(list(range(1000)))


def two_sites():
    a = sample("a", Categorical([1, 2, 4, 8]))
    b = sample("b", Categorical([0, 16, 64]))
    return a * b


# -- sample without handlers ----------------------------------------------------------

def test_sample_without_handler_uses_default_rng_reproducibly():
    set_default_rng(123)
    first = [sample("x", BIG) for _ in range(5)]
    set_default_rng(123)
    assert [sample("x", BIG) for _ in range(5)] == first
    set_default_rng(np.random.default_rng(123))
    assert [sample("x", BIG) for _ in range(5)] == first


def test_set_default_rng_accepts_generator_and_returns_it():
    g = np.random.default_rng(5)
    assert set_default_rng(g) is g
    assert get_default_rng() is g


def test_sample_obs_returns_obs_without_handler():
    assert sample("x", Categorical([1, 2]), obs=7) == 7


def test_sample_rejects_non_string_name():
    with pytest.raises(TypeError, match="str"):
        sample(3, Categorical([1]))


def test_no_handler_does_not_track_duplicates():
    # Documented: without a run-tracking handler there is no notion of a run.
    assert [sample("x", Categorical([1])) for _ in range(2)] == [1, 1]


class NoSample:
    def log_prob(self, value):
        return 0.0


def test_missing_sample_method_names_site_with_and_without_handlers():
    with pytest.raises(MissingMethodError, match="site 'z': distribution NoSample has no method "
                                                 "sample required by sample"):
        sample("z", NoSample())
    with pytest.raises(MissingMethodError, match="site 'z'"):
        trace(lambda: sample("z", NoSample())).get_trace()


# -- message order ----------------------------------------------------------------------

class Recorder(Messenger):
    def __init__(self, fn=None, tag="", log=None):
        super().__init__(fn)
        self.tag, self.log = tag, log

    def process_message(self, msg):
        self.log.append(("process", self.tag))

    def postprocess_message(self, msg):
        self.log.append(("post", self.tag))


def test_process_inner_to_outer_and_postprocess_outer_to_inner():
    log = []
    with Recorder(tag="outer", log=log), Recorder(tag="inner", log=log):
        sample("a", Categorical([1]))
    assert log == [("process", "inner"), ("process", "outer"),
                   ("post", "outer"), ("post", "inner")]


def test_stop_hides_site_from_outer_handlers_but_inner_postprocess_runs():
    log = []
    with Recorder(tag="outer", log=log), block(), Recorder(tag="inner", log=log):
        sample("a", Categorical([1]))
    assert log == [("process", "inner"), ("post", "inner")]


def test_value_set_by_process_message_skips_default_sampling():
    class Fix(Messenger):
        def process_message(self, msg):
            msg.value = "fixed"

    class Boom:
        def sample(self, rng):
            raise AssertionError("must not sample")

        def log_prob(self, value):
            return 0.0

    with Fix():
        assert sample("a", Boom()) == "fixed"


def test_message_fields_defaults():
    msg = Message("a", BIG, infer={"k": 1})
    assert (msg.name, msg.fn, msg.observed, msg.rng, msg.stop, msg.log_q_ratio,
            msg.repaired) == ("a", BIG, False, None, False, 0.0, False)
    assert msg.infer == {"k": 1}
    assert not hasattr(msg, "__dict__")


def test_infer_is_copied_into_the_trace_not_shared_with_caller():
    infer = {"hint": "x"}
    tr = trace(lambda: sample("a", Categorical([1]), infer=infer)).get_trace()
    assert tr["a"].infer == {"hint": "x"}
    assert tr["a"].infer is not infer


# -- the three forms ------------------------------------------------------------------

def test_wrapper_decorator_and_context_manager_forms_agree():
    wrapped = trace(seed(two_sites, 0)).get_trace()

    @trace
    @seed(rng_seed=0)
    def decorated():
        return two_sites()

    decorated()
    with trace() as tr, seed(rng_seed=0):
        two_sites()
    assert decorated.trace == wrapped
    assert tr == wrapped


def test_decorator_form_binds_a_copy_so_config_is_reusable():
    deco = seed(rng_seed=0)
    f = deco(two_sites)
    g = deco(lambda: sample("z", BIG))
    assert f is not deco and g is not deco
    assert f() == seed(two_sites, 0)()
    assert g() == seed(lambda: sample("z", BIG), 0)()


def test_calling_handler_without_function_is_a_clear_error():
    with pytest.raises(TypeError, match="no function to run"):
        seed(rng_seed=0)(1, 2)


def test_handler_cannot_be_entered_twice():
    h = trace()
    with h:
        with pytest.raises(HandlerError, match="already active"):
            with h:
                pass
    assert handler_stack() == ()


def test_recursive_call_of_same_wrapped_instance_is_rejected():
    holder = {}

    def rec(depth):
        return holder["f"](depth - 1) if depth else 0

    holder["f"] = trace(rec)
    with pytest.raises(HandlerError, match="already active"):
        holder["f"](2)
    assert handler_stack() == ()


# -- stack cleanup on exceptions --------------------------------------------------------

def _old_trace():
    return trace(seed(two_sites, 0)).get_trace()


HANDLERS = {
    "trace": lambda fn: trace(fn),
    "replay": lambda fn: replay(fn, _old_trace()),
    "replay_strict": lambda fn: replay(fn, _old_trace(), strict=True),
    "condition": lambda fn: condition(fn, {"a": 1}),
    "substitute": lambda fn: substitute(fn, {"a": 1}),
    "seed": lambda fn: seed(fn, 0),
    "block": lambda fn: block(fn),
    "scope": lambda fn: scope(fn, "s"),
    "mutate": lambda fn: mutate(fn, _old_trace(), sites=["a"], rng_seed=0),
    "plain_messenger": lambda fn: Messenger(fn),
}


class Boom(RuntimeError):
    pass


def _raises_midway():
    sample("a", Categorical([1, 2, 4, 8]))
    raise Boom("inside")


@pytest.mark.parametrize("name", sorted(HANDLERS))
def test_exception_inside_leaves_stack_exactly_as_it_was(name):
    outer = seed(rng_seed=1)
    with outer:
        before = handler_stack()
        with pytest.raises(Boom):
            HANDLERS[name](_raises_midway)()
        assert handler_stack() == before
        # The context-manager form, too.
        with pytest.raises(Boom):
            with HANDLERS[name](None):
                _raises_midway()
        assert handler_stack() == before
    assert handler_stack() == ()


@pytest.mark.parametrize("make, error", [
    (lambda: condition(two_sites, {"a": 3}), SupportError),
    (lambda: substitute(two_sites, {"b": -1}), SupportError),
    (lambda: condition(two_sites, {"nope": 1}, strict=True), UnmatchedKeyError),
    (lambda: replay(lambda: sample("a", Categorical([1])), _old_trace(), strict=True),
     ReplayError),
    (lambda: trace(lambda: [sample("d", BIG) for _ in range(2)]), HandlerError),
])
def test_errors_raised_by_handlers_leave_stack_clean(make, error):
    with pytest.raises(error):
        make()()
    assert handler_stack() == ()


def test_stack_restored_even_if_inner_code_leaks_a_handler():
    leaked = trace()
    with seed(rng_seed=0):
        with trace():
            leaked.__enter__()  # never exited
            assert len(handler_stack()) == 3
        assert [type(h).__name__ for h in handler_stack()] == ["seed"]
    assert handler_stack() == ()


# -- threads ----------------------------------------------------------------------------

def _program_with_barrier(tag, barrier, n=6):
    out = []
    for i in range(n):
        out.append(sample(f"{tag}{i}", BIG))
        out.append([type(h).__name__ for h in handler_stack()])
        barrier.wait(timeout=10)
    return out


def test_threads_have_separate_stacks_and_do_not_cross_talk():
    barrier = threading.Barrier(2)
    results, errors = {}, []

    def worker_traced():
        try:
            tr = trace(seed(_program_with_barrier, 7)).get_trace("t", barrier)
            results["traced"] = tr
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def worker_conditioned():
        try:
            data = {f"c{i}": 999 for i in range(6)}
            results["cond"] = condition(_program_with_barrier, data)("c", barrier)
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=worker_traced), threading.Thread(target=worker_conditioned)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert handler_stack() == ()

    solo = trace(seed(_program_with_barrier, 7)).get_trace("t", threading.Barrier(1))
    assert results["traced"] == solo
    assert list(results["traced"]) == [f"t{i}" for i in range(6)]
    cond = results["cond"]
    assert cond[0::2] == [999] * 6
    # Each thread only ever saw its own handlers while the other was running.
    assert all(stack == ["condition"] for stack in cond[1::2])


def test_concurrent_seeded_traces_match_sequential_ones():
    barrier = threading.Barrier(4)
    results = {}

    def worker(k):
        results[k] = trace(seed(_program_with_barrier, k)).get_trace(f"w{k}_", barrier)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    for k in range(4):
        expected = trace(seed(_program_with_barrier, k)).get_trace(f"w{k}_", threading.Barrier(1))
        assert results[k] == expected
