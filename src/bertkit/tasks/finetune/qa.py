"""Fine-tuning for extractive question answering: run_qa.py's training features on bertkit's windows, its loss."""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import torch

from ...errors import InputError
from ...io.squad import QAExample, read_squad
from ..labels import split_holdout
from ..qa import qa_windows
from .examples import IGNORE_INDEX, Example
from .prepare import QA, Prepared, _data_record


def span_labels(window: Any, example: QAExample, side: int, cls_id: int | None) -> tuple[int, int]:
    """Return the first and last token of the example's answer in this window; [CLS] twice when it holds none."""
    cls = window.ids.index(cls_id) if cls_id in window.ids else 0
    if not example.answers:
        return cls, cls
    text, start_char = example.answers[0]
    end_char = start_char + len(text)
    context = [i for i, s in enumerate(window.sequence_ids) if s == side]
    offsets = [window.offsets[i] for i in context]
    if not context or offsets[0][0] > start_char or offsets[-1][1] < end_char:
        return cls, cls
    first = bisect.bisect_right([o[0] for o in offsets], start_char) - 1  # the last token starting at or before it
    last = bisect.bisect_left([o[1] for o in offsets], end_char)  # the first token ending at or after its end
    return context[first], context[max(first, last)]


def qa_examples(tokenizer: Any, examples: list[QAExample], max_length: int, doc_stride: int) -> tuple[list, int]:
    """One training example per window, labelled with its answer's tokens; and how many contexts needed windows."""
    windows = qa_windows(
        tokenizer, [e.question for e in examples], [e.context for e in examples], max_length, doc_stride
    )
    found, split = [], 0
    for example, parts in zip(examples, windows.parts):
        split += len(parts) > 1
        for window in parts:
            labels = span_labels(window, example, windows.context_side, tokenizer.cls_token_id)
            found.append(Example(window.ids, window.type_ids, labels))
    return found, split


def prepare_qa(
    tokenizer: Any,
    train: str | Path,
    dev: str | Path | None,
    max_length: int,
    seed: int,
    dev_share: float,
    limit: int | None,
    doc_stride: int | None,
) -> Prepared:
    """SQuAD (or flat JSONL) training and dev questions as windows with answer labels, and the run's data record."""
    examples = read_squad(train).examples[:limit]
    if dev is not None:
        dev_examples = read_squad(dev).examples
    else:
        examples, dev_examples, _, _ = split_holdout(examples, [0] * len(examples), dev_share, seed, stratify=False)
    room = max_length - tokenizer.num_special_tokens_to_add(pair=True)
    stride = min(128, room // 2) if doc_stride is None else doc_stride
    train_examples, split = qa_examples(tokenizer, examples, max_length, stride)
    if not any(e.answerable for e in examples):
        raise InputError(f"{train}: no question has an answer; a reader needs answers to learn where they are.")
    notes = []
    if split:
        notes.append(
            f"{split} training contexts did not fit {max_length} tokens with their question and were read in windows "
            f"sharing {stride} tokens (--doc-stride); a window without the whole answer learns 'no answer' ([CLS])."
        )
    record = _data_record(train, dev, len(examples), len(dev_examples), dev_share, seed, limit)
    record.update(doc_stride=stride, negatives=any(not e.answerable for e in examples + dev_examples))
    gold = [[text for text, _ in e.answers] for e in dev_examples]
    return Prepared(QA, ["start", "end"], train_examples, dev_examples, gold, record, notes)


def qa_loss(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
    """`Trainer`'s `compute_loss_func`: start + end cross-entropy over the step's labelled positions (two each)."""
    loss = sum(
        torch.nn.functional.cross_entropy(logits.float(), labels[:, k], reduction="sum", ignore_index=IGNORE_INDEX)
        for k, logits in enumerate((outputs.start_logits, outputs.end_logits))
    )
    return loss / (num_items_in_batch or max(1, int(labels.ne(IGNORE_INDEX).sum())))


def qa_baseline(prepared: Prepared) -> dict:
    """Score answering "no answer" to every dev question (F1, in percent)."""
    unanswerable = sum(1 for answers in prepared.dev_gold if not answers)
    return {"what": "always answering 'no answer'", "score": 100.0 * unanswerable / max(len(prepared.dev_gold), 1)}
