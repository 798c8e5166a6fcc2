"""The spans a question-answering window can answer with, and the characters of a span's tokens."""

from __future__ import annotations

from typing import Any

import numpy as np

N_BEST = 20  # start and end tokens kept per window (run_qa's n_best_size), and candidates per question


def window_spans(start: np.ndarray, end: np.ndarray, window: Any, side: int, max_answer_len: int) -> list[tuple]:
    """Return (logit, first token, last token) of the spans of a window's best `N_BEST` start and end tokens."""
    context = np.flatnonzero(np.array([s == side for s in window.sequence_ids], dtype=bool))  # may be empty
    starts = context[np.argsort(-start[context], kind="stable")[:N_BEST]]
    ends = context[np.argsort(-end[context], kind="stable")[:N_BEST]]
    length = ends[None, :] - starts[:, None] + 1
    scores = start[starts][:, None] + end[ends][None, :]
    valid = np.argwhere((length >= 1) & (length <= max_answer_len))
    return [(float(scores[a, b]), int(starts[a]), int(ends[b])) for a, b in valid]


def character_span(window: Any, side: int, first: int, last: int, align: bool) -> tuple[int, int]:
    """Find the characters of tokens first..last; `align` widens them to the tokenizer's words (transformers' rule)."""
    begin, finish = window.offsets[first][0], window.offsets[last][1]
    if align:
        words = window.token_to_word(first), window.token_to_word(last)
        if None not in words:
            begin, finish = window.word_to_chars(words[0], side)[0], window.word_to_chars(words[1], side)[1]
    return begin, finish
