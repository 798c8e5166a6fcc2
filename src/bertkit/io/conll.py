"""CoNLL-style word/tag files: the reader, IOB checks, IOB1→IOB2, and telling token data from sentence data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from ..errors import InputError
from .readers import LabelledData, read_labelled
from .text_files import decoded_lines


@dataclass
class TaggedData:
    """Sentences as word lists with one IOB2 tag per word, and the file line where each sentence starts."""

    path: Path
    words: list[list[str]]
    tags: list[list[str]]
    lines: list[int]
    converted_from_iob1: bool = False
    columns: int = 0

    @property
    def labels(self) -> list[str]:
        """Every tag seen, 'O' first, then by entity type and B before I (a stable id order for a model)."""
        seen = {tag for sentence in self.tags for tag in sentence}
        return sorted(seen, key=lambda t: (t != "O", t[2:], t[:1]))

    def __len__(self) -> int:
        return len(self.words)


def check_tag(tag: str, path: Path | str, line: int) -> None:
    """Refuse a tag that is not IOB ('O', 'B-TYPE' or 'I-TYPE'), naming its file and line."""
    if tag == "O":
        return
    prefix, _, kind = tag.partition("-")
    if prefix not in ("B", "I") or not kind:
        raise InputError(
            f"{path}, line {line}: tag {tag!r} is not IOB; tags must be 'O', 'B-TYPE' or 'I-TYPE' "
            "(e.g. B-PER, I-PER). Convert IOBES/BILOU tags to IOB2 first."
        )


def read_tagged(path: str | Path) -> TaggedData:
    """Read CoNLL-2003 (word POS chunk tag) or two-column (word tag) files: blank lines end sentences.

    `-DOCSTART-` lines are skipped. The word is the first column and the tag the last; every line must have the
    column count of the first. IOB1 files (an entity may start with I-) are converted to IOB2 and say so.
    """
    path = Path(path)
    words: list[list[str]] = []
    tags: list[list[str]] = []
    lines: list[int] = []
    columns = 0
    ended = True  # the next word starts a sentence
    for number, text in decoded_lines(path):
        fields = text.split()
        if not fields or fields[0] == "-DOCSTART-":
            ended = True
            continue
        if not columns:
            _refuse_sentence_data(path, number, text)
            columns = len(fields)
            if columns < 2:
                raise InputError(
                    f"{path}, line {number}: one column ({text.strip()!r}); a token file needs a word and a tag per "
                    "line (CoNLL: word POS chunk tag). Is this a text file? Use --task text for sentence labels."
                )
        if len(fields) != columns:
            raise InputError(
                f"{path}, line {number}: {len(fields)} columns, but the file started with {columns} "
                f"({text.strip()!r}). Each line needs the same columns (word … tag), separated by spaces or tabs."
            )
        check_tag(fields[-1], path, number)
        if ended:
            words.append([])
            tags.append([])
            lines.append(number)
            ended = False
        words[-1].append(fields[0])
        tags[-1].append(fields[-1])
    if not words:
        raise InputError(f"{path}: no sentences found (only blank or -DOCSTART- lines).")
    fixed = [to_iob2(sentence) for sentence in tags]
    return TaggedData(path, words, fixed, lines, converted_from_iob1=fixed != tags, columns=columns)


def _refuse_sentence_data(path: Path, number: int, text: str) -> None:
    """Refuse a first line 'some words<TAB>label': sentence classification data given to a tagger."""
    cells = text.rstrip("\r\n").split("\t")
    if len(cells) == 2 and len(cells[0].split()) > 1:
        raise InputError(
            f"{path}, line {number}: this looks like sentence/label data (a text, a tab, a label), not a token file "
            "(one word and its tag per line, a blank line between sentences): it is data for a sentence classifier "
            "(--task text)."
        )


def looks_like_token_file(path: str | Path, lines: int = 20) -> bool:
    """Tell whether the file's first lines read as 'word … IOB-tag' columns (CoNLL), i.e. data for --task token."""
    try:
        rows = (text.split() for _, text in decoded_lines(Path(path)))
        first = list(islice((fields for fields in rows if fields and fields[0] != "-DOCSTART-"), lines))
    except InputError:
        return False
    return bool(first) and all(len(f) >= 2 and (f[-1] == "O" or f[-1][:2] in ("B-", "I-")) for f in first)


def to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1 → IOB2: an I-X that does not continue an X entity starts one, so it becomes B-X."""
    fixed: list[str] = []
    for tag in tags:
        previous = fixed[-1] if fixed else "O"
        starts = tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:])
        fixed.append("B-" + tag[2:] if starts else tag)
    return fixed


def read_labelled_text(
    path: str | Path,
    text_column: str | int | None = None,
    label_column: str | int | None = None,
    header: bool | None = None,
    **options: Any,
) -> LabelledData:
    """Read as `read_labelled` does (its `options`), but refuse a CoNLL-style word/tag file: use the token task."""
    if looks_like_token_file(path):
        raise InputError(f"{path}: this is a word/tag (CoNLL) file, not sentence/label data; use --task token for it.")
    return read_labelled(path, text_column, label_column, header=header, **options)
