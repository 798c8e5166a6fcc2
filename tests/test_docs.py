"""The documentation runs: every Python, pycon, console and bash example in README.md and docs/ is executed, on the
packaged model, and an example whose printed output changed fails; the site builds with `mkdocs build --strict`.

How a page's examples run (docs/reference/layout.md says the same for writers):
- `pycon` blocks are doctests, checked output and all; `python` blocks are executed. A page's Python blocks share
  one namespace, top to bottom.
- `console` blocks are `$ command` lines, each followed by what the terminal shows (stdout and stderr together,
  trailing spaces ignored); `bash` blocks are commands that must succeed.
- `<!-- docs: skip -->` just before a block leaves it out (servers that block, hub downloads, prose examples of
  errors from other machines, a run that another page makes); `<!-- docs: slow -->` marks it slow (small trainings;
  run by the whole suite); `<!-- docs: long -->` marks a full-size run on the shared data (minutes each: run with
  BERTKIT_LONG_TESTS=1, as the benchmarks that measured the pages' figures were).
- Commands run in a temporary folder that looks like a checkout: `src/` and `docs/` are the repository's, the shared
  data is at `../shared/data`, and everything written lands in that folder. A `bertkit ...` line without shell syntax
  runs in this process (the same `main()` as the installed command, without 3 s of start-up per line); anything else
  runs in bash with this Python's scripts first on PATH.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import LONG_TESTS, SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = ("pycon", "python", "console", "bash")
FENCE = re.compile(r"(?:<!-- docs: (?P<mark>\w+) -->\n)?```(?P<lang>\w+)[^\n]*\n(?P<body>.*?)^```", re.S | re.M)
SHELL_SYNTAX = re.compile(r"[|&;<>`$()]")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    body: str
    mark: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        if match.group("lang") in RUNNABLE and match.group("mark") != "skip":
            line = text.count("\n", 0, match.start("lang")) + 1
            found.append(Block(page, line, match.group("lang"), match.group("body"), match.group("mark")))
    return found


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


SETS = (None, "slow", "long")  # a block runs in its own set's test and in the larger sets' (quick < slow < long)
QUICK = [p for p in PAGES if any(b.mark is None for b in blocks(p))]
SLOW = [p for p in PAGES if any(b.mark == "slow" for b in blocks(p))]
LONG = [p for p in PAGES if any(b.mark == "long" for b in blocks(p))]


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A folder that looks like the repository to the examples; they write only here."""
    work = tmp_path / "bertkit"
    work.mkdir()
    for name in ("src", "docs", "benchmarks"):
        (work / name).symlink_to(ROOT / name)
    (tmp_path / "shared").mkdir()
    if SHARED_DATA.is_dir():
        (tmp_path / "shared" / "data").symlink_to(SHARED_DATA)
    monkeypatch.chdir(work)
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("COLUMNS", "120")
    return work


def run_bertkit(args: list[str], monkeypatch) -> tuple[int, str]:
    """`bertkit ARGS` through the command line's own main(), in this process: (exit status, stdout + stderr)."""
    from bertkit import cli

    output = io.StringIO()
    monkeypatch.setattr(sys, "argv", ["bertkit", *args])
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        try:
            cli.main()
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return status, output.getvalue()


def run_command(command: str, monkeypatch) -> tuple[int, str]:
    words = shlex.split(command, comments=True)
    if words and words[0] == "bertkit" and not SHELL_SYNTAX.search(command.split(" #")[0]):
        return run_bertkit(words[1:], monkeypatch)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout + done.stderr


def same_output(expected: str, found: str) -> bool:
    clean = lambda text: [line.rstrip() for line in text.strip("\n").splitlines()]  # noqa: E731
    return clean(expected) == clean(found)


def run_console(block: Block, monkeypatch) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
    assert commands, f"{block.where}: a console block with no `$ ` command"
    for command, expected_lines in commands:
        status, found = run_command(command, monkeypatch)
        expected = "\n".join(expected_lines)
        assert status == 0 or expected.lstrip().startswith("error:"), (
            f"{block.where}: `{command}` exited {status}:\n{found}"
        )
        assert same_output(expected, found), (
            f"{block.where}: `{command}` printed something else.\n--- the page says:\n{expected}\n"
            f"--- it printed:\n{found}"
        )


