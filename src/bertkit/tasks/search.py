"""Similarity and semantic search as sentence-transformers' `util` computes them, through the one engine (`engine`).

A metric left out is the model's own (`similarity_fn_name` of its sentence-transformers config), else cosine.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InputError
from .engine import CORPUS_CHUNK, QUERY_CHUNK, Exact, nearest, pairwise, rescore_multiplier_for, results_of

if TYPE_CHECKING:
    from ..encoder.encode import Encoder
    from ..encoder.options import EmbedOptions

logger = logging.getLogger(__name__)

METRICS = ("cosine", "dot", "euclidean", "manhattan")
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
EXACT_SEARCH_LIMIT = 5_000_000  # corpus vectors; past this, each query costs seconds: say which index to take


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
    return pairwise(a, b, _check_metric(metric))


def cosines(reference: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Return the cosine of each row of `vectors` with the same row of `reference` (a zero row with itself: 1)."""
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(vectors, axis=1)
    dots = (reference * vectors).sum(1)
    return np.where(norms > 0, dots / np.where(norms > 0, norms, 1), 1.0)


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
    encoder: Encoder | None = None,
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
        'cosine', 'dot', 'euclidean' or 'manhattan' (default: `encoder`'s own, else cosine); binary candidates are
        found by Hamming distance.
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
        Search this index (`bertkit.tasks.index`) instead of a corpus.
    encoder : Encoder, optional
        The model that made the vectors: its similarity (`similarity_fn_name`) is the default metric.

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
    metric = _check_metric(metric or model_metric(encoder))
    queries, corpus = _rows(queries, "queries"), _rows(corpus, "corpus")
    precision = _precision(queries, corpus, corpus_precision)
    if len(corpus) > EXACT_SEARCH_LIMIT:
        logger.warning(
            "exact search over %d vectors reads all of them for every query; at this size build an approximate "
            "index: `bertkit index VECTORS -o INDEX` (pip install 'bertkit[index]').",
            len(corpus),
        )
    if ranges is not None and precision in ("int8", "uint8"):
        ranges = np.asarray(ranges, dtype=np.float32)
        if ranges.shape != (2, corpus.shape[1]):
            raise InputError(f"ranges have shape {ranges.shape}; these vectors need (2, {corpus.shape[1]}).")
    ranges = ranges if precision in ("int8", "uint8") else None
    engine = Exact(corpus, precision, queries.shape[1], ranges, (query_chunk_size, corpus_chunk_size))
    return results_of(*nearest(engine, queries, top_k, metric, rescore_multiplier))


def model_metric(model: Encoder | str | None) -> str:
    """Return the metric a model's vectors compare by: its `similarity_fn_name`, else cosine.

    `model` is an Encoder, or a model as a record names it ('default', a folder, a hub name read from the hub cache).
    """
    if model is None or not isinstance(model, str):
        return (model.sentence_config.similarity if model is not None else None) or "cosine"
    from ..encoder.models import DEFAULT_MODEL, default_model_dir
    from ..encoder.st_config import declared_similarity

    folder = default_model_dir() if model == DEFAULT_MODEL else Path(model).expanduser()
    try:
        return declared_similarity(str(folder) if folder.is_dir() else model, hub=not folder.is_dir()) or "cosine"
    except ValueError:  # neither a folder nor a hub name
        return "cosine"


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


def query_options(meta: dict, *, prompt: str | None = None, prompt_name: str | None = None) -> EmbedOptions:
    """Make queries' options for the vectors `meta` records: theirs in float32 with long texts cut, prompt included.

    The one rule of every face (`bertkit search`, the service's /search): `prompt` or `prompt_name` replaces the
    prompt the vectors record; both None keep it. A query is cut, not windowed: the windows' stride goes.
    """
    from ..encoder.options import EmbedOptions

    options = EmbedOptions.from_record(meta).replace(output_type="float32", long_text="truncate", stride=None)
    if prompt is None and prompt_name is None:
        return options
    return options.replace(prompt=prompt, prompt_name=prompt_name)


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
    """Read an (n, dim) array in its own type (bools and wide integers become float32; int8/uint8 stay compact)."""
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
