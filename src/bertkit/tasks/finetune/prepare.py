"""Training and dev data for fine-tuning: read, check labels, hold out dev, turn into model inputs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from ...errors import InputError
from ...io.conll import TaggedData, read_labelled_text, read_tagged
from ...io.readers import file_sha256
from ..labels import check_class_counts, check_known_labels, check_labels, split_holdout
from .examples import Example, text_examples, token_examples, word_pieces


@dataclass
class Prepared:
    """The training and dev data turned into model inputs, with what the run directory must record about them."""

    labels: list[str]
    train: list[Example]
    dev_inputs: list  # text: strings; token: word lists
    dev_gold: list  # text: labels; token: tag sequences
    data_record: dict
    notes: list[str]


def prepare(
    task, tokenizer, train, dev, max_length, seed, dev_share, limit, text_column, label_column, header
) -> Prepared:
    if task == "text":
        return _prepare_text(
            tokenizer, train, dev, max_length, seed, dev_share, limit, text_column, label_column, header
        )
    return _prepare_token(tokenizer, train, dev, max_length, seed, dev_share, limit)


def _prepare_text(
    tokenizer, train, dev, max_length, seed, dev_share, limit, text_column, label_column, header
) -> Prepared:
    data = read_labelled_text(train, text_column, label_column, header)
    texts, labels = data.texts[:limit], [str(v) for v in check_labels(data.labels[:limit], str(train), data.lines)]
    classes, codes = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
    check_class_counts(np.array(classes.tolist()), codes, 0)
    if dev is not None:
        dev_data = read_labelled_text(dev, text_column, label_column, header)
        dev_texts, dev_labels = dev_data.texts, [str(v) for v in dev_data.labels]
        check_known_labels(dev, dev_labels, labels, train)
    else:
        texts, dev_texts, labels, dev_labels = split_holdout(texts, labels, dev_share, seed)
    names = sorted(set(labels))
    index = {name: i for i, name in enumerate(names)}
    train_examples, cut = text_examples(tokenizer, texts, [index[v] for v in labels], max_length)
    _, dev_cut = text_examples(tokenizer, dev_texts, None, max_length)
    notes = [
        f"{n} {where} texts were longer than {max_length} tokens and were truncated (--max-length)."
        for n, where in ((cut, "training"), (dev_cut, "dev"))
        if n
    ]
    record = _data_record(train, dev, len(texts), len(dev_texts), dev_share, seed, limit)
    record.update(text_column=text_column, label_column=label_column, header=header)
    return Prepared(names, train_examples, dev_texts, dev_labels, record, notes)


def _prepare_token(tokenizer, train, dev, max_length, seed, dev_share, limit) -> Prepared:
    data = read_tagged(train)
    words, tags = data.words[:limit], data.tags[:limit]
    if dev is not None:
        dev_data = read_tagged(dev)
        dev_words, dev_tags = dev_data.words, dev_data.tags
    else:
        words, dev_words, tags, dev_tags = split_holdout(words, tags, dev_share, seed, stratify=False)
    names = TaggedData(Path(train), words, tags, []).labels
    if names == ["O"]:
        raise InputError(f"{train}: every tag is 'O'; a tagger needs some entity tags (B-TYPE / I-TYPE) to learn.")
    check_known_labels(dev or f"the held-out part of {train}", [t for s in dev_tags for t in s], names, train)
    index = {name: i for i, name in enumerate(names)}
    pieces, split_count = word_pieces(tokenizer, words, max_length)
    train_examples = token_examples(pieces, [[index[t] for t in s] for s in tags])
    _, dev_split = word_pieces(tokenizer, dev_words, max_length)
    notes = [
        f"{n} {where} sentences were longer than {max_length} tokens and were split into pieces at word "
        "boundaries (every word keeps its label)."
        for n, where in ((split_count, "training"), (dev_split, "dev"))
        if n
    ]
    if data.converted_from_iob1:
        notes.append(f"{train}: IOB1 tags (entities starting with I-) were converted to IOB2.")
    record = _data_record(train, dev, len(words), len(dev_words), dev_share, seed, limit)
    record["columns"] = data.columns
    return Prepared(names, train_examples, dev_words, dev_tags, record, notes)


def word_tokenizer(encoder):
    """The tokenizer, able to take pre-split words: byte-level BPE (RoBERTa) needs add_prefix_space=True for that."""
    try:
        encoder.tokenizer([["a", "b"]], is_split_into_words=True)
        return encoder.tokenizer
    except ValueError:
        source = encoder.source
        return AutoTokenizer.from_pretrained(source.path, add_prefix_space=True, local_files_only=source.kind != "hub")


def _data_record(train, dev, train_rows, dev_rows, dev_share, seed, limit) -> dict:
    if dev_rows == 0:
        raise InputError(f"the dev set{f' {dev}' if dev else ''} is empty; give a dev file with examples.")
    record = {
        "train": str(train),
        "train_sha256": file_sha256(train),
        "train_rows": train_rows,
        "limit": limit,
        "dev_rows": dev_rows,
    }
    if dev is not None:
        record.update(dev=str(dev), dev_sha256=file_sha256(dev))
    else:
        record["dev"] = f"{dev_share:.0%} held out of {train} (seed {seed})"
    return record
