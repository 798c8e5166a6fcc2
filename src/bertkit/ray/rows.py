"""The rows of an input file, defined once for both engines, and a Ray Data datasource that reads them.

Text, TSV/CSV and JSONL come from the local engine's reader (`iter_texts`), so rows mean the same on both engines
(Ray's own readers split lines, infer types and parse quotes their own way); Parquet is read with pyarrow.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from ..errors import InputError
from ..io.readers import iter_texts

# extension → reader format (`bertkit.io.readers` names; "parquet" is read here)
RAY_FORMATS = {
    ".parquet": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".txt": "text",
}
NO_ROWS = "the file has no data rows."  # the local reader's words for an empty file, which Ray writes as empty


def file_rows(
    path: Path, column: str | int | None = None, id_column: str | int | None = None, header: bool | None = None
) -> Iterator[tuple[str, object]]:
    """(text, id) of every row of one input, as `bertkit embed` reads it; the id is the row number or its value.

    A file without rows yields nothing. Every problem is an InputError naming the file and line (or row).
    """
    kind = RAY_FORMATS[path.suffix.lower()]
    if kind == "parquet":
        yield from _parquet_rows(path, column, id_column)
        return
    try:
        for _, text, row_id in iter_texts(path, column, header=header, fmt=kind, id_column=id_column):
            yield text, (str(row_id) if id_column is not None else row_id)  # ids as the local engine writes them
    except InputError as exc:
        if not str(exc).endswith(NO_ROWS):
            raise


def _parquet_rows(
    path: Path, column: str | int | None, id_column: str | int | None, batch_rows: int = 4096
) -> Iterator[tuple[str, object]]:
    try:
        source = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc}).") from None
    names = source.schema_arrow.names
    wanted = [_parquet_column(path, names, "text" if column is None else column)]
    if id_column is not None:
        wanted.append(_parquet_column(path, names, id_column))
    batches = source.iter_batches(batch_size=batch_rows, columns=wanted)
    rows = (row for batch in batches for row in zip(*(column.to_pylist() for column in batch.columns)))
    for number, values in enumerate(rows):
        _check_value(path, number, wanted[0], values[0], str)
        if id_column is None:
            yield values[0], number
        else:
            _check_value(path, number, wanted[1], values[1], object)
            yield values[0], str(values[1])


def _parquet_column(path: Path, names: list[str], column: str | int) -> str:
    """Find a column by name, or by index as the local readers take one ("0", -1)."""
    if isinstance(column, int) or (column not in names and column.lstrip("-").isdigit()):
        index = int(column)
        if not -len(names) <= index < len(names):
            raise InputError(f"{path}: column {index} does not exist; the file has columns {names}.")
        return names[index]
    if column not in names:
        raise InputError(f"{path}: no column named {column!r}; the columns are {names}.")
    return column


def _check_value(path: Path, row: int, column: str, value: object, kind: type) -> None:
    if value is None:
        raise InputError(f"{path}, row {row}: {column!r} is empty (null); give a value.")
    if not isinstance(value, kind):
        raise InputError(f"{path}, row {row}: the text is a {type(value).__name__} ({value!r}), not a string.")


class FileRowsDatasource(Datasource):
    """One read task per input file, yielding blocks of `path`, `row`, `id` and `text` (the rows of `file_rows`).

    Rows are numbered as they are read, so no later step has to keep Ray's block order.
    """

    def __init__(self, files: dict[str, int], **options: Any) -> None:
        super().__init__()
        self.files = files  # absolute path → its row count (from the driver)
        self.options = options  # `read_blocks`' column, id_column, header and rows_per_block

    def estimate_inmemory_data_size(self) -> int:
        """Estimate the data's size in memory: the files' sizes on disk."""
        return sum(os.path.getsize(name) for name in self.files)

    def get_read_tasks(self, parallelism: int, *args: Any, **kwargs: Any) -> list[ReadTask]:
        """Return one read task per input file, whatever the `parallelism`."""
        return [
            ReadTask(functools.partial(read_blocks, name, **self.options), _metadata(name, rows))
            for name, rows in self.files.items()
        ]


def read_blocks(
    name: str, column: str | int | None, id_column: str | int | None, header: bool | None, rows_per_block: int
) -> Iterator[pa.Table]:
    """One input's rows as Arrow tables of at most `rows_per_block` rows (runs in a Ray read task)."""
    rows = file_rows(Path(name), column, id_column, header)
    start = 0
    while block := list(islice(rows, rows_per_block)):
        yield pa.table(
            {
                "path": pa.array([name] * len(block), pa.string()),
                "row": pa.array(range(start, start + len(block)), pa.int64()),
                "id": pa.array([row_id for _, row_id in block], pa.int64() if id_column is None else pa.string()),
                "text": pa.array([text for text, _ in block], pa.string()),
            }
        )
        start += len(block)


def _metadata(name: str, rows: int) -> BlockMetadata:
    fields = {field.name for field in dataclasses.fields(BlockMetadata)}
    # schema: Ray before 2.40 kept it in the metadata
    values = dict(num_rows=rows, size_bytes=os.path.getsize(name), input_files=[name], exec_stats=None, schema=None)
    return BlockMetadata(**{k: v for k, v in values.items() if k in fields})
