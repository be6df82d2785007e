"""Suite-wide options: how many of the slow sweeps run.

``--slow=sample`` (the default, what CI runs) keeps a deterministic quarter of the tests
marked ``slow`` (chosen by a stable hash of their id, so each run checks the same ones and
every one is reachable); ``--slow=all`` runs them all; ``--slow=none`` skips them.
"""

import hashlib

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--slow",
        choices=("sample", "all", "none"),
        default="sample",
        help="run a stable quarter (default), all, or none of the tests marked slow",
    )


def pytest_collection_modifyitems(config, items):
    mode = config.getoption("--slow")
    if mode == "all":
        return
    keep, drop = [], []
    for item in items:
        if item.get_closest_marker("slow") is None:
            keep.append(item)
            continue
        digest = int(hashlib.sha256(item.nodeid.encode()).hexdigest(), 16)
        (keep if mode == "sample" and digest % 4 == 0 else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
