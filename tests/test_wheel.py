"""A real package: `python -m build` makes an sdist and a wheel, and the wheel, installed into a fresh virtual
environment after the pinned CPU torch, runs from outside the checkout with everything it needs inside it (the
explainer's static files, the calibration sentences, the samples, py.typed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from test_notebooks import install_cell

ROOT = Path(__file__).resolve().parents[1]
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
PACKAGED = [
    "bertkit/py.typed",
    "bertkit/samples/calibration.txt",
    "bertkit/samples/reviews.tsv",
    "bertkit/explain/static/page.html",
    "bertkit/explain/static/page.js",
    "bertkit/explain/static/page.css",
]


def run(command: list[str], cwd: Path, timeout: int = 900) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """sdist and wheel built from a copy of the tree (a build writes egg-info beside the sources)."""
    pytest.importorskip("build", reason="`build` is part of the test extra: pip install -e '.[test]'")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "CHANGELOG.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("dist")
    run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out), str(source)],
        source,
    )
    return out


@pytest.mark.slow
def test_the_wheel_and_sdist_hold_the_package_data(dist):
    wheel = dist / f"bertkit-{VERSION}-py3-none-any.whl"
    sdist = dist / f"bertkit-{VERSION}.tar.gz"
    assert wheel.is_file() and sdist.is_file(), sorted(p.name for p in dist.iterdir())
    names = set(zipfile.ZipFile(wheel).namelist())
    assert [p for p in PACKAGED if p not in names] == []
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "src/bertkit/__init__.py", "src/bertkit/samples/reviews.tsv"} <= members


def share_dependencies(venv: Path, folder: Path) -> None:
    """Put the suite's own third-party packages, and not its editable bertkit, on `venv`'s path.

    Installing torch and the rest a second time (CI's set-up has just installed them) took three minutes of the suite;
    what this test checks is the wheel: its files, its data, its entry points, outside the checkout. CI's set-up from
    the README installs the declared dependencies fresh every run.
    """
    import torch

    site = Path(torch.__file__).resolve().parents[1]
    folder.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(("bertkit", "__editable__")) and entry.suffix != ".pth":
            (folder / entry.name).symlink_to(entry)
    (next(venv.glob("lib/python*/site-packages")) / "suite-packages.pth").write_text(f"{folder}\n")


@pytest.mark.slow
def test_the_wheel_installs_and_runs_outside_the_checkout(dist, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    share_dependencies(venv, tmp_path / "suite-packages")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "bertkit").mkdir(parents=True)  # a folder named like the package must not pass for it
    # the notebooks' install cell, as a fresh kernel outside the checkout runs it: the CPU torch first, then the wheel
    # with the notebooks' extra (BERTKIT_SOURCE names it: bertkit is not on PyPI)
    cell = install_cell()
    environment = {**os.environ, "BERTKIT_SOURCE": str(dist / f"bertkit-{VERSION}-py3-none-any.whl")}
    installing = subprocess.run(
        [str(venv / "bin" / "python"), "-c", cell], cwd=elsewhere, env=environment, capture_output=True, text=True
    )
    assert installing.returncode == 0, installing.stderr[-3000:]
    assert "torch==2.13.0" in cell and run([*pip[:3], "show", "torch"], tmp_path).count("Version: 2.13.0") == 1
    bertkit = str(venv / "bin" / "bertkit")
    assert run([bertkit, "--version"], elsewhere).strip().endswith(VERSION)
    demo = run([bertkit, "demo"], elsewhere)
    assert "[CLS]" in demo and "384" in demo
    check = (  # the notebooks' imports, and the package's own files from the venv
        "import torch, httpx, openai, huggingface_hub, bertkit, pathlib; "
        "from bertkit.io.readers import sample_path; "
        "p = pathlib.Path(bertkit.__file__); "
        "assert str(p).startswith(r'" + str(venv) + "'), p; "
        "assert (p.parent / 'py.typed').is_file(); "
        "assert len(sample_path('reviews.tsv').read_text().splitlines()) == 81; "
        "print(bertkit.__version__, bertkit.Encoder.from_pretrained().embed(['I love Korea']).shape)"
    )
    assert run([str(venv / "bin" / "python"), "-c", check], elsewhere).split() == [VERSION, "(1,", "384)"]
    run([bertkit, "explain", "I love Korea", "-o", "page.html"], elsewhere)  # the page is built from static files
    page = (elsewhere / "page.html").read_text(encoding="utf-8")
    assert "I love Korea" in page and "<script" in page
