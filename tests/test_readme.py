"""The README's Python blocks run, in order, as one program; its Quickstart matches .ci/run."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_readme_python_blocks_run(capsys):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 3
    scope: dict = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), scope)
    out = capsys.readouterr().out
    assert "def mm(A: float32[64, 32]" in out and "sch.tensorize(" in out and "Z/i/tile" in out


def test_quickstart_has_exactly_two_commands_and_ci_runs_the_second():
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", quick, flags=re.S)
    assert len(commands) == 2
    assert "probsched tune GMM:2" in commands[0] and "pytest" in commands[1]
    assert "quickstart:test" in (ROOT / ".ci" / "run").read_text()


def test_quickstart_installs_the_pinned_versions_of_constraints_txt():
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    for command in re.findall(r"```bash\n(.*?)\n```", quick, flags=re.S):
        assert "pip install -c constraints.txt " in command, command
    pins = dict(
        line.split(";")[0].strip().split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    declared = re.findall(r'"([A-Za-z0-9_.-]+)[<>=!~]', (ROOT / "pyproject.toml").read_text())
    missing = sorted({d for d in declared if d.lower() not in {p.lower() for p in pins}} - {"setuptools"})
    assert not missing, f"constraints.txt pins no version of {missing}"
