"""A file as text: its format, binaries refused in one line, lines decoded one at a time, its digest."""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError, is_a_folder, no_such_path

TEXT_FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".txt": "text"}


def detect_format(path: Path, fmt: str | None = None) -> str:
    """Return the text format: `fmt` when given (checked), else the one the file's extension names, else 'text'."""
    if fmt:
        if fmt not in set(TEXT_FORMATS.values()):
            raise InputError(f"format {fmt!r}: valid formats are tsv, csv, jsonl, text.")
        return fmt
    return TEXT_FORMATS.get(path.suffix.lower(), "text")


BINARY_PROBE_BYTES = 8192
_BINARY_KINDS = {
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"%PDF": "a PDF",
    b"\x7fELF": "an executable",
    b"MZ": "a Windows executable",
    b"\x93NUMPY": "a NumPy .npy array",
    b"PK\x03\x04": "a zip archive (.npz, .xlsx, .docx, ...)",
    b"\x1f\x8b": "a gzip archive",
    b"PAR1": "a Parquet file",
    b"SQLite format 3": "an SQLite database",
}


def check_text(path: Path, head: bytes) -> None:
    """Refuse, in one line that says what it is, a file whose first bytes show it is no text (image, archive...)."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(f"{path}: this is UTF-16 text; re-save it as UTF-8 (e.g. `iconv -f utf-16 -t utf-8`).")
    kind = next((name for magic, name in _BINARY_KINDS.items() if head.startswith(magic)), None)
    if kind is None and b"\x00" in head and not _utf8(head):
        kind = "NUL bytes in what is not UTF-8 text"
    if kind is not None:
        raise InputError(
            f"{path}: this is a binary file ({kind}), not text; give a TSV, CSV, JSONL or plain-text file."
        )


def check_text_file(path: Path) -> Path:
    """Before any work: the file is there, is a file, holds text, and its first line decodes."""
    next(decoded_lines(Path(path)), None)
    return Path(path)


def _utf8(head: bytes) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return True


def decoded_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, text), each line decoded on its own so a bad byte is reported with its line."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise no_such_path(path) from None
    except IsADirectoryError:
        raise is_a_folder(path) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror}).") from None
    with handle:
        check_text(path, handle.read(BINARY_PROBE_BYTES))
        handle.seek(0)
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{path}, line {number}: bytes that are not UTF-8 at column {exc.start + 1} "
                    f"({raw[max(0, exc.start - 10) : exc.start + 10]!r}). Re-save the file as UTF-8 "
                    "(e.g. `iconv -f latin1 -t utf-8`)."
                ) from None
            yield number, text


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB blocks (runs record it to notice changed data)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
