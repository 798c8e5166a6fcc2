"""Training and dev data for fine-tuning: read, check labels, hold out dev, turn into model inputs."""

from __future__ import annotations

import bisect
import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers import AutoTokenizer

from ...errors import InputError
from ...io.conll import TaggedData, read_labelled_text, read_tagged
from ...io.readers import LabelledData, check_label_separator
from ...io.squad import QAExample, read_squad
from ...io.text_files import file_sha256
from ..labels import check_class_counts, check_known_labels, check_labels, split_holdout
from ..qa import qa_windows
from .examples import Example, text_examples, token_examples

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ...encoder.encode import Encoder

SINGLE_LABEL = "single_label_classification"
MULTI_LABEL = "multi_label_classification"
REGRESSION = "regression"
TOKENS = "token_classification"
QA = "question_answering"


@dataclass
class Columns:
    """Where a text task's data is: the text (and pair) column, the label column, a header, the label separator."""

    text: str | int | None = None
    label: str | int | None = None
    pair: str | int | None = None
    header: bool | None = None
    label_separator: str = ","

    def __post_init__(self) -> None:
        check_label_separator(self.label_separator)


@dataclass
class Prepared:
    """The training and dev data turned into model inputs, with what the run directory must record about them."""

    problem: str  # SINGLE_LABEL | MULTI_LABEL | REGRESSION | TOKENS (transformers' problem_type, tokens aside)
    labels: list[str]  # class names (regression: ["score"])
    train: list[Example]
    dev_inputs: list  # text: strings; pair: (text, pair) tuples; token: word lists
    dev_gold: list  # class labels, label tuples (multi-label), floats (regression), tag sequences (token)
    data_record: dict
    notes: list[str]


@dataclass
class _Source:
    """The training file, the dev file (None: a seeded `dev_share` of train held out), the rows limit."""

    train: str | Path
    dev: str | Path | None
    seed: int
    dev_share: float
    limit: int | None

    @property
    def dev_name(self) -> str | Path:
        """The dev data as messages name it."""
        return self.dev or f"the held-out part of {self.train}"

    def holdout(self, items: list, labels: list, stratify: bool = False) -> tuple[list, list, list, list]:
        """Hold the dev part out of the training items: (train items, dev items, train labels, dev labels)."""
        return split_holdout(items, labels, self.dev_share, self.seed, stratify=stratify)

    def record(self, train_rows: int, dev_rows: int) -> dict:
        """Return what the run's record says of the data: files, their digests, rows, and how dev was held out."""
        if dev_rows == 0:
            raise InputError(
                f"the dev set{f' {self.dev}' if self.dev else ''} is empty; give a dev file with examples."
            )
        record = {
            "train": str(Path(self.train).resolve()),
            "train_sha256": file_sha256(self.train),
            "train_rows": train_rows,
            "limit": self.limit,
            "dev_rows": dev_rows,
        }
        if self.dev is not None:
            record.update(dev=str(Path(self.dev).resolve()), dev_sha256=file_sha256(self.dev))
        else:
            record["dev"] = f"{self.dev_share:.0%} held out of {self.train} (seed {self.seed})"
        return record


def _read(path: str | Path, task: str, problem: str | None, columns: Columns) -> LabelledData:
    kind = {REGRESSION: "numeric", MULTI_LABEL: "multi"}.get(problem or "", "categorical")
    return read_labelled_text(
        path,
        columns.text,
        columns.label,
        columns.header,
        paired=task == "pair",
        pair_column=columns.pair,
        label_kind=kind,
        label_separator=columns.label_separator,
    )


def _numbers_with_decimals(labels: list) -> bool:
    """Tell whether most labels are numbers, some not whole: scores (a stray word is then refused at its line)."""
    numbers = []
    for label in labels:
        with contextlib.suppress(TypeError, ValueError):
            numbers.append(float(label))
    return len(numbers) * 2 > len(labels) and any(not value.is_integer() for value in numbers if math.isfinite(value))


def prepare(
    task: str,
    problem: str,
    tokenizer: PreTrainedTokenizerBase,
    train: str | Path,
    dev: str | Path | None,
    max_length: int,
    seed: int,
    dev_share: float,
    limit: int | None,
    columns: Columns,
    doc_stride: int | None = None,
) -> Prepared:
    """Read, check and hold out the data of a text, pair, token or qa task, and turn it into model inputs."""
    source = _Source(train, dev, seed, dev_share, limit)
    if task == "token":
        return _prepare_token(tokenizer, source, max_length)
    if task == "qa":
        return _prepare_qa(tokenizer, source, max_length, doc_stride)
    data = _read(train, task, problem, columns)
    notes = []
    if problem == SINGLE_LABEL and _numbers_with_decimals(data.labels):
        problem = REGRESSION
        notes.append(
            f"{train}: the labels are numbers with decimals, so a one-output regressor is trained (mean "
            "squared error; scored by Spearman correlation on dev)."
        )
        try:
            data = _read(train, task, problem, columns)
        except InputError as exc:
            raise InputError(f"{exc} (Most labels are numbers with decimals, so {train} is read as scores.)") from None
    inputs = list(zip(data.texts, data.pairs)) if data.pairs is not None else list(data.texts)
    inputs, labels = inputs[:limit], data.labels[:limit]
    if problem == SINGLE_LABEL:
        labels = [str(v) for v in check_labels(labels, str(train), data.lines)]
        classes, codes = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
        check_class_counts(np.array(classes.tolist()), codes, 0)
    if dev is not None:
        dev_data = _read(dev, task, problem, columns)
        dev_inputs = list(zip(dev_data.texts, dev_data.pairs)) if dev_data.pairs is not None else list(dev_data.texts)
        dev_labels = [str(v) for v in dev_data.labels] if problem == SINGLE_LABEL else dev_data.labels
    else:
        inputs, dev_inputs, labels, dev_labels = source.holdout(inputs, labels, stratify=problem == SINGLE_LABEL)
    names = _label_names(problem, labels, dev_labels, source)
    index = {name: i for i, name in enumerate(names)}
    targets = [_target(problem, label, index) for label in labels]
    train_examples, cut = text_examples(tokenizer, inputs, targets, max_length)
    _, dev_cut = text_examples(tokenizer, dev_inputs, None, max_length)
    what = "pairs" if task == "pair" else "texts"
    how = " (longest first)" if task == "pair" else ""
    notes += [
        f"{n} {where} {what} were longer than {max_length} tokens and were truncated{how} (--max-length)."
        for n, where in ((cut, "training"), (dev_cut, "dev"))
        if n
    ]
    record = source.record(len(inputs), len(dev_inputs))
    record.update(text_column=columns.text, label_column=columns.label, header=columns.header)
    if task == "pair":
        record["pair_column"] = columns.pair
    if problem == MULTI_LABEL:
        record["label_separator"] = columns.label_separator
    return Prepared(problem, names, train_examples, dev_inputs, dev_labels, record, notes)


