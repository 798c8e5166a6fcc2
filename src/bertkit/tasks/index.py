"""Approximate search: an HNSW graph (faiss) over the vectors of `bertkit embed`, saved as one CRC-checked zip.

Why faiss and not usearch: docs/benchmarks.md, "Approximate search".
"""

from __future__ import annotations

import json
import logging
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ..encoder.compact import dequantize, unpack_binary, unsigned_bits
from ..errors import InputError
from ..io.writers import atomic_path, check_writable_location
from . import search as exact
from .top_k import TopK, results_of

FORMAT, FORMAT_VERSION = "bertkit-index", 1
META_MEMBER, IDS_MEMBER, ENGINE_MEMBER = "bertkit-index.json", "ids.npy", "engine.faiss"
INDEX_METRICS = ("cosine", "dot", "euclidean")
UNIT_SLACK = 0.05  # bucket midpoints of unit vectors are this close to length 1
HNSW_M, EF_CONSTRUCTION, EF_SEARCH = 32, 100, 64  # graph links, build and search breadth: docs/benchmarks.md
READ_ERRORS = (zipfile.BadZipFile, KeyError, ValueError, RuntimeError, EOFError, OSError)
INSTALL = "approximate search needs faiss: pip install 'bertkit[index]' (or pip install faiss-cpu)."

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..encoder.encode import Encoder


def require_faiss() -> Any:
    """Import faiss, or raise an InputError saying how to install it."""
    try:
        import faiss
    except ImportError:
        raise InputError(INSTALL) from None
    return faiss


