"""The run directory, one format for every kind of run: `bertkit.json` (what it is, how it was made) beside its weights.

Feature classifiers store `classifier.safetensors`; fine-tuned runs are a transformers model directory. Everything is
written into a staging directory and swapped into place, so a run is complete or absent, never half-written.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from ..errors import InputError, ModelLoadError
from ..io.writers import check_new_directory, staged_directory

CONFIG_FILE = "bertkit.json"
KIND_FEATURES = "features"
KIND_TEXT = "finetuned-text"
KIND_TOKEN = "finetuned-token"
KINDS = (KIND_FEATURES, KIND_TEXT, KIND_TOKEN)


def write_run_directory(directory: str | Path, files: dict[str, str | bytes], overwrite: bool) -> Path:
    """Write `files` (name → text or bytes) as one new directory, complete or absent."""
    target = check_new_directory(directory, overwrite)
    with staged_directory(target) as staging:
        for name, content in files.items():
            if isinstance(content, bytes):
                (staging / name).write_bytes(content)
            else:
                (staging / name).write_text(content, encoding="utf-8")
    return target


def read_run_config(directory: str | Path, expected_kind: str | None = None) -> dict:
    """The run's `bertkit.json`; a missing or broken file, or another kind than expected, is a clear error."""
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise ModelLoadError(
            f"{directory} is not a bertkit run directory (no {CONFIG_FILE}); give the -o directory of `bertkit "
            "train` or `bertkit finetune`."
        )
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelLoadError(f"{path}: not valid JSON ({exc}); the run is damaged, train it again.") from None
    if expected_kind and record.get("kind") != expected_kind:
        raise ModelLoadError(f"{directory} holds a {record.get('kind')!r} model, not a {expected_kind!r} one.")
    return record


def package_version(package: str) -> str:
    """The installed version of `package`, recorded in every run ("unknown" when not installed as a package)."""
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def to_json_value(value):
    """`json.dumps(default=...)` for numpy scalars in run records."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in JSON")


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def parse_run_specs(specs: list[str]) -> dict[str, Path]:
    """The repeatable `--run [NAME=]DIR` of serve and explain → {name: directory}; a bare DIR is named after its folder.

    The name becomes `/predict/NAME` and the page's label, so it may hold letters, digits, '_', '.' and '-'.
    """
    runs: dict[str, Path] = {}
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if not sep or Path(spec).exists():
            name, directory = Path(spec).name, spec
        if not name or not directory:
            raise InputError(f"--run {spec!r}: give DIR or NAME=DIR, e.g. --run runs/sst2 or --run sst2=runs/sst2.")
        if not RUN_NAME.fullmatch(name):
            raise InputError(
                f"--run {spec!r}: the name {name!r} may hold letters, digits, '_', '.', '-' only; "
                "give one with NAME=DIR."
            )
        if name in runs:
            raise InputError(f"--run {spec!r}: the name {name!r} is given twice; name them: --run a=DIR --run b=DIR.")
        runs[name] = Path(directory)
    return runs
