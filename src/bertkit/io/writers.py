"""The one way bertkit writes: an output path checked once, then replaced atomically with the caller's umask.

An existing file or folder at an output path is replaced only with `--overwrite` (`check_output`), whoever wrote it.
A job's unfinished state is a record beside its output (`read_job` / `save_job`), so the same command resumes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import InputError, add_note
from ..records import is_bertkit_folder, new_record, read_record

VECTOR_FORMATS = (".npy", ".npz", ".parquet")


def check_output(path: str | Path, overwrite: bool = False, inputs: Iterable[str | Path | None] = ()) -> Path:
    """Refuse an output that touches an input, or holds what `overwrite` may not replace: the one output check.

    An output is never one of the `inputs`, a folder holding one, or inside an input folder, even with `overwrite`.
    Anything at `path` is refused unless `overwrite`; a non-empty folder is replaced only when bertkit wrote it (it
    holds a bertkit record, `records.is_bertkit_folder`), never a folder of the user's own files.

    Parameters
    ----------
    path : str or Path
        The file or folder about to be written.
    overwrite : bool
        The caller's `--overwrite`: replace what bertkit wrote there before.
    inputs : iterable of str, Path or None
        The files and folders the command reads (a local model's folder too; None and names that are no path are
        skipped).

    Returns
    -------
    Path
        `path`.
    """
    path = Path(path)
    for given in filter(None, inputs):
        clash = _input_clash(path, Path(given))
        if clash:
            raise InputError(f"-o {path} {clash}; choose another output (nothing was touched).")
    _existing_folder(path)
    if not (path.exists() or path.is_symlink()):
        return path
    if not overwrite:
        raise InputError(
            f"{path} already exists; nothing was touched. Choose another output, or pass --overwrite to replace it."
        )
    if not _empty_folder(path) and path.is_dir() and not path.is_symlink() and not is_bertkit_folder(path):
        raise InputError(
            f"{path} is a folder bertkit did not write (it holds no bertkit record); nothing was touched, and "
            "--overwrite replaces only bertkit's own outputs: give a new or empty folder."
        )
    return path


def _input_clash(output: Path, given: Path) -> str | None:
    """Say how `output` would touch the input `given`: it is the input, holds it, or lies inside it; else None."""
    if not given.exists():
        return None
    out, read = output.resolve(), given.resolve()
    if out == read or (output.is_file() and given.is_file() and output.samefile(given)):
        return "is also an input"
    if out in read.parents:
        return f"holds the input {given}"
    if read in out.parents and given.is_dir():
        return f"is inside the input folder {given}"
    return None


def _empty_folder(path: Path) -> bool:
    """Tell whether `path` is a real (not linked) folder with nothing in it."""
    return path.is_dir() and not path.is_symlink() and next(path.iterdir(), None) is None


def remove_output(path: str | Path) -> None:
    """Remove what is at an output path that `check_output` let `--overwrite` replace (a job that works in place)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


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


def _replace(source: str | Path, target: str | Path) -> None:
    """Rename `source` onto `target` in one step (the same file system): the one rename bertkit does."""
    os.replace(source, target)


def publish(partial: str | Path, output: str | Path) -> None:
    """Put a job's finished `partial` file at `output` in one step, with the mode a new file there would have."""
    os.chmod(partial, _mode_like_open(Path(output), directory=False))
    _replace(partial, output)


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
        publish(temporary, target)
    except OSError as exc:
        add_note(exc, "nothing partial was kept")
        raise
    finally:
        temporary.unlink(missing_ok=True)


