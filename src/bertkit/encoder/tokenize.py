"""Tokenization: texts (or pre-split words) → unpadded encodings (long-text policy applied) → padded `Batch`."""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InputError, quoted
from .batch import Batch
from .options import LONG_TEXT_POLICIES

logger = logging.getLogger(__name__)

if TYPE_CHECKING:  # torch is imported where tensors are made: `bertkit tokenize` runs without it
    import torch

PADDINGS = ("longest", "max_length")
_WORD = re.compile(r"\S+")

Text = str | Sequence[str]  # a raw string, or a list of the user's words


@dataclass
class Encoded:
    """One tokenized input before padding.

    The tokenizer's encoding of the whole input (or of its kept part), and for a long input read in windows, the
    tokenizer's overflow windows.
    """

    encoding: Any  # tokenizers.Encoding
    text: str  # what was tokenized (a list of words: the words joined by spaces)
    full_length: int = 0  # tokens before any truncation
    pair_text: str | None = None
    windows: list[Any] | None = None  # tokenizers.Encoding of each window (long_text='window'), in order
    stride: int = 0  # tokens two neighbouring windows share
    given_spans: list[tuple[int, int]] | None = None  # the words' spans when a list of words was given
    given_pair_spans: list[tuple[int, int]] | None = None

    @functools.cached_property
    def word_spans(self) -> list[tuple[int, int]]:
        """The character span of each user word in `text` (found only when asked: most calls never need it)."""
        return self.given_spans if self.given_spans is not None else _spans(self.text)

    @functools.cached_property
    def pair_word_spans(self) -> list[tuple[int, int]] | None:
        """The character span of each user word in `pair_text`; None without a pair."""
        if self.pair_text is None:
            return None
        return self.given_pair_spans if self.given_pair_spans is not None else _spans(self.pair_text)

    @property
    def truncated(self) -> bool:
        """Whether tokens were cut: fewer kept than `full_length`."""
        return len(self.ids) < self.full_length

    @property
    def ids(self) -> list[int]:
        """The encoding's token ids."""
        return self.encoding.ids

    @property
    def type_ids(self) -> list[int]:
        """The encoding's token type ids."""
        return self.encoding.type_ids

    @property
    def tokens(self) -> list[str]:
        """The encoding's tokens."""
        return self.encoding.tokens

    @property
    def num_words(self) -> int:
        """The words of the input: the given words, or the whitespace words of `text`."""
        return len(self.given_spans) if self.given_spans is not None else len(self.text.split())

    @property
    def parts(self) -> list[Any]:
        """What the model reads: the windows of a long input, else the encoding itself."""
        return self.windows or [self.encoding]

    def word_ids(self) -> list[int | None]:
        """Index of the user's word each token belongs to (None for special tokens), per sequence of a pair."""
        spans_by_sequence = {0: self.word_spans, 1: self.pair_word_spans or []}
        starts_by_sequence = {k: [s for s, _ in v] for k, v in spans_by_sequence.items()}
        result: list[int | None] = []
        encoding = self.encoding
        for offset, special, sequence in zip(encoding.offsets, encoding.special_tokens_mask, encoding.sequence_ids):
            if special or sequence is None:
                result.append(None)
                continue
            spans, starts = spans_by_sequence[sequence], starts_by_sequence[sequence]
            index = bisect.bisect_right(starts, offset[0]) - 1
            inside = index >= 0 and offset[0] < spans[index][1]
            result.append(index if inside else None)
        return result


def _spans(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _WORD.finditer(text)]


def word_spans_of(text: Text) -> tuple[str, list[tuple[int, int]] | None]:
    """Return the text to tokenize, and for a list of words each word's character span in the words joined by spaces.

    The spans are None for a string: its whitespace words, found when needed.
    """
    if isinstance(text, str):
        return text, None
    spans, cursor = [], 0
    for word in text:
        if not isinstance(word, str):
            raise InputError(f"words must be strings, got {type(word).__name__}: {word!r}")
        spans.append((cursor, cursor + len(word)))
        cursor += len(word) + 1
    return " ".join(text), spans


