"""Extractive question-answering data: SQuAD v1.1 / v2.0 JSON and the flat layout of Hugging Face datasets.

Every question is checked where it is read, and a problem is named by the question's id; one without answers (v2's
`is_impossible`) is unanswerable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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
    if path.suffix.lower() not in (".json", ".jsonl", ".ndjson"):
        raise InputError(
            f"{path}: question answering reads SQuAD JSON (.json: data → paragraphs → qas) or JSON Lines (.jsonl: "
            f"id, question, context, answers), not a {path.suffix or 'suffixless'} file; for other tasks leave out "
            "--task qa."
        )
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        examples = [_flat(record, path) for _, record in jsonl_records(path)]
    else:
        examples = list(_json_records(path))
    if not examples:
        raise InputError(f"{path}: no questions found; give SQuAD JSON (data → paragraphs → qas) or JSONL records.")
    seen: set[str] = set()
    for example in examples:
        if example.id in seen:
            raise InputError(f"{path}, id {quoted(example.id)}: the id is given twice; every question needs its own.")
        seen.add(example.id)
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
    for article in items:
        if isinstance(article, dict) and "paragraphs" in article:
            yield from _article(article, path)
        else:
            yield _flat(article, path)


def _article(article: dict, path: Path) -> Iterator[QAExample]:
    for paragraph in article["paragraphs"] or []:
        questions = paragraph.get("qas") if isinstance(paragraph, dict) else None
        if not isinstance(questions, list):
            raise InputError(f"{path}: a paragraph without its list of questions (qas): {quoted(paragraph)}.")
        for qa in questions:
            qid = _id(qa, path)
            answers = [] if qa.get("is_impossible") else qa.get("answers") or []
            if not isinstance(answers, list) or not all(isinstance(a, dict) for a in answers):
                raise InputError(
                    f"{path}, id {quoted(qid)}: answers must be a list of {{text, answer_start}} "
                    f"objects, got {quoted(answers)}."
                )
            pairs = [(a.get("text"), a.get("answer_start")) for a in answers]
            yield _example(qid, qa.get("question"), paragraph.get("context"), pairs, path)


def _flat(record: object, path: Path) -> QAExample:
    if not isinstance(record, dict):
        raise InputError(f"{path}: each record must be a JSON object, got {type(record).__name__} {quoted(record)}.")
    qid = _id(record, path)
    answers = record.get("answers") or {}
    texts, starts = (None, None)
    if isinstance(answers, dict):
        texts, starts = answers.get("text") or [], answers.get("answer_start") or []
    if not isinstance(texts, list) or not isinstance(starts, list):
        raise InputError(
            f"{path}, id {quoted(qid)}: answers must be {{text: [...], answer_start: [...]}} (two lists, "
            f"empty for no answer), got {quoted(answers)}."
        )
    if len(texts) != len(starts):
        raise InputError(f"{path}, id {quoted(qid)}: answers has {len(texts)} texts but {len(starts)} answer_starts.")
    return _example(qid, record.get("question"), record.get("context"), list(zip(texts, starts)), path)


def _id(record: dict, path: Path) -> str:
    qid = record.get("id") if isinstance(record, dict) else None
    if isinstance(qid, bool) or not isinstance(qid, (str, int)) or str(qid) == "":
        raise InputError(f"{path}: a question without an id ({quoted(record)}); every question needs one.")
    return str(qid)


def _example(qid: str, question: object, context: object, answers: list, path: Path) -> QAExample:
    where = f"{path}, id {quoted(qid)}"
    if not isinstance(context, str) or not context.strip():
        raise InputError(f"{where}: the question has no context (a string with words to find the answer in).")
    if not isinstance(question, str) or not question.strip():
        raise InputError(f"{where}: the question is missing or blank.")
    for text, start in answers:
        if not isinstance(text, str) or isinstance(start, bool) or not isinstance(start, int):
            raise InputError(
                f"{where}: an answer needs a text and a whole-number answer_start, got {text!r}, {start!r}."
            )
        if not text.strip():
            raise InputError(f"{where}: an answer's text is blank; give its words (an unanswerable question: none).")
        if not 0 <= start <= len(context) - len(text):
            raise InputError(
                f"{where}: answer {quoted(text)} at answer_start {start} lies outside the context's {len(context)} "
                f"characters (0 to {len(context) - len(text)} for this text)."
            )
        if context[start : start + len(text)] != text:
            found = context.find(text)
            hint = f"; that text is at {found}" if found >= 0 else "; the context does not hold that text"
            raise InputError(
                f"{where}: answer {quoted(text)} is not at answer_start {start} (the context there reads "
                f"{quoted(context[start : start + len(text)])}){hint}."
            )
    return QAExample(qid, question, context, tuple(answers))
