"""Model inputs for fine-tuning: token ids per example, word-aligned labels, long-sentence windows, padded batches."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ...encoder import tokenize as tok

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100  # positions the loss skips: special tokens, padding, and every sub-token after a word's first


@dataclass
class Example:
    """One model input: token ids (+ type ids), a label (text) or one label per token (token task)."""

    input_ids: list[int]
    token_type_ids: list[int]
    labels: int | float | list[int] | list[float]  # class, score, tag per token, or multi-hot


def text_examples(
    tokenizer: PreTrainedTokenizerBase, inputs: Sequence, labels: Sequence | None, max_length: int
) -> tuple[list[Example], int]:
    """Tokenize texts or (text, pair) tuples, cut to `max_length` as inference cuts them; also say how many were cut."""
    paired = bool(inputs) and isinstance(inputs[0], tuple)
    texts = [text for text, _ in inputs] if paired else list(inputs)
    pairs = [pair for _, pair in inputs] if paired else None
    encoded = tok.encode(tokenizer, texts, pairs, max_length=max_length)
    examples = [Example(e.ids, e.type_ids, labels[row] if labels is not None else -1) for row, e in enumerate(encoded)]
    return examples, sum(e.truncated for e in encoded)


def token_examples(
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[Sequence[str]],
    tag_ids: Sequence[Sequence[int]],
    max_length: int,
) -> tuple[list[Example], int]:
    """One example per part of each sentence (a long one's overflow windows, as the tagger reads it).

    Each word's tag id sits on its first sub-token; every other position is ignored by the loss. Also return how many
    sentences needed windows.
    """
    encoded = tok.encode(tokenizer, [list(s) for s in sentences], max_length=max_length, long_text="window")
    examples = []
    for item, tags in zip(encoded, tag_ids):
        starts = tok.word_starts(item.word_ids())
        for part, positions in zip(item.parts, tok.part_positions(item)):
            labels = [IGNORE_INDEX if p is None or starts[p] is None else tags[starts[p]] for p in positions]
            examples.append(Example(part.ids, part.type_ids, labels))
    return examples, sum(1 for item in encoded if item.windows)


def collate(examples: Sequence[Example], pad_token_id: int, with_type_ids: bool) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest example; labels int64 (classes, tags; -100 ignored) or float32 (scores, multi-hot)."""
    ids, mask, type_ids = tok.pad_ids(
        [e.input_ids for e in examples], [e.token_type_ids for e in examples], pad_token_id
    )
    first = examples[0].labels
    if isinstance(first, list) and first and not isinstance(first[0], float):  # one tag id per token
        labels = torch.full(ids.shape, IGNORE_INDEX, dtype=torch.int64)  # as wide as the inputs, whatever the labels
        for row, example in enumerate(examples):
            labels[row, : len(example.labels)] = torch.tensor(example.labels, dtype=torch.int64)
    else:
        floats = isinstance(first, (float, list))  # a score, or multi-hot rows
        labels = torch.tensor([e.labels for e in examples], dtype=torch.float32 if floats else torch.int64)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    if with_type_ids:
        batch["token_type_ids"] = type_ids
    return batch


def length_grouped_batches(
    lengths: Sequence[int], batch_size: int, rng: np.random.Generator, group: int = 50
) -> list[list[int]]:
    """Shuffle, sort within groups of `group` batches by length, then shuffle the batches: little padding."""
    order = rng.permutation(len(lengths))
    batches = []
    span = batch_size * group
    for start in range(0, len(order), span):
        members = sorted(order[start : start + span].tolist(), key=lambda i: -lengths[i])
        batches += [members[i : i + batch_size] for i in range(0, len(members), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


_WORD = re.compile(r"\S+")
_EDGE_PUNCTUATION = "\"'()[]{}<>«»“”‘’,;:!?."


def split_words(text: str) -> list[tuple[str, int, int]]:
    """Split raw text into CoNLL-style words with character spans: whitespace, then punctuation peeled off the edges.

    'lamb.' → 'lamb', '.'; 'Germany's' → 'Germany', ''s'; abbreviations such as 'U.S.' and dates such as
    '1996-08-22' stay whole, as in CoNLL-2003.
    """
    words = []
    for match in _WORD.finditer(text):
        start, end = match.span()
        leading, trailing = [], []
        while start < end and text[start] in _EDGE_PUNCTUATION and end - start > 1:
            leading.append((text[start], start, start + 1))
            start += 1
        while end - start > 1 and text[end - 1] in _EDGE_PUNCTUATION:
            core = text[start:end]
            if text[end - 1] == "." and "." in core[:-1] and core[:-1].replace(".", "").isalpha():
                break  # abbreviation: U.S.
            trailing.insert(0, (text[end - 1], end - 1, end))
            end -= 1
        core = text[start:end]
        if len(core) > 2 and core[-2:].lower() == "'s":
            trailing.insert(0, (core[-2:], end - 2, end))
            end -= 2
        words += leading + [(text[start:end], start, end)] + trailing
    return words
