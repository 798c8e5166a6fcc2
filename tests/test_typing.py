"""The public API type-checks: mypy passes on every module that defines a name `bertkit` exports (py.typed ships)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bertkit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "bertkit"
MYPY = shutil.which("mypy", path=str(Path(sys.executable).parent)) or shutil.which("mypy")


def public_modules() -> list[Path]:
    """`__init__.py`, `errors.py` and the module behind each lazily imported public name."""
    files = {PACKAGE / "__init__.py", PACKAGE / "errors.py"}
    for dotted in set(bertkit._LAZY.values()):
        module = PACKAGE.joinpath(*dotted.split("."))
        files.add(module / "__init__.py" if module.is_dir() else module.with_suffix(".py"))
    return sorted(files)


def test_py_typed_ships_with_the_package():
    assert (PACKAGE / "py.typed").is_file()
    assert set(bertkit.__all__) >= set(bertkit._LAZY)


@pytest.mark.slow
@pytest.mark.skipif(MYPY is None, reason="mypy is part of the test extra: pip install -e '.[test]'")
def test_mypy_passes_on_the_public_api(tmp_path):
    files = public_modules()
    assert len(files) >= 10 and all(f.is_file() for f in files)
    command = [
        MYPY,
        "--ignore-missing-imports",
        "--follow-imports=silent",
        "--cache-dir",
        str(tmp_path),
        *map(str, files),
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
