"""The default run's rotation of slow tests (tests/conftest.py): the rotations cover every
slow test once, the day picks one, the run says which, a pin keeps the long ones apart; and
the claims of the README and the docs whose checks are slow belong to some rotation."""

import ast
import datetime
import pathlib
import re

import pytest

pytest_plugins = ["pytester"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROTATIONS = int(re.search(r"^ROTATIONS = (\d+)$", (ROOT / "tests" / "conftest.py").read_text(), re.M).group(1))
TESTS = """
import pytest

@pytest.mark.slow
@pytest.mark.parametrize("n", range(12))
def test_sweep(n):
    pass

@pytest.mark.slow(rotation=2)
def test_long():
    pass

def test_quick():
    pass
"""


@pytest.fixture
def suite(pytester):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_x=TESTS)
    return pytester


def _ran(result) -> set:
    return {m.group(1) for m in re.finditer(r"(test_\w+(?:\[\d+\])?) PASSED", result.stdout.str())}


def test_the_rotations_run_every_slow_test_once(suite):
    runs = [_ran(suite.runpytest("-v", "--slow-rotation", str(r))) for r in range(ROTATIONS)]
    slow = [run - {"test_quick"} for run in runs]
    assert all("test_quick" in run for run in runs)
    assert set().union(*slow) == {f"test_sweep[{n}]" for n in range(12)} | {"test_long"}
    assert sum(len(s) for s in slow) == 13  # each in one rotation
    assert "test_long" in slow[2]  # its pin
    assert max(len(s) for s in slow) <= 7 and sum(bool(s) for s in slow) >= ROTATIONS // 2  # a share, not all or nothing


def test_the_day_picks_the_rotation_and_the_run_says_which(suite, monkeypatch):
    monkeypatch.delenv("PROBSCHED_SLOW_ROTATION", raising=False)  # this run's own choice is not the day's
    today = datetime.datetime.now(datetime.timezone.utc).date()
    last = ROTATIONS - 1
    result = suite.runpytest("-q")
    result.stdout.fnmatch_lines([f"slow tests: rotation {today.toordinal() % ROTATIONS} of 0-{last} (today's, {today.isoformat()} UTC): * ran*"])
    monkeypatch.setenv("PROBSCHED_SLOW_ROTATION", "2")
    result = suite.runpytest("-q")
    result.stdout.fnmatch_lines([f"slow tests: rotation 2 of 0-{last} ($PROBSCHED_SLOW_ROTATION): * ran*"])
    assert "test_long" in _ran(suite.runpytest("-v"))
    suite.runpytest("-q", "--slow=all").stdout.fnmatch_lines(["slow tests: all 13 ran (--slow=all)"])
    assert _ran(suite.runpytest("-v", "--slow=none")) == {"test_quick"}


def test_the_summary_reaches_the_controller_on_several_processes(suite, monkeypatch):
    # the README's command runs -n 2: the workers select, the controller says which rotation ran
    pytest.importorskip("xdist")
    monkeypatch.setenv("PROBSCHED_SLOW_ROTATION", "2")
    result = suite.runpytest_subprocess("-q", "-n", "2", "-p", "xdist")
    result.stdout.fnmatch_lines([f"slow tests: rotation 2 of 0-{ROTATIONS - 1} ($PROBSCHED_SLOW_ROTATION): * ran*"])
    assert result.ret == 0


def test_a_bad_rotation_is_a_usage_error(suite, monkeypatch):
    monkeypatch.setenv("PROBSCHED_SLOW_ROTATION", str(ROTATIONS + 1))
    assert suite.runpytest("-q").ret == pytest.ExitCode.USAGE_ERROR
    monkeypatch.delenv("PROBSCHED_SLOW_ROTATION")
    suite.makepyfile(test_y=f"import pytest\n@pytest.mark.slow(rotation={ROTATIONS})\ndef test_bad():\n    pass\n")
    assert suite.runpytest("-q").ret == pytest.ExitCode.USAGE_ERROR


#: Claims checked only by slow tests: (document, its words, test file, test function, its
#: parameter or None, long). Each is pinned to a rotation; the long ones to one each.
SLOW_CLAIMS = [
    ("README.md", "ResNet-50", "test_graph_compile.py", "test_full_model_matches_jax_jit", "resnet50", True),
    ("README.md", "MobileNet-V2", "test_graph_compile.py", "test_full_model_matches_jax_jit", "mobilenet_v2", True),
    ("README.md", "BERT-base", "test_graph_compile.py", "test_full_model_matches_jax_jit", "bert_base", True),
    ("README.md", "commits every record to SQLite as it arrives", "test_measure.py",
     "test_sigkill_of_a_real_tuner_then_resume", None, True),
    ("docs/tutorials/dask-cluster.md", "so the cluster's workers do not wait for the search", "test_dask.py",
     "test_simulated_16_workers_stay_busy_under_ps_tune", None, False),
]


def _rotation(call: ast.Call):
    """The ``rotation=`` of a ``pytest.mark.slow(...)`` call (None: not one, or no pin)."""
    if getattr(call.func, "attr", None) != "slow":
        return None
    return next((ast.literal_eval(kw.value) for kw in call.keywords if kw.arg == "rotation"), None)


def _pins(path: pathlib.Path, function: str) -> dict:
    """param (None: the test itself) -> the rotation its slow mark pins, read from the source."""
    tree = ast.parse(path.read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    pins = {}
    for decorator in fn.decorator_list:
        if not isinstance(decorator, ast.Call):
            continue
        if _rotation(decorator) is not None:
            pins[None] = _rotation(decorator)
        for node in ast.walk(decorator):  # pytest.param(value, marks=pytest.mark.slow(rotation=N))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "param":
                for mark in ast.walk(node):
                    if isinstance(mark, ast.Call) and _rotation(mark) is not None:
                        pins[ast.literal_eval(node.args[0])] = _rotation(mark)
    return pins


def test_the_claims_checked_by_slow_tests_run_in_some_rotation_the_long_ones_in_one_each():
    long = []
    for document, words, file, function, param, is_long in SLOW_CLAIMS:
        assert words in " ".join((ROOT / document).read_text().split()), (document, words)  # across line breaks
        pins = _pins(ROOT / "tests" / file, function)
        assert param in pins, f"{file}::{function}[{param}] pins no rotation"
        if is_long:
            long.append(pins[param])
    assert len(set(long)) == len(long), long  # one long test per rotation
