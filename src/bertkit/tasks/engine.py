"""The one search engine: `nearest` asks an engine for each query's candidates, then rescores compact ones in float.

Two engines answer it: `Exact` scans vectors in memory in bounded chunks (numpy and torch; int8 by integer products,
bits by popcount), and faiss's HNSW graph (`HNSW`). An engine has `precision` (the stored type),
`ask(queries, metric)` (the queries as it compares them, and the float queries to rescore with or None),
`candidates(asked, k, metric, **settings)`, `floats(rows)` (rows made float again) and `must_rescore(metric)`.
`semantic_search`, `VectorIndex`, `bertkit search` and the service all search through `nearest`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..encoder.compact import (
    compact,
    dequantize,
    hamming_distances,
    integer_dots,
    squared_norms,
    unpack_binary,
    unsigned_bits,
)
from ..errors import InputError

Found = tuple[np.ndarray, np.ndarray]  # (n, k) scores and corpus rows, best first; row -1: none
QUERY_CHUNK, CORPUS_CHUNK = 1_000, 10_000  # at most 10M scores (40 MB) at once, in few BLAS calls (measured)
CHUNKS = (QUERY_CHUNK, CORPUS_CHUNK)
RESCORED_NUMBERS = 4_000_000  # candidates' numbers made float at once while rescoring (16 MB)
MANHATTAN_TILE = 2_000_000  # corpus numbers per cdist call (16 MB as float64)
BINARY, INT8 = ("binary", "ubinary"), ("int8", "uint8")
# Candidates per result rescored with the float query, by corpus type: the best measured trade-off of recall@10 and
# time on SST-2 (docs/benchmarks.md, "Compact vectors for retrieval"); 0 = no rescoring.
RESCORE_MULTIPLIER = {"int8": 4, "uint8": 4, "binary": 4, "ubinary": 4}
HNSW_M, EF_CONSTRUCTION, EF_SEARCH = 32, 100, 64  # graph links, build and search breadth: docs/benchmarks.md
INSTALL = "approximate search needs faiss: pip install 'bertkit[index]' (or pip install faiss-cpu)."


def nearest(
    engine: Any, queries: np.ndarray, top_k: int, metric: str, rescore_multiplier: int | None = None, **settings: Any
) -> Found:
    """Return (scores, rows) of each query's `top_k` best rows: the engine's candidates, rescored where it is compact.

    Float queries of a compact engine rescore `top_k * rescore_multiplier` candidates (None: `RESCORE_MULTIPLIER`)
    by `metric` against the candidates made float again; `settings` go to the engine (HNSW: ef_search).
    """
    asked, floats = engine.ask(queries, metric)
    multiplier = rescore_multiplier_for(engine.precision, rescore_multiplier) if floats is not None else 0
    found = engine.candidates(asked, top_k * max(1, multiplier), metric, **settings)
    if floats is None or not (multiplier or engine.must_rescore(metric)):
        return found
    return rescore(floats, found[1], top_k, metric, engine.floats)


def rescore_multiplier_for(precision: str, rescore_multiplier: int | None = None) -> int:
    """Candidates per result that a search of a `precision` corpus rescores (0: none), the default filled in."""
    if rescore_multiplier is not None and rescore_multiplier < 0:
        raise InputError(f"rescore_multiplier={rescore_multiplier}: give 0 (no rescoring) or more.")
    return RESCORE_MULTIPLIER.get(precision, 0) if rescore_multiplier is None else rescore_multiplier


class Exact:
    """Exact search of vectors in memory, `chunks` = (query rows, corpus rows) compared at a time.

    float vectors by torch's products (cosine, dot) or scikit-learn's distances; int8/uint8 buckets by integer
    products (float queries bucketed with `ranges`, else taken as bucket numbers, else compared as numbers); bits by
    Hamming distance (faiss's popcount where it is installed).
    """

    def __init__(
        self, vectors: np.ndarray, precision: str, dim: int, ranges: Any = None, chunks: Sequence[int] = CHUNKS
    ) -> None:
        self.vectors, self.precision, self.dim, self.chunks = vectors, precision, dim, tuple(chunks)
        self.ranges = None if ranges is None else np.asarray(ranges, dtype=np.float32)

    @property
    def rows(self) -> int:
        """Vectors held."""
        return len(self.vectors)

    def ask(self, queries: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray | None]:
        """Bits for binary, buckets for int8 (numbers where they are none), the queries themselves for floats."""
        floats = queries.astype(np.float32, copy=False) if queries.dtype.kind == "f" else None
        if self.precision in BINARY:
            bits = np.packbits(floats > 0, axis=-1) if floats is not None else unsigned_bits(queries)
            return np.ascontiguousarray(bits), floats
        if self.precision not in INT8:
            return queries, None
        if floats is not None and self.ranges is not None:
            return compact(queries, "int8", self.ranges), queries
        buckets = _as_int8(queries)
        return (queries, None) if buckets is None else (buckets, None)

    def candidates(self, asked: np.ndarray, k: int, metric: str, **settings: Any) -> Found:
        """Return the best `k` rows of each query, scored exactly."""
        chunks = self.chunks
        if metric == "manhattan":  # scipy's cdist copies each corpus chunk as float64: smaller chunks
            chunks = (chunks[0], min(chunks[1], max(1, MANHATTAN_TILE // max(1, self.vectors.shape[1]))))
        if self.precision in BINARY:
            return _hamming_top_k(asked, self.vectors, k, chunks)
        if self.precision in INT8 and asked.dtype == np.int8 and metric != "manhattan":
            return _int8_top_k(asked, self.vectors, k, metric, chunks)
        numbers = lambda c: (_signed(c) if self.precision in INT8 else c).astype(np.float32)
        queries = unit_rows(asked) if metric == "cosine" else asked.astype(np.float32)
        prepare = (lambda c: unit_rows(numbers(c))) if metric == "cosine" else numbers
        return top_k_exact(queries, self.vectors, k, _float_scorer(metric), chunks, prepare)

    def floats(self, rows: np.ndarray) -> np.ndarray:
        """Rows made float again: ±1 bits, or int8 buckets' lower edges."""
        if self.precision in BINARY:
            return unpack_binary(self.vectors[rows], self.dim)
        return dequantize(self.vectors[rows], self.precision, self.ranges)

    def must_rescore(self, metric: str) -> bool:
        """Never: exact scores are the metric's."""
        return False


def require_faiss(optional: bool = False) -> Any:
    """Import faiss; without it, return None when `optional`, else raise an InputError saying how to install it."""
    try:
        import faiss
    except ImportError:
        if optional:
            return None
        raise InputError(INSTALL) from None
    return faiss


class HNSW:
    """faiss's HNSW graph over float32, float16, int8/uint8 (bertkit's buckets, as faiss's 8-bit codes) or bits."""

    def __init__(self, graph: Any, precision: str, dim: int, metric: str, ranges: Any = None) -> None:
        self.graph, self.precision, self.dim, self.metric = graph, precision, dim, metric
        self.ranges = None if ranges is None else np.asarray(ranges, dtype=np.float32)
        self._bits: np.ndarray | None = None  # binary rows, read out of faiss once for rescoring

    @classmethod
    def create(cls, precision: str, dim: int, metric: str, m: int, ranges: Any = None) -> HNSW:
        """Make an empty graph for `dim`-number vectors of `precision`."""
        faiss = require_faiss()
        kind = faiss.METRIC_L2 if metric == "euclidean" else faiss.METRIC_INNER_PRODUCT
        if precision in BINARY:
            return cls(faiss.IndexBinaryHNSW(-(-dim // 8) * 8, m), precision, dim, metric)
        if precision == "float32":
            return cls(faiss.IndexHNSWFlat(dim, m, kind), precision, dim, metric)
        if precision not in ("float16", "int8", "uint8"):
            raise InputError(f"vectors of type {precision!r} cannot be indexed.")
        quantizer = faiss.ScalarQuantizer.QT_fp16 if precision == "float16" else faiss.ScalarQuantizer.QT_8bit
        engine = cls(faiss.IndexHNSWSQ(dim, quantizer, m, kind), precision, dim, metric, ranges)
        if precision != "float16":  # faiss's 8-bit codes are bertkit's buckets: code = floor((x - minimum) / step)
            if engine.ranges is None or engine.ranges.shape != (2, dim):
                raise InputError(f"int8 vectors need their (2, {dim}) ranges recorded; embed them again.")
            trained = np.concatenate((engine.ranges[0], _steps(engine.ranges) * 255)).astype(np.float32)
            faiss.copy_array_to_vector(trained, faiss.downcast_index(engine.graph.storage).sq.trained)
            engine.graph.is_trained = engine.graph.storage.is_trained = True
        return engine

    @property
    def rows(self) -> int:
        """Vectors in the graph."""
        return int(self.graph.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        """Add vectors as `bertkit embed` wrote them: float32 (unit for cosine), int8 buckets as midpoints, bits."""
        if self.precision in BINARY:
            stored = unsigned_bits(vectors)
        elif self.precision in ("int8", "uint8"):
            stored = dequantize(vectors, self.precision, self.ranges) + _steps(self.ranges) / 2
        else:
            stored = unit_rows(vectors) if self.metric == "cosine" else np.asarray(vectors, dtype=np.float32)
        self.graph.add(np.ascontiguousarray(stored))
        self._bits = None

    def ask(self, queries: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray | None]:
        """Bits, or float queries (unit for cosine); the float queries kept to rescore compact rows."""
        if self.precision in BINARY:
            return np.packbits(queries > 0, axis=-1), queries
        asked = np.ascontiguousarray(unit_rows(queries) if metric == "cosine" else queries)
        return asked, (queries if self.precision in ("int8", "uint8") else None)

    def candidates(self, asked: np.ndarray, k: int, metric: str, ef_search: int = EF_SEARCH) -> Found:
        """Return the graph's best `k` rows of each query, searched `max(ef_search, k)` wide."""
        best = TopK(len(asked), k)
        if self.rows:
            breadth = require_faiss().SearchParametersHNSW(efSearch=max(ef_search, k))
            distances, rows = self.graph.search(asked, k, params=breadth)
            if self.precision in BINARY:
                distances = -distances.astype(np.float64)
            elif metric == "euclidean":
                distances = -np.sqrt(np.maximum(distances, 0))
            best.add(0, np.where(rows >= 0, distances, -np.inf), rows)
        return best.result()

    def floats(self, rows: np.ndarray) -> np.ndarray:
        """Rows made float again: ±1 bits, or int8 bucket midpoints."""
        if self.precision not in BINARY:
            return self.graph.reconstruct_batch(rows)
        if self._bits is None:
            faiss = require_faiss()
            storage = faiss.downcast_IndexBinary(self.graph.storage)
            self._bits = faiss.vector_to_array(storage.xb).reshape(self.rows, -1)
        return unpack_binary(self._bits[rows], self.dim)

    def must_rescore(self, metric: str) -> bool:
        """int8 rows by cosine: their midpoints are not unit length, so faiss's inner product is no cosine."""
        return metric == "cosine" and self.precision in ("int8", "uint8")


def _int8_top_k(queries: np.ndarray, corpus: np.ndarray, top_k: int, metric: str, chunks: Sequence[int]) -> Found:
    """Score int8 vectors by exact integer products, ranked by a key that leaves the query's norm to the kept ones."""
    norms = squared_norms(queries)
    prepare = lambda block: (_signed(block), squared_norms(_signed(block)))
    if metric == "dot":
        return top_k_exact(queries, corpus, top_k, lambda q, c: integer_dots(q, c[0]), chunks, prepare)
    if metric == "cosine":
        scale = lambda q, c: np.multiply(integer_dots(q, c[0]), 1 / np.maximum(np.sqrt(c[1]), 1e-12), dtype=np.float32)
        finish = lambda kept: kept / np.maximum(np.sqrt(norms), 1e-12)[:, None]
        return top_k_exact(queries, corpus, top_k, scale, chunks, prepare, finish)
    closeness = lambda q, c: 2 * integer_dots(q, c[0]).astype(np.float64) - c[1]  # |q|² left out
    finish = lambda kept: -np.sqrt(np.maximum(norms[:, None] - kept, 0))
    return top_k_exact(queries, corpus, top_k, closeness, chunks, prepare, finish)


def _hamming_top_k(bits: np.ndarray, corpus: np.ndarray, top_k: int, chunks: Sequence[int]) -> Found:
    """Return minus the Hamming distances of the nearest bits, by faiss's popcount kernel when installed, else numpy."""
    faiss = require_faiss(optional=True)
    if faiss is None:
        return top_k_exact(bits, corpus, top_k, lambda q, c: -hamming_distances(q, c), chunks, prepare=unsigned_bits)
    best = TopK(len(bits), top_k)
    for c in range(0, len(corpus), chunks[1]):
        block = np.ascontiguousarray(unsigned_bits(corpus[c : c + chunks[1]]))
        distances, columns = faiss.knn_hamming(bits, block, min(top_k, len(block)))
        if len(block) == len(corpus):  # one chunk: faiss's answer is already sorted, nearest first
            return -distances.astype(np.float64), columns
        best.add(0, -distances.astype(np.float64), columns + c)
    return best.result()


def _float_scorer(metric: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Return the scorer of `metric`; products by torch (numpy's BLAS threads beside torch's: 1.5-2x slower)."""
    if metric in ("cosine", "dot"):
        import torch

        return lambda q, c: (torch.from_numpy(q) @ torch.from_numpy(c).T).numpy()
    return lambda q, c: pairwise(q, c, metric)


def pairwise(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """(n, m) float32 `metric` of float32 rows: scikit-learn's pairwise functions (distances negated)."""
    from sklearn.metrics import pairwise

    if metric == "cosine":
        return pairwise.cosine_similarity(a, b).astype(np.float32, copy=False)
    if metric == "dot":
        return a @ b.T
    if metric == "euclidean":
        return -pairwise.euclidean_distances(a, b).astype(np.float32, copy=False)
    return -pairwise.manhattan_distances(a, b).astype(np.float32, copy=False)  # scipy's cdist: no (n, m, dim) array


def rescore(floats: np.ndarray, candidates: np.ndarray, top_k: int, metric: str, vectors_of: Callable) -> Found:
    """Rescore the candidates by `metric` between each float query and `vectors_of(rows)`, best `top_k` kept."""
    best = TopK(len(floats), top_k)
    query_chunk = max(1, RESCORED_NUMBERS // max(1, candidates.shape[1] * floats.shape[1]))
    for q in range(0, len(floats), query_chunk):
        ids = candidates[q : q + query_chunk]
        if not (ids >= 0).any():  # an empty corpus: nothing to rescore
            continue
        vectors = vectors_of(np.maximum(ids, 0).ravel()).reshape(*ids.shape, -1)  # (queries, candidates, dim)
        scores = rescored(floats[q : q + query_chunk], vectors, metric)
        best.add(q, np.where(ids >= 0, scores, -np.inf), ids)
    return best.result()


def rescored(queries: np.ndarray, candidates: np.ndarray, metric: str) -> np.ndarray:
    """(n, k) `similarity(queries[i], candidates[i, j], metric)`: each query against its own (k, dim) candidates."""
    if metric in ("cosine", "dot"):
        dots = np.einsum("qd,qkd->qk", queries, candidates)
        if metric == "dot":
            return dots
        lengths = np.sqrt(np.einsum("qkd,qkd->qk", candidates, candidates))  # each x / max(|x|, 1e-12), as sklearn
        return dots / np.maximum(np.linalg.norm(queries, axis=1), 1e-12)[:, None] / np.maximum(lengths, 1e-12)
    differences = queries[:, None, :] - candidates
    if metric == "euclidean":
        return -np.sqrt(np.einsum("qkd,qkd->qk", differences, differences))
    return -np.abs(differences).sum(axis=-1)


def top_k_exact(
    queries: np.ndarray,
    corpus: np.ndarray,
    top_k: int,
    scores: Callable[[np.ndarray, Any], np.ndarray],
    chunks: Sequence[int] = CHUNKS,
    prepare: Callable[[np.ndarray], Any] = lambda block: block,
    finish: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Found:
    """Return (scores, ids) of each query's `top_k` highest `scores(query_chunk, prepare(corpus_chunk))`, best first.

    An id is -1 where the corpus is shorter; `finish` turns the kept (n, k) keys into scores (a query's own norm, left
    out of the keys).
    """
    best = TopK(len(queries), top_k)
    for c in range(0, len(corpus), chunks[1]):
        block = prepare(corpus[c : c + chunks[1]])
        for q in range(0, len(queries), chunks[0]):
            found = np.asarray(scores(queries[q : q + chunks[0]], block))
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

    def result(self) -> Found:
        """(scores, ids), best first; id -1 where fewer than k were seen."""
        order = np.argsort(-self.scores, axis=1, kind="stable")
        scores, ids = np.take_along_axis(self.scores, order, 1), np.take_along_axis(self.ids, order, 1)
        return scores, np.where(np.isneginf(scores), -1, ids)


def largest(scores: np.ndarray, k: int) -> np.ndarray:
    """Columns of each row's `k` largest scores, in no order (all columns when a row has k or fewer)."""
    if k >= scores.shape[1]:
        return np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    return np.argpartition(scores, scores.shape[1] - k, axis=1)[:, -k:]


def results_of(scores: np.ndarray, ids: np.ndarray) -> list[list[dict]]:
    """(n, k) scores and corpus ids (-1: no result) as sentence-transformers' lists of {"corpus_id", "score"}."""
    return [
        [{"corpus_id": i, "score": s} for s, i in zip(row_scores, row_ids) if i >= 0]
        for row_scores, row_ids in zip(scores.tolist(), ids.tolist())
    ]


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row divided by its length (rows of length 0 stay 0), in float32: sentence-transformers' normalize."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def _signed(block: np.ndarray) -> np.ndarray:
    """int8 buckets as they are; uint8 ones shifted by 128 into the same int8 values."""
    return block if block.dtype == np.int8 else (block ^ np.uint8(0x80)).view(np.int8)


def _as_int8(queries: np.ndarray) -> np.ndarray | None:
    """int8 queries; float or uint8 ones whose values are whole int8 bucket numbers; else None."""
    if queries.dtype in (np.int8, np.uint8):
        return _signed(queries)
    whole = np.all(np.isfinite(queries)) and np.array_equal(queries, np.round(queries))
    if whole and (queries.size == 0 or (queries.min() >= -128 and queries.max() <= 127)):
        return queries.astype(np.int8)
    return None


def _steps(ranges: np.ndarray) -> np.ndarray:
    """Each dimension's bucket width, as `compact` cuts them (1 where a dimension does not vary)."""
    steps = (ranges[1] - ranges[0]) / 255
    return np.where(steps == 0, 1, steps).astype(np.float32)
