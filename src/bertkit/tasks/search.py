"""Similarity and exact semantic search over sentence vectors, as sentence-transformers' `util` computes them (tests
hold the two equal), in bounded memory; binary vectors are searched by Hamming distance and rescored with the float
query. Exact search reads every vector for every query: past a few million vectors, an approximate index is the
tool, and bertkit says which."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterator

import numpy as np

from ..encoder.compact import unpack_binary
from ..errors import InputError

logger = logging.getLogger(__name__)

METRICS = ("cosine", "dot", "euclidean", "manhattan")
EXACT_SEARCH_LIMIT = 5_000_000  # corpus vectors; past this, each query costs seconds: say which index to take
QUERY_CHUNK, CORPUS_CHUNK = 100, 100_000  # rows compared at once: at most 10M scores (40 MB) in memory


def similarity(a, b, metric: str = "cosine") -> np.ndarray:
    """Pairwise similarity of two sets of vectors: sentence-transformers' `SentenceTransformer.similarity`.

    Parameters
    ----------
    a, b : array-like
        (n, dim) and (m, dim) vectors (one vector is a set of one).
    metric : str
        'cosine', 'dot', 'euclidean' (minus the Euclidean distance) or 'manhattan' (minus the L1 distance): larger
        is more similar for all four.

    Returns
    -------
    numpy.ndarray
        (n, m) float32.

    Examples
    --------
    >>> from bertkit import similarity
    >>> similarity([[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]).round(3).tolist()
    [[1.0, 0.0]]
    """
    a, b = _matrix(a, "a"), _matrix(b, "b")
    if a.shape[1] != b.shape[1]:
        raise InputError(f"the vectors differ in size: {a.shape[1]} and {b.shape[1]} numbers.")
    if metric not in METRICS:
        raise InputError(f"metric={metric!r}: valid values are {', '.join(METRICS)}.")
    from sklearn.metrics import pairwise

    if metric == "cosine":
        return pairwise.cosine_similarity(a, b).astype(np.float32, copy=False)
    if metric == "dot":
        return a @ b.T
    if metric == "euclidean":
        return -pairwise.euclidean_distances(a, b).astype(np.float32, copy=False)
    return -pairwise.manhattan_distances(a, b).astype(np.float32, copy=False)  # scipy's cdist: no (n, m, dim) array


def semantic_search(
    queries,
    corpus,
    top_k: int = 10,
    metric: str = "cosine",
    *,
    query_chunk_size: int = QUERY_CHUNK,
    corpus_chunk_size: int = CORPUS_CHUNK,
    rescore_multiplier: int = 4,
) -> list[list[dict]]:
    """The `top_k` corpus vectors nearest each query, best first: sentence-transformers' `util.semantic_search`.

    Parameters
    ----------
    queries : array-like
        (n, dim) float query vectors (one vector is one query).
    corpus : array-like
        (m, dim) float vectors; int8/uint8 ones (`compact`, compared as their bucket numbers, uint8 shifted by 128);
        or binary/ubinary ones (m × dim/8 bytes), searched by Hamming distance to the query's bits, the best
        `top_k * rescore_multiplier` then rescored by the float query's dot product with their ±1 vectors
        (sentence-transformers' rescoring).
    top_k : int
        Results per query.
    metric : str
        'cosine', 'dot', 'euclidean' or 'manhattan' (float corpus).
    query_chunk_size, corpus_chunk_size : int
        Compared at once: the memory bound.
    rescore_multiplier : int
        Binary corpus: how many candidates per result are rescored.

    Returns
    -------
    list of lists of dict
        Per query, [{"corpus_id": int, "score": float}], highest score first.
    """
    queries = _matrix(queries, "queries")
    corpus = np.asarray(corpus)
    if top_k < 1:
        raise InputError(f"top_k={top_k}: give 1 or more.")
    if len(corpus) > EXACT_SEARCH_LIMIT:
        logger.warning(
            "exact search over %d vectors reads all of them for every query; at this size take an approximate "
            "index: FAISS (faiss-cpu, IndexHNSWFlat; IndexBinaryHNSW for binary vectors) or usearch.",
            len(corpus),
        )
    packed = corpus.dtype in (np.int8, np.uint8) and corpus.ndim == 2 and corpus.shape[1] != queries.shape[1]
    if packed and corpus.shape[1] == -(-queries.shape[1] // 8):
        return _binary_search(queries, corpus, top_k, rescore_multiplier, query_chunk_size, corpus_chunk_size)
    if corpus.dtype == np.uint8:  # uint8 buckets: centred like int8's, so that cosine and dot compare directions
        corpus = corpus.astype(np.float32) - 128
    corpus = _matrix(corpus, "corpus")
    results: list[list[tuple[float, int]]] = [[] for _ in range(len(queries))]
    for start, scores in _chunked_scores(queries, corpus, metric, query_chunk_size, corpus_chunk_size):
        _keep_best(results, start, scores, top_k)
    return [
        [{"corpus_id": i, "score": s} for s, i in sorted(best, key=lambda r: r[0], reverse=True)] for best in results
    ]


def _chunked_scores(queries, corpus, metric, query_chunk, corpus_chunk) -> Iterator[tuple[tuple[int, int], np.ndarray]]:
    """((first query, first corpus row), scores) of every (query chunk × corpus chunk)."""
    unit_corpus = metric == "cosine"
    for c in range(0, len(corpus), corpus_chunk):
        block = corpus[c : c + corpus_chunk]
        block = _unit(block) if unit_corpus else block
        for q in range(0, len(queries), query_chunk):
            part = queries[q : q + query_chunk]
            scores = _unit(part) @ block.T if unit_corpus else similarity(part, block, metric)
            yield (q, c), scores


def _keep_best(results: list, start: tuple[int, int], scores: np.ndarray, top_k: int) -> None:
    """Fold one block of scores into each query's best `top_k` (a min-heap of (score, corpus id))."""
    q0, c0 = start
    k = min(top_k, scores.shape[1])
    best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    for row, columns in enumerate(best):
        heap = results[q0 + row]
        for column in columns:
            item = (float(scores[row, column]), int(c0 + column))
            if len(heap) < top_k:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heappushpop(heap, item)


def _binary_search(queries, corpus, top_k, multiplier, query_chunk, corpus_chunk) -> list[list[dict]]:
    """Hamming distance on bits for candidates, then the float query's dot product with their ±1 vectors."""
    dim = queries.shape[1]
    unsigned = (corpus.astype(np.int16) + 128).astype(np.uint8) if corpus.dtype == np.int8 else corpus
    query_bits = np.packbits(queries > 0, axis=-1)
    candidates: list[list[tuple[float, int]]] = [[] for _ in range(len(queries))]
    keep = top_k * max(1, multiplier)
    table = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(1)  # bits set in each byte
    for c in range(0, len(unsigned), corpus_chunk):
        block = unsigned[c : c + corpus_chunk]
        for q in range(0, len(query_bits), query_chunk):
            distances = table[query_bits[q : q + query_chunk, None, :] ^ block[None, :, :]].sum(-1)
            _keep_best(candidates, (q, c), -distances.astype(np.float32), keep)
    results = []
    for query, found in zip(queries, candidates):
        ids = np.array([i for _, i in found], dtype=np.int64)
        scores = unpack_binary(unsigned[ids], dim) @ query if len(ids) else np.zeros(0)
        order = np.argsort(-scores, kind="stable")[:top_k]
        results.append([{"corpus_id": int(ids[i]), "score": float(scores[i])} for i in order])
    return results


def _matrix(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float32)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise InputError(f"{name} must be vectors: an (n, dim) array, not shape {array.shape}.")
    return array


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