def run_bash(block: Block, monkeypatch) -> None:
    lines = [line for line in block.body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for command in _join_continuations(lines):
        status, found = run_command(command, monkeypatch)
        assert status == 0, f"{block.where}: `{command}` exited {status}:\n{found[-3000:]}"


def _join_continuations(lines: list[str]) -> list[str]:
    commands: list[str] = []
    pending = ""
    for line in lines:
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            commands.append(pending)
            pending = ""
    return commands


def run_python(block: Block, namespace: dict) -> None:
    code = compile(block.body, block.where, "exec")
    exec(code, namespace)  # noqa: S102 - the docs' own examples


def run_pycon(block: Block, namespace: dict) -> None:
    test = doctest.DocTestParser().get_doctest(block.body, namespace, block.where, str(block.page), block.line)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    runner.run(test, out=report.write, clear_globs=False)
    namespace.update(test.globs)  # a DocTest runs in a copy of the namespace it is given
    assert runner.failures == 0, f"{block.where}:\n{report.getvalue()}"


def run_page(page: Path, monkeypatch, mark: str | None) -> None:
    """Run the page's blocks of set `mark` and of the smaller sets, top to bottom, in one namespace."""
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks(page):
        if SETS.index(block.mark) > SETS.index(mark):
            continue
        if block.lang == "pycon":
            run_pycon(block, namespace)
        elif block.lang == "python":
            run_python(block, namespace)
        elif block.lang == "console":
            run_console(block, monkeypatch)
        else:
            run_bash(block, monkeypatch)


def needs_shared_data(page: Path, mark: str | None) -> bool:
    return any("../shared/data" in b.body for b in blocks(page) if SETS.index(b.mark) <= SETS.index(mark))


@pytest.mark.parametrize("page", QUICK, ids=page_id)
def test_the_quick_examples_of_each_page_run_and_print_what_the_page_says(page, checkout, monkeypatch):
    if needs_shared_data(page, None):
        from conftest import shared_file

        shared_file("sst2", "train.tsv")
    run_page(page, monkeypatch, None)


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW, ids=page_id)
def test_the_slow_examples_of_each_page_run(page, checkout, monkeypatch):
    if needs_shared_data(page, "slow"):
        from conftest import shared_file

        shared_file("sst2", "train.tsv")
        shared_file("conll2003", "train.txt")
    run_page(page, monkeypatch, "slow")


@pytest.mark.slow
@pytest.mark.skipif(not LONG_TESTS, reason="real-data trainings at full size: BERTKIT_LONG_TESTS=1 runs them")
@pytest.mark.parametrize("page", LONG, ids=page_id)
def test_the_long_examples_of_each_page_run(page, checkout, monkeypatch):
    from conftest import shared_file

    shared_file("sst2", "train.tsv")
    shared_file("conll2003", "train.txt")
    run_page(page, monkeypatch, "long")


def test_the_collector_finds_the_examples_and_their_marks():
    every = [b for page in PAGES for b in blocks(page)]
    assert {b.lang for b in every} == set(RUNNABLE)
    assert len(every) > 60 and {b.mark for b in every} == set(SETS)
    skipped = FENCE.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert any(mark == "skip" for mark, _, _ in skipped)  # the set-up commands are shown, not re-run inside a test


def test_ci_runs_exactly_the_readmes_test_command_and_the_install_page_shows_the_same():
    """`.ci/run` ends in the README's second command (the whole suite in two workers), and install.md shows it too."""
    ci_last = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [body.strip() for mark, lang, body in FENCE.findall(readme) if lang == "bash" and "pytest" in body]
    assert commands == [ci_last] and "-n 2 --dist loadfile" in ci_last
    assert ci_last in (ROOT / "docs" / "getting-started" / "install.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    """mkdocs build --strict: a broken link or anchor, a missing API object or a docstring warning fails it."""
    pytest.importorskip("mkdocs")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    import bertkit

    missing = [name for name in bertkit.__all__ if f'id="bertkit.{name}"' not in api]
    assert not missing, f"public names without a reference entry: {missing}"
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    from bertkit.cli import click_command

    assert all(f"bertkit {name}" in cli for name in click_command.commands), "a command missing from the CLI reference"
    http = (tmp_path / "site" / "reference" / "http" / "index.html").read_text(encoding="utf-8")
    from bertkit.serve.app import create_app

    document = create_app().openapi()
    routes = [f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item]
    assert routes and all(route in http for route in routes), "an operation missing from the HTTP reference"