def content_bounds(special_mask: Sequence[int]) -> tuple[int, int]:
    """[start, end) of the non-special tokens of one sequence (specials sit at both ends)."""
    start, end = 0, len(special_mask)
    while start < end and special_mask[start]:
        start += 1
    while end > start and special_mask[end - 1]:
        end -= 1
    return start, end


def part_positions(item: Encoded) -> list[list[int | None]]:
    """For each part the model reads (`Encoded.parts`), each token's position in the whole encoding.

    None marks a window's own special tokens; a window's content starts where the one before ends, less the stride.
    """
    if not item.windows:
        return [list(range(len(item.ids)))]
    position = content_bounds(item.encoding.special_tokens_mask)[0]
    result: list[list[int | None]] = []
    for window in item.windows:
        a, b = content_bounds(window.special_tokens_mask)
        result.append([None] * a + list(range(position, position + b - a)) + [None] * (len(window.ids) - b))
        position += b - a - item.stride
    return result


def word_starts(word_ids: Sequence[int | None]) -> list[int | None]:
    """Per token, the word it starts (a word's first sub-token: where a tagger reads and learns its tag), else None."""
    return [w if w is not None and (k == 0 or word_ids[k - 1] != w) else None for k, w in enumerate(word_ids)]


def check_texts(texts: str | Sequence, name: str = "texts") -> list:
    """Texts as a list, rejecting None/NaN and non-strings with the row number; '' is valid.

    One string is one text: the rule of every bertkit embed, transform and predict.
    """
    checked = [texts] if isinstance(texts, str) else list(texts)
    for row, text in enumerate(checked):
        if text is None or (isinstance(text, float) and math.isnan(text)):
            raise InputError(f"{name}[{row}] is missing (None/NaN); give a string ('' is fine).")
        words = isinstance(text, (list, tuple)) and all(isinstance(w, str) for w in text)
        if not isinstance(text, str) and not words:
            raise InputError(
                f"{name}[{row}] is a {type(text).__name__}, not a string or a list of words: {quoted(text)}"
            )
    return checked


def check_inputs(texts: Sequence[Text], pairs: Sequence[str] | None) -> tuple[list, list | None]:
    """Texts and their pairs checked (`check_texts`), one pair per text."""
    texts, pairs = check_texts(texts), None if pairs is None else check_texts(pairs, "text_pair")
    if pairs is not None and len(pairs) != len(texts):
        raise InputError(f"{len(texts)} texts but {len(pairs)} text pairs; give one pair per text.")
    return texts, pairs


