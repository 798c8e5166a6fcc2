"""The vectors file: .npy, or .npz / .parquet with the row ids and the bertkit record of how they were made.

Written in slices from a finished .npy (`write_vectors`) and read back checked (`read_vectors`): a file cut short,
damaged or without the record is one error naming it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
import sys
import tokenize
import zipfile
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from pathlib import Path

import numpy as np

from ..encoder.compact import RANGED
from ..errors import InputError
from ..records import check_record, new_record, record_kind
from .writers import atomic_path, check_output, publish, require_pyarrow

_ARROW_TYPES = {"float32": "float32", "float16": "float16", "int8": "int8", "uint8": "uint8"}
_ARROW_TYPES |= {"binary": "int8", "ubinary": "uint8"}  # packed bits


def read_vectors(path: str | Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """(vectors, ids, how they were made) of a .npz or .parquet file written by `bertkit embed`.

    A file that is cut short, damaged or without bertkit's record is one InputError naming it, never a traceback.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    tuple
        The vectors (in their stored type), the row ids, and the record of how they were made.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npz", ".parquet"):
        raise InputError(f"{path}: vectors with their options are read from .npz or .parquet files (bertkit embed -o).")
    try:
        vectors, ids, meta = _read_npz(path) if suffix == ".npz" else _read_parquet(path)
    except _damage() as exc:
        raise _damaged(path, exc) from None
    if record_kind(meta) == "token vectors":
        raise InputError(
            f"{path} holds token vectors (--pooling none), one per token; search and indexes take one vector a text: "
            "embed with a pooling (e.g. --pooling mean)."
        )
    meta = check_record(meta, "vectors", path)
    try:
        return vectors, ids, _checked_record(vectors, ids, meta)
    except ValueError as exc:
        raise _damaged(path, exc) from None


def read_npy(path: Path) -> np.ndarray:
    """Read the (rows, width) array of a bare .npy of `bertkit embed`; a damaged or other one is an InputError."""
    try:
        vectors = np.load(path, allow_pickle=False)
    except _damage() as exc:
        raise _damaged(path, exc) from None
    if vectors.ndim != 2 or not len(vectors):
        raise InputError(
            f"{path} holds an array of shape {vectors.shape}; search takes one vector a row (rows, width)."
        )
    return vectors


def source_texts(meta: dict) -> list[str] | None:
    """Re-read the texts of a vectors file's rows from the file `bertkit embed` read (its record's `texts_from`).

    None when the record names no source, or the file is gone or changed since (its size and time differ).
    """
    from .readers import iter_texts

    source = meta.get("texts_from")
    if not isinstance(source, dict):
        return None
    path = Path(source["path"])
    try:
        stat = path.stat()
    except OSError:
        return None
    if (stat.st_size, stat.st_mtime_ns) != (source["size"], source["mtime"]):
        return None
    reading = {"header": source["header"], "fmt": source["fmt"], "id_column": source["id_column"]}
    return [text for _, text, _ in iter_texts(path, source["column"], **reading)]


def _damaged(path: Path, exc: BaseException) -> BaseException:
    """Return the one error of a vectors file that cannot be read (an access error stays itself)."""
    if isinstance(exc, OSError) and exc.errno in _ACCESS_ERRORS:
        return exc  # the file could not be read (permission, disk): said as such, not as damage
    reason = (str(exc).strip().strip("'\"") or type(exc).__name__).splitlines()[0][:200]
    return InputError(
        f"{path} is not a complete vectors file of bertkit ({reason}); it may be cut short or damaged: embed "
        "the texts again with `bertkit embed ... -o FILE`."
    )


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
    if not meta.get("model"):
        raise ValueError("its record does not name the model that made the vectors")
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


def write_vectors(
    partial: Path,
    output: Path,
    ids: Callable[[], Iterator],
    total: int,
    id_type: str,
    meta: dict,
    slice_rows: int = 65536,
) -> None:
    """Turn a finished .npy of `total` rows into `output` (.npy, .npz or .parquet) with `ids` and `meta`, in slices.

    Parameters
    ----------
    partial : Path
        The vectors, as a .npy of their stored type beside `output`; it is consumed.
    output : Path
        The vectors file.
    ids : callable
        Returns an iterator over the row ids.
    total : int
        Rows.
    id_type : str
        "int64" (row numbers) or "string" (an id column's values).
    meta : dict
        The file's record (`new_record("vectors", ...)`).
    slice_rows : int
        Rows converted at a time (the memory bound).
    """
    suffix = output.suffix.lower()
    if suffix == ".npy":
        publish(partial, output)
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
                np.lib.format.write_array(target, np.array(json.dumps(meta)), allow_pickle=False)
    else:
        pa, pq = require_pyarrow()
        element = getattr(pa, _ARROW_TYPES[meta["output"]])()
        record = json.dumps(meta)  # with its SHA-256, read back and compared: Parquet's footer has no checksum
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
    check_output(path, overwrite)
    offsets = np.cumsum([0] + [len(v) for v in vectors])
    stacked = np.concatenate(vectors) if vectors else np.zeros((0, 0), np.float32)
    flat_tokens = np.array([t for row in tokens for t in row], dtype=str)
    with atomic_path(path) as temporary, temporary.open("wb") as handle:
        record = json.dumps(new_record("token vectors", **(meta or {})))
        np.savez(handle, vectors=stacked, offsets=offsets, tokens=flat_tokens, ids=np.asarray(list(ids)), meta=record)
    return path