class VectorIndex:
    """An HNSW index over sentence vectors, with the record of how they were made.

    Parameters
    ----------
    engine : faiss.Index or faiss.IndexBinary
        The graph and its vectors.
    ids : numpy.ndarray
        The id of each row (the vectors file's ids).
    meta : dict
        The vectors file's record (model, options, output type, dim, ranges) plus the index's: metric, hnsw.
    path : Path, optional
        Where it was read from.

    Examples
    --------
    >>> import numpy as np
    >>> from bertkit import VectorIndex
    >>> index = VectorIndex.create({"dim": 2, "output": "float32"})
    >>> index.add(np.eye(2, dtype=np.float32), ["first", "second"])
    >>> hit = index.search([[0.1, 1.0]], top_k=1)[0][0]
    >>> str(index.ids[hit["corpus_id"]]), round(hit["score"], 3)
    ('second', 0.995)
    """

    def __init__(self, engine: Any, ids: np.ndarray, meta: dict, path: Path | None = None) -> None:
        self.engine, self.ids, self.meta, self.path = engine, np.asarray(ids), meta, path
        self._bits: np.ndarray | None = None  # binary rows, read out of faiss once for rescoring

    @classmethod
    def create(
        cls,
        meta: dict,
        *,
        metric: str = "cosine",
        m: int = HNSW_M,
        ef_construction: int = EF_CONSTRUCTION,
        ef_search: int = EF_SEARCH,
    ) -> VectorIndex:
        """Make an empty index for vectors recorded by `meta`.

        `meta` is a vectors file's record: dim, output, ranges, model...
        """
        faiss = require_faiss()
        if metric not in INDEX_METRICS:
            raise InputError(f"metric={metric!r}: an index compares by {', '.join(INDEX_METRICS)}.")
        for name, value in (("m", m), ("ef_construction", ef_construction), ("ef_search", ef_search)):
            if not isinstance(value, int) or value < 2:
                raise InputError(f"{name}={value!r}: give a whole number of at least 2.")
        precision, dim = meta.get("output", "float32"), int(meta.get("dim") or 0)
        if dim < 1:
            raise InputError("the vectors' record does not say their size (dim); embed them again with bertkit embed.")
        kind = faiss.METRIC_L2 if metric == "euclidean" else faiss.METRIC_INNER_PRODUCT
        if precision in ("binary", "ubinary"):
            engine = faiss.IndexBinaryHNSW(-(-dim // 8) * 8, m)
        elif precision == "float32":
            engine = faiss.IndexHNSWFlat(dim, m, kind)
        elif precision in ("float16", "int8", "uint8"):
            quantizer = faiss.ScalarQuantizer.QT_fp16 if precision == "float16" else faiss.ScalarQuantizer.QT_8bit
            engine = faiss.IndexHNSWSQ(dim, quantizer, m, kind)
            if precision != "float16":
                _set_buckets(faiss, engine, np.asarray(meta.get("ranges"), dtype=np.float32), dim)
        else:
            raise InputError(f"vectors of type {precision!r} cannot be indexed.")
        engine.hnsw.efConstruction, engine.hnsw.efSearch = ef_construction, ef_search
        hnsw = {"m": m, "ef_construction": ef_construction, "ef_search": ef_search}
        record = {**meta, "format": FORMAT, "format_version": FORMAT_VERSION, "engine": f"faiss {faiss.__version__}"}
        return cls(engine, np.zeros(0, dtype=np.int64), {**record, "metric": metric, "hnsw": hnsw})

    @property
    def name(self) -> str:
        """The file's name, as messages say it."""
        return self.path.name if self.path is not None else "this index"

    @property
    def rows(self) -> int:
        """Vectors in the index."""
        return int(self.engine.ntotal)

    @property
    def dim(self) -> int:
        """Numbers in each float vector (a query's size)."""
        return int(self.meta["dim"])

    @property
    def precision(self) -> str:
        """The indexed vectors' type: float32, float16, int8, uint8, binary or ubinary."""
        return str(self.meta.get("output", "float32"))

    @property
    def metric(self) -> str:
        """What the index compares by: cosine, dot or euclidean."""
        return str(self.meta["metric"])

    def add(self, vectors: np.ndarray, ids: Sequence | np.ndarray) -> None:
        """Add vectors of the recorded type (as `bertkit embed` wrote them) and their ids, after the rows there."""
        vectors = np.asarray(vectors)
        expected = -(-self.dim // 8) if self.precision in ("binary", "ubinary") else self.dim
        if vectors.ndim != 2 or vectors.shape[1] != expected:
            raise InputError(
                f"vectors of shape {vectors.shape} do not fit this index of {self.precision} vectors with "
                f"{expected} numbers each; they must come from the same model and options."
            )
        stored = self._stored(vectors)
        if self._cosine_of_buckets and len(stored) and not len(self.ids):
            lengths = np.linalg.norm(stored, axis=1)
            if np.abs(lengths - 1).max() > UNIT_SLACK:
                logger.warning(
                    "these %s vectors are not unit length (%.2f to %.2f): the graph finds cosine candidates by the "
                    "dot product of their buckets, so it can miss nearest rows (the scores are cosines). Embed them "
                    "with normalize_embeddings=True (--normalize), or index by metric='dot'.",
                    self.precision,
                    lengths.min(),
                    lengths.max(),
                )
        self.engine.add(stored)
        self.ids = np.concatenate((self.ids, np.asarray(ids))) if len(self.ids) else np.asarray(ids)
        self._bits = None

    def search(
        self,
        queries: ArrayLike,
        top_k: int = 10,
        *,
        metric: str | None = None,
        rescore_multiplier: int | None = None,
        ef_search: int | None = None,
    ) -> list[list[dict]]:
        """Find the `top_k` nearest rows to each float query, best first, as `semantic_search` answers.

        Parameters
        ----------
        queries : array-like
            (n, dim) float vectors embedded the index's way (`embed_queries`).
        top_k : int
            Results per query.
        metric : str, optional
            Must be the index's own (it was built for one).
        rescore_multiplier : int, optional
            Binary and int8 indexes: `top_k * rescore_multiplier` candidates rescored with the float query
            (None: `RESCORE_MULTIPLIER` of bertkit.tasks.search; 0: none).
        ef_search : int, optional
            HNSW search breadth (default: the recorded one; at least the candidates asked for).

        Returns
        -------
        list of lists of dict
            Per query, [{"corpus_id": row, "score": float}]; `ids[row]` is the row's id.
        """
        return results_of(*self.search_arrays(queries, top_k, metric, rescore_multiplier, ef_search))

    def search_arrays(
        self,
        queries: ArrayLike,
        top_k: int = 10,
        metric: str | None = None,
        rescore_multiplier: int | None = None,
        ef_search: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) arrays of `search` (n, top_k), row -1 where fewer were found."""
        if metric is not None and metric != self.metric:
            raise InputError(f"metric={metric!r}: this index was built for {self.metric}; search it by that.")
        if top_k < 1:
            raise InputError(f"top_k={top_k}: give 1 or more.")
        queries = np.asarray(queries, dtype=np.float32)
        queries = queries[None, :] if queries.ndim == 1 else queries
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InputError(
                f"queries of shape {queries.shape} against an index of {self.dim}-number vectors of model "
                f"{self.meta.get('model')!r}: embed the queries with the index's model and options (embed_queries)."
            )
        multiplier = exact.rescore_multiplier_for(self.precision, rescore_multiplier)
        keep = top_k * max(1, multiplier)
        breadth = require_faiss().SearchParametersHNSW(efSearch=max(ef_search or self.meta["hnsw"]["ef_search"], keep))
        best = TopK(len(queries), top_k)
        if not self.rows:
            return best.result()
        if self.precision in ("binary", "ubinary"):
            distances, rows = self.engine.search(np.packbits(queries > 0, axis=-1), keep, params=breadth)
            scores = -distances.astype(np.float64)
        else:
            asked = np.ascontiguousarray(exact.unit_rows(queries) if self.metric == "cosine" else queries)
            distances, rows = self.engine.search(asked, keep, params=breadth)
            scores = -np.sqrt(np.maximum(distances, 0)) if self.metric == "euclidean" else distances
        if (multiplier or self._cosine_of_buckets) and self.precision not in ("float32", "float16"):
            return exact.rescore(queries, rows, top_k, self.metric, self._floats)
        best.add(0, np.where(rows >= 0, scores, -np.inf), rows)
        return best.result()

    @property
    def _cosine_of_buckets(self) -> bool:
        """int8 rows searched by cosine: their midpoints are not unit length, so faiss's inner product is no cosine."""
        return self.metric == "cosine" and self.precision in ("int8", "uint8")

    def _floats(self, rows: np.ndarray) -> np.ndarray:
        """Return the rows made float again: ±1 bits, or int8 bucket midpoints."""
        if self.precision in ("binary", "ubinary"):
            return unpack_binary(self._binary_rows()[rows], self.dim)
        return self.engine.reconstruct_batch(rows)

    def _binary_rows(self) -> np.ndarray:
        if self._bits is None:
            faiss = require_faiss()
            storage = faiss.downcast_IndexBinary(self.engine.storage)
            self._bits = faiss.vector_to_array(storage.xb).reshape(self.rows, -1)
        return self._bits

    def _stored(self, vectors: np.ndarray) -> np.ndarray:
        """Return vectors as faiss takes them: float32 (unit for cosine), int8 buckets as midpoints, bits unsigned."""
        if self.precision in ("binary", "ubinary"):
            return np.ascontiguousarray(unsigned_bits(vectors))
        if self.precision in ("int8", "uint8"):
            ranges = np.asarray(self.meta["ranges"], dtype=np.float32)
            return np.ascontiguousarray(dequantize(vectors, self.precision, ranges) + _steps(ranges) / 2)
        vectors = np.asarray(vectors, dtype=np.float32)
        return np.ascontiguousarray(exact.unit_rows(vectors) if self.metric == "cosine" else vectors)

    def check_encoder(self, encoder: Encoder) -> None:
        """Refuse, in one line, an encoder whose vectors would not compare with the index's."""
        exact.check_encoder(encoder, self.meta, self.name)

    def embed_queries(self, encoder: Encoder, texts: Sequence[str], **prompts: str | None) -> np.ndarray:
        """`texts` embedded as the index's vectors were (float32), ready for `search`."""
        return exact.embed_queries(encoder, texts, self.meta, source=self.name, **prompts)

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write the index to `path` atomically (complete or absent, never half).

        Parameters
        ----------
        path : str or Path
            The index file; one already there is replaced when it is a bertkit index.
        overwrite : bool
            Replace whatever file is at `path` (without it, a file that is not an index is refused untouched).

        Returns
        -------
        Path
        """
        faiss, path = require_faiss(), check_writable_location(path)
        if path.exists() and not overwrite and not _is_index(path):
            raise InputError(
                f"{path} exists and is not a bertkit index; nothing was touched. Save to another file, or pass "
                "overwrite=True to replace it."
            )
        meta = {**self.meta, "rows": self.rows}
        binary = self.precision in ("binary", "ubinary")
        with atomic_path(path) as temporary, zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED) as archive:
            with archive.open(ENGINE_MEMBER, "w", force_zip64=True) as target:
                writer = faiss.PyCallbackIOWriter(target.write)
                (faiss.write_index_binary if binary else faiss.write_index)(self.engine, writer)
                del writer  # flushes into the member
            with archive.open(IDS_MEMBER, "w", force_zip64=True) as target:
                np.lib.format.write_array(target, self.ids, allow_pickle=False)
            archive.writestr(META_MEMBER, json.dumps(meta))
        self.path, self.meta = Path(path), meta
        return Path(path)

    def __repr__(self) -> str:
        return f"VectorIndex({self.rows} {self.precision} x{self.dim}, {self.metric}, {self.meta.get('model')})"


def load_index(path: str | Path) -> VectorIndex:
    """Load the index written at `path` (its file checked whole first: a damaged one is one InputError line)."""
    path = Path(path)
    faiss = require_faiss()
    meta = read_index_meta(path)
    if meta is None:
        beside = path.with_suffix(".index") if path.suffix != ".index" else path.with_name(f"{path.stem}-new.index")
        raise InputError(f"{path} is not a bertkit index; build one beside it: `bertkit index VECTORS -o {beside}`.")
    binary = meta.get("output") in ("binary", "ubinary")
    try:
        with zipfile.ZipFile(path) as archive:
            with archive.open(IDS_MEMBER) as member:
                ids = np.lib.format.read_array(member, allow_pickle=False)
            with archive.open(ENGINE_MEMBER) as member:
                reader = faiss.PyCallbackIOReader(member.read)
                engine = (faiss.read_index_binary if binary else faiss.read_index)(reader)
                del reader
                rest = member.read()
    except READ_ERRORS as exc:
        raise _damaged(path, exc) from None
    if rest or engine.ntotal != len(ids) or engine.ntotal != meta.get("rows"):
        raise _damaged(path, f"{engine.ntotal} vectors, {len(ids)} ids, {meta.get('rows')} rows recorded")
    return VectorIndex(engine, ids, meta, path)


def _is_index(path: Path) -> bool:
    """Tell, from its table of contents alone, whether `path` is a bertkit index (damaged or whole)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return META_MEMBER in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def read_index_meta(path: str | Path) -> dict | None:
    """Read the record of the bertkit index at `path`, every member's CRC checked; None when it is not an index."""
    path = Path(path)
    if not _is_index(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            for name in (META_MEMBER, IDS_MEMBER, ENGINE_MEMBER):
                with archive.open(name) as member:
                    while member.read(16 << 20):  # reading a member whole checks its CRC
                        pass
            meta = json.loads(archive.read(META_MEMBER))
    except READ_ERRORS as exc:
        raise _damaged(path, exc) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise _damaged(path, "its record is not a bertkit index's")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise InputError(f"{path} was written by a newer bertkit (index format {meta['format_version']}); upgrade.")
    return meta


def _damaged(path: Path, reason: object) -> InputError:
    return InputError(
        f"{path} is a damaged bertkit index ({reason}); rebuild it: bertkit index VECTORS -o {path} --overwrite"
    )


def _set_buckets(faiss: Any, engine: Any, ranges: np.ndarray, dim: int) -> None:
    """Give faiss's 8-bit quantizer bertkit's buckets: code = floor((x - minimum) / step), as `compact` cuts them."""
    if ranges.shape != (2, dim):
        raise InputError(f"int8 vectors need their (2, {dim}) ranges recorded; embed them again with bertkit embed.")
    quantizer = faiss.downcast_index(engine.storage).sq
    faiss.copy_array_to_vector(np.concatenate((ranges[0], _steps(ranges) * 255)).astype(np.float32), quantizer.trained)
    engine.is_trained = engine.storage.is_trained = True


def _steps(ranges: np.ndarray) -> np.ndarray:
    """Each dimension's bucket width, as `compact` cuts them (1 where a dimension does not vary)."""
    steps = (ranges[1] - ranges[0]) / 255
    return np.where(steps == 0, 1, steps).astype(np.float32)
