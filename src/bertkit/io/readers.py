"""Readers for TSV/CSV/JSONL/plain-text inputs that stream rows and name the file and line of any problem.

The file as text (format, binaries refused, lines decoded) is `text_files`; which column holds the texts, `columns`.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, brief, quoted
from .text_files import decoded_lines, detect_format

if TYPE_CHECKING:
    from importlib.abc import Traversable

# csv's own field limit (131,072 characters) is raised, process-wide, to this cap; a longer field is refused.
MAX_FIELD_CHARS = 50 * 1024 * 1024


logger = logging.getLogger(__name__)
TEXT_COLUMN_NAMES = (
    "text",
    "sentence",
    "sentences",
    "review",
    "document",
    "content",
    "body",
    "question",
    "query",
    "passage",
    "comment",
    "tweet",
    "title",
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_ .-]{0,63}")
SNIFF_ROWS = 50  # rows read to detect a header and the text column
LABEL_COLUMN_NAMES = ("label", "labels", "class", "category", "sentiment", "target", "score", "tag", "tags")


@dataclass(frozen=True)
class Row:
    """One input record: its 1-based line number in the file and the requested fields."""

    line: int
    values: tuple


def column_spec(value: str | int | None) -> str | int | None:
    """Read a column as the command line and run records give it: '3' (or '-1') is an index, anything else a name."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def _resolve_columns(path: Path, header: list[str] | None, wanted: list[str | int], width: int, line: int) -> list[int]:
    where = f"{path}, line {line}"
    indices = []
    for column in wanted:
        if isinstance(column, int) or (isinstance(column, str) and column.lstrip("-").isdigit()):
            index = int(column)
            if not -width <= index < width:
                described = (
                    f"columns {header}"
                    if header
                    else f"{width} columns (0 to {width - 1})"
                    if width > 1
                    else "1 column"
                )
                raise InputError(f"{where}: column {index} does not exist; the file has {described}.")
            indices.append(index % width)
        else:
            if header is None:
                raise InputError(
                    f"{where}: column {column!r} is a name but the file is read without a header; "
                    "pass --header, or give the column by index."
                )
            if column not in header:
                raise InputError(f"{where}: no column named {quoted(column)}; the header has {brief(header)}.")
            indices.append(header.index(column))
    return indices


def iter_rows(path: Path, kind: str, columns: list[str | int], header: bool | None = None) -> Iterator[Row]:
    """Stream the requested columns (indices or names; JSONL: field names) of each record of a `kind` file, validated.

    `header=None` reads a header line exactly when some column is given by name.
    """
    empty = True
    if kind == "jsonl":
        rows = _jsonl_rows(path, columns)
    elif kind == "text":
        if any(c not in (0, "0", "text") for c in columns):
            raise InputError(f"{path}: a plain-text file has one text per line; there are no columns to choose.")
        rows = (Row(n, (line.rstrip("\r\n"),)) for n, line in decoded_lines(path))
    else:
        rows = delimited_rows(path, kind, columns, header)
    for row in rows:
        empty = False
        for value, column in zip(row.values, columns):
            if value is None or (isinstance(value, float) and math.isnan(value)):
                raise InputError(f"{path}, line {row.line}: {column!r} is empty (null/NaN); give a value.")
        yield row
    if empty:
        raise InputError(f"{path}: the file has no data rows.")


