"""SQuAD scores by the official v2.0 evaluation script's rules: exact match, token F1, HasAns / NoAns, thresholds.

Written out because torchmetrics' `SQuAD` follows v1.1 (no unanswerable questions) and `evaluate` fetches its script.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence

from .report import EvaluationReport

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, punctuation removed, articles removed, white space collapsed (the official `normalize_answer`)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(gold: str, predicted: str) -> int:
    """1 when the normalised answers are equal, else 0."""
    return int(normalize_answer(gold) == normalize_answer(predicted))


def token_f1(gold: str, predicted: str) -> float:
    """Score the F1 of the normalised answers' words; 1 when both are empty, 0 when one is."""
    gold_tokens, predicted_tokens = normalize_answer(gold).split(), normalize_answer(predicted).split()
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(
    gold: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """Score as the official SQuAD v2.0 script (`evaluate-v2.0.py data pred [--na-prob-file] [--na-prob-thresh]`).

    Parameters
    ----------
    gold : mapping of id to list of str
        Each question's gold answer texts; an empty list for an unanswerable question.
    predictions : mapping of id to str
        Each question's answer ("" for no answer); a question without one is left out of every score.
    na_probs : mapping of id to float, optional
        A no-answer score per question (bertkit: the null score minus the best span's, in logits); with it an answer
        counts as "" where its score is over `na_prob_thresh`, and the best thresholds are searched.
    na_prob_thresh : float
        The threshold over which a question is taken as unanswered.

    Returns
    -------
    dict
        exact, f1, total; HasAns_/NoAns_ exact, f1, total where there are such questions; with `na_probs`,
        best_exact, best_exact_thresh, best_f1, best_f1_thresh. Scores are percentages, as the script prints them.
    """
    has_answer = {qid: bool(answers) for qid, answers in gold.items()}
    exact_raw: dict[str, float] = {}
    f1_raw: dict[str, float] = {}
    for qid, answers in gold.items():
        if qid not in predictions:
            continue
        kept = [a for a in answers if normalize_answer(a)] or [""]
        exact_raw[qid] = max(exact_match(a, predictions[qid]) for a in kept)
        f1_raw[qid] = max(token_f1(a, predictions[qid]) for a in kept)
    probs = {qid: 0.0 for qid in gold} if na_probs is None else dict(na_probs)
    exact = _thresholded(exact_raw, probs, has_answer, na_prob_thresh)
    f1 = _thresholded(f1_raw, probs, has_answer, na_prob_thresh)
    result = _summary(exact, f1, list(exact))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        ids = [qid for qid in exact if has_answer[qid] == wanted]
        if ids:
            result.update({f"{prefix}_{k}": v for k, v in _summary(exact, f1, ids).items()})
    if na_probs is not None and exact_raw:
        for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
            result[f"best_{name}"], result[f"best_{name}_thresh"] = _best_threshold(predictions, raw, probs, has_answer)
    return result


def _thresholded(scores: dict, probs: Mapping, has_answer: dict, threshold: float) -> dict[str, float]:
    return {qid: float(not has_answer[qid]) if probs[qid] > threshold else s for qid, s in scores.items()}


def _summary(exact: dict, f1: dict, ids: list[str]) -> dict[str, float]:
    total = len(ids)
    if not total:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    return {
        "exact": 100.0 * sum(exact[k] for k in ids) / total,
        "f1": 100.0 * sum(f1[k] for k in ids) / total,
        "total": total,
    }


def _best_threshold(predictions: Mapping, scores: dict, probs: Mapping, has_answer: dict) -> tuple[float, float]:
    """Find the best threshold as the official `find_best_thresh`: answer by rising no-answer score, keep the best.

    Two departures, so that the threshold returned gives the score returned: the start ("no answer anywhere") lies
    below every score, not at 0.0 (bertkit's scores are logit differences, often negative, not probabilities); and
    questions of equal score are answered together, as a threshold answers them.
    """
    scored = sorted((k for k in probs if k in scores), key=lambda k: probs[k])
    current = best = sum(1 for k in scored if not has_answer[k])
    lowest = probs[scored[0]] if scored else 0.0
    threshold = 0.0 if lowest > 0 else lowest - 1.0
    for position, qid in enumerate(scored):
        current += scores[qid] if has_answer[qid] else (-1 if predictions[qid] else 0)
        tied = position + 1 < len(scored) and probs[scored[position + 1]] == probs[qid]
        if current > best and not tied:
            best, threshold = current, probs[qid]
    return 100.0 * best / len(scores), float(threshold)


def format_squad_scores(scores: Mapping[str, float]) -> str:
    """Format the scores as `bertkit evaluate` prints them: exact match and F1, the HasAns / NoAns rows, thresholds."""
    lines = [f"{'':10} {'exact':>8} {'F1':>8} {'questions':>10}"]
    for prefix, name in (("", "all"), ("HasAns_", "HasAns"), ("NoAns_", "NoAns")):
        if f"{prefix}total" in scores:
            row = [scores[f"{prefix}exact"], scores[f"{prefix}f1"]]
            lines.append(f"{name:10} {row[0]:8.2f} {row[1]:8.2f} {int(scores[f'{prefix}total']):10d}")
    if "threshold" in scores:
        lines.append(f"scored at the run's no-answer threshold: {scores['threshold']:.4f} (null − best span, logits)")
    if "best_f1" in scores:
        for key, name in (("f1", "F1"), ("exact", "exact")):
            best = f"{scores[f'best_{key}_thresh']:.4f} ({name} {scores[f'best_{key}']:.2f})"
            lines.append(f"best threshold on these questions for {name + ':':6} {best}")
    return "\n".join(lines)


class SquadReport(EvaluationReport):
    """SQuAD scores (a dict of the official script's keys), printed as `bertkit evaluate` prints them."""

    def __init__(self, metrics: dict) -> None:
        super().__init__(metrics, "squad")

    def text(self) -> str:
        """Return the scores as `bertkit evaluate` prints them."""
        return format_squad_scores(self)
