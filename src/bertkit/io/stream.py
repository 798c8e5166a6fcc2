"""Embed a file of any size in constant memory, chunk by chunk into `<output>.partial.npy`, resumably.

`<output>.progress.json` records the finished chunks; the complete output appears at once (renamed or converted).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import logging
import os
import shutil
import sys
import tokenize
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from ..encoder.compact import RANGED, compact
from ..encoder.devices import OutOfDeviceMemory
from ..encoder.encode import Encoder, calibration_ranges
from ..encoder.options import EmbedOptions, options_from
from ..encoder.tokenize import TextTooLong
from ..errors import BertkitError, InputError, add_note
from .readers import iter_texts
from .writers import GENERATOR, atomic_path, check_output_path, package_version, require_pyarrow

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_ROWS = 4096


@dataclass
class StreamResult:
    """What `embed_file` did: rows, width, where it resumed, and what happened to the texts."""

    rows: int
    dim: int
    resumed_from: int
    truncated: int
    windowed: int
    unknown_tokens: int
    tokens: int
    blank_lines: list[int] = field(default_factory=list)  # file lines of empty texts (embedded as empty texts)
    truncated_lines: list[int] = field(default_factory=list)  # file lines of the texts cut to the limit
    poor_coverage_lines: list[int] = field(default_factory=list)  # file lines the vocabulary covers poorly
    coverage_message: str = ""  # what the poor rows' coverage looks like, with the model to try


def _job_key(path: Path, options: dict) -> str:
    stat = path.stat()
    job = {"input": str(path.resolve()), "size": stat.st_size, "mtime": stat.st_mtime_ns, **options}
    return hashlib.sha256(json.dumps(job, sort_keys=True, default=str).encode()).hexdigest()


def embed_file(
    encoder: Encoder,
    input_path: str | Path,
    output_path: str | Path,
    options: EmbedOptions | None = None,
    *,
    column: str | int | None = None,
    id_column: str | int | None = None,
    header: bool | None = None,
    fmt: str | None = None,
    batch_size: int | None = None,
    ranges: np.ndarray | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    on_chunk: Callable[[int, int], None] | None = None,
    overwrite: bool = False,
    **kwargs: Any,
) -> StreamResult:
    """Embed every text of `input_path` into `output_path` (.npy/.npz/.parquet), resuming an interrupted run.

    Parameters
    ----------
    encoder : Encoder
        The model.
    input_path, output_path : str or Path
        A TSV/CSV/JSONL/text file; the vectors file to write (.npz and .parquet also keep the ids and every option,
        read back by `read_vectors`).
    options : EmbedOptions, optional
        The embedding options; keywords (`layers=`, `pooling=`, ...) replace its fields.
    column, id_column, header, fmt
        Which column holds the texts (and the ids), whether line 1 is a header, the format.
    batch_size : int, optional
        Texts per forward pass.
    ranges : numpy.ndarray, optional
        int8/uint8 ranges (default: bertkit's calibration sentences embedded with the same options).
    chunk_rows : int
        Rows read, embedded and written at a time: the memory bound and the unit of resuming.
    on_chunk : callable, optional
        Called with (rows done, rows in all) after each chunk.
    overwrite : bool
        Replace an existing `output_path` that bertkit cannot recognise as a vectors file of its own (a plain .npy,
        another program's file); without it such a file is refused and left as it is.
    **kwargs
        `EmbedOptions` fields.

    Returns
    -------
    StreamResult
        Rows, width, where it resumed, and what happened (truncated, windowed, blank and poorly covered lines).
    """
    input_path, output = Path(input_path), check_output_path(output_path, overwrite)
    if chunk_rows < 1:
        raise InputError(f"chunk_rows={chunk_rows}: give a positive number of rows per chunk.")
    resolved = options_from(options, kwargs).resolve(encoder)  # refuses bad options before any work
    if resolved.token_vectors:
        raise InputError("pooling='none' gives token vectors; embed_file writes one vector per text.")
    output_type = resolved.output_type
    if output_type in RANGED and output.suffix.lower() == ".npy":
        raise InputError(
            f"output {output}: {output_type} vectors need their ranges kept beside them; write .npz or "
            ".parquet, which keep them."
        )
    floats = resolved.replace(output_type="float32")  # compacted once all rows are in (`_finish`)
    dim = encoder.output_dim(floats)
    options_record = {"fingerprint": encoder.fingerprint, **resolved.record(), **encoder.precision_record()}
    reading = {"column": column, "id_column": id_column, "header": header, "chunk_rows": chunk_rows}
    key = _job_key(input_path, {**options_record, **reading})
    partial = output.with_name(output.name + ".partial.npy")
    progress = output.with_name(output.name + ".progress.json")
    read_rows = functools.partial(iter_texts, input_path, column, header=header, fmt=fmt, id_column=id_column)
    total, done, offset = _open_partial(partial, progress, key, dim, output, lambda: sum(1 for _ in read_rows()))
    result = StreamResult(total, dim, done, 0, 0, 0, 0)
    rows = islice(read_rows(), done, None)
    if output_type in RANGED and ranges is None:
        ranges = calibration_ranges(encoder, floats)
    handle = os.open(partial, os.O_WRONLY)
    try:
        while done < total:
            read = list(islice(rows, chunk_rows))
            chunk = _embed_chunk(encoder, read, input_path, floats, batch_size, result)
            # Plain positional writes, not a memory map: written pages do not stay in this process's memory.
            os.pwrite(handle, np.ascontiguousarray(chunk, dtype=np.float32).tobytes(), offset + done * dim * 4)
            os.fsync(handle)  # the data is on disk before the progress record says so
            done += len(read)
            _write_progress(progress, {"key": key, "rows": total, "done": done, "output": str(output)})
            if on_chunk is not None:
                on_chunk(done, total)
    except OSError as exc:
        # a full or unwritable disk: the chunks already recorded stay, so the same command resumes once there is room
        if exc.filename is None:
            exc.filename = str(output)
        if done:
            add_note(exc, f"rows 1-{done} are kept and the same command resumes after them")
        else:
            _discard(partial, progress)
            add_note(exc, "nothing partial was kept")
        raise
    except BertkitError:
        _discard(partial, progress)  # a user mistake (e.g. --long-text error on a long row): the command must change
        raise
    finally:
        os.close(handle)
    ids = lambda: (i for _, _, i in read_rows())  # noqa: E731
    meta = vector_metadata(encoder, options_record, ranges, dim)
    _finish(partial, output, ids, total, "int64" if id_column is None else "string", output_type, ranges, meta)
    progress.unlink(missing_ok=True)
    return result


def _open_partial(
    partial: Path, progress: Path, key: str, dim: int, output: Path, count_rows: Callable[[], int]
) -> tuple[int, int, int]:
    """(rows, rows done, data offset) of the partial .npy: the one a run of this job left, or a new sparse one."""
    state: dict | None = None
    with contextlib.suppress(OSError, ValueError):  # no record, or a damaged one: the job starts over
        state = json.loads(progress.read_text())
    if state is not None and state.get("key") == key and partial.exists():
        existing = np.load(partial, mmap_mode="r")
        if existing.shape != (state["rows"], dim) or existing.dtype != np.float32:
            raise InputError(f"{partial} does not match this job; delete it and {progress} to start over.")
        return state["rows"], state["done"], existing.offset
    total = count_rows()  # reads (and validates) the whole file before any work, or any folder is made
    if state is not None and state.get("done") and partial.exists():
        logger.warning(
            "%s: the unfinished run there embedded %s of %s rows with other options or another input; they are not "
            "reused and the run starts over (the same options resume it instead).",
            output,
            state["done"],
            state.get("rows", "?"),
        )
    partial.parent.mkdir(parents=True, exist_ok=True)
    created = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(total, dim))  # sparse file
    offset = created.offset
    del created
    _write_progress(progress, {"key": key, "rows": total, "done": 0, "output": str(output)})
    return total, 0, offset


def _embed_chunk(
    encoder: Encoder,
    read: list[tuple[int, str, object]],
    input_path: Path,
    options: EmbedOptions,
    batch_size: int | None,
    result: StreamResult,
) -> np.ndarray:
    """Embed one chunk of (line, text, id) rows and add what happened to `result`, by file line."""
    texts, lines = [text for _, text, _ in read], [line for line, _, _ in read]
    try:
        chunk, report = encoder.embed_with_report(texts, options, batch_size=batch_size, progress=False, warn=False)
    except TextTooLong as exc:
        raise InputError(
            f"{input_path}, line {lines[exc.row]}: {exc.tokens} tokens, more than the limit of "
            f"{exc.max_length}; pass --long-text truncate (cut it) or --long-text window (embed it in "
            "overlapping windows), or long_text= in Python."
        ) from None
    except OutOfDeviceMemory as exc:
        raise InputError(
            f"{input_path}, line {lines[exc.row]}: {exc.tokens} tokens do not fit in the memory of {exc.device} even "
            "alone. The rows before it are kept: run the same command again with --device cpu, or when the GPU has "
            "more free memory, and it resumes there (a smaller --max-length needs a new output)."
        ) from None
    result.blank_lines += [line for text, line in zip(texts, lines) if not text.strip()]
    result.truncated += report.n_truncated
    result.truncated_lines += [lines[row] for row in report.truncated_rows]
    result.windowed += len(report.windowed_rows)
    result.unknown_tokens += report.coverage.n_unknown
    result.tokens += report.coverage.n_tokens
    poor = report.coverage.poor_rows
    result.poor_coverage_lines += [lines[row] for row in poor]
    if poor and not result.coverage_message:
        result.coverage_message = encoder.coverage([texts[row] for row in poor]).message()
    return chunk


def vector_metadata(encoder: Encoder, options_record: dict, ranges: np.ndarray | None, dim: int) -> dict:
    """Record how a vectors file's vectors were made: enough to embed a query the same way."""
    model = encoder.source.path if encoder.source.kind == "local" else encoder.name
    return {
        GENERATOR: package_version(),
        "model": model,
        **options_record,
        "dim": dim,
        "output": options_record["output_type"],
        "ranges": None if ranges is None else np.asarray(ranges, dtype=np.float32).tolist(),
    }


_ARROW_TYPES = {"float32": "float32", "float16": "float16", "int8": "int8", "uint8": "uint8"}
_ARROW_TYPES |= {"binary": "int8", "ubinary": "uint8"}  # packed bits


def read_vectors(path: str | Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """(vectors, ids, how they were made) of a .npz or .parquet file written by `bertkit embed`.

    A file that is cut short, damaged or not bertkit's is one InputError naming it, never a traceback.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    tuple
        The vectors (in their stored type), the row ids, and the metadata (`{}` for files of bertkit 0.1).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npz", ".parquet"):
        raise InputError(f"{path}: vectors with their options are read from .npz or .parquet files (bertkit embed -o).")
    try:
        vectors, ids, meta = _read_npz(path) if suffix == ".npz" else _read_parquet(path)
        return vectors, ids, _checked_record(vectors, ids, meta)
    except _damage() as exc:
        if isinstance(exc, OSError) and exc.errno in _ACCESS_ERRORS:
            raise  # the file could not be read (permission, disk): said as such, not as damage
        reason = (str(exc).strip().strip("'\"") or type(exc).__name__).splitlines()[0][:200]
        raise InputError(
            f"{path} is not a complete vectors file of bertkit ({reason}); it may be cut short or damaged: embed "
            "the texts again with `bertkit embed ... -o FILE`."
        ) from None


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        missing = sorted({"vectors.npy", "ids.npy"} - names, reverse=True)  # vectors first
        if missing:
            raise KeyError(f"no {missing[0].removesuffix('.npy')} entry")
        vectors, ids = _member(archive, "vectors.npy"), _member(archive, "ids.npy")
        meta = json.loads(str(_member(archive, "meta.npy"))) if "meta.npy" in names else {}
    return vectors, ids, meta


def _member(archive: zipfile.ZipFile, name: str) -> np.ndarray:
    """One .npy member, its header checked against its size before any array is made (CRC checked on reading)."""
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    with archive.open(name) as member:
        version = np.lib.format.read_magic(member)
        if version not in readers:
            raise ValueError(f"{name} is .npy version {version}, which bertkit does not write")
        shape, fortran, dtype = readers[version](member)
        size = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if dtype.hasobject or member.tell() + size != archive.getinfo(name).file_size:
            raise ValueError(f"{name} says {shape} {dtype} but holds something else")
        array = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
        view, filled = memoryview(array.reshape(-1, order="A").view(np.uint8)), 0  # the array's own memory
        while filled < size:
            count = member.readinto(view[filled:])
            if not count:
                raise ValueError(f"{name} is cut short")
            filled += count
        member.read(1)  # at the end: the member's CRC is checked
    return array


def _read_parquet(path: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    pa, pq = require_pyarrow()
    table = pq.read_table(path, page_checksum_verification=True)  # files written with checksums (bertkit's) checked
    stored = table.schema.metadata or {}
    raw = stored.get(b"bertkit")
    if raw and b"bertkit-sha256" in stored and hashlib.sha256(raw).hexdigest().encode() != stored[b"bertkit-sha256"]:
        raise ValueError("its record does not match its checksum")  # the footer has no checksum of its own
    meta = json.loads(raw) if raw else {}
    output = meta.get("output", "float32") if isinstance(meta, dict) else None
    column = table.column("vector").combine_chunks()
    if not pa.types.is_fixed_size_list(column.type):
        raise ValueError(f"its vector column is {column.type}, not fixed-size lists")
    dtype = _ARROW_TYPES.get(output, "float32") if isinstance(output, str) else "float32"
    vectors = np.asarray(column.flatten(), dtype=dtype).reshape(len(table), column.type.list_size)
    return vectors, np.asarray(table.column("id").to_pylist()), meta


def _checked_record(vectors: np.ndarray, ids: np.ndarray, meta: dict) -> dict:
    """`meta`, after checking that it describes `vectors` (type, width, int8 ranges) and that ids match rows."""
    if not isinstance(meta, dict):
        raise ValueError("its record is not a JSON object")
    if vectors.ndim != 2 or ids.ndim != 1 or len(ids) != len(vectors):
        raise ValueError(f"{len(ids)} ids for vectors of shape {vectors.shape}")
    if not meta:
        return meta
    output, dim = meta.get("output", "float32"), meta.get("dim")
    if not isinstance(output, str) or vectors.dtype != np.dtype(_ARROW_TYPES.get(output, "object")):
        raise ValueError(f"its record says {output!r} vectors, it holds {vectors.dtype}")
    if type(dim) is not int or vectors.shape[1] != (-(-dim // 8) if output in ("binary", "ubinary") else dim):
        raise ValueError(f"its record says {dim}-number vectors, it holds {vectors.shape[1]} numbers each")
    if output in RANGED and np.shape(np.asarray(meta.get("ranges"), dtype=object)) != (2, dim):
        raise ValueError(f"its {output} vectors lack their (2, {dim}) ranges")
    return meta


# OSErrors about reaching the file, not its bytes (a seek to an offset the damaged archive names is EINVAL: damage)
_ACCESS_ERRORS = {errno.EACCES, errno.EPERM, errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EIO, errno.ENXIO}


def _damage() -> tuple[type[BaseException], ...]:
    """Return what parsing a cut or damaged .npz / .parquet raises (zipfile, numpy's .npy reader, JSON, Arrow)."""
    kinds: tuple[type[BaseException], ...] = (zipfile.BadZipFile, ValueError, KeyError, EOFError, OSError)
    kinds += (NotImplementedError, RuntimeError, OverflowError)  # a flipped compression method or encryption flag
    kinds += (SyntaxError, tokenize.TokenError)  # a flipped .npy header, as numpy parses it
    arrow = sys.modules.get("pyarrow")
    return kinds + ((arrow.lib.ArrowException,) if arrow is not None else ())


def _finish(
    partial: Path,
    output: Path,
    ids: Callable[[], Iterator],
    total: int,
    id_type: str,
    output_type: str = "float32",
    ranges: np.ndarray | None = None,
    meta: dict | None = None,
    slice_rows: int = 65536,
) -> None:
    """Turn the finished partial .npy into the output, compacted to `output_type` with `meta`, in slices."""
    if output_type != "float32":
        partial = _compacted(partial, output_type, ranges, slice_rows)
    suffix = output.suffix.lower()
    if suffix == ".npy":
        os.replace(partial, output)
        return
    header = np.load(partial, mmap_mode="r")
    offset, width, dtype = header.offset, header.shape[1], header.dtype
    del header
    if suffix == ".npz":
        id_array = np.asarray(list(ids()))
        with (
            atomic_path(output) as temporary,
            zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED, allowZip64=True) as archive,
        ):
            with partial.open("rb") as source, archive.open("vectors.npy", "w", force_zip64=True) as target:
                shutil.copyfileobj(source, target, 16 << 20)  # the partial file is already a valid .npy
            with archive.open("ids.npy", "w", force_zip64=True) as target:
                np.lib.format.write_array(target, id_array, allow_pickle=False)
            with archive.open("meta.npy", "w") as target:
                np.lib.format.write_array(target, np.array(json.dumps(meta or {})), allow_pickle=False)
    else:
        pa, pq = require_pyarrow()
        element = getattr(pa, _ARROW_TYPES[output_type])()
        record = json.dumps(meta or {})  # with its SHA-256, read back and compared: Parquet's footer has no checksum
        metadata = {"bertkit": record, "bertkit-sha256": hashlib.sha256(record.encode()).hexdigest()}
        schema = pa.schema([("id", getattr(pa, id_type)()), ("vector", pa.list_(element, width))], metadata=metadata)
        id_iter = ids()
        convert = int if id_type == "int64" else str
        with (
            atomic_path(output) as temporary,
            partial.open("rb") as source,
            pq.ParquetWriter(temporary, schema, write_page_checksum=True) as writer,  # changed bytes are caught
        ):
            for start in range(0, total, slice_rows):
                count = min(slice_rows, total - start)
                source.seek(offset + start * width * dtype.itemsize)
                block = np.fromfile(source, dtype=dtype, count=count * width)
                column = pa.FixedSizeListArray.from_arrays(pa.array(block, type=element), width)
                names = pa.array([convert(i) for i in islice(id_iter, count)], type=getattr(pa, id_type)())
                writer.write_table(pa.Table.from_arrays([names, column], schema=schema))
    partial.unlink()


def _compacted(partial: Path, output_type: str, ranges: np.ndarray | None, slice_rows: int) -> Path:
    """Turn the float32 partial file into a `output_type` .npy beside it, slice by slice; the float one goes."""
    source = np.load(partial, mmap_mode="r")
    rows = source.shape[0]
    first = compact(np.asarray(source[:1] if rows else np.zeros((1, source.shape[1]), np.float32)), output_type, ranges)
    target_path = partial.with_name(partial.name.replace(".partial.npy", f".{output_type}.npy"))
    target = np.lib.format.open_memmap(target_path, mode="w+", dtype=first.dtype, shape=(rows, first.shape[1]))
    for start in range(0, rows, slice_rows):
        target[start : start + slice_rows] = compact(
            np.asarray(source[start : start + slice_rows]), output_type, ranges
        )
    target.flush()
    del target, source
    partial.unlink()
    return target_path


def _discard(partial: Path, progress: Path) -> None:
    partial.unlink(missing_ok=True)
    progress.unlink(missing_ok=True)


def _write_progress(path: Path, state: dict) -> None:
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(state))
