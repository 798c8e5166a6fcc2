"""Run the notebooks top to bottom in a fresh kernel and store their outputs (what the docs site shows).

    python docs/notebooks/execute.py                      # every notebook, at its default size
    python docs/notebooks/execute.py visual-guide.ipynb   # one

The environment reaches the kernel: BERTKIT_NOTEBOOK_LIMIT, BERTKIT_NOTEBOOK_EPOCHS and BERTKIT_DATA set the size
and the data, as in tests/test_notebooks.py (which runs them smaller and stores nothing).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent


def execute(path: Path) -> float:
    book = nbformat.read(path, as_version=4)
    started = time.perf_counter()
    NotebookClient(book, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    nbformat.write(book, path)
    return time.perf_counter() - started


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(p.name for p in HERE.glob("*.ipynb"))
    for name in names:
        print(f"{name}: {execute(HERE / name):.0f} s", flush=True)
