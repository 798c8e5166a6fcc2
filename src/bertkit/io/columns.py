"""Which column of a TSV/CSV file holds the texts, and whether line 1 is a header, when no --text-column says."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .readers import TEXT_COLUMN_NAMES, is_header, other_format, sniffed_rows
from .text_files import detect_format


@dataclass(frozen=True)
class ColumnChoice:
    """Which column of a table holds the texts, whether line 1 is a header, and why bertkit thinks so."""

    column: str | int
    header: bool
    reason: str


def choose_text_column(path: str | Path, fmt: str | None = None) -> ColumnChoice:
    """For a TSV/CSV read without --text-column: detect a header row and the column that holds the texts, or refuse.

    Line 1 is a header when its fields are all names and one is a usual text-column name, or a column below holds
    numbers, or sentences under a one-word name. The texts are the column with a usual name, else the one of clearly
    the longest values, holding letters. Anything less clear is refused with the columns listed.
    """
    path = Path(path)
    kind = detect_format(path, fmt)
    rows = sniffed_rows(path, kind)
    if not rows:
        raise InputError(f"{path}: the file has no data rows.")
    first, body = [field.strip() for field in rows[0]], rows[1:]
    width = len(first)
    if width == 1:
        if hint := other_format(kind, rows):
            raise InputError(f"{path}: one column?{hint} --text-column 0 embeds each whole line as it is.")
        return ColumnChoice(0, False, "one column")
    usual = [i for i, field in enumerate(first) if field.lower() in TEXT_COLUMN_NAMES]
    header = is_header(first, body)
    data = body if header else rows
    if header and usual:
        return ColumnChoice(first[usual[0]], True, f"column {first[usual[0]]!r} (line 1 is a header)")
    lengths = [sum(len(row[i]) for row in data if i < len(row)) / max(len(data), 1) for i in range(width)]
    best = max(range(width), key=lengths.__getitem__)
    others = max((length for i, length in enumerate(lengths) if i != best), default=0.0)
    wordy = all(any(c.isalpha() for c in row[best]) for row in data if best < len(row) and row[best].strip())
    if wordy and lengths[best] >= 2 * others:
        name = first[best] if header else best
        return ColumnChoice(
            name, header, f"column {name!r}, the one of the longest texts" + (" (line 1 is a header)" if header else "")
        )
    described = f"the header has {first}" if header else f"line 1 has {width} fields: {first}"
    raise InputError(
        f"{path}: which column holds the texts? {described}; pass --text-column NAME or --text-column INDEX "
        "(and --header or --no-header)."
    )