@contextlib.contextmanager
def staged_files(folder: Path, names: Sequence[str]) -> Iterator[Path]:
    """Yield a scratch folder in `folder`; once the block succeeds, its files `names` replace those of `folder`.

    They are moved in the order given (the last one marks the set complete); the scratch folder goes either way.
    The writer of bertkit's own cache (int8 calibrations, exported graphs), which the encoder wing uses at model load.
    """
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=folder, prefix=".partial-"))
    try:
        yield scratch
        for name in names:
            _replace(scratch / name, folder / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def staged_directory(target: str | Path) -> Iterator[Path]:
    """Yield an empty directory beside `target`; once it is written whole, it takes `target`'s place.

    The caller has checked `target` with `check_output`. On failure the staging directory goes and `target` stays;
    an old `target` stays whole until the new one is complete (`replace_folder`).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temporaries(target)
    staging = Path(tempfile.mkdtemp(prefix=_temporary_prefix(target), suffix=".tmp", dir=target.parent))
    try:
        yield staging
        modes_like_open(staging)
        os.chmod(staging, _mode_like_open(target, directory=True))
        replace_folder(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def replace_folder(complete: Path, target: Path) -> None:
    """Put the folder `complete` at `target`; a folder already there is swapped out in one step, then removed.

    Linux swaps the two names atomically (renameat2's RENAME_EXCHANGE): a kill leaves the old folder or the new one
    at `target`, never neither. Elsewhere the old one is renamed aside first and put back by the next sweep
    (`sweep_stale_temporaries`) if the process dies before the new one is in place.
    """
    if not (target.is_dir() and not target.is_symlink()):
        remove_output(target)
        _replace(complete, target)
        return
    if _exchange(complete, target):
        shutil.rmtree(complete)  # now the old folder
        return
    aside = target.with_name(f"{_temporary_prefix(target)}old.tmp")
    _replace(target, aside)
    _replace(complete, target)
    shutil.rmtree(aside)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths' names atomically where the OS can (Linux renameat2); False where it cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_cwd, exchange = -100, 2  # AT_FDCWD, RENAME_EXCHANGE
    if renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), exchange) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # a file system or kernel without it
        return False
    raise OSError(error, os.strerror(error), str(first), None, str(second))


def work_folder(output: str | Path) -> Path:
    """Return the folder a job that writes the folder `output` works in until it is complete: `<output>.partial`."""
    return Path(output).with_name(Path(output).name + ".partial")


def check_job_output(output: str | Path, overwrite: bool, inputs: Iterable[str | Path | None] = ()) -> bool:
    """Check the folder output of a resumable job (`check_output`); return whether an unfinished one is there.

    The job works in `work_folder(output)`, its record beside `output`: an unfinished job may meet the previous
    output at `output` (an interrupted `--overwrite`), which stays there whole until the new one replaces it.
    """
    output = Path(output)
    unfinished = job_path(output).is_file()
    work = work_folder(output)
    if (work.exists() or work.is_symlink()) and not unfinished:
        raise InputError(
            f"{work} is in the way: bertkit writes {output} there until it is complete; move it, or choose another -o."
        )
    check_output(output, overwrite or unfinished, inputs)
    return unfinished


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
_SWEPT: set[Path] = set()  # targets already swept by this process (a progress record is replaced after every chunk)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but belongs to someone else
        return True
    return True


def sweep_stale_temporaries(target: Path) -> None:
    """Remove, once per process, the temporaries that a killed bertkit process left beside `target` (PID in name)."""
    if target in _SWEPT:
        return
    _SWEPT.add(target)
    with contextlib.suppress(OSError):
        for entry in target.parent.iterdir():
            match = _TEMPORARY.fullmatch(entry.name)
            if match and match["name"] == target.name and not _process_alive(int(match["pid"])):
                if entry.name.endswith(".old.tmp") and not (target.exists() or target.is_symlink()):
                    _replace(entry, target)  # a replaced output set aside by a process killed before the new one
                else:
                    remove_output(entry)


def job_path(output: str | Path) -> Path:
    """Return where the unfinished state of the job writing `output` lives: `<output>.job.json`, beside it."""
    return Path(output).with_name(Path(output).name + ".job.json")


def read_job(output: str | Path, job: dict, overwrite: bool = False) -> dict | None:
    """Return the saved state of the unfinished `job` writing `output`, or None when there is none to resume.

    Parameters
    ----------
    output : str or Path
        The job's output.
    job : dict
        What makes the job this job (command, inputs and their digests, options): a record of another job is
        refused, naming what changed, unless `overwrite` (then the job starts over).
    overwrite : bool
        The caller's `--overwrite`.

    Returns
    -------
    dict or None
        The state `save_job` saved last.
    """
    path = job_path(output)
    if not path.is_file() or overwrite:
        return None
    record = read_record(path, "job", "pass --overwrite to start over")
    changed = _changes(record["job"], json.loads(json.dumps(job, default=str)))  # compared as JSON holds it
    if changed:
        said = "; ".join(f"{key} was {then!r}, now {now!r}" for key, then, now in changed[:3])
        raise InputError(
            f"{output}: an unfinished job with other settings is there ({said}); run the same command to resume "
            "it, or pass --overwrite to start over."
        )
    return record["state"]


def _changes(saved: Any, now: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(key, saved value, value now) of each leaf that differs, inside dictionaries too ('args.learning_rate')."""
    if not (isinstance(saved, dict) and isinstance(now, dict)):
        return [] if saved == now else [(prefix.rstrip("."), saved, now)]
    return [
        change
        for key in sorted(set(saved) | set(now))
        for change in _changes(saved.get(key), now.get(key), f"{prefix}{key}.")
    ]


def save_job(output: str | Path, job: dict, state: dict) -> None:
    """Record, atomically, the state of the unfinished `job` writing `output` (what `read_job` returns)."""
    with atomic_path(job_path(output)) as temporary:
        temporary.write_text(json.dumps(new_record("job", job=job, state=state), default=str), encoding="utf-8")


def end_job(output: str | Path) -> None:
    """Remove the record of the job writing `output`: it is finished (or started over)."""
    job_path(output).unlink(missing_ok=True)


def check_output_path(path: str | Path, overwrite: bool = False, inputs: Iterable[str | Path] = ()) -> Path:
    """Check a vectors file before any work: its extension, pyarrow for .parquet, its folder, and `check_output`."""
    path = Path(path)
    if path.suffix.lower() not in VECTOR_FORMATS:
        raise InputError(f"output {path}: use one of {', '.join(VECTOR_FORMATS)}.")
    if path.suffix.lower() == ".parquet":
        require_pyarrow()
    check_writable_location(path)
    return check_output(path, overwrite, inputs)


def check_writable_location(path: str | Path) -> Path:
    """Refuse an output path that is a directory, or whose folder is a file or cannot be written, before any work."""
    path = Path(path)
    if path.is_dir():
        raise InputError(
            f"output {path} is a directory; give a file name inside it, e.g. "
            f"{path / ('vectors' + (path.suffix or '.npy'))}."
        )
    folder = _existing_folder(path)
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


def _existing_folder(path: Path) -> Path:
    """Return the nearest folder above `path` that exists; one that is a file is refused."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(f"output {path}: {folder} is a file, not a directory; choose another output path.")
    return folder


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


def write_json(path: str | Path, record: dict[str, Any]) -> Path:
    """Write a bertkit record (`records.new_record`) as indented JSON, atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(record, indent=2, default=json_value), encoding="utf-8")
    return Path(path)


def json_value(value: object) -> Any:
    """Turn a numpy scalar into a plain value: `json.dumps(default=json_value)`."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in JSON")
