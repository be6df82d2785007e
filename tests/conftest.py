"""Suite-wide options: which of the slow sweeps run.

``--slow=sample`` (the default, what CI runs) runs one *rotation*, a sixth of the tests
marked ``slow``, and a different one each day: rotation = days since 0001-01-01 (UTC)
mod 6, so CI runs every slow test over any six consecutive days, and a failure is
reproduced with ``--slow-rotation N`` (or ``$PROBSCHED_SLOW_ROTATION``). The summary line
at the end says which rotation ran. ``--slow=all`` runs every slow test; ``--slow=none``
none.

Under pytest-xdist (the README's command runs ``-n 2``) each worker collects and selects
alike; the controller prints the summary the first worker reports.

A slow test belongs to the rotation its ``@pytest.mark.slow(rotation=N)`` names (the long
ones name theirs, so that no rotation holds two of them and each keeps the suite under 10
minutes on 2 cores), else to a stable hash of its id mod 6.
"""

import datetime
import hashlib
import os

import pytest

ROTATIONS = 6


def pytest_addoption(parser):
    parser.addoption(
        "--slow",
        choices=("sample", "all", "none"),
        default="sample",
        help="run today's rotation, a sixth of the tests marked slow (default), all, or none of them",
    )
    parser.addoption(
        "--slow-rotation",
        type=int,
        choices=range(ROTATIONS),
        default=None,
        metavar="N",
        help="with --slow=sample: run rotation N (0-5) instead of today's (also $PROBSCHED_SLOW_ROTATION)",
    )


def rotation_of(item) -> int:
    """The rotation a slow test belongs to (see the module doc)."""
    marker = item.get_closest_marker("slow")
    pinned = marker.kwargs.get("rotation") if marker is not None else None
    if pinned is not None:
        if pinned not in range(ROTATIONS):
            raise pytest.UsageError(f"{item.nodeid}: slow(rotation={pinned!r}) is not in 0-{ROTATIONS - 1}")
        return pinned
    return int(hashlib.sha256(item.nodeid.encode()).hexdigest(), 16) % ROTATIONS


def chosen_rotation(config) -> tuple:
    """(rotation, why) of this run: the option, the environment, or the day."""
    option = config.getoption("--slow-rotation")
    if option is not None:
        return option, "--slow-rotation"
    env = os.environ.get("PROBSCHED_SLOW_ROTATION", "").strip()
    if env:
        if env not in {str(r) for r in range(ROTATIONS)}:
            raise pytest.UsageError(f"$PROBSCHED_SLOW_ROTATION={env!r}: expected one of 0-{ROTATIONS - 1}")
        return int(env), "$PROBSCHED_SLOW_ROTATION"
    today = datetime.datetime.now(datetime.timezone.utc).date()
    return today.toordinal() % ROTATIONS, f"today's, {today.isoformat()} UTC"


def pytest_collection_modifyitems(config, items):
    mode = config.getoption("--slow")
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    for item in slow:
        rotation_of(item)  # a bad pin fails every run, not only its own rotation's
    config._slow_collected = len(slow)
    if mode == "all":
        config._slow_summary = f"slow tests: all {len(slow)} ran (--slow=all)"
        return
    rotation, why = chosen_rotation(config) if mode == "sample" else (None, "")
    drop = [item for item in slow if mode == "none" or rotation_of(item) != rotation]
    if mode == "sample":
        config._slow_summary = (
            f"slow tests: rotation {rotation} of 0-{ROTATIONS - 1} ({why}): {len(slow) - len(drop)} of {len(slow)} ran; "
            "--slow-rotation N runs another, --slow=all every one"
        )
    else:
        config._slow_summary = f"slow tests: none of {len(slow)} ran (--slow=none)"
    if drop:
        dropped = set(map(id, drop))
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if id(item) not in dropped]


def pytest_sessionfinish(session):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the summary to the controller
        workeroutput["slow_summary"] = getattr(session.config, "_slow_summary", None)
        workeroutput["slow_collected"] = getattr(session.config, "_slow_collected", 0)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", None) or {}
    if output.get("slow_summary") and not getattr(node.config, "_slow_summary", None):
        node.config._slow_summary = output["slow_summary"]
        node.config._slow_collected = output.get("slow_collected", 0)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    summary = getattr(config, "_slow_summary", None)
    if summary and getattr(config, "_slow_collected", 0):  # a run without slow tests has nothing to say
        terminalreporter.write_line(summary)
