"""Pooling: token vectors → one vector per sentence (mask-aware) or per word (sub-tokens → the user's words)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from ..errors import InputError, quoted

SENTENCE_POOLINGS = ("cls", "pooler", "mean", "max", "none")
SUBTOKEN_POOLINGS = ("first", "last", "mean", "first_last")


def parse_pooling(spec: str) -> tuple[str, ...]:
    """'mean', or several joined by '+' ('cls+mean'), concatenated in that order; 'none' stands alone."""
    return _parse_text(spec) if isinstance(spec, str) else _parse_text.__wrapped__(spec)


@functools.lru_cache(maxsize=256)
def _parse_text(spec: str) -> tuple[str, ...]:
    """Parse a pooling spec's text: once per spec in a process."""
    parts = tuple(part.strip().lower() for part in str(spec).split("+"))
    for part in parts:
        if part not in SENTENCE_POOLINGS:
            raise InputError(
                f"pooling={quoted(spec)}: unknown pooling {quoted(part)}. Valid: {', '.join(SENTENCE_POOLINGS)}, "
                "or several joined with '+' (e.g. 'cls+mean')."
            )
    if "none" in parts and len(parts) > 1:
        raise InputError(f"pooling={quoted(spec)}: 'none' (token vectors) cannot be combined with other poolings.")
    if len(set(parts)) != len(parts):
        raise InputError(f"pooling={quoted(spec)}: a pooling is listed twice.")
    return parts


def pool_sentences(
    token_vectors: torch.Tensor,
    attention_mask: torch.Tensor,
    methods: tuple[str, ...],
    pooler_output: torch.Tensor | None = None,
) -> torch.Tensor:
    """(batch, seq, dim) + (batch, seq) mask → (batch, dim × len(methods)); padding never enters mean or max."""
    import torch  # here: parsing a spec (EmbedOptions) loads no torch

    mask = attention_mask.to(dtype=torch.bool).unsqueeze(-1)  # (batch, seq, 1)
    pooled = []
    for method in methods:
        if method == "cls":
            pooled.append(token_vectors[:, 0])
        elif method == "pooler":
            if pooler_output is None:
                raise InputError("pooling='pooler' needs the model's pooler output, which this model does not have.")
            pooled.append(pooler_output)
        elif method == "mean":
            summed = token_vectors.masked_fill(~mask, 0.0).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1).to(token_vectors.dtype)
            pooled.append(summed / counts)
        elif method == "max":
            pooled.append(token_vectors.masked_fill(~mask, float("-inf")).max(dim=1).values)
        else:
            raise InputError(f"pooling {method!r} does not produce a sentence vector.")
    return pooled[0] if len(pooled) == 1 else torch.cat(pooled, dim=-1)


def pool_words(token_vectors: torch.Tensor, word_ids: list[int | None], num_words: int, method: str) -> torch.Tensor:
    """(seq, dim) vectors of one sequence → (num_words, dim or 2·dim); a word with no token gets zeros."""
    import torch  # here: parsing a spec (EmbedOptions) loads no torch

    if method not in SUBTOKEN_POOLINGS:
        raise InputError(f"subtoken_pooling={method!r}: valid values are {', '.join(SUBTOKEN_POOLINGS)}.")
    dim = token_vectors.shape[-1]
    width = 2 * dim if method == "first_last" else dim
    out = token_vectors.new_zeros((num_words, width))
    positions: dict[int, list[int]] = {}
    for position, word in enumerate(word_ids):
        if word is not None:
            positions.setdefault(word, []).append(position)
    for word, where in positions.items():
        if method == "first":
            out[word] = token_vectors[where[0]]
        elif method == "last":
            out[word] = token_vectors[where[-1]]
        elif method == "mean":
            out[word] = token_vectors[where].mean(dim=0)
        else:
            out[word] = torch.cat([token_vectors[where[0]], token_vectors[where[-1]]])
    return out
