"""Build an index (`bertkit index`) from a `bertkit embed` file, or resume one: it is saved every few minutes."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..encoder.progress import Progress
from ..errors import InputError
from ..io.writers import check_output, check_writable_location
from .index import EF_CONSTRUCTION, EF_SEARCH, HNSW_M, VectorIndex, load_index, read_index_meta
from .search import model_metric

ADD_ROWS = 65_536  # vectors added between two looks at the clock (checkpoints)
CONTENT = "rows_sha256"  # the record's digest of the rows indexed (rows_digest)
PROGRESS_MIN_ROWS = 100_000  # smaller builds take seconds: no progress report unless asked


@dataclass
class IndexReport:
    """What building an index did: the rows it holds, those added by this run and those it held before, seconds."""

    rows: int  # vectors in the index now
    added: int  # added by this run
    resumed_from: int  # rows the index held before
    seconds: float


def build_index(
    vectors_path: str | Path,
    output: str | Path,
    *,
    metric: str | None = None,
    overwrite: bool = False,
    m: int = HNSW_M,
    ef_construction: int = EF_CONSTRUCTION,
    ef_search: int | None = None,
    checkpoint_seconds: float = 300.0,
    on_progress: Callable[[int, int], None] | None = None,
    progress: bool | None = None,
) -> IndexReport:
    """Index the vectors of a .npz/.parquet file of `bertkit embed` into `output`, or add the rows it lacks.

    Parameters
    ----------
    vectors_path : str or Path
        Vectors with their record (`bertkit embed -o FILE.npz`).
    output : str or Path
        The index file. An index of the same vectors there is extended with the rows after its own (an
        interrupted build resumes); anything else there is replaced only with `overwrite`.
    metric : str, optional
        'cosine', 'dot' or 'euclidean' (default: the model's own similarity, else cosine).
    overwrite : bool
        Replace what is at `output` (an index is rebuilt from scratch).
    m, ef_construction : int
        HNSW graph links per node and build breadth (an index is extended only with its own).
    ef_search : int, optional
        The index's default search breadth (None: the index's own, `EF_SEARCH` for a new one).
    checkpoint_seconds : float
        Write the index (atomically) at least this often while adding, so that a killed build resumes.
    on_progress : callable, optional
        Called with (rows in the index, rows in the file) after each step.
    progress : bool, optional
        Report progress (`Progress`: a bar on a terminal, log lines elsewhere); None: for 100,000 rows or more.

    Returns
    -------
    IndexReport
    """
    from ..io.vectors import read_vectors

    started, vectors_path, output = time.perf_counter(), Path(vectors_path), Path(output)
    check_writable_location(output)
    check_output(output, overwrite=True, inputs=[vectors_path])  # an output is never its input, even overwritten
    vectors, ids, meta = read_vectors(vectors_path)
    graph, metric = {"m": m, "ef_construction": ef_construction}, metric or model_metric(meta["model"])
    index = _existing(output, meta, vectors, ids, metric, graph, overwrite) or VectorIndex.create(
        meta, metric=metric, **graph, ef_search=EF_SEARCH if ef_search is None else ef_search
    )
    index.meta["source"] = vectors_path.name
    index.meta["texts_from"] = meta.get("texts_from")  # the index's rows are the file's first rows
    retuned = ef_search is not None and index.meta["hnsw"]["ef_search"] != ef_search  # a search setting: no rebuild
    if retuned:
        index.meta["hnsw"]["ef_search"] = ef_search
    done = before = index.rows
    last_save = time.monotonic()
    with Progress("index", len(vectors) - before, "vectors", show=progress, min_total=PROGRESS_MIN_ROWS) as reporter:
        while done < len(vectors):
            index.add(vectors[done : done + ADD_ROWS], ids[done : done + ADD_ROWS])
            done = index.rows
            if time.monotonic() - last_save > checkpoint_seconds and done < len(vectors):
                index.meta[CONTENT] = rows_digest(vectors[:done])
                index.save(output, overwrite=True)  # the build's own output, checked above
                last_save = time.monotonic()
            reporter.to(done - before)
            if on_progress is not None:
                on_progress(done, len(vectors))
    if done > before or retuned or not output.exists():
        index.meta[CONTENT] = rows_digest(vectors[:done])
        index.save(output, overwrite=True)
    return IndexReport(index.rows, done - before, before, time.perf_counter() - started)


_SAME = ("model", "fingerprint", "layers", "pooling", "prompt", "truncate_dim", "normalize_embeddings", "output", "dim")


def rows_digest(vectors: np.ndarray) -> str:
    """SHA-256 of the rows an index holds, as the vectors file stores them: an extension proves its rows are these."""
    return hashlib.sha256(np.ascontiguousarray(vectors).data).hexdigest()


def _existing(
    output: Path, meta: dict, vectors: np.ndarray, ids: np.ndarray, metric: str, graph: dict, overwrite: bool
) -> VectorIndex | None:
    """Return the index at `output` to extend: None when there is none, or when `overwrite` says replace it."""
    if not output.exists() or overwrite:
        return None
    if read_index_meta(output) is None:
        check_output(output)  # not an index: refused as any existing output is
    index = load_index(output)
    differs = [key for key in _SAME if index.meta.get(key) != meta.get(key)]
    differs += ["metric"] if index.metric != metric else []
    differs += ["ranges"] if index.meta.get("ranges") != meta.get("ranges") else []
    if differs:
        raise InputError(
            f"{output} indexes other vectors ({', '.join(differs)} differ); pass --overwrite to rebuild it, or "
            "choose another -o file."
        )
    built = {key: index.meta["hnsw"][key] for key in graph}
    if built != graph:
        flags = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in built.items())
        raise InputError(
            f"{output} is a graph built with {flags}; give the same to extend it, or pass --overwrite to rebuild it "
            "with the new settings."
        )
    if index.rows > len(ids) or not np.array_equal(index.ids, ids[: index.rows]):
        raise InputError(
            f"{output} holds rows that the vectors file does not have in the same order; pass --overwrite to "
            "rebuild it, or choose another -o file."
        )
    if index.meta.get(CONTENT) != rows_digest(vectors[: index.rows]):
        raise InputError(
            f"{output} holds other vectors under the file's first {index.rows} ids (were the texts embedded again?); "
            "it is extended only with the rows it already holds unchanged: pass --overwrite to rebuild it."
        )
    return index