def encode(
    tokenizer: Any,  # a transformers fast tokenizer, or anything with its `backend_tokenizer`
    texts: Sequence[Text],
    pairs: Sequence[str] | None = None,
    *,
    max_length: int,
    long_text: str = "truncate",
    direction: str = "right",
    stride: int | None = None,
    window_side: str = "second",
    offsets: bool = True,
) -> list[Encoded]:
    """Tokenize without padding and apply the long-text policy.

    The policies: 'truncate' (the tokenizer's own truncation, longest first for pairs; `direction='right'` keeps a
    text's beginning, 'left' its end), 'error', 'window' (the tokenizer's overflow windows, `stride` tokens shared;
    for pairs, windows over the `window_side` text, the other one whole in each), or 'keep' (no limit). Callers pass
    checked values (`EmbedOptions` checks the user's); an unknown policy is still refused, never taken for 'window'.
    `offsets=False`: the encodings carry no character offsets (nor word ids from them), for sentence vectors, which
    read none: tokenizing SST-2 dev takes 24 ms instead of 32 (the same ids, type ids, special tokens and windows).
    """
    if long_text not in (*LONG_TEXT_POLICIES, "keep"):
        raise InputError(f"long_text={long_text!r}: valid values are {', '.join(LONG_TEXT_POLICIES)}.")
    texts, pairs = check_inputs(texts, pairs)
    joined = [word_spans_of(text) for text in texts]
    pair_joined: list[Any] = [word_spans_of(pair) for pair in pairs] if pairs else [(None, None)] * len(texts)
    strings, second = [s for s, _ in joined], [s for s, _ in pair_joined] if pairs else None
    backend = tokenizer.backend_tokenizer
    with TOKENIZER_LOCK:
        raw = _encodings(backend, strings, second, fast=not offsets) if strings else []
    encoded = [
        Encoded(e, text, len(e.ids), pair, given_spans=spans, given_pair_spans=pair_spans)
        for e, (text, spans), (pair, pair_spans) in zip(raw, joined, pair_joined)
    ]
    too_long = [i for i, e in enumerate(encoded) if e.full_length > max_length]
    if not too_long or long_text == "keep":
        return encoded
    if long_text == "error":
        raise TextTooLong(too_long[0], encoded[too_long[0]].full_length, max_length, len(too_long))
    first_part = [strings[i] for i in too_long]
    second_part = [second[i] for i in too_long] if second else None
    if long_text == "truncate":
        # a long pair is cut first (the tokenizer would keep an overflow window per pair of windows of the two); not
        # from the left, which would move the offsets that word ids read
        if second_part is not None and direction == "right":
            parts = [
                _kept_part(encoded[row].encoding, first_part[n], second_part[n], max_length)
                for n, row in enumerate(too_long)
            ]
            first_part, second_part = [a for a, _ in parts], [b for _, b in parts]
        with TOKENIZER_LOCK:
            cut = _encodings(backend, first_part, second_part, max_length, fast=not offsets, direction=direction)
        for row, encoding in zip(too_long, cut):
            encoded[row].encoding = encoding
        return encoded
    truncation = "longest_first" if second_part is None else f"only_{window_side}"
    budget = max_length - backend.num_special_tokens_to_add(second is not None)
    overlap = budget // 4 if stride is None else stride  # checked where it entered (EmbedOptions, qa_windows)
    with TOKENIZER_LOCK:
        try:
            windows = _encodings(
                backend, first_part, second_part, max_length, fast=not offsets, strategy=truncation, stride=overlap
            )
        except Exception as exc:  # the tokenizers library's own refusal (e.g. no room left for the windowed text)
            raise InputError(f"long_text='window' with max_length={max_length}, stride={overlap}: {exc}") from None
    for row, encoding in zip(too_long, windows):
        encoded[row].windows = [encoding, *encoding.overflowing]
        encoded[row].stride = overlap
    return encoded


PAIR_MARGIN = 16  # tokens a pair's text keeps past `max_length` before it is cut: its cut decides where it ends


def _kept_part(full: Any, first: str, second: str, max_length: int) -> tuple[str, str]:
    """Return the beginning of each text of a pair that longest-first truncation to `max_length` keeps, and a margin.

    Cut by the pair's whole encoding (`full`) at the end of a word, so the truncation that follows keeps the same
    tokens, at the same offsets, with work bounded by `max_length` (a 100,000-character query and document took
    gigabytes of overflow windows). The longer text (on a tie, the second) keeps twice as much, so it stays the
    longer: the truncation gives it the odd token.
    """
    tokens = [
        [(span, word) for span, word, s in zip(full.offsets, full.word_ids, full.sequence_ids) if s == n]
        for n in (0, 1)
    ]
    keep = max_length + PAIR_MARGIN
    second_longer = len(tokens[1]) >= len(tokens[0])
    parts = []
    for text, kept, limit in zip((first, second), tokens, (keep * (2 - second_longer), keep * (1 + second_longer))):
        if len(kept) > limit:
            last = limit - 1
            while last + 1 < len(kept) and kept[last + 1][1] == kept[last][1]:  # to the end of its word
                last += 1
            text = text[: kept[last][0][1]]
        parts.append(text)
    return parts[0], parts[1]


def prompt_length(tokenizer: Any, prompt: str) -> int:
    """Tokens a prompt takes at the start of a text, as sentence-transformers counts them.

    With the leading special token, without the closing one.
    """
    with TOKENIZER_LOCK:
        ids = tokenizer(prompt)["input_ids"]
    return len(ids) - (1 if ids and ids[-1] in set(tokenizer.all_special_ids) else 0)