def delimited_rows(
    path: Path, kind: str, columns: list[str | int], header: bool | None, ragged: bool = False
) -> Iterator[Row]:
    """Yield the `columns` of each record of a TSV/CSV file (`ragged`: short rows padded with '', not refused)."""
    if header is None:
        header = any(isinstance(c, str) and not c.lstrip("-").isdigit() for c in columns)
    lines = decoded_lines(path)
    numbers: list[int] = []
    header_line = 0

    quotes: list[int] = []  # CSV: '"' on each line; a record ending the file with an odd count never closed its quote
    quoted = kind == "csv"  # a TSV is read without quoting: nothing to count on its lines

    def text_lines() -> Iterator[str]:
        for number, text in lines:
            numbers.append(number)
            if quoted:
                quotes.append(text.count('"'))
            yield _protect_bare_cr(text)

    reader = csv_reader(text_lines(), kind)
    names: list[str] | None = None
    indices: list[int] | None = None
    read = 0  # lines of the records read whole: the next record starts at numbers[read]
    unclosed = 0  # the first line of the last record, when it spans lines with an odd count of quotes
    try:
        for record in reader:
            start, line, read = read, numbers[-1], len(numbers)
            if not record:  # blank line
                continue
            unclosed = numbers[start] if quoted and read - start > 1 and sum(quotes[start:read]) % 2 else 0
            if header and names is None:
                names, header_line = [_restore_bare_cr(name).strip() for name in record], line
                continue
            if indices is None:
                try:
                    indices = _resolve_columns(path, names, columns, len(names or record), header_line or line)
                except InputError as exc:
                    raise InputError(f"{exc}{_delimiter_hint(kind, names or record)}") from None
            if not ragged and max(indices) >= len(record):
                raise InputError(
                    f"{path}, line {line}: {len(record)} fields, but column {max(indices)} was asked for"
                    + (f" (the header has {len(names)})." if names else ".")
                    + " Check the delimiter and quoting of that line."
                )
            yield Row(line, tuple(_restore_bare_cr(record[i]) if i < len(record) else "" for i in indices))
    except csv.Error as exc:
        line = numbers[read] if read < len(numbers) else numbers[-1] if numbers else 1
        if "field larger than field limit" in str(exc):
            raise InputError(
                f"{path}, line {line}: a field is longer than bertkit's cap of {MAX_FIELD_CHARS:,} "
                "characters; split that text into smaller rows."
            ) from None
        raise InputError(f"{path}, line {line}: cannot parse it as {kind.upper()} ({exc}).") from None
    if unclosed:  # csv reads an unclosed quote's field to the end of the file, without a word
        raise InputError(
            f"{path}, line {unclosed}: a quote opened in this record is never closed, so the rest of the file would "
            'be one text; close it, or double a quote that is part of the text ("").'
        )


# csv takes a lone "\r" in an unquoted field (as pandas writes them) for a line break; lines are already split at "\n",
# so such a "\r" is data and passes the parser as the noncharacter U+FDD0 (a line that holds one is left as it is).
_BARE_CR = re.compile(r"\r(?!\n?$)")
_CR_STAND_IN = "\ufdd0"


def _protect_bare_cr(text: str) -> str:
    return _BARE_CR.sub(_CR_STAND_IN, text) if "\r" in text and _CR_STAND_IN not in text else text


def _restore_bare_cr(field: str) -> str:
    return field.replace(_CR_STAND_IN, "\r")


def jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, decoded value) of each non-blank line of a JSON Lines file; bad JSON is one line."""
    for number, text in decoded_lines(path):
        if not text.strip():
            continue
        try:
            yield number, json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}, line {number}: not valid JSON ({exc.msg}, column {exc.colno}).") from None


def _jsonl_rows(path: Path, fields: list[str | int]) -> Iterator[Row]:
    keys = [str(field) for field in fields]
    for number, record in jsonl_records(path):
        if not isinstance(record, dict):
            raise InputError(f"{path}, line {number}: each line must be a JSON object, got {type(record).__name__}.")
        key = next((key for key in keys if key not in record), None)
        if key is not None:
            raise InputError(f"{path}, line {number}: no field {quoted(key)}; the fields are {brief(sorted(record))}.")
        yield Row(number, tuple(record[key] for key in keys))


def sniffed_rows(path: Path, kind: str) -> list[tuple[str, ...]]:
    """Return the first rows of a TSV/CSV file, every field of each (as wide as line 1), to detect its layout."""
    if kind not in ("tsv", "csv"):
        raise InputError(f"{path}: only TSV and CSV files have columns to choose from.")
    line = next((text.rstrip("\r\n") for _, text in decoded_lines(path) if text.strip()), "")
    if not line:
        return []
    try:
        width = len(next(csv_reader([line], kind)))
    except csv.Error:
        width = 1  # the first line's own reading (below) says what is wrong with it, with its line number
    rows = delimited_rows(path, kind, list(range(width)), header=False, ragged=True)
    return [row.values for _, row in zip(range(SNIFF_ROWS + 1), rows)]


def is_header(first: list[str], body: list[tuple[str, ...]]) -> bool:
    """Tell whether line 1 (`first`) is a header over `body`: the one rule of every command that reads a table.

    Its fields are all names, and one is a usual column name (text, sentence, label, ...), or a column below holds
    numbers under a name, or sentences under a one-word name.
    """
    if not all(_NAME.fullmatch(field) for field in first):
        return False
    usual = any(field.lower() in TEXT_COLUMN_NAMES + LABEL_COLUMN_NAMES for field in first)
    width = len(first)
    numbers_below = any(
        is_number(row[i]) and not is_number(first[i]) for row in body for i in range(min(width, len(row)))
    )
    return usual or numbers_below or _names_above_sentences(first, body)


def _names_above_sentences(first: list[str], body: list[tuple[str, ...]]) -> bool:
    """Tell whether some column holds sentences (3+ words on average) below a one-word field: a header over texts."""
    for i, name in enumerate(first):
        words = [len(row[i].split()) for row in body if i < len(row)]
        if words and sum(words) / len(words) >= 3 and len(name.split()) == 1:
            return True
    return False


def other_format(kind: str, rows: list[tuple[str, ...]]) -> str:
    """Say why rows read as one field each look like the other format: each parses to as many fields, 2 or more.

    A CSV named .tsv reads as one column of whole lines; sentences with commas split into varying numbers of fields
    (quoted fields, as CSV quotes a sentence with a comma, count as one).
    """
    if len(rows) < 2 or any(len(row) != 1 for row in rows):
        return ""
    widths = {len(fields) for fields in csv_reader([row[0] for row in rows], "csv" if kind == "tsv" else "tsv")}
    if len(widths) != 1 or widths == {1}:
        return ""
    return _delimiter_hint(kind, list(rows[0])).replace("Line 1 has", "Every line read has", 1)


def _delimiter_hint(kind: str, fields: list[str]) -> str:
    """Say, for a line read as one field, that it holds the other format's delimiter (a CSV named .tsv)."""
    other, mark, name = ("csv", ",", "comma") if kind == "tsv" else ("tsv", "\t", "tab")
    if len(fields) != 1 or mark not in fields[0]:
        return ""
    count = fields[0].count(mark)
    return (
        f" Line 1 has no {'tab' if kind == 'tsv' else 'comma'} but {count} {name}{'s' * (count > 1)}: if the file is "
        f"{other.upper()}, name it .{other} (or pass --format {other})."
    )


def csv_reader(lines: Iterable[str], kind: str) -> Iterator[list[str]]:
    """Return csv's reader for a TSV (no quoting) or a CSV, with the field limit raised to bertkit's cap."""
    if csv.field_size_limit() < MAX_FIELD_CHARS:
        csv.field_size_limit(MAX_FIELD_CHARS)
    return csv.reader(lines, **({"delimiter": "\t", "quoting": csv.QUOTE_NONE} if kind == "tsv" else {}))


def is_number(value: Any) -> bool:
    """Tell whether `float(value)` reads it."""
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def iter_texts(
    path: str | Path,
    column: str | int | None = None,
    *,
    header: bool | None = None,
    fmt: str | None = None,
    id_column: str | int | None = None,
) -> Iterator[tuple[int, str, object]]:
    """Stream (line, text, id) of one column; the id is the id column's value or the row number."""
    path = Path(path)
    kind = detect_format(path, fmt)
    columns = [_column(column, kind, "text", 0)] + ([id_column] if id_column is not None else [])
    for index, row in enumerate(iter_rows(path, kind, columns, header)):
        _check_string(path, row.line, row.values[0])
        yield row.line, row.values[0], (row.values[1] if id_column is not None else index)


