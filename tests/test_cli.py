"""The console script: --version, --help, workloads, ir, cache, and exit code 2 on bad input."""

import subprocess
import sys

import probsched as ps
from probsched.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "probsched.cli", *args], capture_output=True, text=True, timeout=120)


def test_version_and_help():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"probsched {ps.__version__}"
    r = run("--help")
    assert r.returncode == 0 and "workloads" in r.stdout and "cache" in r.stdout


def test_workloads_and_ir(capsys):
    assert main(["workloads"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 52 and any(l.startswith("GMM:2 ") and "512" in l for l in lines)
    assert main(["ir", "GMM:2"]) == 0
    text = capsys.readouterr().out
    assert "def GMM(X: float32[1, 512, 512]" in text and "structural hash" in text


def test_bad_input_exits_2(capsys):
    assert main(["ir", "NOPE:9"]) == 2
    assert "NOPE" in capsys.readouterr().err
    assert main(["--no-such-option"]) == 2


def test_cache_path(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PROBSCHED_CACHE_DIR", str(tmp_path))
    assert main(["cache"]) == 0 and str(tmp_path) in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0 and "removed 0" in capsys.readouterr().out
