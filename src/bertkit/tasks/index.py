"""`VectorIndex`: vectors, their ids and record behind the one search engine; HNSW (faiss) saved as one CRC-checked zip.

A vectors file of `bertkit embed` opens as an exact index (no faiss needed). Why faiss and not usearch:
docs/benchmarks.md, "Approximate search".
"""

from __future__ import annotations

import functools
import json
import logging
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InputError
from ..io.writers import atomic_path, check_output, check_writable_location
from ..records import check_record, new_record
from . import search as exact
from .engine import BINARY, EF_CONSTRUCTION, EF_SEARCH, HNSW, HNSW_M, Exact, nearest, require_faiss, results_of

META_MEMBER, IDS_MEMBER, ENGINE_MEMBER = "bertkit-index.json", "ids.npy", "engine.faiss"
INDEX_METRICS = ("cosine", "dot", "euclidean")
UNIT_SLACK = 0.05  # bucket midpoints of unit vectors are this close to length 1
READ_ERRORS = (zipfile.BadZipFile, KeyError, ValueError, RuntimeError, EOFError, OSError)

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..encoder.encode import Encoder
    from ..encoder.options import EmbedOptions


class VectorIndex:
    """Sentence vectors with their ids and the record of how they were made, searched by the one engine.

    Parameters
    ----------
    engine : HNSW or Exact
        The vectors and how they are searched: an HNSW graph (approximate, saved by `save`), or in memory (exact).
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

    def __init__(self, engine: HNSW | Exact, ids: np.ndarray, meta: dict, path: Path | None = None) -> None:
        self.engine, self.ids, self.meta, self.path = engine, np.asarray(ids), meta, path

    @classmethod
    def create(
        cls,
        meta: dict,
        *,
        metric: str | None = None,
        m: int = HNSW_M,
        ef_construction: int = EF_CONSTRUCTION,
        ef_search: int = EF_SEARCH,
    ) -> VectorIndex:
        """Make an empty HNSW index for vectors recorded by `meta` (a vectors file's record: dim, output, ranges...).

        `metric` is 'cosine', 'dot' or 'euclidean' (default: the model's own similarity, else cosine).
        """
        metric = metric or exact.model_metric(meta.get("model"))
        if metric not in INDEX_METRICS:
            raise InputError(f"metric={metric!r}: an index compares by {', '.join(INDEX_METRICS)}.")
        for name, value in (("m", m), ("ef_construction", ef_construction), ("ef_search", ef_search)):
            if not isinstance(value, int) or value < 2:
                raise InputError(f"{name}={value!r}: give a whole number of at least 2.")
        precision, dim = meta.get("output", "float32"), int(meta.get("dim") or 0)
        if dim < 1:
            raise InputError("the vectors' record does not say their size (dim); embed them again with bertkit embed.")
        engine = HNSW.create(precision, dim, metric, m, meta.get("ranges"))
        engine.graph.hnsw.efConstruction, engine.graph.hnsw.efSearch = ef_construction, ef_search
        hnsw = {"m": m, "ef_construction": ef_construction, "ef_search": ef_search}
        fields = {key: value for key, value in meta.items() if key != "bertkit"}
        record = new_record("index", **{**fields, "engine": f"faiss {require_faiss().__version__}", "metric": metric})
        return cls(engine, np.zeros(0, dtype=np.int64), {**record, "hnsw": hnsw})

    @property
    def name(self) -> str:
        """The file's name, as messages say it."""
        return self.path.name if self.path is not None else "this index"

    @property
    def rows(self) -> int:
        """Vectors in the index."""
        return self.engine.rows

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
        """What the index compares by: cosine, dot or euclidean (an exact index: also manhattan)."""
        return str(self.meta["metric"])

    @property
    def exact(self) -> bool:
        """Whether every search reads every vector (an exact index of a vectors file) rather than the graph."""
        return isinstance(self.engine, Exact)

    def add(self, vectors: np.ndarray, ids: Sequence | np.ndarray) -> None:
        """Add vectors of the recorded type (as `bertkit embed` wrote them) and their ids, after the rows there."""
        vectors = np.asarray(vectors)
        expected = -(-self.dim // 8) if self.precision in BINARY else self.dim
        if vectors.ndim != 2 or vectors.shape[1] != expected:
            raise InputError(
                f"vectors of shape {vectors.shape} do not fit this index of {self.precision} vectors with "
                f"{expected} numbers each; they must come from the same model and options."
            )
        if isinstance(self.engine, Exact):
            self.engine.vectors = np.concatenate((self.engine.vectors, vectors))
        else:
            self.engine.add(vectors)
        if self.engine.must_rescore(self.metric) and len(vectors) and not len(self.ids):
            lengths = np.linalg.norm(self.engine.floats(np.arange(len(vectors))), axis=1)
            if np.abs(lengths - 1).max() > UNIT_SLACK:
                logger.warning(
                    "these %s vectors are not unit length (%.2f to %.2f): the graph finds cosine candidates by the "
                    "dot product of their buckets, so it can miss nearest rows (the scores are cosines). Embed them "
                    "with normalize_embeddings=True (--normalize), or index by metric='dot'.",
                    self.precision,
                    lengths.min(),
                    lengths.max(),
                )
        self.ids = np.concatenate((self.ids, np.asarray(ids))) if len(self.ids) else np.asarray(ids)

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
            An HNSW index: its own (it was built for one); an exact one: any of `semantic_search`'s.
        rescore_multiplier : int, optional
            Binary and int8 indexes: `top_k * rescore_multiplier` candidates rescored with the float query
            (None: `RESCORE_MULTIPLIER` of bertkit.tasks.engine; 0: none).
        ef_search : int, optional
            HNSW search breadth (default: the recorded one; at least the candidates asked for).

        Returns
        -------
        list of lists of dict
            Per query, [{"corpus_id": row, "score": float, "id": the row's id, "text": its text}], plain Python
            values; "text" where bertkit knows it (the embedded file is where `bertkit embed` read it, unchanged).
        """
        results = results_of(*self.search_arrays(queries, top_k, metric, rescore_multiplier, ef_search))
        texts = self.texts
        for hit in (hit for row in results for hit in row):
            hit["id"] = self.ids[hit["corpus_id"]].item()
            if texts is not None:
                hit["text"] = texts[hit["corpus_id"]]
        return results

    @functools.cached_property
    def texts(self) -> list[str] | None:
        """The rows' texts, re-read from the file they were embedded from; None where it is gone or changed."""
        from ..io.vectors import source_texts

        texts = source_texts(self.meta)
        return texts if texts is not None and len(texts) >= self.rows else None

    def search_arrays(
        self,
        queries: ArrayLike,
        top_k: int = 10,
        metric: str | None = None,
        rescore_multiplier: int | None = None,
        ef_search: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) arrays of `search` (n, top_k), row -1 where fewer were found."""
        if self.exact:
            metric = exact._check_metric(metric or self.metric)
        elif metric is not None and metric != self.metric:
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
        if self.exact:
            return nearest(self.engine, queries, top_k, metric, rescore_multiplier)  # type: ignore[arg-type]
        breadth = ef_search or self.meta["hnsw"]["ef_search"]
        return nearest(self.engine, queries, top_k, self.metric, rescore_multiplier, ef_search=breadth)

    def check_encoder(self, encoder: Encoder) -> None:
        """Refuse, in one line, an encoder whose vectors would not compare with the index's."""
        exact.check_encoder(encoder, self.meta, self.name)

    def embed_queries(self, encoder: Encoder, texts: Sequence[str], **prompts: str | None) -> np.ndarray:
        """`texts` embedded as the index's vectors were (float32), ready for `search`."""
        return exact.embed_queries(encoder, texts, self.meta, source=self.name, **prompts)

    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """Write an HNSW index to `path` atomically (complete or absent, never half).

        Parameters
        ----------
        path : str or Path
            The index file.
        overwrite : bool
            Replace a file already at `path` (without it, one there is refused untouched).

        Returns
        -------
        Path
        """
        if self.exact:
            raise InputError("an exact index is its vectors file; build an HNSW index with `bertkit index`.")
        faiss, path = require_faiss(), check_output(check_writable_location(path), overwrite)
        meta = {**self.meta, "rows": self.rows}
        binary = self.precision in BINARY
        with atomic_path(path) as temporary, zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED) as archive:
            with archive.open(ENGINE_MEMBER, "w", force_zip64=True) as target:
                writer = faiss.PyCallbackIOWriter(target.write)
                (faiss.write_index_binary if binary else faiss.write_index)(self.engine.graph, writer)  # type: ignore[union-attr]
                del writer  # flushes into the member
            with archive.open(IDS_MEMBER, "w", force_zip64=True) as target:
                np.lib.format.write_array(target, self.ids, allow_pickle=False)
            archive.writestr(META_MEMBER, json.dumps(meta))
        self.path, self.meta = Path(path), meta
        return Path(path)

    def __repr__(self) -> str:
        how = "exact" if self.exact else "HNSW"
        return f"VectorIndex({self.rows} {self.precision} x{self.dim}, {how}, {self.metric}, {self.meta.get('model')})"


def load_index(path: str | Path) -> VectorIndex:
    """Load the index written at `path`, or a vectors file of `bertkit embed` as an exact index.

    An index file is checked whole first: a damaged one, or one whose graph and record disagree, is one InputError.
    """
    path = Path(path)
    meta = read_index_meta(path)
    if meta is None and path.suffix.lower() in (".npz", ".parquet"):
        from ..io.vectors import read_vectors

        vectors, ids, meta = read_vectors(path)
        meta = {**meta, "metric": exact.model_metric(meta.get("model"))}
        dim = meta.get("dim") or vectors.shape[1]
        return VectorIndex(Exact(vectors, meta.get("output", "float32"), dim, meta.get("ranges")), ids, meta, path)
    if meta is None:
        beside = path.with_suffix(".index") if path.suffix != ".index" else path.with_name(f"{path.stem}-new.index")
        raise InputError(f"{path} is not a bertkit index; build one beside it: `bertkit index VECTORS -o {beside}`.")
    faiss = require_faiss()
    binary = meta.get("output") in BINARY
    try:
        with zipfile.ZipFile(path) as archive:
            with archive.open(IDS_MEMBER) as member:
                ids = np.lib.format.read_array(member, allow_pickle=False)
            with archive.open(ENGINE_MEMBER) as member:
                reader = faiss.PyCallbackIOReader(member.read)
                graph = (faiss.read_index_binary if binary else faiss.read_index)(reader)
                del reader
                rest = member.read()
    except READ_ERRORS as exc:
        raise _damaged(path, exc) from None
    if rest or graph.ntotal != len(ids) or graph.ntotal != meta.get("rows"):
        raise _damaged(path, f"{graph.ntotal} vectors, {len(ids)} ids, {meta.get('rows')} rows recorded")
    dim = int(meta.get("dim") or 0)
    if graph.d != (-(-dim // 8) * 8 if binary else dim):
        raise _damaged(path, f"its graph holds vectors of {graph.d} numbers, its record says {dim}")
    engine = HNSW(graph, meta.get("output", "float32"), dim, meta["metric"], meta.get("ranges"))
    return VectorIndex(engine, ids, meta, path)


def npy_index(path: str | Path, encoder: Encoder, options: EmbedOptions) -> VectorIndex:
    """Open a bare .npy of `bertkit embed` as an exact index, its vectors taken as `encoder` and `options` make them.

    A .npy holds numbers only (no ids, model or options): rows are numbered from 0, and a width other than what
    `encoder` gives with `options` is refused. Only float vectors: compact ones need the record a .npz keeps.
    """
    from ..encoder.encode import vectors_record
    from ..io.vectors import read_npy

    path = Path(path)
    vectors = read_npy(path)
    if vectors.dtype not in (np.float32, np.float16):
        raise InputError(
            f"{path} holds {vectors.dtype} vectors, and a .npy keeps no record of how compact vectors were made: "
            "embed to .npz or .parquet (`bertkit embed ... -o vectors.npz`) to search them."
        )
    resolved = options.resolve(encoder)
    dim = encoder.output_dim(resolved)
    model = encoder.source.path if encoder.source.kind == "local" else encoder.source.spec
    if vectors.shape[1] != dim:
        raise InputError(
            f"{path} holds {vectors.shape[1]}-number vectors; {model_named(model)} with layers {resolved.layers} and "
            f"pooling {resolved.pooling} gives {dim}: give --model and the options you embedded it with, or embed to "
            ".npz, which records them."
        )
    meta = {"model": model, **vectors_record(encoder, resolved), "dim": dim, "output": "float32"}
    meta["metric"] = exact.model_metric(encoder)
    ids = np.arange(len(vectors))
    return VectorIndex(Exact(np.asarray(vectors, np.float32), "float32", dim, None), ids, meta, path)


def model_named(model: str) -> str:
    """Name a model as a record names it, for a message ('default': the packaged model)."""
    return "the packaged model" if model == "default" else model


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
    return check_record(meta, "index", path)


def _damaged(path: Path, reason: object) -> InputError:
    return InputError(
        f"{path} is a damaged bertkit index ({reason}); rebuild it: bertkit index VECTORS -o {path} --overwrite"
    )
