"""Similarity and exact semantic search as sentence-transformers' `util` computes them, in bounded memory.

Compact corpora are scanned in their own type (int8 products, binary popcount), candidates rescored in float.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ..encoder.compact import dequantize, hamming_distances, integer_dots, squared_norms, unpack_binary, unsigned_bits
from ..errors import InputError
from .top_k import CORPUS_CHUNK, QUERY_CHUNK, Found, TopK, results_of, top_k_exact

if TYPE_CHECKING:
    from ..encoder.encode import Encoder
    from ..encoder.options import EmbedOptions

logger = logging.getLogger(__name__)

METRICS = ("cosine", "dot", "euclidean", "manhattan")
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
EXACT_SEARCH_LIMIT = 5_000_000  # corpus vectors; past this, each query costs seconds: say which index to take
RESCORED_NUMBERS = 4_000_000  # candidates' numbers made float at once while rescoring (16 MB)
MANHATTAN_TILE = 2_000_000  # corpus numbers per cdist call (16 MB as float64)
# Candidates per result rescored with the float query, by corpus type: the best measured trade-off of recall@10 and
# time on SST-2 (docs/benchmarks.md, "Compact vectors for retrieval"); 0 = no rescoring.
RESCORE_MULTIPLIER = {"int8": 4, "uint8": 4, "binary": 4, "ubinary": 4}


def similarity(a: ArrayLike, b: ArrayLike, metric: str = "cosine") -> np.ndarray:
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
    a, b = _rows(a, "a").astype(np.float32, copy=False), _rows(b, "b").astype(np.float32, copy=False)
    _check_width(a.shape[1], b.shape[1])
    _check_metric(metric)
    from sklearn.metrics import pairwise

    if metric == "cosine":
        return pairwise.cosine_similarity(a, b).astype(np.float32, copy=False)
    if metric == "dot":
        return a @ b.T
    if metric == "euclidean":
        return -pairwise.euclidean_distances(a, b).astype(np.float32, copy=False)
    return -pairwise.manhattan_distances(a, b).astype(np.float32, copy=False)  # scipy's cdist: no (n, m, dim) array


def semantic_search(
    queries: ArrayLike,
    corpus: ArrayLike | None = None,
    top_k: int = 10,
    metric: str | None = None,
    *,
    query_chunk_size: int = QUERY_CHUNK,
    corpus_chunk_size: int = CORPUS_CHUNK,
    rescore_multiplier: int | None = None,
    ranges: ArrayLike | None = None,
    corpus_precision: str | None = None,
    index: Any = None,
) -> list[list[dict]]:
    """Find the `top_k` corpus vectors nearest each query, best first: sentence-transformers' `util.semantic_search`.

    Parameters
    ----------
    queries : array-like
        (n, dim) float query vectors (one vector is one query); or queries already in the corpus's compact type.
    corpus : array-like, optional
        (m, dim) float vectors; int8/uint8 buckets (`compact`: compared by integer products, uint8 shifted by 128);
        or binary/ubinary bits (m × dim/8 bytes), compared by Hamming distance (score: minus the distance).
    top_k : int
        Results per query.
    metric : str, optional
        'cosine' (default), 'dot', 'euclidean' or 'manhattan'; binary candidates are found by Hamming distance.
    query_chunk_size, corpus_chunk_size : int
        Compared at once: the memory bound.
    rescore_multiplier : int, optional
        Compact corpus and float queries: the best `top_k * rescore_multiplier` candidates are rescored by `metric`
        between the float query and each candidate made float again (±1 bits; int8 buckets' lower edges, which needs
        `ranges`). None: `RESCORE_MULTIPLIER` of the corpus type; 0: no rescoring.
    ranges : array-like, optional
        int8/uint8 corpus: the (2, dim) ranges it was bucketed with; float queries are bucketed the same way.
        Without them, float queries are taken as bucket numbers already.
    corpus_precision : str, optional
        'float32', 'int8', 'uint8', 'binary' or 'ubinary' (default: told by the corpus's type and width).
    index : VectorIndex, optional
        Search this approximate index (`bertkit.tasks.index`) instead of a corpus.

    Returns
    -------
    list of lists of dict
        Per query, [{"corpus_id": int, "score": float}], highest score first.

    Examples
    --------
    >>> from bertkit import semantic_search
    >>> semantic_search([[1.0, 0.1]], [[0.0, 1.0], [1.0, 0.0]], top_k=1)[0][0]["corpus_id"]
    1
    """
    if top_k < 1:
        raise InputError(f"top_k={top_k}: give 1 or more.")
    rescore_multiplier_for("binary", rescore_multiplier)  # refuses a negative one
    if index is not None:
        if corpus is not None:
            raise InputError("give a corpus or an index, not both.")
        return index.search(queries, top_k, metric=metric, rescore_multiplier=rescore_multiplier)
    if corpus is None:
        raise InputError("give the corpus vectors to search (or index=).")
    if min(query_chunk_size, corpus_chunk_size) < 1:
        raise InputError("query_chunk_size and corpus_chunk_size must be 1 or more.")
    metric = _check_metric(metric or "cosine")
    queries, corpus = _rows(queries, "queries"), _rows(corpus, "corpus")
    precision = _precision(queries, corpus, corpus_precision)
    if len(corpus) > EXACT_SEARCH_LIMIT:
        logger.warning(
            "exact search over %d vectors reads all of them for every query; at this size build an approximate "
            "index: `bertkit index VECTORS -o INDEX` (pip install 'bertkit[index]').",
            len(corpus),
        )
    if metric == "manhattan":  # scipy's cdist copies each corpus chunk as float64: smaller chunks
        corpus_chunk_size = min(corpus_chunk_size, max(1, MANHATTAN_TILE // max(1, corpus.shape[1])))
    chunks = (query_chunk_size, corpus_chunk_size)
    if precision in ("binary", "ubinary"):
        scores, ids = _binary_search(queries, corpus, top_k, metric, rescore_multiplier, chunks)
    elif precision in ("int8", "uint8"):
        scores, ids = _int8_search(queries, corpus, precision, top_k, metric, rescore_multiplier, ranges, chunks)
    else:
        scores, ids = _float_search(queries, corpus, top_k, metric, chunks)
    return results_of(scores, ids)


def _precision(queries: np.ndarray, corpus: np.ndarray, given: str | None) -> str:
    """Return the corpus's type (`given`, else told by its dtype and width against the queries'), its shape checked."""
    width, dim, kind = corpus.shape[1], queries.shape[1], corpus.dtype.kind
    if given is None and kind == "f":
        given = "float32"
    elif given is None:  # int8 / uint8: buckets of every number, or bits packed 8 to a byte
        packed, signed = width != dim and width == -(-dim // 8), corpus.dtype == np.int8
        if queries.dtype.kind in "iu" and width == dim:  # compact queries: the widths cannot tell them apart
            kinds = "'int8' or 'binary'" if signed else "'uint8' or 'ubinary'"
            raise InputError(
                f"queries and corpus are both {corpus.dtype} arrays of {width} numbers: buckets or packed bits alike; "
                f"say which with corpus_precision={kinds} (or give float queries)."
            )
        given = ("binary" if signed else "ubinary") if packed else ("int8" if signed else "uint8")
    if given not in PRECISIONS:
        raise InputError(f"corpus_precision={given!r}: valid values are {', '.join(PRECISIONS)}.")
    if given != "float32" and corpus.dtype not in (np.int8, np.uint8):
        raise InputError(f"{given} corpus vectors are int8 or uint8 arrays (`compact`), not {corpus.dtype}.")
    if given not in ("binary", "ubinary"):
        _check_width(dim, width, "the queries", "the corpus vectors")
    elif width != (dim if queries.dtype in (np.int8, np.uint8) else -(-dim // 8)):
        raise InputError(f"binary corpus vectors of {width} bytes do not fit queries of {dim} numbers.")
    return given


def rescore_multiplier_for(precision: str, rescore_multiplier: int | None = None) -> int:
    """Candidates per result that a search of a `precision` corpus rescores (0: none), the default filled in."""
    if rescore_multiplier is not None and rescore_multiplier < 0:
        raise InputError(f"rescore_multiplier={rescore_multiplier}: give 0 (no rescoring) or more.")
    return RESCORE_MULTIPLIER.get(precision, 0) if rescore_multiplier is None else rescore_multiplier


def check_encoder(encoder: Encoder, meta: dict, source: str) -> None:
    """Refuse, in one line, an encoder whose vectors would not compare with those `meta` records."""
    if not meta.get("model"):
        raise InputError(f"{source} does not say how its vectors were made; embed it again with `bertkit embed`.")
    if encoder.fingerprint != meta.get("fingerprint"):
        raise InputError(
            f"{source} was embedded by model {meta['model']!r} with fingerprint {meta.get('fingerprint')}; this "
            f"model's is {encoder.fingerprint}: its vectors and a query's would not compare. Embed it again, or "
            "load the model it names."
        )


def query_options(meta: dict, **prompts: str | None) -> EmbedOptions:
    """Make queries' options for the vectors `meta` records (float32, long texts cut, `prompt=` / `prompt_name=`)."""
    from ..encoder.options import EmbedOptions

    return EmbedOptions.from_record(meta).replace(**prompts, output_type="float32", long_text="truncate")


