"""Word/tag data for token classification: a CoNLL reader, IOB checks, entity spans and entity-level scores."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .data import decoded_lines
from .errors import InputError


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


@dataclass(frozen=True)
class Entity:
    """One entity: its type and the half-open word range [start, end), plus text and characters when known."""

    type: str
    start: int
    end: int
    text: str = ""
    char_start: int | None = None
    char_end: int | None = None
    score: float | None = field(default=None, compare=False)


def check_tag(tag: str, path: Path | str, line: int) -> None:
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
    sentence_words: list[str] = []
    sentence_tags: list[str] = []
    start_line = 0
    columns = 0

    def close() -> None:
        if sentence_words:
            words.append(list(sentence_words))
            tags.append(list(sentence_tags))
            lines.append(start_line)
            sentence_words.clear()
            sentence_tags.clear()

    for number, text in decoded_lines(path):
        fields = text.split()
        if not fields:
            close()
            continue
        if fields[0] == "-DOCSTART-":
            close()
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
        if not sentence_words:
            start_line = number
        sentence_words.append(fields[0])
        sentence_tags.append(fields[-1])
    close()
    if not words:
        raise InputError(f"{path}: no sentences found (only blank or -DOCSTART- lines).")
    converted = False
    for index, sentence in enumerate(tags):
        fixed = to_iob2(sentence)
        if fixed != sentence:
            tags[index] = fixed
            converted = True
    return TaggedData(path, words, tags, lines, converted_from_iob1=converted, columns=columns)


def _refuse_sentence_data(path: Path, number: int, text: str) -> None:
    """A first line 'some words<TAB>label' is sentence classification data given to a tagger."""
    cells = text.rstrip("\r\n").split("\t")
    if len(cells) == 2 and len(cells[0].split()) > 1:
        raise InputError(
            f"{path}, line {number}: this looks like sentence/label data (a text, a tab, a label), not a token file "
            "(one word and its tag per line, a blank line between sentences): it is data for a sentence classifier "
            "(--task text)."
        )


def looks_like_token_file(path: str | Path, lines: int = 20) -> bool:
    """True when the file's first lines read as 'word … IOB-tag' columns (CoNLL), i.e. data for --task token."""
    seen = 0
    try:
        for _, text in decoded_lines(Path(path)):
            fields = text.split()
            if not fields or fields[0] == "-DOCSTART-":
                continue
            if len(fields) < 2 or not (fields[-1] == "O" or fields[-1][:2] in ("B-", "I-")):
                return False
            seen += 1
            if seen >= lines:
                break
    except InputError:
        return False
    return seen > 0


def to_iob2(tags: Sequence[str]) -> list[str]:
    """IOB1 → IOB2: an I-X that does not continue an X entity starts one, so it becomes B-X."""
    fixed = []
    previous = "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        fixed.append(tag)
        previous = tag
    return fixed


def entity_spans(tags: Sequence[str]) -> list[Entity]:
    """Entities of one IOB2 tag sequence, read as conlleval does: a stray I-X after O or another type starts one."""
    entities = []
    kind, start = None, 0
    for position, tag in enumerate(list(tags) + ["O"]):
        prefix, kind_here = (tag[:1], tag[2:]) if tag != "O" else ("O", None)
        continues = prefix == "I" and kind_here == kind
        if kind is not None and not continues:
            entities.append(Entity(kind, start, position))
            kind = None
        if prefix in ("B", "I") and not continues:
            kind, start = kind_here, position
    return entities


def entity_scores(true_tags: Sequence[Sequence[str]], predicted_tags: Sequence[Sequence[str]]) -> dict:
    """Entity-level precision / recall / F1 (exact type and span match), per type and micro-averaged; token accuracy."""
    if len(true_tags) != len(predicted_tags):
        raise InputError(f"{len(true_tags)} gold sentences but {len(predicted_tags)} predicted ones.")
    gold_counts: Counter = Counter()
    predicted_counts: Counter = Counter()
    correct_counts: Counter = Counter()
    tokens = right = 0
    for gold, predicted in zip(true_tags, predicted_tags):
        if len(gold) != len(predicted):
            raise InputError(f"a sentence has {len(gold)} gold tags but {len(predicted)} predicted ones.")
        gold_set = {(e.type, e.start, e.end) for e in entity_spans(gold)}
        predicted_set = {(e.type, e.start, e.end) for e in entity_spans(predicted)}
        gold_counts.update(t for t, _, _ in gold_set)
        predicted_counts.update(t for t, _, _ in predicted_set)
        correct_counts.update(t for t, _, _ in gold_set & predicted_set)
        tokens += len(gold)
        right += sum(g == p for g, p in zip(gold, predicted))
    per_type = {
        kind: _prf(correct_counts[kind], predicted_counts[kind], gold_counts[kind])
        for kind in sorted(set(gold_counts) | set(predicted_counts))
    }
    overall = _prf(sum(correct_counts.values()), sum(predicted_counts.values()), sum(gold_counts.values()))
    return {
        "n_sentences": len(true_tags),
        "n_tokens": tokens,
        "token_accuracy": right / tokens if tokens else 0.0,
        **{k: overall[k] for k in ("precision", "recall", "f1")},
        "n_gold_entities": overall["support"],
        "n_predicted_entities": overall["predicted"],
        "per_type": per_type,
    }


def _prf(correct: int, predicted: int, gold: int) -> dict:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": gold, "predicted": predicted}


def format_entity_scores(scores: dict) -> str:
    """Plain-text table: entity-level P/R/F1 per type and overall (micro), plus token accuracy."""
    lines = [
        f"entity F1 {scores['f1']:.4f}   precision {scores['precision']:.4f}   recall {scores['recall']:.4f}   "
        f"token accuracy {scores['token_accuracy']:.4f}   sentences={scores['n_sentences']} "
        f"entities={scores['n_gold_entities']}",
        "",
    ]
    width = max([len("type"), len("overall")] + [len(k) for k in scores["per_type"]])
    lines.append(f"{'type'.ljust(width)}  precision  recall  f1      support  predicted")
    rows = list(scores["per_type"].items()) + [("overall", {
        "precision": scores["precision"], "recall": scores["recall"], "f1": scores["f1"],
        "support": scores["n_gold_entities"], "predicted": scores["n_predicted_entities"]})]
    for kind, row in rows:
        lines.append(f"{kind.ljust(width)}  {row['precision']:.4f}     {row['recall']:.4f}  {row['f1']:.4f}  "
                     f"{str(row['support']).ljust(7)}  {row['predicted']}")
    return "\n".join(lines)
