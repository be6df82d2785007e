"""SIGTERM (what ``kill``, systemd and container runtimes send) to a real ``probsched
tune`` / ``tune-model`` process ends it as Ctrl-C does: one message saying where the
records are, exit 143, the measuring workers gone without tracebacks, the measurer's
temporary directory removed, every committed record intact."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from probsched.database import Database

CLI = [sys.executable, "-m", "probsched.cli"]
USER = (
    "import numpy as np\n"
    "import probsched as ps\n"
    "def model():\n"
    "    w = np.full((6, 5), 0.5, np.float32)\n"
    "    return (lambda x: x @ w), (np.ones((4, 6), np.float32),)\n"
    "def matmul():\n"
    "    A = ps.placeholder((4, 6), name='A')\n"
    "    B = ps.placeholder((6, 5), name='B')\n"
    "    k = ps.reduce_axis(6, name='k')\n"
    "    return ps.create_func([A, B, ps.compute((4, 5), lambda i, j: ps.sum(A[i, k] * B[k, j], axis=k), name='C')], name='matmul')\n"
)
#: what each command says: how many records of what it kept, or just where they are
SAID = {"tune": "terminated: {n} records of matmul are in {db} (best so far",
        "tune-model": "terminated: the records so far are in {db}; run again to resume"}


def _records(path) -> int:
    try:
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
    except sqlite3.Error:
        return 0


def _stat(pid: int) -> list:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def _descendants(pid: int) -> list:
    """Live processes below ``pid`` (the measuring workers lead process groups of their own)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                children.setdefault(int(_stat(int(entry))[1]), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pids) -> list:
    out = []
    for pid in pids:
        try:
            if _stat(pid)[0] not in "ZX":
                out.append(pid)
        except OSError:
            pass
    return out


@pytest.mark.parametrize("command, fn, service", [("tune", "matmul", False), ("tune-model", "model", False),
                                                   ("tune-model", "model", True)])
def test_sigterm_ends_a_tuning_run_as_ctrl_c_does(tmp_path, command, fn, service):
    """``kill PID`` (a container runtime), or SIGTERM to every process of the run, the
    measuring workers first (systemd's stop): exit 143, one message, workers and temp files
    gone, records intact."""
    (tmp_path / "user.py").write_text(USER)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    db = tmp_path / "m.db"
    proc = subprocess.Popen(
        [*CLI, command, f"{tmp_path / 'user.py'}:{fn}", "--trials", "400", "--strategy", "replay",
         "--cost-model", "random", "--workers", "1", "--batch-size", "1", "--db", str(db), "--no-compare"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp), "PYTHONFAULTHANDLER": "1"},
    )
    try:
        deadline = time.monotonic() + 150
        while _records(db) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _records(db) >= 2, proc.stderr.read() if proc.poll() is not None else "no two records in 150 s"
        assert [d for d in os.listdir(tmp) if d.startswith("probsched-measure-")]  # the measurer's, while it runs
        workers = _descendants(proc.pid)
        assert workers
        if service:
            for pid in workers:
                os.kill(pid, signal.SIGTERM)
            time.sleep(0.3)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        deadline = time.monotonic() + 10
        while _alive(workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _alive(workers)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in _alive(workers if "workers" in locals() else []):
            os.kill(pid, signal.SIGKILL)
    with Database(str(db)) as d:
        records = [r for w in d.workloads() for r in d.records(w.hash)]
    assert proc.returncode == 143, err
    assert SAID[command].format(n=len(records), db=db) in err, err
    assert "Traceback" not in err and "Error" not in err, err
    assert not left, "a measuring worker outlived the tuner"
    assert not [d for d in os.listdir(tmp) if d.startswith("probsched-measure-")]
    assert len(records) >= 2 and all(r.ok for r in records)  # the signal crashed no candidate in flight