def _label_names(problem: str, labels: list, dev_labels: list, source: _Source) -> list[str]:
    """Return the class names (regression: ["score"]), the dev labels checked against them."""
    if problem == REGRESSION:
        return ["score"]
    if problem == MULTI_LABEL:
        labels, dev_labels = [n for row in labels for n in row], [n for row in dev_labels for n in row]
        if not labels:
            raise InputError(f"{source.train}: no row has a label; a multi-label classifier needs labels to learn.")
    names = sorted(set(labels))
    check_known_labels(source.dev_name, dev_labels, names, source.train)
    return names


def _target(problem: str, label: Any, index: dict[str, int]) -> int | float | list[float]:
    """Return what the loss compares with: a class index, a float, or a multi-hot list."""
    if problem == REGRESSION:
        return float(label)
    if problem == MULTI_LABEL:
        hot = [0.0] * len(index)
        for name in label:
            hot[index[name]] = 1.0
        return hot
    return index[label]


def _prepare_token(tokenizer: PreTrainedTokenizerBase, source: _Source, max_length: int) -> Prepared:
    """CoNLL sentences as examples labelled at each word's first sub-token (long ones in windows), a data record."""
    train, dev = source.train, source.dev
    data = read_tagged(train)
    words, tags = data.words[: source.limit], data.tags[: source.limit]
    if dev is not None:
        dev_data = read_tagged(dev)
        dev_words, dev_tags = dev_data.words, dev_data.tags
    else:
        words, dev_words, tags, dev_tags = source.holdout(words, tags)
    names = TaggedData(Path(train), words, tags, []).labels
    if names == ["O"]:
        raise InputError(f"{train}: every tag is 'O'; a tagger needs some entity tags (B-TYPE / I-TYPE) to learn.")
    check_known_labels(source.dev_name, [t for s in dev_tags for t in s], names, train)
    index = {name: i for i, name in enumerate(names)}
    train_examples, split_count = token_examples(tokenizer, words, [[index[t] for t in s] for s in tags], max_length)
    _, dev_split = token_examples(tokenizer, dev_words, [[0] * len(s) for s in dev_words], max_length)
    notes = [
        f"{n} {where} sentences were longer than {max_length} tokens and were read in overlapping windows, as the "
        "tagger reads them (every word keeps its label)."
        for n, where in ((split_count, "training"), (dev_split, "dev"))
        if n
    ]
    if data.converted_from_iob1:
        notes.append(f"{train}: IOB1 tags (entities starting with I-) were converted to IOB2.")
    record = source.record(len(words), len(dev_words))
    record["columns"] = data.columns
    return Prepared(TOKENS, names, train_examples, dev_words, dev_tags, record, notes)


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


def _prepare_qa(tokenizer: Any, source: _Source, max_length: int, doc_stride: int | None) -> Prepared:
    """SQuAD (or flat JSONL) questions as windows with answer labels (run_qa.py's training features), a data record."""
    train = source.train
    examples = read_squad(train).examples[: source.limit]
    if source.dev is not None:
        dev_examples = read_squad(source.dev).examples
    else:
        examples, dev_examples, _, _ = source.holdout(examples, [0] * len(examples))
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
    record = source.record(len(examples), len(dev_examples))
    record.update(doc_stride=stride, negatives=any(not e.answerable for e in examples + dev_examples))
    gold = [[text for text, _ in e.answers] for e in dev_examples]
    return Prepared(QA, ["start", "end"], train_examples, dev_examples, gold, record, notes)


def word_tokenizer(encoder: Encoder) -> PreTrainedTokenizerBase:
    """Return the tokenizer for pre-split words: byte-level BPE (RoBERTa) with add_prefix_space=True.

    Each word then reads as a word does mid-sentence, the first one too.
    """
    if getattr(encoder.tokenizer.backend_tokenizer.pre_tokenizer, "add_prefix_space", True):
        return encoder.tokenizer
    source = encoder.source
    return AutoTokenizer.from_pretrained(source.path, add_prefix_space=True, local_files_only=source.kind != "hub")
