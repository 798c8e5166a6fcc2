"""The run directory, one format for every kind of run: `bertkit.json` (what it is, how it was made) beside its weights.

Written into a staging directory and swapped into place, so a run is complete or absent, never half-written.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import InputError, ModelLoadError, no_such_path, quoted
from ..io.writers import check_output, staged_directory
from ..records import PROBE_FILE, RUN_FILE, read_record

CONFIG_FILE, PROBE_FILE = RUN_FILE, PROBE_FILE  # a run's record; a probe's scores, shown by the explainer
KIND_FEATURES = "features"
KIND_TEXT = "finetuned-text"
KIND_TOKEN = "finetuned-token"
KIND_QA = "finetuned-qa"
KINDS = (KIND_FEATURES, KIND_TEXT, KIND_TOKEN, KIND_QA)


def write_run_directory(directory: str | Path, files: dict[str, str | bytes], overwrite: bool) -> Path:
    """Write `files` (name → text or bytes) as one new directory, complete or absent (`overwrite`: replacing one)."""
    target = check_output(directory, overwrite)
    with staged_directory(target) as staging:
        for name, content in files.items():
            if isinstance(content, bytes):
                (staging / name).write_bytes(content)
            else:
                (staging / name).write_text(content, encoding="utf-8")
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
