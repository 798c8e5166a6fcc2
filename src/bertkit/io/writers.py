"""Writers that replace their target atomically, with the modes of the caller's umask (a replaced file keeps its own).

`--overwrite` only ever replaces a folder that bertkit wrote, or an empty one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

from ..errors import InputError, add_note

VECTOR_FORMATS = (".npy", ".npz", ".parquet")
# A run record, an unfinished fine-tuning run's record or checkpoint, or a `bertkit quantize` calibration.
BERTKIT_MARKERS = (
    "bertkit.json",
    "bertkit-run.json",
    "optimizer.safetensors",
    "checkpoint/optimizer.safetensors",
    ".checkpoint.old/optimizer.safetensors",
    "int8_calibration.safetensors",
)
MARKED_RECORDS = ("probe.json",)  # bertkit's only when they say so (a `bertkit probe` output)


def caller_umask() -> int:
    """Read the process umask without changing it where the OS allows (Linux), else by setting and restoring it."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_like_open(target: Path, directory: bool) -> int:
    if target.exists() and target.is_dir() == directory:
        return target.stat().st_mode & 0o7777
    return (0o777 if directory else 0o666) & ~caller_umask()


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `target`; on success it is renamed onto `target`, on failure removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temporaries(target)
    handle, name = tempfile.mkstemp(prefix=_temporary_prefix(target), suffix=".tmp", dir=target.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        os.chmod(temporary, _mode_like_open(target, directory=False))
        os.replace(temporary, target)
    except OSError as exc:
        add_note(exc, "nothing partial was kept")
        raise
    finally:
        if temporary.exists():
            temporary.unlink()


@contextlib.contextmanager
def staged_directory(target: str | Path) -> Iterator[Path]:
    """Yield an empty directory beside `target`; on success it replaces `target` whole, on failure it is removed.

    `target` must be absent, empty or written by bertkit (`check_new_directory`). The previous version is set aside
    under a name of this process's own (`.NAME.PID.XXXX.old`), so no folder that was there before is removed; a crash
    between the two renames leaves it there, and `recover_interrupted_replace` puts it back.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temporaries(target)
    staging = Path(tempfile.mkdtemp(prefix=_temporary_prefix(target), suffix=".tmp", dir=target.parent))
    old: Path | None = None
    try:
        yield staging
        modes_like_open(staging)
        os.chmod(staging, _mode_like_open(target, directory=True))
        if target.exists():
            _check_replaceable(target)
            old = Path(tempfile.mkdtemp(prefix=_temporary_prefix(target), suffix=".old", dir=target.parent))
            _SETTING_ASIDE.add(old)
            old.rmdir()  # the name is this process's; the folder itself is the previous version, renamed
            target.rename(old)
        staging.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _SETTING_ASIDE.discard(old)


def modes_like_open(folder: Path) -> None:
    """Give what a library wrote into `folder` the modes of the caller's umask (safetensors writes files 0600)."""
    files, folders = 0o666 & ~caller_umask(), 0o777 & ~caller_umask()
    for root, directories, names in os.walk(folder):
        for name in directories:
            os.chmod(Path(root) / name, folders)
        for name in names:
            os.chmod(Path(root) / name, files)


def _temporary_prefix(target: Path) -> str:
    return f".{target.name}.{os.getpid()}."


_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[A-Za-z0-9_]+\.tmp")
_SET_ASIDE = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[a-z0-9_]{8}\.old")  # mkdtemp's eight characters
_SETTING_ASIDE: set[Path] = set()  # the previous versions this process is replacing right now


def is_temporary(name: str) -> bool:
    """Tell whether a file name is one of `atomic_path`'s or `staged_directory`'s temporaries."""
    return bool(_TEMPORARY.fullmatch(name))


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but belongs to someone else
        return True
    return True


_SWEPT: set[Path] = set()  # targets already swept by this process (a progress record is replaced after every chunk)


def sweep_stale_temporaries(target: Path) -> None:
    """Remove, once per process, the temporaries that a killed bertkit process left beside `target` (PID in name)."""
    if target in _SWEPT:
        return
    _SWEPT.add(target)
    with contextlib.suppress(OSError):
        for entry in target.parent.iterdir():
            match = _TEMPORARY.fullmatch(entry.name)
            if match and match["name"] == target.name and not _process_alive(int(match["pid"])):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
    if target.is_dir():  # the new version is in place: what a killed process set aside can go, whole or cut short
        for previous in _set_aside(target, whole=False):
            shutil.rmtree(previous, ignore_errors=True)


def _set_aside(target: Path, whole: bool = True) -> list[Path]:
    """Find the previous versions of `target` a killed `staged_directory` set aside (`whole`: a run still; newest last).

    One named with this process's own PID (a restarted container's process often has its predecessor's) is stale
    unless this process is replacing it now.
    """
    found: list[tuple[float, Path]] = []
    with contextlib.suppress(OSError):
        for entry in target.parent.iterdir():
            match = _SET_ASIDE.fullmatch(entry.name)
            if not match or match["name"] != target.name or entry in _SETTING_ASIDE:
                continue
            pid = int(match["pid"])
            if (pid == os.getpid() or not _process_alive(pid)) and (not whole or written_by_bertkit(entry)):
                found.append((entry.stat().st_mtime, entry))
    return [entry for _, entry in sorted(found)]


def written_by_bertkit(path: str | Path) -> bool:
    """Tell whether `path` is a folder that holds a bertkit run record, checkpoint, int8 calibration or probe."""
    path = Path(path)
    return path.is_dir() and (
        any((path / marker).is_file() for marker in BERTKIT_MARKERS)
        or any(written_by_bertkit_file(path / record) for record in MARKED_RECORDS)
    )


def _check_replaceable(path: Path) -> None:
    if not path.is_dir():
        raise InputError(
            f"{path} is a file, not a folder bertkit wrote; choose another -o directory (nothing was touched)."
        )
    if any(not is_temporary(entry.name) for entry in path.iterdir()) and not written_by_bertkit(path):
        raise InputError(
            f"{path} is not a folder bertkit wrote (no bertkit.json or checkpoint in it), so --overwrite "
            "will not replace it and nothing in it was touched; choose another -o directory."
        )


def recover_interrupted_replace(path: str | Path) -> None:
    """Put back the previous version that a process killed between `staged_directory`'s two renames set aside."""
    path = Path(path)
    previous = [] if path.exists() else _set_aside(path)
    if previous:
        previous[-1].rename(path)


def check_new_directory(path: str | Path, overwrite: bool) -> Path:
    """Check an output directory: it must not exist yet, or with --overwrite be an empty folder or one bertkit wrote."""
    path = Path(path)
    recover_interrupted_replace(path)
    if path.exists():
        _check_replaceable(path)  # what --overwrite may not replace is refused first, without offering it
    if path.exists() and not overwrite:
        raise InputError(f"{path} already exists; choose another -o directory or pass --overwrite.")
    return path


def remove_bertkit_directory(path: str | Path) -> None:
    """Delete a folder that `check_new_directory` allowed to be replaced (checked again here)."""
    path = Path(path)
    if path.exists():
        _check_replaceable(path)
        shutil.rmtree(path)


def check_output_path(path: str | Path, overwrite: bool = False) -> Path:
    """Refuse an unknown extension, .parquet without pyarrow, or a file bertkit did not write, before any work."""
    path = Path(path)
    if path.suffix.lower() not in VECTOR_FORMATS:
        raise InputError(f"output {path}: use one of {', '.join(VECTOR_FORMATS)}.")
    if path.suffix.lower() == ".parquet":
        require_pyarrow()
    check_writable_location(path)
    return check_output_file(path, overwrite)


GENERATOR = "bertkit"  # what bertkit's files say made them: .npz `meta`, .parquet metadata, HTML <meta name=generator>


def check_output_file(path: str | Path, overwrite: bool = False) -> Path:
    """Check an output file: it may replace only a file bertkit recognises as its own, or any file with `overwrite`.

    Parameters
    ----------
    path : str or Path
        The file about to be written.
    overwrite : bool
        The caller's `--overwrite`: replace whatever is there.

    Returns
    -------
    Path
        `path`.
    """
    path = Path(path)
    if path.exists() and not path.is_dir() and not overwrite and not written_by_bertkit_file(path):
        raise InputError(
            f"{path} already exists and bertkit did not write it (or cannot tell that it did); nothing was touched. "
            "Choose another output, or pass --overwrite to replace it."
        )
    return path


def written_by_bertkit_file(path: str | Path) -> bool:
    """Tell whether bertkit wrote `path`: a vectors file, an explainer page or a predictions/ranking TSV.

    A plain .npy carries no mark and is never taken for bertkit's.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    with contextlib.suppress(Exception):  # a damaged or foreign file is simply not bertkit's
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                return "meta" in archive.files and GENERATOR in json.loads(str(archive["meta"]))
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return GENERATOR.encode() in (pq.read_schema(path).metadata or {})
        if suffix in _HEAD_MARKS:  # a figure's PNG tEXt chunk "Software" = "bertkit", a page's <meta> generator
            with path.open("rb") as handle:
                return _HEAD_MARKS[suffix] in handle.read(4096)
        if suffix == ".json":
            with path.open("rb") as handle:
                record = json.loads(handle.read(1 << 20))
                return isinstance(record, dict) and GENERATOR in record
        with path.open("rb") as handle:  # a table bertkit wrote starts with one of its own header rows
            return handle.readline(4096).rstrip(b"\r\n").decode() in TABLE_HEADERS
    return False


_HTML_MARK = f'<meta name="generator" content="{GENERATOR}'.encode()
_HEAD_MARKS = {".png": b"Software\x00" + GENERATOR.encode(), ".html": _HTML_MARK, ".htm": _HTML_MARK}

# The header rows of the TSVs bertkit writes (predict, rerank): a file that starts with one of them is bertkit's.
# Regression and multi-label predictions ("score\ttext", "labels\ttext") are left out: users' training files for those
# tasks start with the same rows, so bertkit cannot tell its own from them and asks for --overwrite.
TABLE_HEADERS = {
    "\t".join(columns)
    for columns in (
        ("row", "type", "start", "end", "score", "entity"),
        ("label", "probability", "text"),
        ("label", "probability", "text", "pair"),
        ("rank", "line", "score", "document"),
        ("rank", "index", "score", "document"),
    )
}


def check_writable_location(path: str | Path) -> Path:
    """Refuse an output path that is a directory, or whose folder is a file or cannot be written, before any work."""
    path = Path(path)
    if path.is_dir():
        raise InputError(
            f"output {path} is a directory; give a file name inside it, e.g. "
            f"{path / ('vectors' + (path.suffix or '.npy'))}."
        )
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(f"output {path}: {folder} is a file, not a directory; choose another output path.")
    if _read_only(folder):
        raise InputError(
            f"output {path}: {folder} is on a read-only file system; choose a folder you can write to "
            "(anything already written there is kept)."
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(
            f"output {path}: cannot write in {folder} (permission denied); choose a folder you can write to."
        )
    return path


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def require_pyarrow() -> tuple[ModuleType, ModuleType]:
    """Import pyarrow and pyarrow.parquet, or refuse in one line that says how to install them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise InputError(
            "writing .parquet needs pyarrow: `pip install 'bertkit[parquet]'`, or write .npy/.npz."
        ) from None
    return pyarrow, pyarrow.parquet


def write_token_vectors(
    path: str | Path,
    tokens: list[list[str]],
    vectors: list[np.ndarray],
    ids: Sequence,
    meta: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the token vectors of many texts in one .npz: `vectors` stacked, `offsets`, `tokens`, `ids`, `meta`."""
    path = Path(path)
    if path.suffix.lower() != ".npz":
        raise InputError(f"output {path}: token vectors (pooling='none') are written as .npz.")
    check_output_file(path, overwrite)
    offsets = np.cumsum([0] + [len(v) for v in vectors])
    stacked = np.concatenate(vectors) if vectors else np.zeros((0, 0), np.float32)
    flat_tokens = np.array([t for row in tokens for t in row], dtype=str)
    with atomic_path(path) as temporary, temporary.open("wb") as handle:
        record = json.dumps({GENERATOR: package_version(), "kind": "token vectors", **(meta or {})})
        np.savez(handle, vectors=stacked, offsets=offsets, tokens=flat_tokens, ids=np.asarray(list(ids)), meta=record)
    return path


def package_version(package: str = "bertkit") -> str:
    """Return the installed version of `package` (bertkit by default), or "unknown" when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"
