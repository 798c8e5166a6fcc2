"""Entities for token classification: entity spans from IOB2 tags and entity-level P/R/F1 scores."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import InputError


@dataclass(frozen=True)
class Entity:
    """One entity: its type and the half-open word range [start, end), plus text and characters when known.

    Entities from transformers' pipeline (`predict(aggregation=...)`) have no word range: `start` is the token index
    of an `aggregation='none'` entry and None otherwise, `end` is None.
    """

    type: str
    start: int | None
    end: int | None
    text: str = ""
    char_start: int | None = None
    char_end: int | None = None
    score: float | None = field(default=None, compare=False)


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
    """Entity-level precision / recall / F1 (exact type and span match), per type and micro-averaged; token accuracy.

    The numbers seqeval's default (CoNLL) mode gives, without its dependency.

    Parameters
    ----------
    true_tags, predicted_tags : sequence of list of str
        IOB2 tags, one list per sentence, the same lengths (a stray I-X starts an entity, as conlleval reads it).

    Returns
    -------
    dict
        `precision`, `recall`, `f1` (micro), `token_accuracy`, the counts, and `per_type` ({type: {precision,
        recall, f1, support, predicted}}).

    Examples
    --------
    >>> from bertkit import entity_scores
    >>> round(entity_scores([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "O"]])["f1"], 4)
    0.6667
    """
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
    overall = {k: scores[k] for k in ("precision", "recall", "f1")}
    overall.update(support=scores["n_gold_entities"], predicted=scores["n_predicted_entities"])
    for kind, row in [*scores["per_type"].items(), ("overall", overall)]:
        lines.append(
            f"{kind.ljust(width)}  {row['precision']:.4f}     {row['recall']:.4f}  {row['f1']:.4f}  "
            f"{str(row['support']).ljust(7)}  {row['predicted']}"
        )
    return "\n".join(lines)
