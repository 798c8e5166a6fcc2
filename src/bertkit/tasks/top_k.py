"""The best k of many scores, folded in block by block: what exact search and the index's rescoring share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Found = tuple[np.ndarray, np.ndarray]  # (n, k) scores and corpus rows, best first; row -1: none
QUERY_CHUNK, CORPUS_CHUNK = 1_000, 10_000  # at most 10M scores (40 MB) at once, in few BLAS calls (measured)


def results_of(scores: np.ndarray, ids: np.ndarray) -> list[list[dict]]:
    """(n, k) scores and corpus ids (-1: no result) as sentence-transformers' lists of {"corpus_id", "score"}."""
    return [
        [{"corpus_id": i, "score": s} for s, i in zip(row_scores, row_ids) if i >= 0]
        for row_scores, row_ids in zip(scores.tolist(), ids.tolist())
    ]


def top_k_exact(
    queries: np.ndarray,
    corpus: np.ndarray,
    top_k: int,
    scores: Callable[[np.ndarray, Any], np.ndarray],
    chunks: Sequence[int] = (QUERY_CHUNK, CORPUS_CHUNK),
    prepare: Callable[[np.ndarray], Any] = lambda block: block,
    finish: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (scores, ids) of each query's `top_k` highest-scoring corpus rows, best first.

    An id is -1 where the corpus is shorter. `chunks` = (query rows, corpus rows) are compared at a time:
    `scores(query_chunk, prepare(corpus_chunk))`; `finish` turns the kept (n, k) keys into scores (a rise in each row:
    a query's own norm, left out of the keys).
    """
    query_chunk, corpus_chunk = chunks
    best = TopK(len(queries), top_k)
    for c in range(0, len(corpus), corpus_chunk):
        block = prepare(corpus[c : c + corpus_chunk])
        for q in range(0, len(queries), query_chunk):
            found = np.asarray(scores(queries[q : q + query_chunk], block))
            columns = largest(found, top_k)
            best.add(q, np.take_along_axis(found, columns, axis=1), columns + c)
    kept, ids = best.result()
    return (kept if finish is None else finish(kept)), ids


class TopK:
    """Each query's best `k` (score, id) pairs, folded in block by block (numpy's introselect: no threads)."""

    def __init__(self, queries: int, k: int) -> None:
        self.scores = np.full((queries, k), -np.inf)
        self.ids = np.full((queries, k), -1, dtype=np.int64)

    def add(self, first: int, scores: np.ndarray, ids: np.ndarray) -> None:
        """Fold (rows, any) scores and corpus ids of the queries from `first` on into their best k."""
        rows = slice(first, first + len(scores))
        merged = np.concatenate((self.scores[rows], scores), axis=1)
        merged_ids = np.concatenate((self.ids[rows], ids), axis=1)
        kept = largest(merged, self.scores.shape[1])
        self.scores[rows] = np.take_along_axis(merged, kept, axis=1)
        self.ids[rows] = np.take_along_axis(merged_ids, kept, axis=1)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids), best first; id -1 where fewer than k were seen."""
        order = np.argsort(-self.scores, axis=1, kind="stable")
        scores, ids = np.take_along_axis(self.scores, order, 1), np.take_along_axis(self.ids, order, 1)
        return scores, np.where(np.isneginf(scores), -1, ids)


def largest(scores: np.ndarray, k: int) -> np.ndarray:
    """Columns of each row's `k` largest scores, in no order (all columns when a row has k or fewer)."""
    if k >= scores.shape[1]:
        return np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    return np.argpartition(scores, scores.shape[1] - k, axis=1)[:, -k:]
