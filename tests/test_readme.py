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
