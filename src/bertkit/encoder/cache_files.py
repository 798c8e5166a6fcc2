"""Files bertkit keeps in its own cache (int8 calibrations, exported graphs): written complete or not at all."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path


@contextlib.contextmanager
def cache_files(folder: Path, names: Sequence[str]) -> Iterator[Path]:
    """Yield a scratch folder in `folder`; once the block succeeds, its files `names` replace those of `folder`.

    They are moved in the order given (the last one marks the set complete); the scratch folder goes either way.
    The cache's writer: user-facing outputs go through `io.writers` (this wing does not import `io/`).
    """
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=folder, prefix=".partial-"))
    try:
        yield scratch
        for name in names:
            os.replace(scratch / name, folder / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
