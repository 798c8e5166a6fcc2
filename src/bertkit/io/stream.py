"""Embed a file of any size in constant memory, chunk by chunk into `<output>.partial.npy`, resumably.

The job's record (`<output>.job.json`) counts the finished chunks; the complete output appears at once. A run
that stops keeps both, so the same command resumes, unless only other settings can get past the error.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from ..encoder.compact import RANGED, compact
from ..encoder.coverage import text_coverage
from ..encoder.devices import OutOfDeviceMemory
from ..encoder.encode import Encoder, calibration_ranges, vectors_record
from ..encoder.options import EmbedOptions, options_from
from ..encoder.progress import counting
from ..encoder.tokenize import TextTooLong
from ..errors import InputError, add_note
from ..records import new_record
from .readers import iter_texts
from .vectors import write_vectors
from .writers import check_output_path, end_job, read_job, save_job

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
    on_rows: Callable[[int, int], None] | None = None,
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
        Called with (rows done, rows in all) after each chunk (its rows are on disk and resume from there).
    on_rows : callable, optional
        Called with (rows embedded, rows in all) as each forward pass finishes: a progress reporter's count, which
        moves within a chunk too.
    overwrite : bool
        Replace an existing `output_path`, or start over an unfinished job of other settings there.
    **kwargs
        `EmbedOptions` fields.

    Returns
    -------
    StreamResult
        Rows, width, where it resumed, and what happened (truncated, windowed, blank and poorly covered lines).
    """
    input_path, output = Path(input_path), check_output_path(output_path, overwrite, [input_path])
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
    options_record = vectors_record(encoder, resolved)
    reading = {"column": column, "id_column": id_column, "header": header, "chunk_rows": chunk_rows}
    stat = input_path.stat()
    job = {"input": str(input_path.resolve()), "size": stat.st_size, "mtime": stat.st_mtime_ns}
    job |= {**options_record, **reading}
    partial = output.with_name(output.name + ".partial.npy")
    read_rows = functools.partial(iter_texts, input_path, column, header=header, fmt=fmt, id_column=id_column)
    total, done, offset = _open_partial(partial, output, job, dim, overwrite, lambda: sum(1 for _ in read_rows()))
    result = StreamResult(total, dim, done, 0, 0, 0, 0)
    rows = islice(read_rows(), done, None)
    if output_type in RANGED and ranges is None:
        ranges = calibration_ranges(encoder, floats)
    handle = os.open(partial, os.O_WRONLY)
    try:
        while done < total:
            read = list(islice(rows, chunk_rows))
            with counting(functools.partial(_report, on_rows, done, total)):  # within the chunk, pass by pass
                chunk = _embed_chunk(encoder, read, floats, batch_size, result)
            # Plain positional writes, not a memory map: written pages do not stay in this process's memory.
            os.pwrite(handle, np.ascontiguousarray(chunk, dtype=np.float32).tobytes(), offset + done * dim * 4)
            os.fsync(handle)  # the data is on disk before the progress record says so
            done += len(read)
            save_job(output, job, {"rows": total, "done": done})
            if on_chunk is not None:
                on_chunk(done, total)
    except OSError as exc:
        # a full or unwritable disk: the chunks already recorded stay, so the same command resumes once there is room
        if exc.filename is None:
            exc.filename = str(output)
        if done:
            add_note(exc, f"rows 1-{done} are kept and the same command resumes after them")
        else:
            _discard(partial, output)
            add_note(exc, "nothing partial was kept")
        raise
    except TextTooLong as exc:  # only other settings get past this row: this job cannot resume, so nothing is kept
        _discard(partial, output)
        raise InputError(
            f"{input_path}, line {read[exc.row][0]}: {exc.tokens} tokens, more than the limit of "
            f"{exc.max_length}; pass --long-text truncate (cut it) or --long-text window (embed it in "
            "overlapping windows), or long_text= in Python."
        ) from None
    except OutOfDeviceMemory as exc:  # as every other error, it keeps the finished chunks and the job record
        raise InputError(
            f"{input_path}, line {read[exc.row][0]}: {exc.tokens} tokens do not fit in the memory of {exc.device} "
            f"even alone. {_kept(done)}: run the same command again with --device cpu, or when the GPU has more "
            "free memory, and it resumes there (a smaller --max-length needs a new output)."
        ) from None
    finally:
        os.close(handle)
    ids = lambda: (i for _, _, i in read_rows())  # noqa: E731
    source = {"path": job["input"], "size": stat.st_size, "mtime": stat.st_mtime_ns, "fmt": fmt}
    meta = vector_metadata(encoder, options_record, ranges, dim) | {"texts_from": source | reading}
    if output_type != "float32":
        partial = _compacted(partial, output_type, ranges)
    write_vectors(partial, output, ids, total, "int64" if id_column is None else "string", meta)
    end_job(output)
    return result


