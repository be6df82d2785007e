"""The documentation site: every page's Python runs, and ``mkdocs build --strict`` passes.

How pages are tested (docs/tutorials/*.md, and any other page with Python in it):

- every ```` ```python ```` block of a page runs, in page order, in one namespace per page,
  in a temporary working directory (databases and images the code writes go there);
- a ```` ```text ```` block right after a Python block is that block's expected output,
  compared as doctest does with ELLIPSIS and NORMALIZE_WHITESPACE (``...`` stands for
  anything, e.g. a time);
- a Python block right after ``<!-- docs-test: skip (reason) -->`` is not run, only
  compiled; the pages that may skip blocks, and how many, are listed in :data:`SKIPPED`
  so that no block stops running by accident.

A failing block is reported with its page and line. To see what a page prints (when
writing or updating an expected output), run this file on it:

    python tests/test_docs.py docs/tutorials/generative-schedules.md
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import pathlib
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: Pages allowed to skip blocks, and how many they skip.
SKIPPED = {
    "index.md": 1,  # the first look: a full default tune, which the tutorials run in small
    "tutorials/dask-cluster.md": 2,  # needs a Dask cluster
    "tutorials/bring-your-model.md": 5,  # Flax (linen, NNX), Equinox, Haiku, Keras: not test dependencies
}
#: Tutorials whose code does not run yet (none: the Dask page runs a LocalCluster).
NOT_RUN_YET: set = set()

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[^\n]*)$")
_SKIP = re.compile(r"<!--\s*docs-test:\s*skip\b.*?-->")
_CHECKER_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass
class Block:
    lang: str
    code: str
    line: int  # 1-based line of the first code line in the page
    skip: bool = False
    expected: Optional[str] = None  # the text block that follows, if any


def blocks_of(text: str) -> List[Block]:
    """The fenced code blocks of a Markdown page, with skip marks and expected outputs."""
    lines = text.splitlines()
    out: List[Block] = []
    i = 0
    last_end = -1  # index of the closing fence of the previous block
    pending_skip = False
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            if lines[i].strip() and not _SKIP.search(lines[i]):
                pending_skip = False
            if _SKIP.search(lines[i]):
                pending_skip = True
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        lang = (m["info"].split() or [""])[0].strip("{}.").lower()
        body, j = [], i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence) and lines[j].strip().strip("`~") == ""):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        code = "\n".join(body) + "\n"
        between = lines[last_end + 1 : i]
        if lang == "text" and out and out[-1].lang == "python" and last_end >= 0 and not any(l.strip() for l in between):
            out[-1].expected = code
        else:
            out.append(Block(lang, code, i + 2, skip=pending_skip))
        pending_skip = False
        last_end = j
        i = j + 1
    return out


class BlockFailed(AssertionError):
    pass


def run_page(path: pathlib.Path, workdir: pathlib.Path, echo: bool = False) -> Dict[str, float]:
    """Run the Python blocks of one page (see the module docstring); seconds per block."""
    rel = path.relative_to(DOCS).as_posix() if path.is_relative_to(DOCS) else path.name
    blocks = [b for b in blocks_of(path.read_text()) if b.lang == "python"]
    scope: dict = {"__name__": "docs_page"}
    timings: Dict[str, float] = {}
    checker = doctest.OutputChecker()
    old = os.getcwd()
    os.chdir(workdir)
    try:
        for b in blocks:
            # padded so that a traceback's line numbers are the page's
            code = compile("\n" * (b.line - 1) + b.code, str(path), "exec")
            if b.skip:
                continue
            buf = io.StringIO()
            start = time.perf_counter()
            try:
                with contextlib.redirect_stdout(buf):
                    exec(code, scope)
            except Exception as exc:
                raise BlockFailed(f"{rel}:{b.line}: the block raised {type(exc).__name__}: {exc}\n{buf.getvalue()}") from exc
            timings[f"{rel}:{b.line}"] = time.perf_counter() - start
            got = buf.getvalue()
            if echo:
                print(f"----- {rel}:{b.line} ({timings[f'{rel}:{b.line}']:.1f} s)\n{got}", end="")
            if b.expected is not None and not checker.check_output(b.expected, got, _CHECKER_FLAGS):
                example = doctest.Example(b.code, b.expected)
                diff = checker.output_difference(example, got, _CHECKER_FLAGS)
                raise BlockFailed(f"{rel}:{b.line}: the output differs from the text block after it\n{diff}")
    finally:
        os.chdir(old)
    return timings


def pages_with_python() -> List[str]:
    return sorted(
        p.relative_to(DOCS).as_posix()
        for p in DOCS.rglob("*.md")
        if any(b.lang == "python" for b in blocks_of(p.read_text()))
    )


# ---------------------------------------------------------------------------- the harness


def test_the_block_parser_finds_skips_and_expected_outputs():
    page = "\n".join([
        "Intro.", "", "```python", "print(1)", "```", "", "```text", "1", "```", "",
        "<!-- docs-test: skip (needs a cluster) -->", "", "```python", "x = 1", "```",
        "", "```python", "print(2)", "```", "Some words.", "```text", "2", "```",
        "", "    ```python", "    y = 3", "    ```",
    ])
    got = [(b.lang, b.code, b.line, b.skip, b.expected) for b in blocks_of(page)]
    assert got == [
        ("python", "print(1)\n", 4, False, "1\n"),
        ("python", "x = 1\n", 14, True, None),
        ("python", "print(2)\n", 18, False, None),  # words between: not its output
        ("text", "2\n", 22, False, None),
        ("python", "y = 3\n", 26, False, None),  # inside a list item
    ]


def test_a_wrong_output_or_an_exception_fails_the_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nprint(41)\n```\n\n```text\n42\n```\n")
    with pytest.raises(BlockFailed, match="output differs"):
        run_page(page, tmp_path)
    page.write_text("```python\nprint(1)\n```\n\n```python\n1 / 0\n```\n")
    with pytest.raises(BlockFailed, match=r"page.md:6: the block raised ZeroDivisionError"):
        run_page(page, tmp_path)
    page.write_text("```python\nprint('took 1.23 s')\n```\n\n```text\ntook ... s\n```\n")
    run_page(page, tmp_path)


# ---------------------------------------------------------------------------- the pages


def test_every_tutorial_has_running_code_and_only_listed_pages_skip():
    tutorials = sorted(p.relative_to(DOCS).as_posix() for p in (DOCS / "tutorials").glob("*.md"))
    assert len(tutorials) == 6
    for rel in tutorials:
        blocks = [b for b in blocks_of((DOCS / rel).read_text()) if b.lang == "python"]
        assert blocks, f"{rel}: no Python block"
        runs = any(not b.skip for b in blocks)
        if rel in NOT_RUN_YET:
            assert not runs, f"{rel} runs code now: take it out of NOT_RUN_YET"
        else:
            assert runs, f"{rel}: no Python block runs"
    for rel in pages_with_python():
        skipped = sum(b.skip for b in blocks_of((DOCS / rel).read_text()) if b.lang == "python")
        assert skipped == SKIPPED.get(rel, 0), f"{rel}: {skipped} skipped blocks, expected {SKIPPED.get(rel, 0)}"


#: pages whose code tunes or compiles the most, run in a rotation of the slow tests (tests/conftest.py)
SLOW_PAGES = {"howto/task-scheduler.md": 4, "tutorials/bring-your-model.md": 5}


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow(rotation=SLOW_PAGES[p])) if p in SLOW_PAGES else p
                                  for p in pages_with_python()])
def test_page_code_runs(page, tmp_path):
    run_page(DOCS / page, tmp_path)


def test_cli_page_documents_every_command():
    from probsched.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    commands = set(sub.choices)
    assert {"tune", "tune-model", "plot"} <= commands
    headings = set(re.findall(r"^## `probsched ([a-z-]+)", (DOCS / "cli.md").read_text(), flags=re.M))
    assert commands <= headings, f"commands without a section in docs/cli.md: {sorted(commands - headings)}"


def test_images_the_pages_show_exist():
    for page in DOCS.rglob("*.md"):
        for src in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", page.read_text()):
            assert (page.parent / src).is_file(), f"{page.relative_to(DOCS)}: missing image {src}"


# ---------------------------------------------------------------------------- the site


@pytest.mark.slow(rotation=2)  # the pages' code runs in every run
def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    api = (tmp_path / "site" / "api" / "schedule" / "index.html").read_text()
    assert 'id="probsched.schedule.Schedule"' in api and 'id="probsched.schedule.Schedule.split"' in api
    assert "&gt;&gt;&gt; " in api and ":class:`" not in api  # examples as code, roles converted


if __name__ == "__main__":
    import tempfile

    for arg in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            run_page(pathlib.Path(arg).resolve(), pathlib.Path(tmp), echo=True)
