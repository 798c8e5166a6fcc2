"""Long inputs as overlapping windows: split into pieces the model can take, batch them by length, pad them, and
stitch token vectors back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..errors import InputError
from . import tokenize as tok


@dataclass
class InputWindow:
    """A sequence the model sees: a whole input (window 0 of 1), or one window of a long input."""

    row: int
    ids: list[int]
    type_ids: list[int]
    window: int = 0
    content_range: tuple[int, int] = (0, 0)  # [start, end) of full-sequence positions this window's content covers


def default_overlap(budget: int) -> int:
    """Tokens two neighbouring windows share when the caller gives no stride: a quarter of a window."""
    return budget // 4


def window_spans(n_content: int, budget: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) of each window over `n_content` tokens, as the fast tokenizer's overflow makes them.

    `tokenizer(..., truncation=True, max_length=L, stride=overlap, return_overflowing_tokens=True)` cuts a text into
    windows of `budget` = L - special tokens, each starting `budget - overlap` after the previous one, the last
    one ending at the text's end (tests/test_encode.py holds the two equal).
    """
    if not 0 <= overlap < budget:
        raise InputError(f"stride={overlap}: give a number of overlapping tokens from 0 to {budget - 1}.")
    spans, start = [], 0
    while True:
        end = min(start + budget, n_content)
        spans.append((start, end))
        if end == n_content:
            return spans
        start += budget - overlap


def split_into_windows(
    encoded: Sequence[tok.Encoded], max_length: int, stride: int | None, windowed_rows: list[int]
) -> list[InputWindow]:
    """One piece per input that fits; overlapping windows (rows appended to `windowed_rows`) for longer ones."""
    pieces = []
    for row, item in enumerate(encoded):
        if len(item.ids) <= max_length:
            pieces.append(InputWindow(row, item.ids, item.type_ids))
            continue
        windowed_rows.append(row)
        start, end = item.content_bounds()
        ids, type_ids = item.encoding.ids, item.encoding.type_ids
        budget = max_length - (start + len(ids) - end)
        if budget < 1:
            raise InputError(f"max_length={max_length} leaves no room for text between the special tokens.")
        overlap = default_overlap(budget) if stride is None else stride
        for window, (a, b) in enumerate(window_spans(end - start, budget, overlap)):
            keep = list(range(start)) + list(range(start + a, start + b)) + list(range(end, len(ids)))
            pieces.append(
                InputWindow(row, [ids[p] for p in keep], [type_ids[p] for p in keep], window, (start + a, start + b))
            )
    return pieces


def pad_windows(pieces: Sequence[InputWindow], pad_token_id: int) -> tok.Batch:
    """Right-pad pieces into a batch (no token views: the model needs ids only)."""
    ids, mask, types = tok.pad_ids([p.ids for p in pieces], [p.type_ids for p in pieces], pad_token_id)
    return tok.Batch(ids, mask, types, [], [])


def stitch(item: tok.Encoded, windows: list) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Give every token of a long input exactly one vector: from the window where it has the most context."""
    windows.sort(key=lambda w: w[0].window)
    start, end = item.content_bounds()
    full = len(item.encoding.ids)
    dim = windows[0][1].shape[-1]
    out = windows[0][1].new_zeros((full, dim))
    best = torch.full((full,), -1, dtype=torch.long)
    for piece, vectors, _ in windows:
        a, b = piece.content_range
        positions = torch.arange(a, b)
        context = torch.minimum(positions - a, b - 1 - positions)
        better = context > best[a:b]
        out[a:b][better] = vectors[start : start + (b - a)][better]
        best[a:b] = torch.where(better, context, best[a:b])
    first, last = windows[0][1], windows[-1][1]
    out[:start] = first[:start]
    out[end:] = last[last.shape[0] - (full - end) :]
    return out, windows[0][2]


def sorted_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices of `lengths`, longest first, in batches of at most `batch_size` rows and (when given) `max_tokens`
    padded tokens, a row longer than that alone; callers put results back in input order."""
    chunks: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if (
            chunks
            and len(chunks[-1]) < batch_size
            and (max_tokens is None or (len(chunks[-1]) + 1) * lengths[chunks[-1][0]] <= max_tokens)
        ):
            chunks[-1].append(index)
        else:
            chunks.append([index])
    return chunks