def embed_queries(
    encoder: Encoder, texts: Sequence[str], meta: dict, *, source: str = "the vectors", **prompts: str | None
) -> np.ndarray:
    """Embed `texts` as the vectors `meta` records were, in float32; `prompt` / `prompt_name` replace its prompt."""
    check_encoder(encoder, meta, source)
    found = encoder.embed(list(texts), query_options(meta, **prompts), warn=False)
    if found.shape[1] != meta.get("dim"):
        raise InputError(
            f"{source} records {meta.get('dim')}-number vectors, but its options give {found.shape[1]}: its "
            "record is damaged; embed it again."
        )
    return found


def _float_search(
    queries: np.ndarray,
    corpus: np.ndarray,
    top_k: int,
    metric: str,
    chunks: Sequence[int],
    floats: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Found:
    queries = unit_rows(queries) if metric == "cosine" else queries.astype(np.float32)
    floats = floats or (lambda c: c.astype(np.float32))
    prepare = (lambda c: unit_rows(floats(c))) if metric == "cosine" else floats
    return top_k_exact(queries, corpus, top_k, _float_scorer(metric), chunks, prepare=prepare)


def _int8_search(
    queries: np.ndarray,
    corpus: np.ndarray,
    precision: str,
    top_k: int,
    metric: str,
    multiplier: int | None,
    ranges: Any,  # array-like (2, dim), or None
    chunks: Sequence[int],
) -> Found:
    """Integer products of int8 buckets (uint8 shifted by 128), then float rescoring of the best candidates."""
    floats = queries if queries.dtype.kind == "f" else None
    if floats is not None and ranges is not None:
        from ..encoder.compact import compact

        asked: np.ndarray | None = compact(floats, "int8", _ranges(ranges, corpus.shape[1]))
    else:
        asked = _as_int8(queries)
        floats = None if asked is not None else floats
    if asked is None:  # float queries without ranges, not whole bucket numbers: compared as numbers, in float
        return _float_search(queries, corpus, top_k, metric, chunks, floats=lambda c: _signed(c).astype(np.float32))
    multiplier = rescore_multiplier_for(precision, multiplier) if floats is not None else 0
    found = _int8_top_k(asked, corpus, top_k * max(1, multiplier), metric, chunks)
    if not multiplier or floats is None:
        return found
    return rescore(floats, found[1], top_k, metric, lambda rows: dequantize(corpus[rows], precision, ranges))


def _binary_search(
    queries: np.ndarray, corpus: np.ndarray, top_k: int, metric: str, multiplier: int | None, chunks: Sequence[int]
) -> Found:
    """Hamming distance by popcount on packed bits, then the float query's rescoring of the best candidates."""
    floats = queries.astype(np.float32, copy=False) if queries.dtype.kind == "f" else None
    bits = np.packbits(floats > 0, axis=-1) if floats is not None else unsigned_bits(queries)
    multiplier = rescore_multiplier_for("binary", multiplier) if floats is not None else 0
    found = _hamming_top_k(np.ascontiguousarray(bits), corpus, top_k * max(1, multiplier), chunks)
    if not multiplier or floats is None:
        return found
    return rescore(floats, found[1], top_k, metric, lambda rows: unpack_binary(corpus[rows], floats.shape[1]))


def _int8_top_k(queries: np.ndarray, corpus: np.ndarray, top_k: int, metric: str, chunks: Sequence[int]) -> Found:
    """Score int8 vectors by exact integer products, ranked by a key that leaves the query's norm to the kept ones."""
    if metric == "manhattan":
        return _float_search(queries, corpus, top_k, metric, chunks, floats=lambda c: _signed(c).astype(np.float32))
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
    faiss = _faiss()
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


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:
        return None
    return faiss


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


def _float_scorer(metric: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Return the scorer of `metric`; products by torch (numpy's BLAS threads beside torch's: 1.5-2x slower)."""
    if metric in ("cosine", "dot"):
        import torch

        return lambda q, c: (torch.from_numpy(q) @ torch.from_numpy(c).T).numpy()
    return lambda q, c: similarity(q, c, metric)


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


def _ranges(ranges: ArrayLike, width: int) -> np.ndarray:
    ranges = np.asarray(ranges, dtype=np.float32)
    if ranges.shape != (2, width):
        raise InputError(f"ranges have shape {ranges.shape}; these vectors need (2, {width}).")
    return ranges


def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise InputError(f"metric={metric!r}: valid values are {', '.join(METRICS)}.")
    return metric


def _check_width(a: int, b: int, first: str = "a", second: str = "b") -> None:
    if a != b:
        raise InputError(
            f"the vectors differ in size: {first} have {a} numbers and {second} {b}; both must come from the same "
            "model and options."
        )


def _rows(values: ArrayLike, name: str) -> np.ndarray:
    """Read an (n, dim) array in its own type (float16/64 become float32; others stay for the compact types)."""
    array = np.asarray(values)
    if array.dtype.kind not in "fiub":
        raise InputError(f"{name} must be numbers, not {array.dtype}.")
    if array.dtype.kind == "b" or (array.dtype.kind in "iu" and array.dtype not in (np.int8, np.uint8)):
        array = array.astype(np.float32)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2:
        raise InputError(f"{name} must be vectors: an (n, dim) array, not shape {array.shape}.")
    return array


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row divided by its length (rows of length 0 stay 0), in float32: sentence-transformers' normalize."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