def _column(column: str | int | None, kind: str, field: str, index: int) -> str | int:
    """`column`, or by default the JSONL field `field` or the column at `index`."""
    return (field if kind == "jsonl" else index) if column is None else column


def _check_string(path: Path, line: int, value: object, what: str = "text", show: Callable = quoted) -> None:
    if not isinstance(value, str):
        raise InputError(f"{path}, line {line}: the {what} is a {type(value).__name__} ({show(value)}), not a string.")


def read_texts(
    path: str | Path,
    column: str | int | None = None,
    *,
    header: bool | None = None,
    fmt: str | None = None,
    id_column: str | int | None = None,
) -> tuple[list[str], list, list[int]]:
    """All texts of one column (and optional ids) with their line numbers; every text is checked to be a string."""
    rows = list(iter_texts(path, column, header=header, fmt=fmt, id_column=id_column))
    return [text for _, text, _ in rows], [i for _, _, i in rows], [line for line, _, _ in rows]


def read_text_pairs(
    path: str | Path,
    text_column: str | int | None = None,
    pair_column: str | int | None = None,
    *,
    header: bool | None = None,
    fmt: str | None = None,
) -> tuple[list[str], list[str], list[int]]:
    """Two text columns of every row (defaults: 0 and 1; JSONL 'text' and 'text_pair') with their line numbers."""
    path, kind = _table(path, fmt, "text pairs come from TSV, CSV or JSONL (two text columns)")
    columns = [_column(text_column, kind, "text", 0), _column(pair_column, kind, "text_pair", 1)]
    rows = []
    for row in iter_rows(path, kind, columns, header):
        for value, what in zip(row.values, ("text", "pair text")):
            _check_string(path, row.line, value, what, repr)
        rows.append(row)
    return [row.values[0] for row in rows], [row.values[1] for row in rows], [row.line for row in rows]


@dataclass
class LabelledData:
    """Texts (and their pairs) with labels, and the file line each came from (for messages)."""

    path: Path
    texts: list[str]
    labels: list
    lines: list[int]
    pairs: list[str] | None = None


LABEL_KINDS = ("categorical", "numeric", "multi")


def read_labelled(
    path: str | Path,
    text_column: str | int | None = None,
    label_column: str | int | None = None,
    *,
    header: bool | None = None,
    fmt: str | None = None,
    paired: bool = False,
    pair_column: str | int | None = None,
    label_kind: str = "categorical",
    label_separator: str = ",",
) -> LabelledData:
    """Read (text, label) rows, or (text, pair, label) when `paired`.

    The defaults are SST-2's layout (columns 0 and 1; with pairs the pair in 1 and the label in 2) or JSONL fields
    'text', 'text_pair' and 'label'.

    `label_kind` says what a label is: 'categorical' (kept as written: strings from TSV/CSV, JSON numbers stay
    numbers), 'numeric' (a float; a regression target) or 'multi' (several labels, split at `label_separator`, or
    a JSON list; an empty field is no label). A first line whose label appears nowhere else (numeric: is no number)
    is taken for an unannounced header and refused, unless `header=False` says it is data.
    """
    path, kind = _table(path, fmt, "a labelled file is TSV, CSV or JSONL (text and label columns)")
    if label_kind not in LABEL_KINDS:
        raise InputError(f"label_kind={label_kind!r}: valid values are {', '.join(LABEL_KINDS)}.")
    check_label_separator(label_separator)
    paired = paired or pair_column is not None
    columns = [_column(text_column, kind, "text", 0), _column(label_column, kind, "label", 2 if paired else 1)]
    columns += [_column(pair_column, kind, "text_pair", 1)] if paired else []
    named = any(isinstance(c, str) and not c.lstrip("-").isdigit() for c in columns)
    sniffed = sniffed_rows(path, kind) if header is None and kind in ("tsv", "csv") and not named else []
    if sniffed and is_header([field.strip() for field in sniffed[0]], sniffed[1:]):  # as `embed` decides it
        header = True
        logger.info("%s: line 1 is a header (%s); --no-header reads it as data", path.name, ", ".join(sniffed[0]))
    texts, labels, lines, pairs = [], [], [], []
    for row in iter_rows(path, kind, columns, header):
        for value, what in zip([row.values[0], *row.values[2:]], ("text", "pair text")):
            _check_string(path, row.line, value, what)
            if not value.strip():
                raise InputError(
                    f"{path}, line {row.line}: the {what} is blank; every example needs "
                    + ("both texts of its pair" if paired else "a text")
                    + " (fill it in or remove the row)."
                )
        texts.append(row.values[0])
        labels.append(_label(row.values[1], label_kind, label_separator, path, row.line))
        lines.append(row.line)
        pairs += row.values[2:]
    if header is None and kind != "jsonl" and len(labels) >= 10 and lines[0] == 1 and _header_like(labels, label_kind):
        raise InputError(
            f"{path}, line 1: its label {quoted(labels[0])} appears nowhere else, so line 1 looks like a header. "
            "Pass --header (or name the columns), or --no-header if it really is data."
        )
    if not texts:
        below = " below its header line" if header else ""
        raise InputError(f"{path}: no examples{below}; a labelled file holds one (text, label) row per example.")
    return LabelledData(path, texts, labels, lines, pairs if paired else None)