def _encodings(
    backend: Any, texts: list[str], pairs: list[str] | None, max_length: int = 0, fast: bool = False, **truncation: Any
) -> list:
    """Return the Rust tokenizer's encodings, straight from `encode_batch`: unpadded, cut at `max_length` (0: never).

    `truncation` is the rest of `enable_truncation`'s settings (strategy, stride, direction), as a transformers call
    would set them; a long text's overflow windows are each encoding's `overflowing`. The transformers call would also
    build Python lists of every id and offset, which bertkit does not read (on a GPU that was most of an embedding
    call's time). The caller holds `TOKENIZER_LOCK`.
    """
    if max_length:
        backend.enable_truncation(max_length, **truncation)
    else:
        backend.no_truncation()
    backend.no_padding()
    encode = backend.encode_batch_fast if fast else backend.encode_batch  # fast: without character offsets
    return encode(list(zip(texts, pairs)) if pairs is not None else texts, add_special_tokens=True)


# A transformers tokenizer call (like `_encodings`) sets the Rust tokenizer's truncation and padding state before
# encoding, so two threads calling it at once race ("Already borrowed"). Tokenizing is a small share of an embed call:
# serialise it.
TOKENIZER_LOCK = threading.RLock()


def pad(encoded: Sequence[Encoded], pad_token_id: int, pad_token: str, pad_to: int | None = None) -> Batch:
    """Right-pad a list of encodings into tensors; `pad_to` fixes the width (padding='max_length')."""
    input_ids, mask, type_ids = pad_ids([e.ids for e in encoded], [e.type_ids for e in encoded], pad_token_id, pad_to)
    width = input_ids.shape[1]
    tokens = [item.tokens + [pad_token] * (width - len(item.ids)) for item in encoded]
    word_ids = [item.word_ids() + [None] * (width - len(item.ids)) for item in encoded]
    return Batch(input_ids, mask, type_ids, tokens, word_ids, [e.truncated for e in encoded])


def pad_ids(
    id_rows: Sequence[Sequence[int]], type_rows: Sequence[Sequence[int]], pad_token_id: int, pad_to: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad the rows on the right: the one padding routine.

    Gives (input_ids, attention_mask, token_type_ids), each (rows, width) int64. The width is the longest row
    (per-batch padding) or `pad_to` when that is wider.
    """
    lengths = np.fromiter(map(len, id_rows), dtype=np.int64, count=len(id_rows))
    width = max(int(lengths.max(initial=0)), pad_to or 0, 1)  # a pass of empty rows (static models) too
    real = np.arange(width) < lengths[:, None]  # one flat copy of every row's ids: no per-row slicing
    total = int(lengths.sum())
    input_ids = np.full((len(id_rows), width), pad_token_id, dtype=np.int64)
    input_ids[real] = np.fromiter(itertools.chain.from_iterable(id_rows), dtype=np.int64, count=total)
    type_ids = np.zeros((len(id_rows), width), dtype=np.int64)
    type_ids[real] = np.fromiter(itertools.chain.from_iterable(type_rows), dtype=np.int64, count=total)
    mask = real.astype(np.int64)
    import torch

    return torch.from_numpy(input_ids), torch.from_numpy(mask), torch.from_numpy(type_ids)


class TextTooLong(InputError):
    """long_text='error' met a text longer than the limit; `row` is its index in the call's texts."""

    def __init__(self, row: int, tokens: int, max_length: int, count: int) -> None:
        self.row, self.tokens, self.max_length, self.count = row, tokens, max_length, count
        super().__init__(
            f"text {row} has {tokens} tokens, more than max_length={max_length} ({count} texts are too "
            "long). Use long_text='truncate' or long_text='window', or shorten it."
        )


def warn_truncated(cut: int, total: int, max_length: int, pairs: bool = False) -> None:
    """Say, in the one warning bertkit gives for it, that `cut` of `total` texts (or pairs) were cut at the limit."""
    if cut:
        what, advice = ("pairs", "shorten them (long_text='window' takes single texts)") if pairs else ("texts", "")
        advice = advice or "use long_text='window' to keep all of them"
        message = "%d of %d %s were longer than %d tokens and were truncated; %s."
        logger.warning(message, cut, total, what, max_length, advice)


def with_prompt(texts: list, prompt: str) -> list:
    """Return `texts` with `prompt` put before each (lists of words are refused: join them first)."""
    if not prompt:
        return texts
    if any(not isinstance(text, str) for text in texts):
        raise InputError(
            "a prompt goes before texts, not before lists of words; join the words, or leave the prompt out."
        )
    return [prompt + text for text in texts]
