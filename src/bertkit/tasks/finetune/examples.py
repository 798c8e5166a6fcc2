"""Model inputs for fine-tuning: token ids per example, word-aligned labels, long-sentence pieces, padded batches."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ...encoder.tokenize import TOKENIZER_LOCK, pad_ids

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100  # positions the loss skips: special tokens, padding, and every sub-token after a word's first


@dataclass
class Example:
    """One model input: token ids (+ type ids), a label (text) or one label per token (token task)."""

    input_ids: list[int]
    token_type_ids: list[int]
    labels: int | float | list[int] | list[float]  # class, score, tag per token, or multi-hot


@dataclass
class WordPiece:
    """Part of a sentence that fits the model: words [first_word, first_word + n_words) and where each word starts."""

    sentence: int
    first_word: int
    n_words: int
    input_ids: list[int]
    token_type_ids: list[int]
    word_starts: list[int | None]  # per token: index of the word (within the piece) it starts, else None


def text_examples(
    tokenizer: PreTrainedTokenizerBase, inputs: Sequence, labels: Sequence | None, max_length: int
) -> tuple[list[Example], int]:
    """Tokenize texts or (text, pair) tuples, cut to `max_length` by the tokenizer; also return how many were cut."""
    paired = bool(inputs) and isinstance(inputs[0], tuple)
    texts = [text for text, _ in inputs] if paired else list(inputs)
    pairs = [pair for _, pair in inputs] if paired else None
    with TOKENIZER_LOCK:
        encoded = tokenizer(texts, pairs, truncation=True, max_length=max_length)
    examples = []
    for row, ids in enumerate(encoded["input_ids"]):
        type_ids = encoded["token_type_ids"][row] if "token_type_ids" in encoded else [0] * len(ids)
        examples.append(Example(ids, type_ids, labels[row] if labels is not None else -1))
    return examples, sum(1 for encoding in encoded.encodings if encoding.overflowing)


def word_pieces(
    tokenizer: PreTrainedTokenizerBase, sentences: Sequence[Sequence[str]], max_length: int
) -> tuple[list[WordPiece], int]:
    """Split sentences into pieces that fit max_length at word boundaries; also return how many needed several."""
    budget = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    with TOKENIZER_LOCK:
        whole = tokenizer([list(s) for s in sentences], is_split_into_words=True, add_special_tokens=False)
    spans: list[tuple[int, int, int]] = []
    split_sentences = 0
    for index, sentence in enumerate(sentences):
        counts = np.bincount([w for w in whole.word_ids(index) if w is not None], minlength=len(sentence))
        start, used = 0, 0
        pieces_before = len(spans)
        for word, count in enumerate(counts):
            if used + count > budget and word > start:
                spans.append((index, start, word))
                start, used = word, 0
            used += count
        spans.append((index, start, len(sentence)))
        split_sentences += len(spans) - pieces_before > 1
    with TOKENIZER_LOCK:
        encoded = tokenizer(
            [list(sentences[i][a:b]) for i, a, b in spans],
            is_split_into_words=True,
            truncation=True,
            max_length=max_length,
        )
    pieces = []
    for row, (index, start, end) in enumerate(spans):
        word_ids = encoded.word_ids(row)
        starts = [w if w is not None and (k == 0 or word_ids[k - 1] != w) else None for k, w in enumerate(word_ids)]
        ids = encoded["input_ids"][row]
        type_ids = encoded["token_type_ids"][row] if "token_type_ids" in encoded else [0] * len(ids)
        pieces.append(WordPiece(index, start, end - start, ids, type_ids, starts))
    return pieces, split_sentences


def token_examples(pieces: Sequence[WordPiece], tag_ids: Sequence[Sequence[int]]) -> list[Example]:
    """Label the first sub-token of each word with its tag id; every other position is ignored by the loss."""
    examples = []
    for piece in pieces:
        tags = tag_ids[piece.sentence]
        labels = [IGNORE_INDEX if w is None else tags[piece.first_word + w] for w in piece.word_starts]
        examples.append(Example(piece.input_ids, piece.token_type_ids, labels))
    return examples


def collate(examples: Sequence[Example], pad_token_id: int, with_type_ids: bool) -> dict[str, torch.Tensor]:
    """Pad a batch to its longest example; labels int64 (classes, tags; -100 ignored) or float32 (scores, multi-hot)."""
    ids, mask, type_ids = pad_ids([e.input_ids for e in examples], [e.token_type_ids for e in examples], pad_token_id)
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