def check_label_separator(separator: str) -> str:
    """Check a multi-label separator: it must be some text, as an empty one cannot split anything."""
    if not isinstance(separator, str) or not separator:
        raise InputError(
            f"label separator {separator!r}: give the text between a row's labels, e.g. ',' or '|' (--label-separator)."
        )
    return separator


def _label(label: Any, kind: str, separator: str, path: Path, line: int) -> Any:
    """One label as `kind` wants it; a missing or unreadable one is an error naming the line."""
    if isinstance(label, str):
        label = label.strip()
    if kind == "multi":
        if isinstance(label, list) and all(isinstance(v, (str, int)) for v in label):
            return tuple(sorted({str(v) for v in label}))
        if isinstance(label, (str, int)):
            return tuple(sorted({part.strip() for part in str(label).split(separator) if part.strip()}))
        raise InputError(
            f"{path}, line {line}: the labels are a {type(label).__name__}; give them as text separated "
            f"by {separator!r} or as a JSON list."
        )
    if label == "" or label is None or isinstance(label, (dict, list)):
        raise InputError(
            f"{path}, line {line}: the label is {'empty' if label in ('', None) else 'not a scalar'}; every "
            "example needs a label."
        )
    if kind == "numeric":
        try:
            value = float(label)
        except (TypeError, ValueError):
            hint = " If line 1 is a header, pass --header (or name the columns)." if line == 1 else ""
            raise InputError(
                f"{path}, line {line}: the label {quoted(label)} is not a number; a regression needs a number "
                f"on every row.{hint}"
            ) from None
        if not math.isfinite(value):
            raise InputError(f"{path}, line {line}: the label {quoted(label)} is not a finite number.")
        return value
    if isinstance(label, float) and label.is_integer():
        label = int(label)
    return label


def _header_like(labels: list, kind: str) -> bool:
    # a header's label is no number (a numeric kind has refused one already), and appears nowhere else
    return kind != "numeric" and not is_number(labels[0]) and labels.count(labels[0]) == 1


def sample_path(name: str) -> Traversable:
    """Return a file from the labelled samples that ship with bertkit (`bertkit/samples/`)."""
    return files("bertkit") / "samples" / name


def _table(path: str | Path, fmt: str | None, what: str) -> tuple[Path, str]:
    """Return the path and format of a file of text columns; SQuAD JSON (`--task qa`) or plain text is refused."""
    path = Path(path)
    kind = detect_format(path, fmt)
    if kind == "text" and path.suffix.lower() == ".json":
        raise InputError(f"{path}: {what}, not JSON; a SQuAD .json file is question answering: pass --task qa.")
    if kind == "text":
        raise InputError(f"{path}: {what}, not plain text.")
    return path, kind