def _report(on_rows: Callable[[int, int], None] | None, before: int, total: int, rows: int) -> None:
    """Tell `on_rows` the rows embedded: the chunks before, and `rows` of this one."""
    if on_rows is not None:
        on_rows(before + rows, total)


def _open_partial(
    partial: Path, output: Path, job: dict, dim: int, overwrite: bool, count_rows: Callable[[], int]
) -> tuple[int, int, int]:
    """(rows, rows done, data offset) of the partial .npy: the one an unfinished run of this job left, or a new one."""
    state = read_job(output, job, overwrite)  # another job's record is refused unless `overwrite`
    if state is not None and partial.exists():
        existing = np.load(partial, mmap_mode="r")
        if existing.shape != (state["rows"], dim) or existing.dtype != np.float32:
            raise InputError(f"{partial} does not match this job; pass --overwrite to start over.")
        return state["rows"], state["done"], existing.offset
    total = count_rows()  # reads (and validates) the whole file before any work, or any folder is made
    partial.parent.mkdir(parents=True, exist_ok=True)
    created = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(total, dim))  # sparse file
    offset = created.offset
    del created
    save_job(output, job, {"rows": total, "done": 0})
    return total, 0, offset


def _embed_chunk(
    encoder: Encoder,
    read: list[tuple[int, str, object]],
    options: EmbedOptions,
    batch_size: int | None,
    result: StreamResult,
) -> np.ndarray:
    """Embed one chunk of (line, text, id) rows and add what happened to `result`, by file line."""
    texts, lines = [text for _, text, _ in read], [line for line, _, _ in read]
    chunk, report = encoder.embed_with_report(texts, options, batch_size=batch_size, progress=False, warn=False)
    result.blank_lines += [line for text, line in zip(texts, lines) if not text.strip()]
    result.truncated += report.n_truncated
    result.truncated_lines += [lines[row] for row in report.truncated_rows]
    result.windowed += len(report.windowed_rows)
    result.unknown_tokens += report.coverage.n_unknown
    result.tokens += report.coverage.n_tokens
    poor = report.coverage.poor_rows
    result.poor_coverage_lines += [lines[row] for row in poor]
    if poor and not result.coverage_message:
        result.coverage_message = text_coverage(encoder.tokenizer, [texts[row] for row in poor]).message()
    return chunk


def vector_metadata(encoder: Encoder, options_record: dict, ranges: np.ndarray | None, dim: int) -> dict:
    """Record how a vectors file's vectors were made: enough to embed a query the same way."""
    model = encoder.source.path if encoder.source.kind == "local" else encoder.source.spec
    ranges = None if ranges is None else np.asarray(ranges, dtype=np.float32).tolist()
    output = options_record["output_type"]
    return new_record("vectors", model=model, **options_record, dim=dim, output=output, ranges=ranges)


def _compacted(partial: Path, output_type: str, ranges: np.ndarray | None, slice_rows: int = 65536) -> Path:
    """Turn the float32 partial file into a `output_type` .npy beside it, slice by slice; the float one goes."""
    source = np.load(partial, mmap_mode="r")
    rows = source.shape[0]
    first = compact(np.asarray(source[:1] if rows else np.zeros((1, source.shape[1]), np.float32)), output_type, ranges)
    target_path = partial.with_name(partial.name.replace(".partial.npy", f".{output_type}.npy"))
    target = np.lib.format.open_memmap(target_path, mode="w+", dtype=first.dtype, shape=(rows, first.shape[1]))
    for part in (slice(start, start + slice_rows) for start in range(0, rows, slice_rows)):
        target[part] = compact(np.asarray(source[part]), output_type, ranges)
    target.flush()
    del target, source
    partial.unlink()
    return target_path


def _kept(done: int) -> str:
    """Say which rows an interrupted job keeps on disk."""
    return f"Rows 1-{done} are kept" if done else "The job is kept (no row was finished yet)"


def _discard(partial: Path, output: Path) -> None:
    partial.unlink(missing_ok=True)
    end_job(output)
