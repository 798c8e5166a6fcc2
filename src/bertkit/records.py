"""The one record every file bertkit writes carries: who wrote it, what it is, and the one format version.

A run's `bertkit.json`, a vectors file's metadata, the index, the cache, Ray's manifest, a checkpoint's progress and
an int8 calibration all start from `new_record(kind)` and are read back through `check_record`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .errors import InputError

FORMAT_VERSION = 1  # the layout of every bertkit record; a reader refuses a newer one


def package_version(package: str = "bertkit") -> str:
    """Return the installed version of `package` (bertkit by default), or "unknown" when it is not installed."""
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def new_record(kind: str, **fields: Any) -> dict[str, Any]:
    """Return a record of `kind` holding `fields`, stamped with bertkit's version and the format version.

    Examples
    --------
    >>> new_record("vectors", rows=2)["bertkit"]["kind"]
    'vectors'
    """
    stamp = dict(kind=kind, format_version=FORMAT_VERSION, version=package_version())
    return {**fields, "bertkit": stamp}  # last: a record made from another one's fields is of its own kind


def record_kind(record: object) -> str | None:
    """Return the kind of a bertkit record, or None when `record` is not one."""
    stamp = record.get("bertkit") if isinstance(record, Mapping) else None
    return stamp.get("kind") if isinstance(stamp, Mapping) else None


def check_record(record: object, kinds: str | tuple[str, ...], where: object) -> dict[str, Any]:
    """Return `record` if it is a bertkit record of one of `kinds` in a format this bertkit reads; else refuse.

    Parameters
    ----------
    record : object
        What was read (a JSON object).
    kinds : str or tuple of str
        The kinds the caller reads.
    where : object
        The file, named in the message.
    """
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    kind = record_kind(record)
    if kind is None:
        raise InputError(f"{where}: not a file bertkit wrote (it has no bertkit record); give one bertkit made.")
    if kind not in kinds:
        raise InputError(f"{where}: holds a {kind}, not a {' or '.join(kinds)}.")
    stamp = record["bertkit"]  # type: ignore[index]
    written = stamp.get("format_version", 0)
    if written > FORMAT_VERSION:
        raise InputError(f"{where}: written by a newer bertkit ({stamp.get('version')}); upgrade bertkit to read it.")
    if written != FORMAT_VERSION:
        raise InputError(
            f"{where}: written by bertkit {stamp.get('version')}, whose format this one does not read; "
            "make it again with this version."
        )
    return dict(record)  # type: ignore[arg-type]


def read_record(
    path: str | Path, kinds: str | tuple[str, ...], remedy: str, error: type[Exception] = InputError
) -> dict[str, Any]:
    """Read the JSON record file at `path` through `check_record`: bertkit's one reader of its record files.

    A file that is not JSON, or not a record of `kinds`, is one line (`error`, saying `remedy` for broken JSON).
    """
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise error(f"{path}: not valid JSON ({exc}); {remedy}.") from None
    try:
        return check_record(record, kinds, path)
    except InputError as exc:
        raise (exc if error is InputError else error(str(exc))) from None


RUN_FILE = "bertkit.json"  # a run's record: what it is, how it was made
PROBE_FILE = "probe.json"  # what `bertkit probe` writes (scores by layer and pooling)
MANIFEST_FILE = "manifest.json"  # a Ray embedding job's finished folder: its options and each file's rows
CALIBRATION_FILE = "int8_calibration.safetensors"  # a model or run directory's own int8 calibration
FOLDER_RECORDS = (RUN_FILE, PROBE_FILE, MANIFEST_FILE, CALIBRATION_FILE)  # the files that carry a folder's record


def is_bertkit_folder(folder: str | Path) -> bool:
    """Tell whether bertkit wrote `folder`: one of its `FOLDER_RECORDS` holds a bertkit record."""
    for name in FOLDER_RECORDS:
        path = Path(folder) / name
        try:
            if name.endswith(".safetensors"):  # the record is in the header's metadata: read the header only
                with path.open("rb") as handle:
                    (size,) = struct.unpack("<Q", handle.read(8))
                    header = json.loads(handle.read(min(size, 1 << 24)))
                record = json.loads(header.get("__metadata__", {}).get("bertkit", "null"))
            else:
                record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, struct.error, AttributeError):
            continue
        if record_kind(record) is not None:
            return True
    return False
