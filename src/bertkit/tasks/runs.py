"""The run directory, one format for every kind of run: `bertkit.json` (what it is, how it was made) beside its weights.

Written into a staging directory and swapped into place, so a run is complete or absent, never half-written.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Union

from ..errors import InputError, ModelLoadError, no_such_path, quoted
from ..io.writers import check_output, json_value, staged_directory
from ..records import PROBE_FILE, RUN_FILE, read_record

CONFIG_FILE, PROBE_FILE = RUN_FILE, PROBE_FILE  # a run's record; a probe's scores, shown by the explainer
KIND_FEATURES = "features"
KIND_TEXT = "finetuned-text"
KIND_TOKEN = "finetuned-token"
KIND_QA = "finetuned-qa"
KINDS = (KIND_FEATURES, KIND_TEXT, KIND_TOKEN, KIND_QA)
RunFile = Union[str, bytes, dict, Path, Callable[[Path], None]]  # what `write_run` writes under a name


def write_run(
    directory: str | Path,
    files: Mapping[str, RunFile],
    *,
    overwrite: bool = False,
    weights: tuple[Any, Any] | None = None,
    checked: bool = False,
) -> Path:
    """Write a run folder complete or not at all: the one writer of every run (train, finetune, quantize, probe).

    `files` maps a name to its content: text, bytes, a record (a dict, written as JSON), a file or folder to copy
    (a Path), or a function that writes the file at the path it is given. `weights` is a (model, tokenizer) pair,
    saved as transformers saves them (safetensors). `checked`: the caller has checked the output already (a
    fine-tuning run checks it before training); otherwise `check_output(directory, overwrite)` does it here.
    """
    from ..encoder.models import quiet_transformers

    target = Path(directory) if checked else check_output(directory, overwrite)
    with staged_directory(target) as staging:
        if weights is not None:
            with quiet_transformers():
                weights[0].save_pretrained(str(staging), safe_serialization=True)
                weights[1].save_pretrained(str(staging))
        for name, content in files.items():
            path = staging / name
            if isinstance(content, bytes):
                path.write_bytes(content)
            elif isinstance(content, str):
                path.write_text(content, encoding="utf-8")
            elif isinstance(content, dict):
                path.write_text(json.dumps(content, indent=2, default=json_value), encoding="utf-8")
            elif isinstance(content, Path):
                (shutil.copytree if content.is_dir() else shutil.copy2)(content, path)
            else:
                content(path)
    return target


def read_run_config(directory: str | Path, expected_kind: str | None = None) -> dict:
    """Read a run's `bertkit.json`: a missing or broken one, or another kind than expected, is a clear error.

    The record's kind is the run's (`KINDS`); `expected_kind` None takes any of them.
    """
    path = Path(directory) / CONFIG_FILE
    if not Path(directory).exists():
        raise no_such_path(directory)
    if not path.is_file():
        raise ModelLoadError(
            f"{directory} is not a bertkit run directory (no {CONFIG_FILE}); give the -o directory of `bertkit "
            "train` or `bertkit finetune`."
        )
    return read_record(path, expected_kind or KINDS, "the run is damaged, train it again", ModelLoadError)


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def parse_run_specs(specs: list[str], flag: str = "--run") -> dict[str, Path]:
    """Read the repeatable `--run [NAME=]DIR` of serve and explain → {name: directory}; a bare DIR: its folder's name.

    The name becomes `/predict/NAME` and the page's label, so it may hold letters, digits, '_', '.' and '-'. With
    `flag="--index"` (serve's `--index [NAME=]FILE`) a bare file is named after its file name without its suffix.
    """
    runs: dict[str, Path] = {}
    what = "FILE" if flag == "--index" else "DIR"
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if not sep or Path(spec).exists():
            name, directory = (Path(spec).stem if flag == "--index" else Path(spec).name), spec
        if not name or not directory:
            raise InputError(f"{flag} {quoted(spec)}: give {what} or NAME={what}, e.g. {flag} NAME={what.lower()}.")
        if not RUN_NAME.fullmatch(name):
            raise InputError(
                f"{flag} {quoted(spec)}: the name {quoted(name)} may hold letters, digits, '_', '.', '-' only; "
                f"give one with NAME={what}."
            )
        if name in runs:
            raise InputError(
                f"{flag} {quoted(spec)}: the name {quoted(name)} is given twice; name them: {flag} a={what} "
                f"{flag} b={what}."
            )
        runs[name] = Path(directory)
    return runs


def check_run_or_probe(directory: Path) -> Path:
    """Check a `--run` directory of serve or explain: a run (bertkit.json) or a `bertkit probe` output (probe.json)."""
    directory = Path(directory)
    if not directory.exists():
        raise no_such_path(directory)
    if not (directory / CONFIG_FILE).is_file() and not (directory / PROBE_FILE).is_file():
        raise InputError(
            f"{directory} is neither a bertkit run ({CONFIG_FILE}) nor a probe ({PROBE_FILE}); give the -o directory "
            "of `bertkit train`, `bertkit finetune` or `bertkit probe`."
        )
    return directory
