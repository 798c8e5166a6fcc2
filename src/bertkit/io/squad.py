"""Extractive question-answering data: SQuAD v1.1 / v2.0 JSON and the flat layout of Hugging Face datasets.

Every question is checked where it is read; one without answers (v2's `is_impossible`) is unanswerable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, quoted
from .readers import jsonl_records
from .text_files import decoded_lines


@dataclass(frozen=True)
class QAExample:
    """One question about a context, with its gold answers as (text, character start) pairs (none: unanswerable)."""

    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...] = ()
    line: int = 0  # the file line the question is on (nested JSON: the line of its id)

    @property
    def answerable(self) -> bool:
        """Whether the question has gold answers."""
        return bool(self.answers)


@dataclass
class SquadData:
    """The questions of one file, in file order; `negatives` says whether any is unanswerable (SQuAD v2)."""

    path: Path
    examples: list[QAExample]

    @property
    def negatives(self) -> bool:
        """Whether any question is unanswerable (SQuAD v2)."""
        return any(not e.answerable for e in self.examples)

    def __len__(self) -> int:
        return len(self.examples)


def read_squad(path: str | Path) -> SquadData:
    """Read SQuAD v1.1 / v2.0 JSON, or Hugging Face's flat layout as JSONL (one question a line) or a JSON list.

    Parameters
    ----------
    path : str or Path
        `.json` (SQuAD's `{"data": [{"paragraphs": [{"context", "qas"}]}]}`, or a list / `{"data": [...]}` of flat
        records) or `.jsonl` (one flat record a line: `id, question, context, answers: {text, answer_start}`).

    Returns
    -------
    SquadData
        The questions with their gold answers, checked.
    """
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        examples = [_flat(record, path, number) for number, record in jsonl_records(path)]
    else:
        examples = list(_json_records(path))
    if not examples:
        raise InputError(f"{path}: no questions found; give SQuAD JSON (data → paragraphs → qas) or JSONL records.")
    seen: dict[str, int] = {}
    for example in examples:
        if example.id in seen:
            raise InputError(
                f"{path}, line {example.line}: id {quoted(example.id)} is given twice (first on line "
                f"{seen[example.id]}); every question needs its own id."
            )
        seen[example.id] = example.line
    return SquadData(path, examples)


def _json_records(path: Path) -> Iterator[QAExample]:
    text = "".join(line for _, line in decoded_lines(path))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = exc.msg == "Extra data" and exc.colno == 1  # a second value at a line's start: JSON Lines
        hint = "; it holds one record a line (JSON Lines): name it .jsonl" if lines else ""
        raise InputError(f"{path}, line {exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno}){hint}.") from None
    items = document.get("data") if isinstance(document, dict) else document
    if not isinstance(items, list):
        raise InputError(
            f'{path}: expected SQuAD JSON ({{"data": [articles]}}) or a list of records, got '
            f"{type(document).__name__} without a 'data' list."
        )
    line_of = _IdLines(text)
    for article in items:
        if isinstance(article, dict) and "paragraphs" in article:
            yield from _article(article, path, line_of)
        else:
            record = article if isinstance(article, dict) else {}
            yield _flat(record, path, line_of(_id(record, path, 0)))


class _IdLines:
    """The line of each question's id, in file order: every `"id": value` of the text decoded once, then walked.

    A value is compared decoded, so any spelling JSON allows (escapes, integers) finds its line.
    """

    def __init__(self, text: str) -> None:
        decoder, self.text = json.JSONDecoder(), text
        self.ids: list[tuple[int, str]] = []  # (position of the key, the value as bertkit reads an id)
        for key in re.finditer(r'"id"\s*:\s*', text):
            try:
                value, _ = decoder.raw_decode(text, key.end())
            except ValueError:
                continue
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                self.ids.append((key.start(), str(value)))
        self.next, self.position, self.line = 0, 0, 1

    def __call__(self, qid: str) -> int:
        for k in range(self.next, len(self.ids)):
            position, value = self.ids[k]
            if value == qid:
                self.line += self.text.count("\n", self.position, position)
                self.next, self.position = k + 1, position
                break
        return self.line


def _article(article: dict, path: Path, line_of: Callable[[str], int]) -> Iterator[QAExample]:
    for paragraph in article["paragraphs"] or []:
        questions = paragraph.get("qas") if isinstance(paragraph, dict) else None
        if not isinstance(questions, list):
            raise InputError(f"{path}: a paragraph without its list of questions (qas): {quoted(paragraph)}.")
        for qa in questions:
            qid = _id(qa, path, 0)
            line = line_of(qid)
            answers = [] if qa.get("is_impossible") else qa.get("answers") or []
            if not isinstance(answers, list) or not all(isinstance(a, dict) for a in answers):
                raise InputError(
                    f"{path}, line {line}, id {quoted(qid)}: answers must be a list of {{text, answer_start}} "
                    f"objects, got {quoted(answers)}."
                )
            pairs = [(a.get("text"), a.get("answer_start")) for a in answers]
            yield _example(qid, qa.get("question"), paragraph.get("context"), pairs, path, line)


def _flat(record: dict, path: Path, line: int) -> QAExample:
    if not isinstance(record, dict):
        raise InputError(f"{path}, line {line}: each record must be a JSON object, got {type(record).__name__}.")
    qid = _id(record, path, line)
    answers = record.get("answers") or {}
    texts, starts = (None, None)
    if isinstance(answers, dict):
        texts, starts = answers.get("text") or [], answers.get("answer_start") or []
    if not isinstance(texts, list) or not isinstance(starts, list):
        raise InputError(
            f"{path}, line {line}, id {quoted(qid)}: answers must be {{text: [...], answer_start: [...]}} (two lists, "
            f"empty for no answer), got {quoted(answers)}."
        )
    if len(texts) != len(starts):
        raise InputError(
            f"{path}, line {line}, id {quoted(qid)}: answers has {len(texts)} texts but {len(starts)} answer_starts."
        )
    return _example(qid, record.get("question"), record.get("context"), list(zip(texts, starts)), path, line)


def _id(record: dict, path: Path, line: int) -> str:
    qid = record.get("id") if isinstance(record, dict) else None
    if isinstance(qid, bool) or not isinstance(qid, (str, int)) or str(qid) == "":
        where = f", line {line}" if line else ""
        raise InputError(f"{path}{where}: a question without an id ({quoted(record)}); every question needs one.")
    return str(qid)


def _example(qid: str, question: object, context: object, answers: list, path: Path, line: int) -> QAExample:
    where = f"{path}, line {line}, id {quoted(qid)}"
    if not isinstance(context, str):
        raise InputError(f"{where}: the question has no context (a string to find the answer in).")
    if not isinstance(question, str) or not question.strip():
        raise InputError(f"{where}: the question is missing or blank.")
    for text, start in answers:
        if not isinstance(text, str) or isinstance(start, bool) or not isinstance(start, int):
            raise InputError(
                f"{where}: an answer needs a text and a whole-number answer_start, got {text!r}, {start!r}."
            )
        if context[start : start + len(text)] != text:
            found = context.find(text)
            hint = f"; that text is at {found}" if found >= 0 else "; the context does not hold that text"
            raise InputError(
                f"{where}: answer {quoted(text)} is not at answer_start {start} (the context there reads "
                f"{quoted(context[start : start + len(text)])}){hint}."
            )
    return QAExample(qid, question, context, tuple(answers), line)
